"""Baseline source-selection scores: representation similarity, transferability, gradients.

Every function takes a *source* and a *target* stream and returns one float, higher =
better source.  Inputs may be torch tensors or numpy arrays; all arithmetic is float64.

The cross-task setting (one model, one head, different tasks = different examples) has no
example-to-example correspondence, so the classic matched-sample definitions of CKA, RSA
and SVCCA do not apply.  Each is restated here on the two tasks' *feature distributions*
(second-moment geometry in the shared d-dimensional activation space); each docstring
gives the exact definition.  All three depend on activations only, hence are
non-identifiable for head-level transfer (paper A, Thm 3.2): identical activations with
disjoint label sets score exactly 1.

Transferability estimators (LogME, LEEP, H-score) score how well target labels are
predicted from some source-dependent quantity; the classic functions below are pure, and
the source dependence enters through :func:`source_projection` (LogME, H-score) and
:func:`source_label_probs` (LEEP), composed in :data:`BASELINES`.  They raise
:class:`InputError` instead of returning a meaningless number on degenerate input.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import Tensor

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "TaskStream",
    "linear_cka",
    "rsa",
    "svcca",
    "source_projection",
    "source_label_probs",
    "logme",
    "leep",
    "hscore",
    "mean_gradient",
    "mean_gradient_cosine",
    "project_rows",
    "gradient_cosine_scores",
    "random_scores",
    "BASELINES",
]

#: Largest float64 matrix (in entries) any baseline may allocate: 2**26 = 512 MiB.
DEFAULT_MAX_ENTRIES = 2**26


# --------------------------------------------------------------------------- helpers
def _f64(x: Any, name: str, ndim: int) -> Tensor:
    """Any array-like -> finite float64 torch tensor with ``ndim`` dims (else InputError)."""
    t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(np.ascontiguousarray(x))
    t = t.to(device="cpu", dtype=torch.float64)
    if t.ndim != ndim:
        raise InputError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise InputError(f"{name} contains NaN or inf")
    return t


def _int_labels(x: Any, name: str) -> Tensor:
    t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(np.ascontiguousarray(x))
    if t.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.is_floating_point():
        if t.numel() and not bool((t == t.round()).all()):
            raise InputError(f"{name} must hold integer class ids")
    return t.to(device="cpu", dtype=torch.int64)


def _gib(entries: float) -> str:
    return f"{entries * 8 / 2**30:.3g} GiB"


def _check_budget(entries: int, what: str, who: str, max_entries: int) -> None:
    if entries > max_entries:
        raise InputError(
            f"{who}: {what} needs {entries:,} float64 entries ({_gib(entries)}), over the "
            f"budget of {_gib(max_entries)} (max_entries={max_entries:,})"
        )


def _check_classes(labels: Tensor, n: int, who: str, min_per_class: int) -> tuple[Tensor, Tensor]:
    """Compact labels to 0..C-1; refuse fewer than 2 classes or under-populated classes."""
    if labels.shape[0] != n:
        raise InputError(f"{who}: {n} feature rows but {labels.shape[0]} labels")
    if n < 2:
        raise InputError(f"{who}: needs at least 2 examples, got {n}")
    classes, compact, counts = torch.unique(labels, return_inverse=True, return_counts=True)
    if classes.numel() < 2:
        raise InputError(f"{who}: needs at least 2 target classes, got {classes.numel()}")
    rare = int((counts < min_per_class).sum())
    if rare:
        raise InputError(
            f"{who}: {rare} of {classes.numel()} target classes have fewer than "
            f"{min_per_class} examples (n={n}); drop or merge rare classes"
        )
    return compact, counts


def _centered(x: Tensor) -> Tensor:
    return x - x.mean(dim=0, keepdim=True)


def _same_width(a: Tensor, b: Tensor, who: str) -> None:
    if a.shape[1] != b.shape[1]:
        raise InputError(f"{who}: source has {a.shape[1]} features, target {b.shape[1]}")
    for x, side in ((a, "source"), (b, "target")):
        if x.shape[0] < 2:
            raise InputError(f"{who}: {side} needs at least 2 examples, got {x.shape[0]}")


def _gram_inner(x: Tensor, y: Tensor, block: int = 2**22) -> Tensor:
    """tr(xᵀx yᵀy) = ‖x yᵀ‖²_F, by the d×d or the n_x×n_y route, whichever is smaller."""
    d = x.shape[1]
    if d * d <= x.shape[0] * y.shape[0]:
        return ((x.T @ x) * (y.T @ y)).sum()
    rows = max(1, block // max(1, y.shape[0]))
    return sum(
        ((x[i : i + rows] @ y.T).square().sum() for i in range(0, x.shape[0], rows)),
        torch.zeros((), dtype=torch.float64),
    )


def _principal_basis(x: Tensor, keep: float, max_rank: int | None, who: str) -> Tensor:
    """Top right singular vectors of centred x capturing ``keep`` of the variance. (d, k)"""
    if not 0.0 < keep <= 1.0:
        raise InputError(f"{who}: keep must be in (0, 1], got {keep}")
    _, s, vh = torch.linalg.svd(_centered(x), full_matrices=False)
    var = s.square()
    total = float(var.sum())
    if total <= 0.0:
        raise InputError(f"{who}: activations have zero variance")
    # rank cut-off: singular values below round-off are not directions of the data.
    var = var[s > s[0] * max(x.shape) * torch.finfo(torch.float64).eps]
    frac = torch.cumsum(var, 0) / total
    k = min(int((frac < keep - 1e-12).sum()) + 1, var.numel())  # smallest k with frac >= keep
    if max_rank is not None:
        k = min(k, max_rank)
    return vh[:k].T


# --------------------------------------------------------- representation similarity
def linear_cka(acts_s: Any, acts_t: Any, *, center: bool = True) -> float:
    """Cross-task linear CKA: Frobenius cosine of the two tasks' activation covariances.

    acts_s (n_s, d), acts_t (n_t, d) -> float in [0, 1].

    ``CKA(S, T) = <C_S, C_T>_F / (‖C_S‖_F ‖C_T‖_F)``, ``C = Xᶜᵀ Xᶜ / n`` with ``Xᶜ`` the
    column-centred activations (uncentred second moments ``E[a aᵀ]`` with
    ``center=False``).  Matched-sample linear CKA is the cosine of the two n×n Gram
    matrices (one sample, two feature maps); with different samples and one feature map
    we take its feature-space dual, the cosine of the d×d Gram matrices (one feature map,
    two samples), i.e. normalised HSIC between the covariance operators,
    ``‖Xᶜ_S Xᶜ_Tᵀ‖²_F / (‖Xᶜ_S Xᶜ_Sᵀ‖_F ‖Xᶜ_T Xᶜ_Tᵀ‖_F)``.  Plug-in (biased) estimate, as
    in the usual biased CKA.  Invariant to row order, to scaling either task, to a
    translation (when centred) and to an orthogonal rotation applied to both.
    Identical activations give exactly 1 whatever the labels.  Never forms a d×d matrix
    when the n_s×n_t route is cheaper.
    """
    xs, xt = _f64(acts_s, "acts_s", 2), _f64(acts_t, "acts_t", 2)
    _same_width(xs, xt, "linear_cka")
    if center:
        xs, xt = _centered(xs), _centered(xt)
    ss, tt = _gram_inner(xs, xs), _gram_inner(xt, xt)
    if float(ss) <= 0.0 or float(tt) <= 0.0:
        raise InputError("linear_cka: a task has zero activation covariance")
    return float((_gram_inner(xs, xt) / (ss.sqrt() * tt.sqrt())).clamp(0.0, 1.0))


def rsa(acts_s: Any, acts_t: Any, *, method: str = "spearman", max_entries: int = DEFAULT_MAX_ENTRIES) -> float:
    """Cross-task RSA on *feature* dissimilarity matrices.  acts (n, d) -> float in [-1, 1].

    Classic RSA correlates two stimulus×stimulus RDMs computed on the same stimuli; the
    tasks here share features, not stimuli, so the RDM is taken over the d features:
    ``RDM_T[i, j] = 1 − corr_T(a_i, a_j)`` (Pearson correlation of features i and j over
    task T's examples).  RSA = Spearman (default; average ranks for ties) or Pearson
    correlation of the strict upper triangles of RDM_S and RDM_T.  Features constant in
    either task are dropped.  Invariant to row order, per-feature shifts and positive
    scalings, and a permutation of features applied to both; not to rotations (RDMs are
    basis-bound).
    Identical activations give exactly 1.
    """
    if method not in ("spearman", "pearson"):
        raise InputError(f"rsa: method must be 'spearman' or 'pearson', got {method!r}")
    xs, xt = _f64(acts_s, "acts_s", 2), _f64(acts_t, "acts_t", 2)
    _same_width(xs, xt, "rsa")
    _check_budget(2 * xs.shape[1] ** 2, "two d×d feature RDMs", "rsa", max_entries)

    def corr(x: Tensor) -> tuple[Tensor, Tensor]:
        c = _centered(x)
        sd = c.square().mean(0).sqrt()
        return c.T @ c / x.shape[0], sd

    cs, sds = corr(xs)
    ct, sdt = corr(xt)
    tiny = torch.finfo(torch.float64).eps * 1e3
    keep = (sds > tiny * sds.max().clamp_min(1e-300)) & (sdt > tiny * sdt.max().clamp_min(1e-300))
    k = int(keep.sum())
    if k < 3:
        raise InputError(f"rsa: needs at least 3 non-constant features in both tasks, got {k}")
    iu = torch.triu_indices(k, k, offset=1)
    rdm = []
    for c, sd in ((cs, sds), (ct, sdt)):
        c, sd = c[keep][:, keep], sd[keep]
        r = (c / torch.outer(sd, sd)).clamp(-1.0, 1.0)
        rdm.append((1.0 - r)[iu[0], iu[1]].numpy())
    if np.ptp(rdm[0]) == 0.0 or np.ptp(rdm[1]) == 0.0:
        raise InputError("rsa: a feature RDM is constant; correlation undefined")
    fn = stats.spearmanr if method == "spearman" else stats.pearsonr
    return float(fn(rdm[0], rdm[1])[0])


def svcca(acts_s: Any, acts_t: Any, *, keep: float = 0.99, max_rank: int | None = None) -> float:
    """Cross-task SVCCA on principal subspaces.  acts (n, d) -> float in [0, 1].

    SVCCA keeps each representation's top singular directions (``keep`` = fraction of
    variance, 0.99 as in the original) and reports the mean canonical correlation.  CCA
    between two matched data matrices equals the cosines of the principal angles between
    their column spans in sample space; with unmatched samples we use the dual: the
    principal angles between the two tasks' top-k principal subspaces ``V_S`` (d×k_S),
    ``V_T`` (d×k_T) in the shared feature space.  Score = mean of the min(k_S, k_T)
    singular values of ``V_Sᵀ V_T``.  Like SVCCA it saturates at 1 when one subspace
    contains the other (e.g. isotropic activations keep all d directions).  Invariant to
    row order, scaling, translation and a shared rotation; identical activations give 1.
    """
    xs, xt = _f64(acts_s, "acts_s", 2), _f64(acts_t, "acts_t", 2)
    _same_width(xs, xt, "svcca")
    vs = _principal_basis(xs, keep, max_rank, "svcca")
    vt = _principal_basis(xt, keep, max_rank, "svcca")
    cos = torch.linalg.svdvals(vs.T @ vt).clamp(0.0, 1.0)
    return float(cos.mean())


# ----------------------------------------------------- source-dependent feature maps
def source_projection(acts_s: Any, acts_t: Any, *, keep: float = 0.9, max_rank: int | None = None) -> Tensor:
    """Target activations seen through the source's principal subspace.  -> (n_t, k)

    ``acts_t @ V_S`` with ``V_S`` (d×k) the top right singular vectors of the centred source
    activations capturing ``keep`` of the source variance.  This is how LogME and H-score
    are made source-dependent in :data:`BASELINES`: with one frozen backbone the target
    features do not depend on the source, so we ask how well target labels are predicted
    from the directions the source task occupies.  The target is not centred (LogME uses
    raw features; H-score centres internally).
    """
    xs, xt = _f64(acts_s, "acts_s", 2), _f64(acts_t, "acts_t", 2)
    _same_width(xs, xt, "source_projection")
    return xt @ _principal_basis(xs, keep, max_rank, "source_projection")


def source_label_probs(probs_t: Any, labels_s: Any) -> Tensor:
    """The model's distribution over the *source* label set on target inputs. -> (n_t, Z)

    ``θ(x)_z = p(z | x) / Σ_{z' ∈ Z_S} p(z' | x)`` for the Z labels ``Z_S`` present in the
    source stream (sorted), with ``probs_t`` (n_t, K) the shared head's softmax on the
    target inputs.  This is the "source model's prediction over source labels" that LEEP
    needs: with one shared head, the source task is its label set.
    """
    p = _f64(probs_t, "probs_t", 2)
    ls = _int_labels(labels_s, "labels_s")
    ls = ls[ls != IGNORE_INDEX]
    if ls.numel() == 0:
        raise InputError("source_label_probs: source has no labels")
    if int(ls.min()) < 0 or int(ls.max()) >= p.shape[1]:
        raise InputError(f"source_label_probs: source labels outside [0, {p.shape[1]})")
    theta = p[:, torch.unique(ls)]
    mass = theta.sum(1, keepdim=True)
    if bool((mass <= 0).any()):
        raise InputError("source_label_probs: a target row puts zero mass on the source labels")
    return theta / mass


# ------------------------------------------------------------- transferability scores
def logme(
    features_t: Any,
    labels_t: Any,
    *,
    min_per_class: int = 2,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> float:
    """LogME: mean over classes of the maximised log evidence per example.

    features_t (n, D), labels_t (n,) -> float.  For each class c, ``y = 1[label = c]``
    (n,) is modelled as ``y = F w + ε``, ``w ~ N(0, α⁻¹ I_D)``, ``ε ~ N(0, β⁻¹ I_n)``; the
    log evidence ``n/2 log β + D/2 log α − n/2 log 2π − β/2 ‖Fm − y‖² − α/2 ‖m‖²
    − 1/2 log|αI + βFᵀF|`` (``m`` the posterior mean) is maximised over (α, β) by the
    MacKay fixed point ``γ = Σ βσ²/(α+βσ²)``, ``α = γ/‖m‖²``, ``β = (n−γ)/‖Fm−y‖²`` in the
    SVD basis of F, all classes at once.  Score = mean_c max evidence / n.  Features are
    used raw (no intercept), as in the original.  Invariant to row order, feature scaling
    and feature rotations.  Raises InputError for fewer than 2 classes, classes with fewer
    than ``min_per_class`` examples (covers K ≫ n), or an SVD over the memory budget.
    """
    f = _f64(features_t, "features_t", 2)
    n, dim = f.shape
    r_max = min(n, dim)
    _check_budget(max(n * r_max, r_max * r_max), "the SVD of the features", "logme", max_entries)
    y_idx, counts = _check_classes(_int_labels(labels_t, "labels_t"), n, "logme", min_per_class)
    n_cls = counts.numel()
    _check_budget(r_max * n_cls, "features × classes projections", "logme", max_entries)
    u, s, _ = torch.linalg.svd(f, full_matrices=False)
    nz = s > (s[0] if s.numel() else 0) * max(n, dim) * torch.finfo(torch.float64).eps
    u, sig2 = u[:, nz], s[nz].square()  # (n, r), (r,)
    if sig2.numel() == 0:
        raise InputError("logme: features are all zero")
    # z = Uᵀ y for every one-hot class column: (r, C), built by summing rows per class.
    z = torch.zeros(u.shape[1], n_cls, dtype=torch.float64).index_add_(1, y_idx, u.T)
    yy = counts.to(torch.float64)  # ‖y_c‖² = n_c
    out_of_span = (yy - z.square().sum(0)).clamp_min(0.0)  # ‖(I − UUᵀ) y‖²
    zz = z.square()
    sig2c = sig2[:, None]
    alpha = torch.ones(n_cls, dtype=torch.float64)
    beta = torch.ones(n_cls, dtype=torch.float64)
    lo, hi = 1e-12, 1e12  # keeps the iteration finite when y ⟂ span(F) or F fits y exactly

    def moments(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        den = a + b * sig2c  # (r, C)
        gamma = (b * sig2c / den).sum(0)
        mm = (b.square() * sig2c * zz / den.square()).sum(0)  # ‖m‖²
        res = (a.square() * zz / den.square()).sum(0) + out_of_span  # ‖Fm − y‖²
        return gamma, mm, res

    for _ in range(max_iter):
        gamma, mm, res = moments(alpha, beta)
        new_a = (gamma / mm.clamp_min(1e-300)).clamp(lo, hi)
        new_b = ((n - gamma) / res.clamp_min(1e-300)).clamp(lo, hi)
        done = bool(((new_a - alpha).abs() <= tol * alpha).all() and ((new_b - beta).abs() <= tol * beta).all())
        alpha, beta = new_a, new_b
        if done:
            break
    _, mm, res = moments(alpha, beta)
    logdet = torch.log(alpha + beta * sig2c).sum(0) + (dim - sig2.numel()) * torch.log(alpha)
    evidence = (
        n / 2 * torch.log(beta)
        + dim / 2 * torch.log(alpha)
        - n / 2 * math.log(2 * math.pi)
        - beta / 2 * res
        - alpha / 2 * mm
        - logdet / 2
    )
    return float((evidence / n).mean())


def leep(
    source_probs_on_t: Any, labels_t: Any, *, min_per_class: int = 2, max_entries: int = DEFAULT_MAX_ENTRIES
) -> float:
    """LEEP: log expected empirical prediction.  θ (n, Z), labels_t (n,) -> float ≤ 0.

    ``θ_i`` is the source model's distribution over its Z source labels on target input i
    (see :func:`source_label_probs`).  Empirical joint ``P(y, z) = 1/n Σ_i θ_iz 1[y_i=y]``,
    conditional ``P(y|z) = P(y, z)/P(z)``; LEEP = ``1/n Σ_i log Σ_z P(y_i|z) θ_iz``.
    Source labels that receive zero total mass are dropped.  Raises InputError for rows
    that are not distributions, fewer than 2 target classes, under-populated classes
    (K ≫ n), or a C×Z joint over the memory budget.
    """
    theta = _f64(source_probs_on_t, "source_probs_on_t", 2)
    n, z_dim = theta.shape
    if bool((theta < 0).any()) or not torch.allclose(theta.sum(1), torch.ones(n, dtype=theta.dtype), atol=1e-6):
        raise InputError("leep: source_probs_on_t rows must be probability distributions")
    labels = _int_labels(labels_t, "labels_t")
    n_cls_guess = int(torch.unique(labels).numel()) if labels.numel() else 0
    _check_budget(n_cls_guess * z_dim, "the target×source label joint", "leep", max_entries)
    y_idx, counts = _check_classes(labels, n, "leep", min_per_class)
    joint = torch.zeros(counts.numel(), z_dim, dtype=torch.float64).index_add_(0, y_idx, theta) / n
    pz = joint.sum(0)
    live = pz > 0
    cond = joint[:, live] / pz[live]  # P(y | z), (C, Z')
    eep = (cond[y_idx] * theta[:, live]).sum(1)  # Σ_z P(y_i|z) θ_iz
    return float(torch.log(eep).mean())


def hscore(features_t: Any, labels_t: Any, *, min_per_class: int = 2, max_entries: int = DEFAULT_MAX_ENTRIES) -> float:
    """H-score: ``tr(cov(f)⁺ cov(E[f|y]))``.  features_t (n, D), labels_t (n,) -> float ≥ 0.

    ``cov`` are plug-in (1/n) covariances; ``cov(E[f|y]) = Σ_c (n_c/n)(μ_c − μ)(μ_c − μ)ᵀ``;
    ``⁺`` is the pseudo-inverse (eigenvalues below round-off of the largest are dropped).
    Invariant to row order and to any invertible linear map of the features.  Raises
    InputError for a D×D covariance over the memory budget (e.g. D = K = 49,152), fewer
    than 2 classes or under-populated classes (K ≫ n).
    """
    f = _f64(features_t, "features_t", 2)
    n, dim = f.shape
    _check_budget(dim * dim, f"the {dim}×{dim} feature covariance", "hscore", max_entries)
    y_idx, counts = _check_classes(_int_labels(labels_t, "labels_t"), n, "hscore", min_per_class)
    fc = _centered(f)
    evals, evecs = torch.linalg.eigh(fc.T @ fc / n)
    keep = evals > evals.max().clamp_min(0) * dim * torch.finfo(torch.float64).eps * 10
    if not bool(keep.any()):
        raise InputError("hscore: features have zero variance")
    means = torch.zeros(counts.numel(), dim, dtype=torch.float64).index_add_(0, y_idx, fc)
    means = means / counts[:, None]  # μ_c − μ, (C, D)
    proj = means @ evecs[:, keep]  # in the covariance eigenbasis
    w = counts.to(torch.float64) / n
    return float((w[:, None] * proj.square() / evals[keep]).sum())


# ------------------------------------------------------------------- gradient baseline
def mean_gradient(chunks: Iterable[tuple[Tensor, Tensor]]) -> Tensor:
    """The mean head gradient ``G = 1/n Σ_i e_i a_iᵀ`` (K×d, float64) from row chunks
    ``(a (r, d), e (r, K))``, accumulated in place so no (n, K) or extra K×d object is formed
    (callers can compute each chunk's errors on the fly)."""
    g: Tensor | None = None
    n = 0
    for a, e in chunks:
        a, e = a.to(torch.float64), e.to(torch.float64)
        if g is None:
            g = torch.zeros(e.shape[1], a.shape[1], dtype=torch.float64)
        g.addmm_(e.T, a)
        n += a.shape[0]
    if g is None or n == 0:
        raise InputError("mean_gradient: no rows")
    return g / n


def mean_gradient_cosine(
    acts_s: Any,
    errors_s: Any,
    acts_t: Any,
    errors_t: Any,
    *,
    method: str = "auto",
    max_entries: int = DEFAULT_MAX_ENTRIES,
    block_entries: int = 2**22,
) -> float:
    """Cosine between the two tasks' mean head gradients.  a (n, d), e (n, K) -> [-1, 1].

    ``G_T = 1/n_T Σ_i e_i a_iᵀ`` (K×d, the gradient of the mean cross-entropy w.r.t. the head
    weight when ``e = softmax(z) − onehot(y)``); score ``<G_S, G_T>_F / (‖G_S‖ ‖G_T‖)``.
    ``method="dense"`` forms ``Eᵀ A`` (K×d, O(n d K)); ``"pairs"`` never does and uses
    ``<G_S, G_T>_F = 1/(n_S n_T) Σ_ij (a_i·a_j)(e_i·e_j)`` in row blocks of at most
    ``block_entries`` pairs (O(n_S n_T (d + K))).  ``"auto"`` takes the cheaper one whose
    memory fits ``max_entries``.  This is the first-order similarity that gradient
    data-selection tools use; it ignores the second-moment (Fisher) geometry.
    """
    a_s, e_s = _f64(acts_s, "acts_s", 2), _f64(errors_s, "errors_s", 2)
    a_t, e_t = _f64(acts_t, "acts_t", 2), _f64(errors_t, "errors_t", 2)
    for a, e, side in ((a_s, e_s, "source"), (a_t, e_t, "target")):
        if a.shape[0] != e.shape[0] or a.shape[0] == 0:
            raise InputError(
                f"mean_gradient_cosine: {side} has {a.shape[0]} activation rows and {e.shape[0]} error rows"
            )
    if a_s.shape[1] != a_t.shape[1] or e_s.shape[1] != e_t.shape[1]:
        raise InputError(
            "mean_gradient_cosine: source and target head shapes differ "
            f"(d {a_s.shape[1]} vs {a_t.shape[1]}, K {e_s.shape[1]} vs {e_t.shape[1]})"
        )
    d, k = a_s.shape[1], e_s.shape[1]
    n_s, n_t = a_s.shape[0], a_t.shape[0]
    if method == "auto":
        dense_cost = (n_s + n_t) * d * k
        pair_cost = (n_s * n_s + n_t * n_t + n_s * n_t) * (d + k)
        method = "dense" if d * k <= max_entries and dense_cost <= pair_cost else "pairs"
    if method == "dense":
        _check_budget(2 * d * k, "two K×d mean gradients", "mean_gradient_cosine", max_entries)
        rows = max(1, block_entries // max(d, k))

        def grad(a: Tensor, e: Tensor) -> Tensor:
            return mean_gradient((a[i : i + rows], e[i : i + rows]) for i in range(0, a.shape[0], rows))

        gs, gt = grad(a_s, e_s), grad(a_t, e_t)
        st, ss, tt = (gs * gt).sum(), gs.square().sum(), gt.square().sum()
    elif method == "pairs":

        def inner(a1: Tensor, e1: Tensor, a2: Tensor, e2: Tensor) -> Tensor:
            rows = max(1, block_entries // a2.shape[0])
            tot = torch.zeros((), dtype=torch.float64)
            for i in range(0, a1.shape[0], rows):
                tot += ((a1[i : i + rows] @ a2.T) * (e1[i : i + rows] @ e2.T)).sum()
            return tot / (a1.shape[0] * a2.shape[0])

        st, ss, tt = inner(a_s, e_s, a_t, e_t), inner(a_s, e_s, a_s, e_s), inner(a_t, e_t, a_t, e_t)
    else:
        raise InputError(f"mean_gradient_cosine: method must be auto, dense or pairs, got {method!r}")
    if float(ss) <= 0.0 or float(tt) <= 0.0:
        raise InputError("mean_gradient_cosine: a task's mean gradient is zero; cosine undefined")
    return float((st / (ss.clamp_min(0).sqrt() * tt.clamp_min(0).sqrt())).clamp(-1.0, 1.0))


def project_rows(x: Tensor, out_dim: int | None, seed: int, *, block: int = 8192) -> Tensor:
    """Seeded Rademacher projection of row vectors: ``x R / √p``.  (N, D) -> (N, p) float64.

    R is D×p with i.i.d. ±1 entries, regenerated from ``seed`` (one CPU generator, row
    blocks of ``block`` drawn in order, so R is never held whole and never stored).
    E[RRᵀ]/p = I, so inner products are preserved in expectation (Johnson–Lindenstrauss:
    unbiased, variance O(‖g‖²‖h‖²/p)); this is how gradient data-selection tools shrink
    per-example gradients.  ``out_dim=None``: the identity (no projection)."""
    x = _f64(x, "x", 2)
    if out_dim is None:
        return x.clone()
    if isinstance(out_dim, bool) or not isinstance(out_dim, int) or out_dim < 1:
        raise InputError(f"project_rows: out_dim must be a positive integer or None, got {out_dim!r}")
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(x.shape[0], out_dim, dtype=torch.float64)
    for i in range(0, x.shape[1], block):
        cols = x[:, i : i + block]
        r = torch.randint(0, 2, (cols.shape[1], out_dim), generator=g, dtype=torch.int8).to(torch.float64) * 2 - 1
        out.addmm_(cols, r)
    return out / math.sqrt(out_dim)


def gradient_cosine_scores(doc_grads: Tensor, target_grads: Tensor) -> Tensor:
    """Cosine of each document's gradient with the target's mean gradient.
    (N, p), (n_T, p) -> (N,) float64; NaN for a zero document gradient."""
    g, t = _f64(doc_grads, "doc_grads", 2), _f64(target_grads, "target_grads", 2)
    if g.shape[1] != t.shape[1] or t.shape[0] == 0:
        raise InputError(f"gradient_cosine_scores: widths {g.shape[1]} and {t.shape[1]} differ or no target rows")
    mu = t.mean(0)
    if float(mu.norm()) == 0.0:
        raise InputError("gradient_cosine_scores: the target's mean gradient is zero; cosine undefined")
    norms = g.norm(dim=1)
    return torch.where(
        norms > 0, (g @ mu) / (norms.clamp_min(1e-300) * mu.norm()), torch.full_like(norms, float("nan"))
    )


# ------------------------------------------------------------------------ random
def random_scores(names: Sequence[str], seed: int, *, salt: str = "") -> dict[str, float]:
    """Random baseline: name -> uniform [0, 1) score, reproducible across processes.

    Each name's score is drawn from its own generator seeded by (seed, crc32(salt),
    crc32(name)), so it does not depend on the order of ``names`` or on which other
    candidates are present.  Pass the target's name as ``salt`` for independent draws per
    target.
    """
    names = list(names)
    if len(set(names)) != len(names):
        raise InputError("random_scores: names must be unique")
    salt_h = zlib.crc32(salt.encode())
    return {nm: float(np.random.default_rng([seed, salt_h, zlib.crc32(nm.encode())]).random()) for nm in names}


# ---------------------------------------------------------------------- registry
@dataclass(frozen=True)
class TaskStream:
    """One task's head inputs and outputs, float64.  Rows with label -100 are dropped.

    acts (n, d) is required; errors (n, K), labels (n,) and probs (n, K) are optional but
    errors = probs − onehot(labels), so any two give the third, and labels are read off
    errors (the only negative entry of a row) when absent.
    """

    acts: Any
    errors: Any = None
    labels: Any = None
    probs: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        acts = _f64(self.acts, "acts", 2)
        n = acts.shape[0]
        fields: dict[str, Tensor | None] = {"acts": acts}
        fields["errors"] = None if self.errors is None else _f64(self.errors, "errors", 2)
        fields["probs"] = None if self.probs is None else _f64(self.probs, "probs", 2)
        fields["labels"] = None if self.labels is None else _int_labels(self.labels, "labels")
        for key, v in fields.items():
            if v is not None and v.shape[0] != n:
                raise InputError(f"TaskStream: {key} has {v.shape[0]} rows, acts has {n}")
        lab = fields["labels"]
        if lab is not None:
            keep = lab != IGNORE_INDEX
            fields = {key: (None if v is None else v[keep]) for key, v in fields.items()}
        for key, v in fields.items():
            object.__setattr__(self, key, v)

    def resolved_labels(self) -> Tensor:
        if self.labels is not None:
            return self.labels
        if self.errors is None:
            raise InputError(f"task {self.name!r}: needs labels or errors")
        vals, idx = self.errors.min(1)
        if bool((vals >= 0).any()):
            raise InputError(f"task {self.name!r}: labels cannot be read off all-zero error rows")
        return idx

    def resolved_probs(self) -> Tensor:
        if self.probs is not None:
            return self.probs
        if self.errors is None:
            raise InputError(f"task {self.name!r}: needs probs or errors")
        lab = self.resolved_labels()
        return self.errors.index_put(
            (torch.arange(lab.numel()), lab), self.errors[torch.arange(lab.numel()), lab] + 1.0
        )

    def resolved_errors(self) -> Tensor:
        if self.errors is not None:
            return self.errors
        if self.probs is None or self.labels is None:
            raise InputError(f"task {self.name!r}: needs errors, or probs and labels")
        lab = self.labels
        return self.probs.index_put((torch.arange(lab.numel()), lab), self.probs[torch.arange(lab.numel()), lab] - 1.0)


def _random_pair(s: TaskStream, t: TaskStream) -> float:
    if s.name is None or t.name is None:
        raise InputError("random: source and target streams need names")
    return random_scores([s.name], seed=0, salt=t.name)[s.name]


#: name -> f(source, target) -> float (higher = better source).  Methods that cannot run on
#: the given streams raise InputError with the reason.
BASELINES: Mapping[str, Callable[[TaskStream, TaskStream], float]] = {
    "cka": lambda s, t: linear_cka(s.acts, t.acts),
    "rsa": lambda s, t: rsa(s.acts, t.acts),
    "svcca": lambda s, t: svcca(s.acts, t.acts),
    "logme": lambda s, t: logme(source_projection(s.acts, t.acts), t.resolved_labels()),
    "hscore": lambda s, t: hscore(source_projection(s.acts, t.acts), t.resolved_labels()),
    "leep": lambda s, t: leep(source_label_probs(t.resolved_probs(), s.resolved_labels()), t.resolved_labels()),
    "grad_cos": lambda s, t: mean_gradient_cosine(s.acts, s.resolved_errors(), t.acts, t.resolved_errors()),
    "random": _random_pair,
}
