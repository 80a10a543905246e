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

Standard errors are calibrated for ±2·se ≈ 95% coverage (t-multiplier on the
Satterthwaite degrees of freedom, see ``Alignment``); tests/test_trust_values.py checks
the coverage over resampled data sets.  Every signature is divided by a per-kind scale
before any square is formed and n(n−1) is computed in floating point, so sums near 1e300
or counts above 3·10⁹ give the same values as ordinary ones.
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
# TensorSketch features are FFT mixes of one count sketch, hence dependent across feature
# blocks: the block jackknife then misjudges the sketch error.  Measured (K = 8192, m = 1024,
# 150 resampled data sets): its error SE's sketch part is 3× the SRHT's for the same real
# spread, ±2·SE covered the error 1.00 of the time (over-wide) and fisher was undefined in
# many draws; at K ≈ 50k the error SE was 5× the real spread.  Values are therefore never trusted.
COUNTSKETCH_WARNING = (
    "countsketch map: standard errors are not calibrated (error SE up to 5× the real "
    "spread, values often undefined at vocabulary scale); use the srht map"
)
Z975 = 1.959963984540054  # normal 97.5% quantile: the reference the t-multiplier is relative to


@dataclass(frozen=True)
class Alignment:
    """Fisher alignment and its factors.  ``*_se`` are standard errors (0 for exact values),
    calibrated so that ``value ± 2·se`` is a ≈95% interval: the quadrature sum of the sketch
    error (block jackknife over random features, G−1 degrees of freedom) and the sampling
    error (disagreement of the stream halves, 1–2 degrees of freedom), multiplied by
    t₀.₉₇₅(ν)/z₀.₉₇₅ with ν the Welch–Satterthwaite degrees of freedom of that sum.  With
    few degrees of freedom this widens the error bar (up to ×6.5 at ν = 1) instead of
    reporting a noisy standard error that covers the truth far less than 95% of the time.
    The unscaled parts and ν are in ``se_parts``.  ``trusted`` is False whenever a value is
    undefined, negative (impossible for a mean of non-negative kernels), has an undefined or
    large standard error, or compares a signature with itself; ``warnings`` says which."""

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
    # √a·√b, not √(a·b): the product of two squared norms can overflow where each is finite
    den = sq_s.clamp(min=0).sqrt() * sq_t.clamp(min=0).sqrt()
    ok = (sq_s > 0) & (sq_t > 0) & (den > 0) & torch.isfinite(den)
    v = torch.where(ok, cross / torch.where(ok, den, torch.ones_like(den)), torch.full_like(den, float("nan")))
    coupling = v[..., 0] / (v[..., 1] * v[..., 2])
    return torch.cat((v, coupling.unsqueeze(-1)), dim=-1)


def _u_sq(sums_sq: Tensor, diag: Tensor, n: int) -> Tensor:
    if n < 2:
        return torch.full_like(sums_sq, float("nan"))
    # n(n−1) as a float: as an integer it overflows int64 for n > 3·10⁹
    return (sums_sq - diag) / (float(n) * float(n - 1))


def _scaled(sig: Signature) -> tuple[Tensor, Tensor]:
    """The signature's (sums (2, 3, m), diag (2, 3, G)) divided per kind by a common scale c_k.

    Every ratio is invariant to a per-signature, per-kind scale (sums by c, diag and squared
    norms by c²), and dividing first keeps every later square finite: sums near 1e300 would
    otherwise overflow to inf and turn a value into 0 or NaN.
    """
    sums, diag = sig.sums.to(torch.float64), sig.diag.to(torch.float64)
    c = torch.maximum(sums.abs().amax(dim=(0, 2)), diag.amax(dim=(0, 2)).sqrt())  # (3,)
    c = torch.where((c > 0) & torch.isfinite(c), c, torch.ones_like(c))
    return sums / c[None, :, None], diag / c[None, :, None].square()


