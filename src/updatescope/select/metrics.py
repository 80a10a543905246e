"""Source-selection metrics: how good is a predicted score table against measured transfer.

Inputs are two tables indexed ``[target][source]``: ``scores`` (predicted, higher = better
source) and ``transfer`` (ground truth, e.g. held-out loss reduction, higher = better).
Either nested mappings ``{target: {source: value}}`` or 2-D arrays (targets × sources).
The candidate sources of a target are the entries of ``transfer[target]`` other than the
target itself (a target is never its own source) and, for arrays, other than NaN entries.
Every candidate must have a finite score.

Ties in the predicted scores (within ``tie_tol``) are broken uniformly at random *in
expectation*: the chosen source's transfer, the top-1 hit and the regret are averaged over
the tied top candidates.  A method whose scores collapse to a constant therefore gets
exactly the chance top-1 rate, as it should.  A pick counts as a top-1 hit when its
transfer equals the best (within ``tie_tol``), so ties in the truth are all correct.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from updatescope.errors import InputError

__all__ = [
    "TargetMetric",
    "top1_accuracy",
    "chance_top1",
    "oracle_normalised_transfer",
    "regret",
    "spearman",
    "pooled_spearman",
    "bootstrap_ci",
    "summarise",
    "metric_report",
    "within_group",
    "paired_difference",
    "mean_and_se",
    "noise_ceiling",
    "ceiling_from_pairs",
    "sign_flip_p",
    "holm",
    "Verdict",
    "paired_verdicts",
]


@dataclass(frozen=True)
class TargetMetric:
    """One metric per target: ``per_target`` for included targets, ``excluded`` with reasons.

    ``mean``/``sd`` (sample sd, ddof=1; 0 for one target)/``max`` are over included
    targets; NaN when none is included.
    """

    name: str
    per_target: dict[str, float]
    excluded: dict[str, str] = field(default_factory=dict)
    extra: dict[str, dict[str, float]] = field(default_factory=dict)

    def _vals(self) -> np.ndarray:
        return np.fromiter(self.per_target.values(), dtype=np.float64, count=len(self.per_target))

    @property
    def mean(self) -> float:
        v = self._vals()
        return float(v.mean()) if v.size else math.nan

    @property
    def sd(self) -> float:
        v = self._vals()
        return float(v.std(ddof=1)) if v.size > 1 else (0.0 if v.size else math.nan)

    @property
    def max(self) -> float:
        v = self._vals()
        return float(v.max()) if v.size else math.nan


# ------------------------------------------------------------------------- tables
def _as_table(
    scores: Any, transfer: Any, targets: Sequence[str] | None, sources: Sequence[str] | None
) -> list[tuple[str, list[str], np.ndarray, np.ndarray]]:
    """-> [(target, candidate names, scores (c,), transfer (c,))] in target order."""
    if not isinstance(transfer, Mapping):
        tr = np.asarray(transfer, dtype=np.float64)
        sc = np.asarray(scores, dtype=np.float64)
        if tr.ndim != 2 or sc.shape != tr.shape:
            raise InputError(f"scores {sc.shape} and transfer {tr.shape} must be equal 2-D shapes")
        if sources is None and targets is None and tr.shape[0] == tr.shape[1]:
            targets = sources = [str(i) for i in range(tr.shape[0])]  # square: diagonal = self
        targets = list(targets) if targets is not None else [f"t{i}" for i in range(tr.shape[0])]
        sources = list(sources) if sources is not None else [f"s{j}" for j in range(tr.shape[1])]
        if len(targets) != tr.shape[0] or len(sources) != tr.shape[1]:
            raise InputError("targets/sources names do not match the table shape")
        transfer = {
            t: {s: tr[i, j] for j, s in enumerate(sources) if not np.isnan(tr[i, j])} for i, t in enumerate(targets)
        }
        scores = {t: {s: sc[i, j] for j, s in enumerate(sources)} for i, t in enumerate(targets)}
    if not isinstance(scores, Mapping):
        raise InputError("scores and transfer must both be mappings or both be arrays")
    rows = []
    for tgt, row in transfer.items():
        cands = [s for s in row if s != tgt]
        if not cands:
            raise InputError(f"target {tgt!r} has no candidate sources")
        if tgt not in scores:
            raise InputError(f"scores has no row for target {tgt!r}")
        missing = [s for s in cands if s not in scores[tgt]]
        if missing:
            raise InputError(f"scores[{tgt!r}] lacks sources {missing[:5]}")
        s_arr = np.array([float(scores[tgt][s]) for s in cands], dtype=np.float64)
        t_arr = np.array([float(row[s]) for s in cands], dtype=np.float64)
        if not np.isfinite(s_arr).all():
            raise InputError(f"scores[{tgt!r}] has a NaN or inf for a candidate source")
        if not np.isfinite(t_arr).all():
            raise InputError(f"transfer[{tgt!r}] has an inf")
        rows.append((str(tgt), cands, s_arr, t_arr))
    if not rows:
        raise InputError("transfer table is empty")
    return rows


def _pick(s: np.ndarray, t: np.ndarray, tie_tol: float) -> tuple[float, float, float]:
    """-> (expected hit, expected chosen transfer, best transfer) under random tie-breaking."""
    top = s >= s.max() - tie_tol * max(1.0, abs(s.max()))
    best = t.max()
    hit = t[top] >= best - tie_tol * max(1.0, abs(best))
    return float(hit.mean()), float(t[top].mean()), float(best)


# ------------------------------------------------------------------------ metrics
def top1_accuracy(
    scores: Any,
    transfer: Any,
    *,
    targets: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    tie_tol: float = 1e-12,
) -> TargetMetric:
    """Per target 1 if the top-scored source has the best transfer (expected over ties)."""
    return TargetMetric(
        "top1", {t: _pick(s, r, tie_tol)[0] for t, _, s, r in _as_table(scores, transfer, targets, sources)}
    )


def chance_top1(
    transfer: Any, *, targets: Sequence[str] | None = None, sources: Sequence[str] | None = None, tie_tol: float = 1e-12
) -> TargetMetric:
    """Top-1 of a random pick: per target (# best-tied candidates) / (# candidates)."""
    out = {t: _pick(np.zeros_like(r), r, tie_tol)[0] for t, _, _, r in _as_table(transfer, transfer, targets, sources)}
    return TargetMetric("chance_top1", out)


def oracle_normalised_transfer(
    scores: Any,
    transfer: Any,
    *,
    targets: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    tie_tol: float = 1e-12,
) -> TargetMetric:
    """Per target transfer(chosen) / transfer(best).

    Defined only when the best transfer is > 0: when no source helps (best ≤ 0) the ratio
    has no meaning (its sign flips, 0/0 is possible), so the target is *excluded* and
    listed in ``excluded``; use :func:`regret`, which is always defined, for those.  A
    chosen source that hurts (negative transfer) gives a negative ratio.
    """
    per, excl = {}, {}
    for t, _, s, r in _as_table(scores, transfer, targets, sources):
        _, chosen, best = _pick(s, r, tie_tol)
        if best <= 0.0:
            excl[t] = f"best transfer {best:.4g} <= 0: no source helps"
        else:
            per[t] = chosen / best
    return TargetMetric("oracle_normalised_transfer", per, excl)


def regret(
    scores: Any,
    transfer: Any,
    *,
    targets: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    tie_tol: float = 1e-12,
) -> TargetMetric:
    """Per target best transfer − chosen transfer (≥ 0); ``.mean`` and ``.max`` over targets."""
    per = {}
    for t, _, s, r in _as_table(scores, transfer, targets, sources):
        _, chosen, best = _pick(s, r, tie_tol)
        per[t] = best - chosen
    return TargetMetric("regret", per)


def spearman(
    scores: Any, transfer: Any, *, targets: Sequence[str] | None = None, sources: Sequence[str] | None = None
) -> TargetMetric:
    """Per-target Spearman ρ between scores and transfer over the candidates.

    Ties get average ranks (scipy.stats.spearmanr).  Targets with fewer than 3 candidates
    or with constant scores/transfer (ρ undefined) are excluded with the reason;
    two-sided p-values are in ``extra["p_value"]``.
    """
    per, excl, pvals = {}, {}, {}
    for t, _, s, r in _as_table(scores, transfer, targets, sources):
        if s.size < 3:
            excl[t] = f"only {s.size} candidates"
        elif np.ptp(s) == 0.0:
            excl[t] = "constant scores"
        elif np.ptp(r) == 0.0:
            excl[t] = "constant transfer"
        else:
            res = stats.spearmanr(s, r)
            per[t], pvals[t] = float(res.statistic), float(res.pvalue)
    return TargetMetric("spearman", per, excl, {"p_value": pvals})


def pooled_spearman(
    scores: Any, transfer: Any, *, targets: Sequence[str] | None = None, sources: Sequence[str] | None = None
) -> dict[str, float]:
    """Spearman ρ and two-sided p over all (target, source) pairs pooled: {rho, p, n}."""
    rows = _as_table(scores, transfer, targets, sources)
    s = np.concatenate([x[2] for x in rows])
    r = np.concatenate([x[3] for x in rows])
    if s.size < 3 or np.ptp(s) == 0.0 or np.ptp(r) == 0.0:
        return {"rho": math.nan, "p": math.nan, "n": int(s.size)}
    res = stats.spearmanr(s, r)
    return {"rho": float(res.statistic), "p": float(res.pvalue), "n": int(s.size)}


def bootstrap_ci(
    per_target_values: Mapping[str, float] | Sequence[float] | np.ndarray,
    *,
    n_boot: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float]:
    """Percentile bootstrap (1 − alpha) interval of the mean over targets.

    Resamples targets with replacement ``n_boot`` times from ``np.random.default_rng(seed)``;
    NaN values are dropped first.  Needs at least 2 values.
    """
    vals = per_target_values.values() if isinstance(per_target_values, Mapping) else per_target_values
    v = np.asarray(list(vals), dtype=np.float64).ravel()
    v = v[~np.isnan(v)]
    if v.size < 2:
        raise InputError(f"bootstrap_ci: needs at least 2 non-NaN values, got {v.size}")
    if not 0.0 < alpha < 1.0 or n_boot < 1:
        raise InputError(f"bootstrap_ci: need 0 < alpha < 1 and n_boot >= 1 (got {alpha}, {n_boot})")
    idx = np.random.default_rng(seed).integers(0, v.size, size=(n_boot, v.size))
    means = v[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def _num(x: float) -> float | None:
    return None if math.isnan(x) else x


def _report(m: TargetMetric, n_boot: int, seed: int, alpha: float) -> dict[str, Any]:
    ci = list(bootstrap_ci(m.per_target, n_boot=n_boot, seed=seed, alpha=alpha)) if len(m.per_target) >= 2 else None
    out: dict[str, Any] = {
        "mean": _num(m.mean),
        "sd": _num(m.sd),
        "max": _num(m.max),
        "ci": ci,
        "n": len(m.per_target),
        "per_target": dict(m.per_target),
    }
    if m.excluded:
        out["excluded"] = dict(m.excluded)
    for key, val in m.extra.items():
        out[key] = dict(val)
    return out


def summarise(
    scores: Any,
    transfer: Any,
    *,
    targets: Sequence[str] | None = None,
    sources: Sequence[str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    tie_tol: float = 1e-12,
) -> dict[str, Any]:
    """All selection metrics for one method, JSON-ready (NaN -> None).

    Keys: n_targets, top1, chance_top1, top1_over_chance, oracle_normalised_transfer,
    regret, spearman (each ``{mean, sd, max, ci, n, per_target[, excluded][, p_value]}``, ci the
    bootstrap interval over targets or None with < 2 targets) and pooled_spearman.
    """
    kw = {"targets": targets, "sources": sources}
    top1 = top1_accuracy(scores, transfer, tie_tol=tie_tol, **kw)
    chance = chance_top1(transfer, tie_tol=tie_tol, **kw)
    rep = lambda m: _report(m, n_boot, seed, alpha)  # noqa: E731
    return {
        "n_targets": len(top1.per_target),
        "top1": rep(top1),
        "chance_top1": chance.mean,
        "top1_over_chance": top1.mean / chance.mean,
        "oracle_normalised_transfer": rep(oracle_normalised_transfer(scores, transfer, tie_tol=tie_tol, **kw)),
        "regret": rep(regret(scores, transfer, tie_tol=tie_tol, **kw)),
        "spearman": rep(spearman(scores, transfer, **kw)),
        "pooled_spearman": {
            k: (_num(v) if isinstance(v, float) else v) for k, v in pooled_spearman(scores, transfer, **kw).items()
        },
    }


# ------------------------------------------------------- beside-the-method evidence
def metric_report(m: TargetMetric, *, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """JSON-ready {mean, sd, max, ci, n, per_target[, excluded]} of one TargetMetric."""
    return _report(m, n_boot, seed, alpha)


def _restrict(
    transfer: Mapping[str, Mapping[str, float]], groups: Mapping[str, str], min_candidates: int
) -> dict[str, dict[str, float]]:
    """transfer restricted to each target's same-group candidates (targets with fewer than
    ``min_candidates`` of them dropped)."""
    out = {}
    for t, row in transfer.items():
        sub = {s: v for s, v in row.items() if s != t and groups.get(s) == groups.get(t)}
        if len(sub) >= min_candidates:
            out[t] = sub
    return out


def within_group(
    scores: Mapping[str, Mapping[str, float]],
    transfer: Mapping[str, Mapping[str, float]],
    groups: Mapping[str, str],
    *,
    tie_tol: float = 1e-12,
) -> dict[str, TargetMetric]:
    """Top-1 (and its chance level) and Spearman among the candidates sharing the target's
    group (family, collection) only.

    This is the question a family label cannot answer: once the user knows the family, does
    the method still order the sources inside it?  Targets with fewer than 2 same-group
    candidates are left out of top-1, fewer than 3 out of Spearman (see :func:`spearman`).
    -> {"top1", "chance_top1", "spearman"} (TargetMetrics; empty when no target qualifies).
    """
    sub = _restrict(transfer, groups, 2)
    if not sub:
        return {k: TargetMetric(f"within_{k}", {}) for k in ("top1", "chance_top1", "spearman")}
    return {
        "top1": top1_accuracy(scores, sub, tie_tol=tie_tol),
        "chance_top1": chance_top1(sub, tie_tol=tie_tol),
        "spearman": spearman(scores, sub),
    }


def paired_difference(
    a: Mapping[str, float], b: Mapping[str, float], *, n_boot: int = 2000, seed: int = 0, alpha: float = 0.05
) -> dict[str, Any]:
    """Mean over targets of a[t] − b[t] (two methods' per-target metric) with a paired
    percentile bootstrap over targets.

    Pairing matters: targets differ far more in difficulty than methods do, so two
    overlapping marginal CIs say little; resampling the per-target *differences* keeps that
    shared difficulty out.  Only targets where both values are finite are used.
    -> {"mean", "ci" ([lo, hi] or None with < 2 targets), "n", "frac_boot_le_0"}.
    """
    common = [t for t in a if t in b and np.isfinite(a[t]) and np.isfinite(b[t])]
    d = np.array([float(a[t]) - float(b[t]) for t in common], dtype=np.float64)
    if d.size == 0:
        return {"mean": None, "ci": None, "n": 0, "frac_boot_le_0": None}
    out: dict[str, Any] = {"mean": float(d.mean()), "ci": None, "n": int(d.size), "frac_boot_le_0": None}
    if d.size >= 2:
        idx = np.random.default_rng(seed).integers(0, d.size, size=(n_boot, d.size))
        means = d[idx].mean(axis=1)
        lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
        out["ci"] = [float(lo), float(hi)]
        out["frac_boot_le_0"] = float((means <= 0).mean())
    return out


def mean_and_se(
    tables: Sequence[Mapping[str, Mapping[str, float]]],
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Cell-wise mean and standard error (sd with ddof=1 over √n; NaN for one table) of
    ``n`` tables of the same shape, e.g. one transfer table per fine-tuning seed."""
    if not tables:
        raise InputError("mean_and_se: needs at least one table")
    n = len(tables)
    mean: dict[str, dict[str, float]] = {}
    se: dict[str, dict[str, float]] = {}
    for t, row in tables[0].items():
        mean[t], se[t] = {}, {}
        for s in row:
            v = np.array([float(tab[t][s]) for tab in tables], dtype=np.float64)
            mean[t][s] = float(v.mean())
            se[t][s] = float(v.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return mean, se


def noise_ceiling(
    tables: Sequence[Mapping[str, Mapping[str, float]]],
    *,
    groups: Mapping[str, str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    tie_tol: float = 1e-12,
) -> dict[str, Any]:
    """What a perfect predictor could reach given the seed-to-seed noise of the truth.

    ``tables``: one transfer table per fine-tuning seed (≥ 2).  For each seed k its table is
    used as the *predictor* of the mean of the other seeds' tables, and the per-target top-1,
    oracle-normalised transfer, regret and Spearman are averaged over k (then over targets,
    bootstrap CI over targets).  A method scored against the n-seed mean cannot be expected
    to beat this by more than noise.  It is a conservative (low) estimate of the ceiling
    for the n-seed mean: both the predictor (one seed) and the truth (n − 1 seeds) are
    noisier than the n-seed mean a method is scored against.
    With ``groups``, also the within-group top-1 and Spearman (:func:`within_group`).
    """
    n = len(tables)
    if n < 2:
        raise InputError(f"noise_ceiling needs at least 2 seed tables, got {n}")
    pairs = [(tables[k], mean_and_se([tab for j, tab in enumerate(tables) if j != k])[0]) for k in range(n)]
    return {
        "n_seeds": n,
        **ceiling_from_pairs(pairs, groups=groups, n_boot=n_boot, seed=seed, alpha=alpha, tie_tol=tie_tol),
    }


def ceiling_from_pairs(
    pairs: Iterable[tuple[Mapping[str, Mapping[str, float]], Mapping[str, Mapping[str, float]]]],
    *,
    groups: Mapping[str, str] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    alpha: float = 0.05,
    tie_tol: float = 1e-12,
) -> dict[str, Any]:
    """The ceiling metrics from (predictor table, truth table) pairs that are independent
    draws of the noisy truth: per target each metric averaged over the pairs, then over
    targets with a bootstrap CI (:func:`noise_ceiling` uses one seed against the others)."""
    acc: dict[str, dict[str, list[float]]] = {}

    def add(key: str, m: TargetMetric) -> None:
        for t, v in m.per_target.items():
            acc.setdefault(key, {}).setdefault(t, []).append(v)

    for pred, rest in pairs:
        add("top1", top1_accuracy(pred, rest, tie_tol=tie_tol))
        add("oracle_normalised_transfer", oracle_normalised_transfer(pred, rest, tie_tol=tie_tol))
        add("regret", regret(pred, rest, tie_tol=tie_tol))
        add("spearman", spearman(pred, rest))
        if groups is not None:
            w = within_group(pred, rest, groups, tie_tol=tie_tol)
            add("within_top1", w["top1"])
            add("within_spearman", w["spearman"])
    out: dict[str, Any] = {}
    for key in ("top1", "oracle_normalised_transfer", "regret", "spearman", "within_top1", "within_spearman"):
        if key in acc or (key.startswith("within") and groups is not None):
            m = TargetMetric(key, {t: float(np.mean(v)) for t, v in acc.get(key, {}).items()})
            out[key] = _report(m, n_boot, seed, alpha)
    return out


# ------------------------------------------------------- verdicts under multiple comparisons
#: above this many non-zero differences (or clusters) the sign-flip p-value is a Monte Carlo estimate
EXACT_MAX = 20
#: Monte Carlo draws of the sign-flip test: the p-value's SE is at most 0.5 / √draws = 0.0016
N_DRAWS = 100_000


def sign_flip_p(
    diffs: Sequence[float] | np.ndarray, *, exact_max: int = EXACT_MAX, n_draws: int = N_DRAWS, seed: int = 0
) -> tuple[float, float, str]:
    """Two-sided paired sign-flip (randomisation) test of "the mean difference is 0".

    Under the null each difference is as likely to have either sign, so the p-value is the
    share of the 2^n sign assignments whose |sum| reaches the observed |sum|.  Zero
    differences are dropped (flipping them changes nothing).  With at most ``exact_max``
    non-zero differences every assignment is enumerated (exact, SE 0); beyond that
    ``n_draws`` random assignments from ``np.random.default_rng(seed)`` are drawn and the
    p-value is (hits + 1) / (draws + 1), with its binomial SE.
    -> (p, se, "exact" or "Monte Carlo").  An empty input gives p = 1.
    """
    d = np.asarray(list(diffs), dtype=np.float64).ravel()
    if not np.isfinite(d).all():
        raise InputError("sign_flip_p: differences must be finite")
    d = d[d != 0.0]
    if d.size == 0:
        return 1.0, 0.0, "exact"
    obs = abs(float(d.sum()))
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if d.size <= exact_max:
        hits, total = 0, 1 << d.size
        bits = np.arange(d.size, dtype=np.int64)
        step = 1 << 16
        for start in range(0, total, step):
            codes = np.arange(start, min(start + step, total), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            hits += int((np.abs(signs @ d) >= obs - tol).sum())
        return hits / total, 0.0, "exact"
    rng = np.random.default_rng(seed)
    hits, left = 0, n_draws
    while left:
        b = min(left, 1 << 14)
        signs = rng.integers(0, 2, size=(b, d.size)) * 2.0 - 1.0
        hits += int((np.abs(signs @ d) >= obs - tol).sum())
        left -= b
    p = (hits + 1) / (n_draws + 1)
    return p, math.sqrt(p * (1 - p) / n_draws), "Monte Carlo"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (same order as given): the k-th
    smallest is multiplied by (N − k + 1), made non-decreasing in that order, capped at 1."""
    p = np.asarray(list(pvalues), dtype=np.float64)
    n = p.size
    out = np.empty(n)
    running = 0.0
    for k, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (n - k) * float(p[i])))
        out[i] = running
    return out.tolist()


@dataclass(frozen=True)
class Verdict:
    """One paired comparison of a family: the per-unit mean difference (first − second),
    the sign-flip p-value (raw and Holm-adjusted over the family) and the word it allows."""

    comparison: str
    n: int
    mean: float
    p: float
    p_se: float
    test: str
    p_holm: float
    family: str
    family_size: int
    alpha: float
    word: str

    def note(self) -> str:
        """ "p 0.012, Holm 0.048 over 6": the numbers behind the word."""
        se = f" ± {self.p_se:.1g}" if self.p_se else ""
        return f"p {_fmt_p(self.p)}{se}, Holm {_fmt_p(self.p_holm)} over {self.family_size}"


def _fmt_p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def paired_verdicts(
    diffs_by_comparison: Mapping[str, Mapping[str, float] | Sequence[float]],
    *,
    family: str,
    clusters: Mapping[str, Any] | None = None,
    alpha: float = 0.05,
    exact_max: int = EXACT_MAX,
    n_draws: int = N_DRAWS,
    seed: int = 0,
) -> list[Verdict]:
    """The verdict of each paired comparison of one family, Holm-corrected over the family.

    ``diffs_by_comparison``: per comparison the per-unit differences first − second (a
    mapping unit -> difference, e.g. per target, or a sequence), oriented so that a positive
    difference favours the first.  Each comparison is tested with :func:`sign_flip_p`; with
    ``clusters`` (unit -> cluster id, e.g. targets that share a source or evaluation data;
    mappings only) the differences are summed per cluster and the signs flip cluster by
    cluster, so units that are not independent are not counted as if they were.  Holm's
    step-down correction is applied across all comparisons of ``diffs_by_comparison``, whose
    name is ``family``.  The word: "better" (adjusted p < ``alpha``, mean > 0), "worse"
    (adjusted p < ``alpha``, mean < 0), else "no difference".  A comparison without units
    gets p = 1 and mean NaN.  -> one :class:`Verdict` per comparison, in the given order.
    """
    if not 0.0 < alpha < 1.0:
        raise InputError(f"paired_verdicts: need 0 < alpha < 1, got {alpha}")
    raw = []
    for name, diffs in diffs_by_comparison.items():
        if isinstance(diffs, Mapping):
            units = {str(k): float(v) for k, v in diffs.items()}
            if clusters is not None:
                missing = [u for u in units if u not in clusters]
                if missing:
                    raise InputError(f"paired_verdicts: no cluster for {missing[:5]}")
                sums: dict[Any, float] = {}
                for u, v in units.items():
                    sums[clusters[u]] = sums.get(clusters[u], 0.0) + v
                tested = list(sums.values())
            else:
                tested = list(units.values())
            vals = list(units.values())
        else:
            if clusters is not None:
                raise InputError("paired_verdicts: clusters need differences keyed by unit")
            vals = tested = [float(v) for v in diffs]
        p, se, test = sign_flip_p(tested, exact_max=exact_max, n_draws=n_draws, seed=seed)
        if clusters is not None:
            test += f" over {len(tested)} clusters"
        mean = float(np.mean(vals)) if vals else math.nan
        raw.append((name, len(vals), mean, p, se, test))
    adjusted = holm([r[3] for r in raw])
    out = []
    for (name, n, mean, p, se, test), pa in zip(raw, adjusted):
        word = "better" if pa < alpha and mean > 0 else "worse" if pa < alpha and mean < 0 else "no difference"
        out.append(Verdict(name, n, mean, p, se, test, pa, family, len(raw), alpha, word))
    return out
