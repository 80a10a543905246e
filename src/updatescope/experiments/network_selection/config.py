"""``network-selection``'s config: LoRA-layer against head sketch on a source-selection record.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_positive,
    check_seed,
    check_sketch_dim,
)


@dataclass(frozen=True)
class NetworkSelectionConfig:
    """``network-selection``: does a sketch of the LoRA-targeted layers predict LoRA transfer
    better than the head sketch?  Reads the ground truth of a ``source-selection`` record
    (``ground_truth_record``; nothing is retrained), re-creates its sketch-split token streams
    and ranks sources by the head sketch, the network sketch of the LoRA-targeted layers
    (record's ``lora.targets`` × last ``lora.n_last`` blocks) and, with ``all_layers``, the
    network sketch of every linear layer of those blocks plus the head.

    ``sketch_tokens`` / ``sketch_dim``: None takes the record's values (the same streams and
    basis size its head sketch used); fewer tokens take a prefix of the same streams.
    ``mode``: the network sketch's sample unit ("token", the library default, or "sequence").
    ``profile_pairs``: domain pairs whose per-block profile is reported (highest, median,
    lowest mean transfer first)."""

    ground_truth_record: str = "docs/results/source_selection_full.json"
    sketch_tokens: int | None = None
    sketch_dim: int | None = None
    mode: str = "token"
    all_layers: bool = True
    profile_pairs: int = 3
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(self, "sketch_tokens")
        if self.sketch_dim is not None:
            check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        if not str(self.ground_truth_record).endswith(".json"):
            raise InputError(
                f"ground_truth_record must be a source-selection record (.json), got {self.ground_truth_record!r}"
            )
        if self.mode not in ("token", "sequence"):
            raise InputError(f"mode must be 'token' or 'sequence', got {self.mode!r}")
        if not 0 <= self.profile_pairs <= 20:
            raise InputError(f"profile_pairs must be in [0, 20], got {self.profile_pairs}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> NetworkSelectionConfig:
        if quick:
            return cls(ground_truth_record="docs/results/source_selection_quick.json", seed=seed, quick=True)
        return cls(seed=seed)
