"""Fisher alignment and its decomposition, from two signatures (estimate) or two streams (exact).

Targets, for tasks S and T with samples x = (a, e) and F_T = E_T[(a aᵀ) ⊗ (e eᵀ)]:

    fisher      A_F   = <F_S, F_T> / (‖F_S‖ ‖F_T‖)          kernel k = (a·a')²(e·e')²
    activation  Scov(M_a) = <M_a^S, M_a^T> / (‖·‖ ‖·‖)      kernel (a·a')²
    error       Scov(Γ_e) = <Γ_e^S, Γ_e^T> / (‖·‖ ‖·‖)      kernel (e·e')²
    coupling    ρ = A_F / (Scov(M_a) · Scov(Γ_e))            1 when a and e are independent

Each inner product is a mean of the kernel over sample pairs.  Cross-task inner products
use all pairs; a task's own squared norm excludes self-pairs (a U-statistic): that is the
unbiased estimate of the population norm, whereas the plug-in (V-statistic) norm of the
empirical Fisher is inflated by the n self-pairs k(x_i, x_i), which are large for
next-token errors.  Consequences:
- with few samples, or for two samples of the same distribution, a value can exceed 1:
  the cross term uses all pairs while each norm's estimate fluctuates;  >1 means "as
  aligned as two halves of one task", not "more than identical";
- a norm estimate can be ≤ 0 (tiny or degenerate tasks): the value is then undefined
  (NaN) and flagged as not trusted.
``exact_alignment(..., self_pairs=True)`` gives the cosine of the materialised empirical
Fishers instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.inputs import as_tensor, check_finite
from updatescope.sketch.signature import KINDS, Signature

MIN_TRUSTED_COUNT = 64  # fewer samples per task than this: estimates flagged as not trusted
MAX_TRUSTED_REL_SE = 0.5


@dataclass(frozen=True)
class Alignment:
    """Fisher alignment and its factors.  ``*_se`` are standard errors (0 for exact values):
    the quadrature sum of the sketch error (block jackknife over random features) and the
    sampling error (disagreement of the two stream halves); both parts are in ``se_parts``."""

    fisher: float
    activation: float
    error: float
    coupling: float
    fisher_se: float = 0.0
    activation_se: float = 0.0
    error_se: float = 0.0
    coupling_se: float = 0.0
    n_source: int = 0
    n_target: int = 0
    exact: bool = False
    trusted: bool = True
    warnings: tuple[str, ...] = ()
    se_parts: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _ratios(cross: Tensor, sq_s: Tensor, sq_t: Tensor) -> Tensor:
    """(fisher, activation, error, coupling) from cross terms and squared norms, each (..., 3)."""
    den = (sq_s * sq_t).sqrt()
    ok = (sq_s > 0) & (sq_t > 0)
    v = torch.where(ok, cross / torch.where(ok, den, torch.ones_like(den)), torch.full_like(den, float("nan")))
    coupling = v[..., 0] / (v[..., 1] * v[..., 2])
    return torch.cat((v, coupling.unsqueeze(-1)), dim=-1)


def _u_sq(sums_sq: Tensor, diag: Tensor, n: int) -> Tensor:
    if n < 2:
        return torch.full_like(sums_sq, float("nan"))
    return (sums_sq - diag) / (n * (n - 1))


def _estimate(ss: Tensor, ds: Tensor, ns: int, st: Tensor, dt: Tensor, nt: int, blocks: int) -> tuple[Tensor, Tensor]:
    """Point estimate (4,) and delete-one-block jackknife replicates (G, 4).

    ss, st: feature sums (3, m); ds, dt: diagonal block sums (3, G).
    """
    m = ss.shape[-1]
    g = blocks
    cross_b = (ss * st).view(3, g, m // g).sum(-1) / (ns * nt)  # (3, G)
    sqs_b = (ss * ss).view(3, g, m // g).sum(-1)
    sqt_b = (st * st).view(3, g, m // g).sum(-1)
    full = _ratios(cross_b.sum(-1), _u_sq(sqs_b.sum(-1), ds.sum(-1), ns), _u_sq(sqt_b.sum(-1), dt.sum(-1), nt))
    # leave block b out: totals minus block b (ratios are invariant to the common scale)
    loo = _ratios((cross_b.sum(-1, keepdim=True) - cross_b).T,
                  _u_sq((sqs_b.sum(-1, keepdim=True) - sqs_b).T, (ds.sum(-1, keepdim=True) - ds).T, ns),
                  _u_sq((sqt_b.sum(-1, keepdim=True) - sqt_b).T, (dt.sum(-1, keepdim=True) - dt).T, nt))
    return full, loo


def alignment(sig_s: Signature, sig_t: Signature) -> Alignment:
    """Estimated Fisher alignment of a source and a target signature (same config required)."""
    if not isinstance(sig_s, Signature) or not isinstance(sig_t, Signature):
        raise InputError("alignment() takes two Signature objects (FisherSketch.signature() or load_signature())")
    sig_s.config.check_compatible(sig_t.config)
    g = sig_s.diag.shape[-1]
    ns, nt = sig_s.count, sig_t.count
    (ss, ds), (st, dt) = sig_s.total(), sig_t.total()
    est, loo = _estimate(ss, ds, ns, st, dt, nt, g)
    # block jackknife: se² = (G-1)/G Σ_b (θ_-b − mean θ_-)²
    se_sketch = ((g - 1) / g * ((loo - loo.mean(0)) ** 2).sum(0)).sqrt()
    # sampling: the two halves of each stream give two independent half-size estimates;
    # var(full) ≈ var(half)/2 and var(θ_A − θ_B) = 2 var(half), so se ≈ |θ_A − θ_B| / 2.
    halves = []
    for h in (0, 1):
        nsh, nth = int(sig_s.counts[h]), int(sig_t.counts[h])
        if nsh >= 2 and nth >= 2:
            halves.append(_estimate(sig_s.sums[h], sig_s.diag[h], nsh, sig_t.sums[h], sig_t.diag[h], nth, g)[0])
    se_sampling = (halves[0] - halves[1]).abs() / 2 if len(halves) == 2 else torch.full((4,), float("nan"))
    se_total = (se_sketch**2 + torch.nan_to_num(se_sampling, nan=0.0) ** 2).sqrt()

    warnings = []
    if min(ns, nt) < MIN_TRUSTED_COUNT:
        warnings.append(f"few samples ({min(ns, nt)} < {MIN_TRUSTED_COUNT})")
    for i, name in enumerate(KINDS):
        if not math.isfinite(float(est[i])):
            warnings.append(f"{name}: non-positive norm estimate, value undefined")
        elif abs(float(se_total[i])) > MAX_TRUSTED_REL_SE * max(abs(float(est[i])), 1e-12):
            warnings.append(f"{name}: standard error {float(se_total[i]):.3g} is large relative to the value")
    names = (*KINDS, "coupling")
    return Alignment(
        *[float(v) for v in est], *[float(v) for v in se_total],
        n_source=ns, n_target=nt, exact=False, trusted=not warnings, warnings=tuple(warnings),
        se_parts={"sketch": dict(zip(names, se_sketch.tolist())),
                  "sampling": dict(zip(names, se_sampling.tolist()))},
    )


# ---------------------------------------------------------------------- exact reference
_BLOCK_ELEMS = 1 << 24  # float64 elements per row block (128 MiB)


def _prep(acts: Any, errors: Any, side: str) -> tuple[Tensor, Tensor]:
    a = as_tensor(acts, f"activations_{side}")
    e = as_tensor(errors, f"errors_{side}")
    if a.ndim != 2 or e.ndim != 2 or a.shape[0] != e.shape[0]:
        raise InputError(f"{side}: activations (n, d) and errors (n, K) must be 2-D with equal n, "
                         f"got {tuple(a.shape)} and {tuple(e.shape)}")
    if a.shape[0] == 0:
        raise InputError(f"{side}: no samples")
    check_finite(a, f"activations_{side}", 0)
    check_finite(e, f"errors_{side}", 0)
    return a, e


def _kernel_sums(a1: Tensor, e1: Tensor, a2: Tensor, e2: Tensor) -> Tensor:
    """Σ_{i,j} of the three kernels (joint, act, err) over all pairs, in float64 blocks.  (3,)"""
    width = a1.shape[1] + e1.shape[1]
    rows = max(1, min(4096, _BLOCK_ELEMS // width))
    out = torch.zeros(3, dtype=torch.float64)
    for i in range(0, a1.shape[0], rows):
        ai, ei = a1[i : i + rows].double(), e1[i : i + rows].double()
        for j in range(0, a2.shape[0], rows):
            ga = (ai @ a2[j : j + rows].double().T).square_()
            ge = (ei @ e2[j : j + rows].double().T).square_()
            out += torch.stack(((ga * ge).sum(), ga.sum(), ge.sum()))
    return out


def _self_sums(a: Tensor, e: Tensor) -> Tensor:
    """Σ_i of the three kernels at self-pairs: (‖a‖⁴‖e‖⁴, ‖a‖⁴, ‖e‖⁴).  (3,)"""
    na = a.double().square().sum(1).square()
    ne = e.double().square().sum(1).square()
    return torch.stack(((na * ne).sum(), na.sum(), ne.sum()))


def exact_alignment(acts_s: Any, errors_s: Any, acts_t: Any, errors_t: Any, *, self_pairs: bool = False) -> Alignment:
    """Exact A_F, Scov(M_a), Scov(Γ_e) and ρ via the Gram identity, float64.

    acts_* (n_*, d), errors_* (n_*, K).  <F_S, F_T> = mean_{i∈S, j∈T} (a_i·a_j)²(e_i·e_j)²,
    computed in row blocks: cost O(n_S n_T (d + K)), memory O(block·(d + K)); no d·K or
    K×K matrix.  Norms exclude self-pairs (unbiased, the sketch's target) unless
    ``self_pairs=True`` (the cosine of the materialised empirical Fishers).
    """
    a_s, e_s = _prep(acts_s, errors_s, "source")
    a_t, e_t = _prep(acts_t, errors_t, "target")
    if a_s.shape[1] != a_t.shape[1] or e_s.shape[1] != e_t.shape[1]:
        raise InputError(f"source and target widths differ: acts {a_s.shape[1]} vs {a_t.shape[1]}, "
                         f"errors {e_s.shape[1]} vs {e_t.shape[1]}")
    ns, nt = a_s.shape[0], a_t.shape[0]
    cross = _kernel_sums(a_s, e_s, a_t, e_t) / (ns * nt)

    def sq(a: Tensor, e: Tensor) -> Tensor:
        n = a.shape[0]
        total = _kernel_sums(a, e, a, e)
        if self_pairs:
            return total / (n * n)
        if n < 2:
            return torch.full((3,), float("nan"), dtype=torch.float64)
        return (total - _self_sums(a, e)) / (n * (n - 1))

    est = _ratios(cross, sq(a_s, e_s), sq(a_t, e_t))
    warnings = tuple(f"{k}: non-positive norm, value undefined" for k, v in zip(KINDS, est.tolist()) if not math.isfinite(v))
    return Alignment(*[float(v) for v in est], n_source=ns, n_target=nt, exact=True,
                     trusted=not warnings, warnings=warnings)


def exact_alignment_matrix(tasks: "list[tuple[Any, Any]]", *, self_pairs: bool = False) -> dict[str, Tensor]:
    """Exact alignments between every pair of tasks, each task's norm computed once.

    tasks: [(acts (n_i, d), errors (n_i, K)), ...] -> {"fisher", "activation", "error",
    "coupling"}: (T, T) float64 matrices, symmetric, diagonal NaN.  Cost: T norms plus
    T(T−1)/2 cross terms, instead of 3 Gram passes per pair.
    """
    prepped = [_prep(a, e, f"task {i}") for i, (a, e) in enumerate(tasks)]
    sq = []
    for a, e in prepped:
        n = a.shape[0]
        total = _kernel_sums(a, e, a, e)
        if self_pairs:
            sq.append(total / (n * n))
        else:
            sq.append((total - _self_sums(a, e)) / (n * (n - 1)) if n >= 2
                      else torch.full((3,), float("nan"), dtype=torch.float64))
    t = len(prepped)
    out = {k: torch.full((t, t), float("nan"), dtype=torch.float64) for k in (*KINDS, "coupling")}
    for i in range(t):
        for j in range(i + 1, t):
            (ai, ei), (aj, ej) = prepped[i], prepped[j]
            cross = _kernel_sums(ai, ei, aj, ej) / (ai.shape[0] * aj.shape[0])
            vals = _ratios(cross, sq[i], sq[j])
            for k, name in enumerate((*KINDS, "coupling")):
                out[name][i, j] = out[name][j, i] = vals[k]
    return out


def alignment_matrix(sigs: "list[Signature]") -> dict[str, Tensor]:
    """Estimated alignments between every pair of signatures (one matrix product per kind).

    -> {"fisher", "activation", "error", "coupling"}: (T, T) float64, diagonal NaN.
    """
    if not sigs:
        raise InputError("alignment_matrix needs at least one signature")
    for s in sigs[1:]:
        sigs[0].config.check_compatible(s.config)
    totals = [s.total() for s in sigs]
    sums = torch.stack([t[0] for t in totals])  # (T, 3, m)
    counts = torch.tensor([s.count for s in sigs], dtype=torch.float64)
    means = sums / counts[:, None, None]
    sq = torch.stack([_u_sq((t[0] * t[0]).sum(-1), t[1].sum(-1), s.count) for t, s in zip(totals, sigs)])  # (T, 3)
    cross = torch.einsum("akm,bkm->abk", means, means)  # (T, T, 3)
    vals = _ratios(cross, sq[:, None, :].expand_as(cross), sq[None, :, :].expand_as(cross))
    eye = torch.eye(len(sigs), dtype=torch.bool)
    return {name: vals[..., k].masked_fill(eye, float("nan")) for k, name in enumerate((*KINDS, "coupling"))}
