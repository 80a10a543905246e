"""The frozen Signature: what a FisherSketch has accumulated, ready to compare or save.

State layout (all float64 sums, normalised only when an estimate is computed):
- ``sums``  (2, 3, m): per half (A, B) and per kind (joint φ, activation ψ, error χ), the
  sum over samples of the feature vectors.  2·3·4096·8 B = 192 KiB at m = 4096.
- ``diag``  (2, 3, G): per half and kind, Σ_i ‖f_i‖² restricted to each of G feature
  blocks (for the unbiased norm and the block jackknife).
- ``counts`` (2,): samples per half.  Sample i of the stream goes to half i mod 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import torch
from torch import Tensor

from updatescope.sketch.config import SketchConfig

KINDS = ("fisher", "activation", "error")
N_BLOCKS = 16  # G feature blocks for the jackknife


@dataclass(frozen=True, eq=False)
class Signature:
    config: SketchConfig
    sums: Tensor  # (2, 3, m) float64
    diag: Tensor  # (2, 3, G) float64
    counts: Tensor  # (2,) int64
    meta: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def count(self) -> int:
        """Number of samples (tokens or examples) sketched."""
        return int(self.counts.sum())

    def total(self) -> tuple[Tensor, Tensor]:
        """(Σ over both halves of the feature sums (3, m), of the diagonal blocks (3, G))."""
        return self.sums.sum(0), self.diag.sum(0)

    def sq_norm(self) -> Tensor:
        """Unbiased estimate of ‖μ‖² = mean_{i≠i'} k(x_i, x_i') for each kind.  (3,)

        ‖Σ_i f_i‖² − Σ_i ‖f_i‖² = Σ_{i≠i'} f_i·f_i' exactly, and each f_i·f_i' is unbiased
        for k(x_i, x_i') over the random basis, so the self-pairs (which inflate the
        plug-in norm by O(1/n)) are removed without adding their random-feature noise.
        """
        s, d = self.total()
        n = self.count
        if n < 2:
            return torch.full((3,), float("nan"), dtype=torch.float64)
        return ((s * s).sum(-1) - d.sum(-1)) / (n * (n - 1))

    def vector(self) -> Tensor:
        """The compact float32 signature: the joint mean embedding divided by its
        unbiased norm, so ``a.vector() @ b.vector()`` is the fisher alignment.  (m,)  16 KB at m=4096."""
        s, _ = self.total()
        nrm = self.sq_norm()[0]
        if not bool(nrm > 0):
            return torch.full((self.config.sketch_dim,), float("nan"))
        return (s[0] / (self.count * nrm.sqrt())).to(torch.float32)

    def state_dict(self) -> dict[str, Tensor]:
        return {"sums": self.sums.clone(), "diag": self.diag.clone(), "counts": self.counts.clone()}

    def describe(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "count": self.count,
                "counts": self.counts.tolist(), **dict(self.meta)}
