"""The full-network Fisher decomposition: block-diagonal part, profiles, off-diagonal share, bound.

Notation.  Parameters split into blocks b = 1..L (one ``nn.Linear`` weight each, or one
transformer block); a sample's gradient is g = (g_1, …, g_L) and a task's Fisher
F = E[g gᵀ] has blocks F_bc = E[g_b g_cᵀ].  For a source S and a target T:

    N      = <F_S, F_T>            = Σ_{b,c} <F_S,bc, F_T,bc>      (Gram identity:
                                                                    mean_{i,j} (g_i·g_j)²)
    d_b    = <F_S,bb, F_T,bb>        diagonal-block numerator,      D = Σ_b d_b
    O      = N − D                   off-diagonal numerator
    n_b^X  = ‖F_X,bb‖                block energy of task X,        P_X = Σ_b (n_b^X)²
    Q_X    = ‖F_X‖² − P_X            off-diagonal energy of task X

and the quantities reported (``NetworkAlignment``):

    full           A_F  = N / (‖F_S‖ ‖F_T‖)
    block_diagonal A_BD = D / √(P_S P_T)                  the alignment of the block-diagonal
                                                          Fishers diag(F_bb) (K-FAC style)
    profile        a_b  = d_b / (n_b^S n_b^T)             per-block alignment (NaN if a norm is 0)
    profile_cosine π    = cos(n^S, n^T)                   agreement of the energy profiles
    offdiag_share  ω_X  = Q_X / ‖F_X‖²                    share of ‖F_X‖² off the diagonal
    offdiag_term   ε    = O / (‖F_S‖ ‖F_T‖)               the off-diagonal part of A_F
    discrepancy         = A_F − A_BD                      what the block-diagonal view misses

Why the energy vectors n^X = (‖F_X,bb‖)_b for the profile cosine: with weights
w_b = n_b^S n_b^T / (‖n^S‖ ‖n^T‖) ≥ 0 one has exactly

    A_BD = Σ_b w_b a_b,     Σ_b w_b = π,

so π is the total weight the per-block alignments receive: A_BD is π times a convex
combination of the a_b.  Two tasks that put their gradient energy in different layers
(π small) cannot be block-diagonally aligned even when every a_b is 1.

The bound.  By Cauchy–Schwarz on each off-diagonal block and then on the sum over blocks,
|O| ≤ Σ_{b≠c} ‖F_S,bc‖ ‖F_T,bc‖ ≤ √(Q_S Q_T).  Dividing N = D + O by ‖F_S‖‖F_T‖ and writing
κ = √((1 − ω_S)(1 − ω_T)):

    A_F = κ A_BD + ε,    |ε| ≤ √(ω_S ω_T),   so
    κ π min_b a_b − √(ω_S ω_T)  ≤  A_F  ≤  κ π max_b a_b + √(ω_S ω_T)   (min/max over w_b > 0)
    |A_F − A_BD| ≤ (1 − κ) |A_BD| + √(ω_S ω_T) ≤ 2 max(ω_S, ω_T).

It holds for any pair of PSD Fishers (population, or the plug-in empirical Fishers,
``self_pairs=True``).  Estimated inputs (U-statistic norms, sketches) satisfy it only up to
their estimation error: an unbiased norm estimate need not obey Cauchy–Schwarz.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError

__all__ = ["NetworkAlignment", "decompose"]


@dataclass(frozen=True)
class NetworkAlignment:
    """Full vs block-diagonal Fisher alignment and the diagnostics linking them (see module)."""

    full: float
    block_diagonal: float
    profile: tuple[float, ...]
    profile_cosine: float
    offdiag_share_source: float
    offdiag_share_target: float
    offdiag_term: float
    discrepancy: float
    bound_lower: float
    bound_upper: float
    blocks: tuple[str, ...] = ()
    energy_source: tuple[float, ...] = ()
    energy_target: tuple[float, ...] = ()
    exact: bool = False
    se: Mapping[str, float] = field(default_factory=dict)  # standard errors (estimates only)
    se_parts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # sketch / sampling

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _safe_div(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(den) else float("nan")


def decompose(
    diag_cross: Tensor,
    diag_sq_s: Tensor,
    diag_sq_t: Tensor,
    full_cross: float | Tensor,
    full_sq_s: float | Tensor,
    full_sq_t: float | Tensor,
    *,
    blocks: tuple[str, ...] = (),
    exact: bool = False,
) -> NetworkAlignment:
    """All decomposition quantities from the block inner products.

    diag_cross (L,): d_b = <F_S,bb, F_T,bb>;  diag_sq_s, diag_sq_t (L,): ‖F_S,bb‖², ‖F_T,bb‖²;
    full_cross: N = <F_S, F_T>;  full_sq_s, full_sq_t: ‖F_S‖², ‖F_T‖² (scalars, all float64).
    A squared norm estimated ≤ 0 makes the quantities that divide by it NaN.
    """
    d = torch.as_tensor(diag_cross, dtype=torch.float64).reshape(-1)
    ps_b = torch.as_tensor(diag_sq_s, dtype=torch.float64).reshape(-1)
    pt_b = torch.as_tensor(diag_sq_t, dtype=torch.float64).reshape(-1)
    if not (d.shape == ps_b.shape == pt_b.shape) or d.numel() == 0:
        raise InputError(
            f"block terms must be three equal non-empty vectors, got {tuple(d.shape)}, "
            f"{tuple(ps_b.shape)}, {tuple(pt_b.shape)}"
        )
    if blocks and len(blocks) != d.numel():
        raise InputError(f"{len(blocks)} block names for {d.numel()} blocks")
    n_full, fs, ft = float(full_cross), float(full_sq_s), float(full_sq_t)
    # energies: a non-positive estimate has no square root; its block gets weight 0
    ns = ps_b.clamp(min=0).sqrt()
    nt = pt_b.clamp(min=0).sqrt()
    prof = torch.where((ns > 0) & (nt > 0), d / (ns * nt).clamp(min=1e-300), torch.full_like(d, float("nan")))
    ps, pt, dsum = float(ps_b.sum()), float(pt_b.sum()), float(d.sum())
    a_full = _safe_div(n_full, math.sqrt(fs * ft)) if fs > 0 and ft > 0 else float("nan")
    a_bd = _safe_div(dsum, math.sqrt(ps * pt)) if ps > 0 and pt > 0 else float("nan")
    pi = _safe_div(float(ns @ nt), float(ns.norm() * nt.norm()))
    om_s = _safe_div(fs - ps, fs)
    om_t = _safe_div(ft - pt, ft)
    eps = _safe_div(n_full - dsum, math.sqrt(fs * ft)) if fs > 0 and ft > 0 else float("nan")
    # bound; shares clipped to [0, 1] (they are there exactly; estimates may step outside)
    cs, ct = min(max(om_s, 0.0), 1.0), min(max(om_t, 0.0), 1.0)
    kappa = math.sqrt((1 - cs) * (1 - ct))
    slack = math.sqrt(cs * ct)
    w = ns * nt
    used = (w > 0) & torch.isfinite(prof)
    if bool(used.any()) and math.isfinite(pi):
        lo = kappa * pi * float(prof[used].min()) - slack
        hi = kappa * pi * float(prof[used].max()) + slack
    else:
        lo, hi = float("nan"), float("nan")
    return NetworkAlignment(
        full=a_full,
        block_diagonal=a_bd,
        profile=tuple(prof.tolist()),
        profile_cosine=pi,
        offdiag_share_source=om_s,
        offdiag_share_target=om_t,
        offdiag_term=eps,
        discrepancy=a_full - a_bd,
        bound_lower=lo,
        bound_upper=hi,
        blocks=tuple(blocks),
        energy_source=tuple(ns.tolist()),
        energy_target=tuple(nt.tolist()),
        exact=exact,
    )
