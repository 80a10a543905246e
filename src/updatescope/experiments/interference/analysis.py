"""The pre-registered statistics of ``interference`` and its verdict rules (numpy only).

Pairs are ordered ``(A, B)`` keys written ``"A>B"`` (A trained first, B second); a table is
``{"A>B": value}``.  Every rule here turns recorded numbers into words, so the record and the
docs say what the numbers allow and nothing is typed by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from updatescope.select.metrics import paired_verdicts

__all__ = [
    "PAIR_COMPARISONS",
    "PLAN_COMPARISONS",
    "pair_key",
    "split_key",
    "correlations",
    "per_task_spearman",
    "cluster_bootstrap",
    "pair_verdicts",
    "plan_verdicts",
    "proxy_conclusion",
    "eval_bootstrap",
    "eval_se",
]

#: (name, first predictor, second predictor): the pre-registered comparisons, in order
PAIR_COMPARISONS = (
    ("A_F - family label", "fisher", "family"),
    ("A_F - random", "fisher", "random"),
    ("<F_A,F_B> - mean-gradient conflict", "inner", "grad_conflict"),
    ("A_F - Scov(Gamma_e)", "fisher", "error"),
)
#: (name, arm whose loss is subtracted from, arm): positive = the second arm (the planner's) has lower loss
PLAN_COMPARISONS = (
    ("planner order vs random orders", "random", "plan"),
    ("planner order vs predicted-worst order", "worst", "plan"),
    ("planner replay vs uniform replay", "uniform_replay", "plan_replay"),
)
SUPPORTED = "A_F predicts forgetting beyond the family label and random"
NOT_SHOWN = "no predictor is shown to beat the family label or random"


def pair_key(a: str, b: str) -> str:
    return f"{a}>{b}"


def split_key(key: str) -> tuple[str, str]:
    a, _, b = key.partition(">")
    return a, b


def _rho(x: np.ndarray, y: np.ndarray, kind: str) -> float:
    if x.size < 3 or np.ptp(x) == 0.0 or np.ptp(y) == 0.0:
        return math.nan
    fn = stats.spearmanr if kind == "spearman" else stats.pearsonr
    return float(fn(x, y).statistic)


def _arrays(pred: Mapping[str, float], truth: Mapping[str, float]) -> tuple[list[str], np.ndarray, np.ndarray]:
    keys = [k for k in truth if k in pred and math.isfinite(pred[k]) and math.isfinite(truth[k])]
    return keys, np.array([pred[k] for k in keys], float), np.array([truth[k] for k in keys], float)


def correlations(pred: Mapping[str, float], truth: Mapping[str, float]) -> dict[str, Any]:
    """Spearman and Pearson over the pairs both tables hold: {spearman, pearson, n} (NaN -> None)."""
    _, x, y = _arrays(pred, truth)
    out = {"spearman": _rho(x, y, "spearman"), "pearson": _rho(x, y, "pearson")}
    return {**{k: (None if math.isnan(v) else v) for k, v in out.items()}, "n": int(x.size)}


def per_task_spearman(pred: Mapping[str, float], truth: Mapping[str, float]) -> dict[str, float]:
    """For each first task A, Spearman over its partners B between predictor and truth;
    undefined (constant predictor or truth, < 3 partners) counts as 0, as pre-registered."""
    by_a: dict[str, list[str]] = {}
    for k in truth:
        by_a.setdefault(split_key(k)[0], []).append(k)
    out = {}
    for a, keys in by_a.items():
        _, x, y = _arrays(pred, {k: truth[k] for k in keys})
        r = _rho(x, y, "spearman")
        out[a] = 0.0 if math.isnan(r) else r
    return out


def cluster_bootstrap(
    preds: Mapping[str, Mapping[str, float]],
    truth: Mapping[str, float],
    *,
    pairs: Sequence[tuple[str, str]] = (),
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Percentile 95% CIs of the pooled Spearman of every predictor and of the differences
    ``pairs`` (first − second), resampling first tasks A with replacement (all of a drawn A's
    pairs come with it: pairs sharing A are not independent).  -> {"ci": {predictor: [lo, hi]},
    "diff_ci": {"first - second": [lo, hi]}}; None where fewer than 2 draws are defined."""
    groups: dict[str, list[str]] = {}
    for k in truth:
        groups.setdefault(split_key(k)[0], []).append(k)
    tasks = sorted(groups)
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {p: [] for p in preds}
    for _ in range(n_boot):
        pick = rng.integers(0, len(tasks), size=len(tasks))
        keys = [k for i in pick for k in groups[tasks[i]]]
        y = np.array([truth[k] for k in keys], float)
        for p, table in preds.items():
            x = np.array([table.get(k, math.nan) for k in keys], float)
            ok = np.isfinite(x) & np.isfinite(y)
            draws[p].append(_rho(x[ok], y[ok], "spearman"))

    def ci(v: np.ndarray) -> list[float] | None:
        v = v[np.isfinite(v)]
        return [float(q) for q in np.quantile(v, [0.025, 0.975])] if v.size >= 2 else None

    arr = {p: np.array(v) for p, v in draws.items()}
    return {
        "ci": {p: ci(v) for p, v in arr.items()},
        "diff_ci": {f"{a} - {b}": ci(arr[a] - arr[b]) for a, b in pairs if a in arr and b in arr},
    }


