"""The frozen Signature: what a FisherSketch has accumulated, ready to compare or save.

State layout (all float64 sums, normalised only when an estimate is computed):
- ``sums``  (2, 3, m): per half (A, B) and per kind (joint φ, activation ψ, error χ), the
  sum over samples of the feature vectors.  2·3·4096·8 B = 192 KiB at m = 4096.
- ``diag``  (2, 3, G): per half and kind, Σ_i ‖f_i‖² restricted to each of G feature
  blocks (for the unbiased norm and the block jackknife).
- ``counts`` (2,): samples per half.  Sample i of the stream goes to half i mod 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

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
        """Number of samples (tokens or examples) sketched.  Summed as Python integers: an
        int64 tensor sum wraps to a negative number for counts near 2⁶²."""
        return sum(int(c) for c in self.counts.tolist())

    def same_state(self, other: Signature) -> bool:
        """True when ``other`` holds exactly the same accumulated state (the same data
        sketched with the same config), e.g. a target passed again as its own source."""
        if other is self:
            return True
        return (
            isinstance(other, Signature)
            and self.config == other.config
            and torch.equal(self.counts, other.counts)
            and torch.equal(self.sums, other.sums)
            and torch.equal(self.diag, other.diag)
        )

    def _scaled_total(self) -> tuple[Tensor, Tensor, Tensor]:
        """(sums (3, m) / c, diag (3, G) / c², c (3,)): per-kind scale c so squares cannot overflow."""
        s, d = self.total()
        c = torch.maximum(s.abs().amax(-1), d.amax(-1).sqrt())
        c = torch.where((c > 0) & torch.isfinite(c), c, torch.ones_like(c))
        return s / c[:, None], d / c[:, None].square(), c

    def total(self) -> tuple[Tensor, Tensor]:
        """(Σ over both halves of the feature sums (3, m), of the diagonal blocks (3, G))."""
        return self.sums.sum(0), self.diag.sum(0)

    def sq_norm(self) -> Tensor:
        """Unbiased estimate of ‖μ‖² = mean_{i≠i'} k(x_i, x_i') for each kind.  (3,)

        ‖Σ_i f_i‖² − Σ_i ‖f_i‖² = Σ_{i≠i'} f_i·f_i' exactly, and each f_i·f_i' is unbiased
        for k(x_i, x_i') over the random basis, so the self-pairs (which inflate the
        plug-in norm by O(1/n)) are removed without adding their random-feature noise.
        """
        s, d, c = self._scaled_total()
        n = self.count
        if n < 2:
            return torch.full((3,), float("nan"), dtype=torch.float64)
        # scaled before squaring (sums near 1e300 would overflow), n(n−1) as a float (int64 overflows)
        return ((s * s).sum(-1) - d.sum(-1)) / (float(n) * float(n - 1)) * c.square()

    def vector(self) -> Tensor:
        """The compact float32 signature: the joint mean embedding divided by its
        unbiased norm, so ``a.vector() @ b.vector()`` is the fisher alignment.  (m,)  16 KB at m=4096."""
        s, d, _ = self._scaled_total()
        n = self.count
        nrm = ((s[0] * s[0]).sum() - d[0].sum()) / (float(n) * float(n - 1)) if n >= 2 else torch.tensor(float("nan"))
        if not bool(nrm > 0):
            return torch.full((self.config.sketch_dim,), float("nan"))
        return (s[0] / (float(n) * nrm.sqrt())).to(torch.float32)

    def state_dict(self) -> dict[str, Tensor]:
        return {"sums": self.sums.clone(), "diag": self.diag.clone(), "counts": self.counts.clone()}

    def describe(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "count": self.count, "counts": self.counts.tolist(), **dict(self.meta)}
