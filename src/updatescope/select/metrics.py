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
from collections.abc import Mapping, Sequence
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
    acc: dict[str, dict[str, list[float]]] = {}

    def add(key: str, m: TargetMetric) -> None:
        for t, v in m.per_target.items():
            acc.setdefault(key, {}).setdefault(t, []).append(v)

    for k in range(n):
        rest, _ = mean_and_se([tab for j, tab in enumerate(tables) if j != k])
        pred = tables[k]
        add("top1", top1_accuracy(pred, rest, tie_tol=tie_tol))
        add("oracle_normalised_transfer", oracle_normalised_transfer(pred, rest, tie_tol=tie_tol))
        add("regret", regret(pred, rest, tie_tol=tie_tol))
        add("spearman", spearman(pred, rest))
        if groups is not None:
            w = within_group(pred, rest, groups, tie_tol=tie_tol)
            add("within_top1", w["top1"])
            add("within_spearman", w["spearman"])
    out: dict[str, Any] = {"n_seeds": n}
    for key in ("top1", "oracle_normalised_transfer", "regret", "spearman", "within_top1", "within_spearman"):
        if key in acc or (key.startswith("within") and groups is not None):
            m = TargetMetric(key, {t: float(np.mean(v)) for t, v in acc.get(key, {}).items()})
            out[key] = _report(m, n_boot, seed, alpha)
    return out
