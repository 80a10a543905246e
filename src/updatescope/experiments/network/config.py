"""``network``'s config: head / block-diagonal / last-k sketches against the exact network Fisher.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_names,
    check_positive,
    check_seed,
    check_sketch_dim,
)


@dataclass(frozen=True)
class NetworkExperimentConfig:
    """``network``: do head / block-diagonal / last-k-blocks Fisher alignments track the exact
    full-network alignment?  Tiny models (the synthetic transformer, a random Llama), briefly
    pre-trained; one target task and sources whose label map agrees with the target's on a
    fraction ``label_agreement`` of tokens and whose inputs come from the target's token pool
    for a fraction ``input_overlap`` of sequences (the rest from a disjoint pool)."""

    models: tuple[str, ...] = ("synthetic", "llama")
    width: int = 32  # hidden size of both models
    n_layer: int = 4  # transformer blocks
    vocab: int = 64  # Llama vocabulary (the synthetic transformer has its own 15 tokens)
    seq_len: int = 12  # Llama tokens per sequence (synthetic: its context, 11)
    n_seq: int = 64  # sequences per task (samples of the exact and sketched Fishers)
    label_agreement: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    input_overlap: tuple[float, ...] = (0.0, 0.5, 1.0)
    last_k: int = 1  # transformer blocks (plus the head) in the last-k sketch
    pretrain_steps: int = 60  # Adam steps on the task mixture before measuring
    sketch_dim: int = DEFAULT_SKETCH_DIM
    cost_repeats: int = 7  # timed repeats per cost measurement (median reported)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(self, "width", "n_layer", "vocab", "seq_len", "n_seq", "last_k", "cost_repeats")
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_names(self.models, "models", 1)
        bad = [m for m in self.models if m not in ("synthetic", "llama")]
        if bad:
            raise InputError(f"models must be 'synthetic' or 'llama', got {bad}")
        if self.width % 4:
            raise InputError(f"width must be a multiple of 4 (4 attention heads), got {self.width}")
        if self.vocab < 8 or self.seq_len < 4 or self.n_seq < 4:
            raise InputError(
                f"need vocab >= 8, seq_len >= 4, n_seq >= 4; got {self.vocab}, {self.seq_len}, {self.n_seq}"
            )
        if self.last_k > self.n_layer:
            raise InputError(f"last_k={self.last_k} exceeds n_layer={self.n_layer}")
        if self.pretrain_steps < 0:
            raise InputError(f"pretrain_steps must be >= 0, got {self.pretrain_steps}")
        for name in ("label_agreement", "input_overlap"):
            v = getattr(self, name)
            check_names(v, name, 1)
            if any(not 0.0 <= x <= 1.0 for x in v):
                raise InputError(f"{name} values must be in [0, 1], got {list(v)}")
        if len(self.label_agreement) * len(self.input_overlap) < 4:
            raise InputError("need at least 4 source tasks (label_agreement x input_overlap) for a Spearman")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> NetworkExperimentConfig:
        if quick:
            return cls(
                n_seq=24,
                label_agreement=(0.0, 1 / 3, 2 / 3, 1.0),
                pretrain_steps=30,
                sketch_dim=1024,
                cost_repeats=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