def _estimate(ss: Tensor, ds: Tensor, ns: int, st: Tensor, dt: Tensor, nt: int, blocks: int) -> tuple[Tensor, Tensor]:
    """Point estimate (4,) and delete-one-block jackknife replicates (G, 4).

    ss, st: feature sums (3, m); ds, dt: diagonal block sums (3, G).
    """
    m = ss.shape[-1]
    g = blocks
    cross_b = (ss * st).view(3, g, m // g).sum(-1) / (float(ns) * float(nt))  # (3, G)
    sqs_b = (ss * ss).view(3, g, m // g).sum(-1)
    sqt_b = (st * st).view(3, g, m // g).sum(-1)
    full = _ratios(cross_b.sum(-1), _u_sq(sqs_b.sum(-1), ds.sum(-1), ns), _u_sq(sqt_b.sum(-1), dt.sum(-1), nt))
    # leave block b out: totals minus block b (ratios are invariant to the common scale)
    loo = _ratios(
        (cross_b.sum(-1, keepdim=True) - cross_b).T,
        _u_sq((sqs_b.sum(-1, keepdim=True) - sqs_b).T, (ds.sum(-1, keepdim=True) - ds).T, ns),
        _u_sq((sqt_b.sum(-1, keepdim=True) - sqt_b).T, (dt.sum(-1, keepdim=True) - dt).T, nt),
    )
    return full, loo


def t975(nu: Tensor) -> Tensor:
    """Student-t 97.5% quantile for (possibly fractional) degrees of freedom ν ≥ 1.  (k,) -> (k,)"""
    from scipy.special import stdtrit

    nu = nu.clamp(min=1.0)
    out = torch.tensor(
        [float(stdtrit(float(v), 0.975)) if math.isfinite(float(v)) else Z975 for v in nu], dtype=torch.float64
    )
    return torch.where(torch.isfinite(nu), out, torch.full_like(out, Z975))


def _sampling_variance(
    sig_s: Signature, sig_t: Signature, scaled_s: tuple[Tensor, Tensor], scaled_t: tuple[Tensor, Tensor], g: int
) -> tuple[Tensor, Tensor]:
    """Sampling variances of the estimate due to the source and to the target stream, (4,) each.

    Each stream is stored as two independent halves, so θ_hk (source half h, target half k)
    are four half-size estimates.  In θ_hk ≈ θ + f_h + g_k, var(f_0 − f_1) = 2·var_half(f) =
    4·var_full(f), so v_S = d_S²/4 with d_S = mean_k(θ_0k − θ_1k), and likewise v_T: one
    degree of freedom each (the old |θ_00 − θ_11|/2 mixed both into a single one).
    NaN when a half has fewer than 2 samples.
    """
    (ss, ds), (st, dt) = scaled_s, scaled_t
    th = {}
    for h in (0, 1):
        for k in (0, 1):
            nsh, ntk = int(sig_s.counts[h]), int(sig_t.counts[k])
            if nsh < 2 or ntk < 2:
                nan = torch.full((4,), float("nan"), dtype=torch.float64)
                return nan, nan
            th[h, k] = _estimate(ss[h], ds[h], nsh, st[k], dt[k], ntk, g)[0]
    d_s = ((th[0, 0] - th[1, 0]) + (th[0, 1] - th[1, 1])) / 2
    d_t = ((th[0, 0] - th[0, 1]) + (th[1, 0] - th[1, 1])) / 2
    return d_s.square() / 4, d_t.square() / 4


def alignment(sig_s: Signature, sig_t: Signature) -> Alignment:
    """Estimated Fisher alignment of a source and a target signature (same config required)."""
    if not isinstance(sig_s, Signature) or not isinstance(sig_t, Signature):
        raise InputError("alignment() takes two Signature objects (FisherSketch.signature() or load_signature())")
    sig_s.config.check_compatible(sig_t.config)
    g = sig_s.diag.shape[-1]
    ns, nt = sig_s.count, sig_t.count
    scaled_s, scaled_t = _scaled(sig_s), _scaled(sig_t)
    ss, ds = scaled_s[0].sum(0), scaled_s[1].sum(0)
    st, dt = scaled_t[0].sum(0), scaled_t[1].sum(0)
    est, loo = _estimate(ss, ds, ns, st, dt, nt, g)
    # block jackknife: se² = (G-1)/G Σ_b (θ_-b − mean θ_-)², G−1 degrees of freedom
    var_sketch = (g - 1) / g * ((loo - loo.mean(0)) ** 2).sum(0)
    var_s, var_t = _sampling_variance(sig_s, sig_t, scaled_s, scaled_t, g)
    var_total = var_sketch + var_s + var_t
    # Welch–Satterthwaite degrees of freedom of the sum; 0/0 (all parts 0) means no noise seen
    den = var_sketch.square() / max(g - 1, 1) + var_s.square() + var_t.square()
    nu = torch.where(
        den > 0,
        var_total.square() / torch.where(den > 0, den, torch.ones_like(den)),
        torch.full_like(den, float("inf")),
    )
    se_total = var_total.sqrt() * t975(nu) / Z975

    warnings = []
    if sig_s.same_state(sig_t):
        warnings.append(
            "source and target are the same signature: the cross term pairs every sample with "
            "itself, so the value is not a similarity"
        )
    if "countsketch" in (sig_s.config.act_map, sig_s.config.error_map):
        warnings.append(COUNTSKETCH_WARNING)
    if min(ns, nt) < MIN_TRUSTED_COUNT:
        warnings.append(f"few samples ({min(ns, nt)} < {MIN_TRUSTED_COUNT})")
    for i, name in enumerate(KINDS):
        v, se = float(est[i]), float(se_total[i])
        if not math.isfinite(v):
            warnings.append(f"{name}: non-positive norm estimate, value undefined")
        elif not math.isfinite(se):
            warnings.append(f"{name}: standard error undefined (a stream half has fewer than 2 samples)")
        elif v < 0:
            warnings.append(
                f"{name}: negative estimate {v:.3g}, impossible for a mean of non-negative kernels: noise dominates"
            )
        elif se > MAX_TRUSTED_REL_SE * max(abs(v), 1e-12):
            warnings.append(f"{name}: standard error {se:.3g} is large relative to the value")
    names = (*KINDS, "coupling")
    return Alignment(
        *[float(v) for v in est],
        *[float(v) for v in se_total],
        n_source=ns,
        n_target=nt,
        exact=False,
        trusted=not warnings,
        warnings=tuple(warnings),
        se_parts={
            "sketch": dict(zip(names, var_sketch.sqrt().tolist())),
            "sampling": dict(zip(names, (var_s + var_t).sqrt().tolist())),
            "dof": dict(zip(names, nu.tolist())),
        },
    )


# ---------------------------------------------------------------------- exact reference
_BLOCK_ELEMS = 1 << 24  # float64 elements per row block (128 MiB)


def _prep(acts: Any, errors: Any, side: str) -> tuple[Tensor, Tensor]:
    a = as_tensor(acts, f"activations_{side}")
    e = as_tensor(errors, f"errors_{side}")
    if a.ndim != 2 or e.ndim != 2 or a.shape[0] != e.shape[0]:
        raise InputError(
            f"{side}: activations (n, d) and errors (n, K) must be 2-D with equal n, "
            f"got {tuple(a.shape)} and {tuple(e.shape)}"
        )
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
        raise InputError(
            f"source and target widths differ: acts {a_s.shape[1]} vs {a_t.shape[1]}, "
            f"errors {e_s.shape[1]} vs {e_t.shape[1]}"
        )
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
    warnings = tuple(
        f"{k}: non-positive norm, value undefined" for k, v in zip(KINDS, est.tolist()) if not math.isfinite(v)
    )
    return Alignment(
        *[float(v) for v in est], n_source=ns, n_target=nt, exact=True, trusted=not warnings, warnings=warnings
    )


def exact_alignment_matrix(tasks: list[tuple[Any, Any]], *, self_pairs: bool = False) -> dict[str, Tensor]:
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
            sq.append(
                (total - _self_sums(a, e)) / (n * (n - 1))
                if n >= 2
                else torch.full((3,), float("nan"), dtype=torch.float64)
            )
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


def alignment_matrix(sigs: list[Signature]) -> dict[str, Tensor]:
    """Estimated alignments between every pair of signatures (one matrix product per kind).

    -> {"fisher", "activation", "error", "coupling"}: (T, T) float64, diagonal NaN.
    """
    if not sigs:
        raise InputError("alignment_matrix needs at least one signature")
    for s in sigs[1:]:
        sigs[0].config.check_compatible(s.config)
    totals = [(sc[0].sum(0), sc[1].sum(0)) for sc in map(_scaled, sigs)]  # scaled: no overflow
    sums = torch.stack([t[0] for t in totals])  # (T, 3, m)
    counts = torch.tensor([float(s.count) for s in sigs], dtype=torch.float64)
    means = sums / counts[:, None, None]
    sq = torch.stack([_u_sq((t[0] * t[0]).sum(-1), t[1].sum(-1), s.count) for t, s in zip(totals, sigs)])  # (T, 3)
    cross = torch.einsum("akm,bkm->abk", means, means)  # (T, T, 3)
    vals = _ratios(cross, sq[:, None, :].expand_as(cross), sq[None, :, :].expand_as(cross))
    eye = torch.eye(len(sigs), dtype=torch.bool)
    return {name: vals[..., k].masked_fill(eye, float("nan")) for k, name in enumerate((*KINDS, "coupling"))}


def inner_products(sigs: list[Signature], kind: str = "fisher") -> Tensor:
    """Estimated inner products of the signatures' mean embeddings for one kind.  (T, T) float64.

    Off the diagonal ⟨μ_i, μ_j⟩ is the product of the two feature means (all pairs: unbiased
    for two independent streams); on it the unbiased squared norm (self-pairs excluded, as
    in ``Signature.sq_norm``), so the matrix can be indefinite when noise dominates.  Every
    signature is divided by one common scale c (the largest magnitude among them) before any
    square is formed: the values are ⟨μ_i, μ_j⟩ / c², which leaves every ratio (alignments,
    cosines, the alignment of a mixture) unchanged.  ``alignment_matrix`` is this matrix
    normalised by its diagonal.
    """
    if kind not in KINDS:
        raise InputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not sigs:
        raise InputError("inner_products needs at least one signature")
    for s in sigs[1:]:
        if s.config != sigs[0].config:
            sigs[0].config.check_compatible(s.config)
    k = KINDS.index(kind)
    sums = torch.stack([s.sums[:, k].sum(0).to(torch.float64) for s in sigs])  # (T, m)
    diag = torch.stack([s.diag[:, k].sum(0).to(torch.float64) for s in sigs]).sum(-1)  # (T,)
    c = torch.maximum(sums.abs().max(), diag.max().clamp(min=0).sqrt())
    c = c if bool((c > 0) & torch.isfinite(c)) else torch.ones((), dtype=torch.float64)
    sums, diag = sums / c, diag / c.square()
    ns = [s.count for s in sigs]
    counts = torch.tensor([float(n) for n in ns], dtype=torch.float64)
    means = sums / counts[:, None]
    gram = means @ means.T
    sq = torch.stack([_u_sq(v, d, n) for v, d, n in zip(sums.square().sum(-1), diag, ns)])
    gram.diagonal().copy_(sq)
    return gram
