"""Best-of-N Gaussian random search, inside a subspace or isotropic.

Candidate i is theta + sigma * z_i with
- isotropic: z_i ~ N(0, I_D), drawn tensor by tensor, each tensor from its own generator
  seeded by SeedSequence([seed, i, tensor_index]) -- independent across tensors and
  candidates (one stream reused for every tensor would correlate them), and any single
  candidate can be regenerated from (seed, i) alone;
- in a subspace with orthonormal basis Q (r, D): z_i = Q^T c_i, c_i ~ N(0, I_r) from
  SeedSequence([seed, i, -1]) -- so ||z_i|| ~ sqrt(r), not sqrt(D).
The best candidate is chosen by the *selection* objective and reported on a *held-out*
objective; gain = f(theta) - f(theta_best) (positive is better, f is a loss).

Theory (locally linear regime).  f(theta + sigma z) ~ f(theta) - sigma <g, z>, and
<g, z> ~ N(0, ||P g||^2) whatever D is.  The best of N therefore gains about
sigma ||P g|| E[max of N standard normals] ~ sigma ||P g|| sqrt(2 ln N): it grows with the
budget like sqrt(ln N), not with D.  Curvature adds sigma^2 z^T H z / 2 ~ sigma^2 tr(P H P)/2,
which grows with the dimension searched: hence a window of useful sigma.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import integrate, stats
from torch import Tensor

from updatescope.errors import InputError

__all__ = [
    "candidate_seed",
    "candidate_direction",
    "SearchResult",
    "best_of_n",
    "best_over_norms",
    "expected_max_normal",
]


def candidate_seed(seed: int, candidate: int, tensor: int) -> int:
    """The generator seed of one tensor of one candidate (tensor = -1: subspace coefficients)."""
    ss = np.random.SeedSequence([seed, candidate, tensor + 1])  # entries must be >= 0
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> 1)


def candidate_direction(numels: Sequence[int], seed: int, candidate: int, basis: Tensor | None = None) -> Tensor:
    """The unscaled perturbation z of one candidate.  -> (D,) float32, D = sum(numels).

    ``numels`` gives the per-tensor sizes (``ParamLayout.numels``); with a ``basis``
    (r, D) the direction is Q^T c instead of isotropic noise.
    """
    if basis is not None:
        g = torch.Generator().manual_seed(candidate_seed(seed, candidate, -1))
        c = torch.randn(basis.shape[0], generator=g, dtype=torch.float64)
        return (c @ basis.double()).float()
    parts = []
    for t, n in enumerate(numels):
        g = torch.Generator().manual_seed(candidate_seed(seed, candidate, t))
        parts.append(torch.randn(n, generator=g))
    return torch.cat(parts)


@dataclass(frozen=True)
class SearchResult:
    """Losses of every candidate on both splits, and the chosen one's gain."""

    sigma: float
    seed: int
    base_select: float
    base_heldout: float
    select: tuple[float, ...]  # f_sel(theta + sigma z_i), i = 0..N-1
    heldout: tuple[float, ...]
    best: int  # argmin of select
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.select)

    @property
    def gain_select(self) -> float:
        return self.base_select - self.select[self.best]

    @property
    def gain_heldout(self) -> float:
        return self.base_heldout - self.heldout[self.best]

    def best_of(self, n: int) -> tuple[float, float]:
        """(selection gain, held-out gain) of the best among the first n candidates."""
        if not 1 <= n <= self.n:
            raise InputError(f"n must lie in [1, {self.n}], got {n}")
        i = int(np.argmin(self.select[:n]))
        return self.base_select - self.select[i], self.base_heldout - self.heldout[i]

    def as_dict(self) -> dict:
        return {
            "sigma": self.sigma,
            "seed": self.seed,
            "n": self.n,
            "best": self.best,
            "gain_select": self.gain_select,
            "gain_heldout": self.gain_heldout,
            "base_select": self.base_select,
            "base_heldout": self.base_heldout,
            "select": list(self.select),
            "heldout": list(self.heldout),
            **self.extra,
        }


def best_of_n(
    theta: Tensor,
    select_fn: Callable[[Tensor], float],
    heldout_fn: Callable[[Tensor], float],
    sigma: float,
    n: int,
    seed: int,
    numels: Sequence[int] | None = None,
    basis: Tensor | None = None,
    mask: Tensor | None = None,
) -> SearchResult:
    """Evaluate N candidates theta + sigma z_i; pick the best on ``select_fn``.

    theta (D,); the objectives map a flat parameter vector (D,) to a loss.  ``numels``
    splits the isotropic noise per tensor (default: one tensor).  Every candidate is
    reproducible from (seed, i) via :func:`candidate_direction`.  ``mask`` (D,) of 0/1
    restricts isotropic noise to a set of coordinates (same sigma per coordinate).
    """
    if n < 1 or sigma < 0:
        raise InputError(f"need n >= 1 and sigma >= 0, got n={n}, sigma={sigma}")
    numels = [theta.numel()] if numels is None else list(numels)
    if sum(numels) != theta.numel():
        raise InputError(f"numels sum to {sum(numels)}, theta has {theta.numel()} entries")
    sel, held = [], []
    for i in range(n):
        z = candidate_direction(numels, seed, i, basis)
        if mask is not None:
            z = z * mask.to(z.dtype)
        cand = theta + sigma * z.to(theta.dtype)
        sel.append(float(select_fn(cand)))
        held.append(float(heldout_fn(cand)))
    return SearchResult(
        sigma=sigma,
        seed=seed,
        base_select=float(select_fn(theta)),
        base_heldout=float(heldout_fn(theta)),
        select=tuple(sel),
        heldout=tuple(held),
        best=int(np.argmin(sel)),
    )


def best_over_norms(
    origin: Tensor,
    select_fn: Callable[[Tensor], float],
    heldout_fn: Callable[[Tensor], float],
    norms: Sequence[float],
    scale: float,
    n: int,
    seed: int,
    numels: Sequence[int],
) -> tuple[int, list[SearchResult], Tensor]:
    """Isotropic :func:`best_of_n` from ``origin`` (D,) at each norm ρ in ``norms``, with
    σ = ρ·scale/√D so that ‖σ z‖ ≈ ρ·scale; the norm is chosen on the selection objective too.
    -> (index of the chosen norm, every norm's result, the chosen perturbation σ z_best (D,))."""
    d = origin.numel()
    runs = [best_of_n(origin, select_fn, heldout_fn, rho * scale / math.sqrt(d), n, seed, numels) for rho in norms]
    j = max(range(len(runs)), key=lambda i: runs[i].gain_select)
    return j, runs, runs[j].sigma * candidate_direction(numels, seed, runs[j].best)


def expected_max_normal(n: int) -> float:
    """E[max of n iid N(0, 1)], by quadrature of n x phi(x) Phi(x)^(n-1).

    For comparison, sqrt(2 ln n) is its large-n leading term (it overestimates at small n).
    """
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    f = lambda x: x * n * stats.norm.pdf(x) * math.exp((n - 1) * stats.norm.logcdf(x))
    val, _ = integrate.quad(f, -12, 12, limit=200)
    return float(val)
