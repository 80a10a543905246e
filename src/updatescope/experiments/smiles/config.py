"""``smiles``'s config: the SMILES domains, correlation with perplexity reduction.  Torch-free."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    SelectionConfig,
    check_positive,
)


@dataclass(frozen=True)
class SmilesConfig(SelectionConfig):
    """``smiles``: the SMILES domains (None: all of them), correlation with perplexity reduction.

    ``budget_grid`` / ``budget_domains`` / ``budget_only``: the LoRA steps chosen on the
    validation (sketch) split before the truth is measured, as in ``source-selection``.

    ``collection``: None (default, the recorded experiment): the 9 ``smiles`` domains from two
    collections (NCI, WEHI).  "nci": the 12 ``smiles_nci`` property bins of one collection
    (9 with ``--quick``), so the same-collection indicator is constant and only the sketch
    geometry (or the property-family label, easiness, size) can rank sources."""

    domains: tuple[str, ...] | None = None  # type: ignore[assignment]
    n_perm: int = 5000  # permutations of the Mantel-style test
    collection: Literal["nci"] | None = None  # within one collection (see above)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "n_perm")
        # the pooled correlation and its Mantel test need every pair: refuse a candidate subset
        # rather than ignore it
        if self.candidates is not None:
            raise InputError(
                "candidates is not a smiles setting: the pooled correlation and its Mantel test use every pair of bins"
            )
        if self.collection not in (None, "nci"):
            raise InputError(
                f"collection must be None or 'nci' (the one collection with >= 9 bins), got {self.collection!r}"
            )

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SmilesConfig:
        base = SelectionConfig.defaults(quick, seed)
        # quick sizes equal source-selection's, so the SMILES domains it uses are cache hits
        return cls(**{**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, "domains": None})
