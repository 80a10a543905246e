"""The sketch configuration: the compatibility key of every signature."""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass, fields
from typing import Any

from updatescope.constants import DEFAULT_SKETCH_DIM, MAP_KINDS, SEED_LIMIT, check_sketch_dim
from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.sketch.hadamard import next_pow2

# "auto" picks a projection per side from its width: ``stack`` (G = m/N independent N-point
# SRHTs of the zero-padded input, N = next_pow2(dim); O(m·√N) per sample, O(m) memory) for
# sides no wider than next_pow2(m), e.g. the 576-wide activation, and the wide-block SRHT of
# ``spread`` (errors read in place by one GEMM, O(dim·m/A + m·√A)) beyond, which is what
# makes a 128k vocabulary cheap.  Both are unbiased ±1 rows under independent signs; their
# accuracy against the earlier default (dense up to 1,024, block SRHT beyond) is measured,
# paired by basis seed, on the synthetic family and on real SmolLM2 streams
# (benchmarks/map_accuracy.py, benchmarks/default_maps.py).  Every other kind stays
# selectable.  Signatures store the resolved kind, so a file always names its own basis, and
# signatures made with different kinds (e.g. before and after this default) refuse to be
# compared.


def resolve_map(kind: str, dim: int, m: int) -> str:
    if kind == "auto":
        return "stack" if dim <= next_pow2(m) else "spread"
    if kind not in MAP_KINDS:
        raise InputError(f"unknown projection kind {kind!r}; choose one of auto, {', '.join(MAP_KINDS)}")
    return kind


@dataclass(frozen=True)
class SketchConfig:
    """Everything that must match for two sketches to be merged or compared.

    act_dim:     d, width of the head input (activation after the final norm)
    out_dim:     K, number of head outputs (vocabulary size or classes)
    sketch_dim:  m, number of random features (4096 -> 16 KB float32 signature vector)
    seed:        fixes the random basis; regenerated from it, never stored
    act_map / error_map: projection family per side ("auto" resolves by width and m, see
                 resolve_map); part of the basis, hence of the key
    fingerprint: hash of the model's weights (head and body) and tokenizer vocabulary ("" when the
                 streams do not come from a named model, e.g. synthetic tasks)
    head_bias:   the head has a bias b (logits = W a + b).  Its gradient e is part of the
                 per-sample gradient (e aᵀ, e) = e ⊗ (a, 1), so the activation is augmented
                 with a constant 1 before its map (the maps then act on d + 1 inputs):
                 (a·a' + 1)(e·e') is the gradient inner product of the biased head.
    """

    act_dim: int
    out_dim: int
    sketch_dim: int = DEFAULT_SKETCH_DIM
    seed: int = 0
    act_map: str = "auto"
    error_map: str = "auto"
    fingerprint: str = ""
    head_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("act_dim", "out_dim", "sketch_dim", "seed"):
            value = getattr(self, name)
            if not isinstance(value, (bool, int)) and hasattr(value, "__index__"):
                try:  # numpy and torch integers
                    object.__setattr__(self, name, operator.index(value))
                except TypeError:  # an array of several values, or a float tensor
                    raise InputError(f"{name} must be a positive integer, got {value!r}") from None
        for name in ("act_dim", "out_dim", "sketch_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if self.out_dim < 2:
            raise InputError(f"out_dim must be at least 2 (a softmax head), got {self.out_dim}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < SEED_LIMIT:
            raise InputError(f"seed must be a non-negative integer, got {self.seed!r}")
        check_sketch_dim(self.sketch_dim)
        if not isinstance(self.head_bias, bool):
            raise InputError(f"head_bias must be true or false, got {self.head_bias!r}")
        object.__setattr__(self, "act_map", resolve_map(self.act_map, self.map_act_dim, self.sketch_dim))
        object.__setattr__(self, "error_map", resolve_map(self.error_map, self.out_dim, self.sketch_dim))
        if not isinstance(self.fingerprint, str):
            raise InputError(f"fingerprint must be a string, got {type(self.fingerprint).__name__}")

    @property
    def map_act_dim(self) -> int:
        """Inputs of the activation map: d, plus the constant 1 of a biased head."""
        return self.act_dim + int(self.head_bias)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SketchConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def check_compatible(self, other: SketchConfig) -> None:
        """Raise IncompatibleSignatureError naming the first field that differs."""
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                raise IncompatibleSignatureError(f.name, a, b)


def sketch_memory_bytes(config: SketchConfig, token_budget: int) -> int:
    """A lower bound on the memory one sketching pass needs, in bytes.

    A dense side holds a (dim, 2m) float32 basis (drawn through an int8 copy: 5 bytes per
    entry); the structured maps hold O(dim + m); each pass also makes (tokens, 2m) float32
    features per side and a float32 copy of the (tokens, K) logits."""
    m = config.sketch_dim
    need = 0
    for dim, kind in ((config.map_act_dim, config.act_map), (config.out_dim, config.error_map)):
        need += 5 * dim * 2 * m if kind == "dense" else 16 * (dim + 2 * m)
    return need + token_budget * (2 * (2 * m) + config.out_dim) * 4