def _verdict_rows(verdicts: list[Any], extra: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    rows = []
    for v in verdicts:
        row = {
            "comparison": v.comparison,
            "n": v.n,
            "mean": None if math.isnan(v.mean) else v.mean,
            "p": v.p,
            "p_holm": v.p_holm,
            "test": v.test,
            "word": v.word,
            "note": v.note(),
        }
        rows.append({**row, **(extra or {}).get(v.comparison, {})})
    return rows


def pair_verdicts(
    preds: Mapping[str, Mapping[str, float]], truth: Mapping[str, float], *, seed: int = 0
) -> list[dict[str, Any]]:
    """The four pre-registered comparisons: per-task Spearman differences, sign-flip over
    tasks A, Holm across the four.  Comparisons whose predictors are missing are left out."""
    per = {p: per_task_spearman(t, truth) for p, t in preds.items()}
    diffs, extra = {}, {}
    for name, a, b in PAIR_COMPARISONS:
        if a in per and b in per:
            diffs[name] = {t: per[a][t] - per[b][t] for t in per[a] if t in per[b]}
            extra[name] = {"first": a, "second": b}
    if not diffs:
        return []
    return _verdict_rows(paired_verdicts(diffs, family="interference pairs", seed=seed), extra)


def plan_verdicts(
    outcomes: Mapping[str, Mapping[str, float]], clusters: Mapping[str, str] | None = None, *, seed: int = 0
) -> list[dict[str, Any]]:
    """``outcomes``: arm -> {run: final mean loss} (run = "sequence/seed").  Differences
    (other arm − planner arm), sign-flip over runs (or, with ``clusters``, over sequences),
    Holm across :data:`PLAN_COMPARISONS`."""
    diffs, extra = {}, {}
    for name, other, mine in PLAN_COMPARISONS:
        if other in outcomes and mine in outcomes:
            runs = [r for r in outcomes[mine] if r in outcomes[other]]
            diffs[name] = {r: outcomes[other][r] - outcomes[mine][r] for r in runs}
            extra[name] = {"first": other, "second": mine}
    if not diffs:
        return []
    return _verdict_rows(paired_verdicts(diffs, family="interference plans", clusters=clusters, seed=seed), extra)


def proxy_conclusion(verdicts: Sequence[Mapping[str, Any]]) -> str:
    """The pre-registered conclusion: :data:`SUPPORTED` only if A_F beat both the family label
    and random ("better"), else :data:`NOT_SHOWN` (also when nothing was scored)."""
    words = {v["comparison"]: v["word"] for v in verdicts}
    ok = words.get(PAIR_COMPARISONS[0][0]) == "better" and words.get(PAIR_COMPARISONS[1][0]) == "better"
    return SUPPORTED if ok else NOT_SHOWN


def eval_bootstrap(diffs: np.ndarray, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Per-example differences (seeds, n_eval) on shared eval examples -> the seed mean of
    their means, its SE over seeds and the percentile 95% CI from resampling examples
    (the same draw for every seed)."""
    d = np.asarray(diffs, float)
    s, n = d.shape
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    boot = d[:, idx].mean(-1).mean(0)
    per_seed = d.mean(1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return {
        "mean": float(per_seed.mean()),
        "se_seeds": float(per_seed.std(ddof=1) / math.sqrt(s)) if s > 1 else None,
        "eval_ci": [float(lo), float(hi)],
        "by_seed": per_seed.tolist(),
    }


def eval_se(diffs: np.ndarray, *, n_boot: int, seed: int) -> float:
    """Per-example differences (n_eval,) of one seed -> the bootstrap SE of their mean: the sd
    of the means of ``n_boot`` resamples of the examples (the resampling of
    :func:`eval_bootstrap`, the same draw for the same ``seed``)."""
    d = np.asarray(diffs, float)
    idx = np.random.default_rng(seed).integers(0, d.size, size=(n_boot, d.size))
    return float(d[idx].mean(-1).std(ddof=1))
