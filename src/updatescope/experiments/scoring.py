"""Scoring every selection method on the same task streams, and the summaries every
selection runner reports.

``score_methods`` scores each (target, source) pair with FisherSketch (joint,
activation-only, error-only, coupling), the exact Gram identity, mean-gradient cosine, the
``select.baselines.BASELINES`` registry and random.  A method that cannot run is reported
with its reason, never silently dropped.  ``trivial_scores`` adds the baselines a user has
without any similarity computation (family label, easiness, size); ``evaluate_methods``,
``paired_comparisons`` and ``truth_noise`` put every method beside them and beside the
noise ceiling of the ground truth.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.heads import errors_of, sketch_stream

__all__ = [
    "SKETCH_KINDS",
    "PAIRED",
    "mean_gradients",
    "score_methods",
    "trivial_scores",
    "evaluate_methods",
    "paired_comparisons",
    "truth_noise",
    "seed_and_eval_ceiling",
    "eval_noise",
    "sketch_vs_exact",
    "sketch_resolution",
    "headline",
    "method_metrics",
]


SKETCH_KINDS = ("fisher", "activation", "error", "coupling")
#: (method, baseline) pairs whose per-target difference every selection runner bootstraps
PAIRED = (
    ("fisher", "cka"),
    ("fisher", "family"),
    ("fisher", "activation"),
    ("fisher", "easiness"),
    ("exact_fisher", "family"),
    ("fisher", "exact_fisher"),
)
#: per-target metrics compared in pairs (regret: lower is better, so a negative difference favours the first)
PAIRED_METRICS = ("spearman", "top1", "oracle_normalised_transfer", "regret", "within_spearman", "within_top1")


def _table(names: Sequence[str], mat: Tensor) -> dict[str, dict[str, float]]:
    """(T, T) matrix [target, source] -> {target: {source: value}} without the diagonal."""
    return {t: {s: float(mat[i, j]) for j, s in enumerate(names) if j != i} for i, t in enumerate(names)}


def mean_gradients(
    w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]], chunk: int = 256
) -> dict[str, Tensor]:
    """Per task the mean head gradient G = Eᵀ A / n (K×d, float64), errors formed chunk by chunk."""
    from updatescope.select.baselines import mean_gradient

    return {
        name: mean_gradient(
            (t["acts"][i : i + chunk], errors_of(w0, b0, t["acts"][i : i + chunk], t["labels"][i : i + chunk]))
            for i in range(0, t["acts"].shape[0], chunk)
        )
        for name, t in tasks.items()
    }


def sketch_tables(
    w0: Tensor,
    b0: Tensor | None,
    tasks: Mapping[str, Mapping[str, Tensor]],
    *,
    sketch_dim: int,
    seed: int,
    fp: str = "",
) -> dict[str, dict[str, dict[str, float]]]:
    """FisherSketch's pair values: one signature per task (streaming pass), all pairs from
    the signatures.  -> {kind: {target: {source: value}}} for every kind in SKETCH_KINDS."""
    import updatescope as us

    names = list(tasks)
    sigs = [
        sketch_stream(w0, b0, tasks[n]["acts"], tasks[n]["labels"], sketch_dim=sketch_dim, seed=seed, fp=fp, name=n)
        for n in names
    ]
    mats = us.alignment_matrix(sigs)
    return {kind: _table(names, mats[kind]) for kind in SKETCH_KINDS}


def score_methods(
    w0: Tensor,
    b0: Tensor | None,
    tasks: Mapping[str, Mapping[str, Tensor]],
    *,
    fp: str = "",
    sketch_dim: int = DEFAULT_SKETCH_DIM,
    seed: int = 0,
    exact_n: int | None = 400,
    baseline_n: int | None = 400,
    baselines: Sequence[str] = ("cka", "rsa", "svcca", "logme", "hscore", "leep"),
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score every (target, source) pair with every method.

    tasks: name -> {"acts" (n, d), "labels" (n,)}: the data a user would sketch.
    -> {"scores": {method: {target: {source: score}}}, "cannot_run": {method: reason},
        "seconds": {method: s}, "sketch_alignment": {kind: {target: {source: value}}},
        "exact_n": {task: n used}}.
    Methods: fisher / activation / error (FisherSketch signatures, all tokens), exact_fisher /
    exact_activation / exact_error (Gram identity on the first ``exact_n`` rows of each
    task), grad_cos (mean-gradient cosine, all tokens), the named ``baselines`` (on the
    first ``baseline_n`` rows), random.
    """
    import updatescope as us
    from updatescope.select.baselines import BASELINES, TaskStream, random_scores

    names = list(tasks)
    k, d = w0.shape
    scores: dict[str, dict[str, dict[str, float]]] = {}
    cannot: dict[str, str] = {}
    secs: dict[str, float] = {}

    def say(msg: str) -> None:
        if log:
            log(msg)

    # FisherSketch: one streaming pass per task, all pairs from the signatures.
    t0 = time.perf_counter()
    sketch_al = sketch_tables(w0, b0, tasks, sketch_dim=sketch_dim, seed=seed, fp=fp)
    secs["sketch"] = time.perf_counter() - t0
    say(f"sketched {len(names)} tasks ({secs['sketch']:.1f}s)")
    for kind in ("fisher", "activation", "error"):
        scores[kind] = sketch_al[kind]

    # Exact Gram identity on (a subsample of) the same streams.
    t0 = time.perf_counter()
    used = {}
    try:
        pairs = []
        for name in names:
            a, y = tasks[name]["acts"], tasks[name]["labels"]
            if exact_n is not None:
                a, y = a[:exact_n], y[:exact_n]
            used[name] = int(a.shape[0])
            pairs.append((a, errors_of(w0, b0, a, y)))
        ex = us.exact_alignment_matrix(pairs)
        del pairs
        for kind in ("fisher", "activation", "error"):
            scores[f"exact_{kind}"] = _table(names, ex[kind])
        exact_tab = {kind: _table(names, ex[kind]) for kind in SKETCH_KINDS}
    except (InputError, RuntimeError) as exc:
        for kind in ("fisher", "activation", "error"):
            cannot[f"exact_{kind}"] = str(exc).splitlines()[0]
        exact_tab = {}
    secs["exact"] = time.perf_counter() - t0
    say(f"exact alignment ({secs['exact']:.1f}s)")

    # Mean-gradient cosine from K×d mean gradients built once per task (same definition as
    # select.baselines.mean_gradient_cosine, which would rebuild them for every pair).
    t0 = time.perf_counter()
    grads = mean_gradients(w0, b0, tasks)
    norms = {n: float(g.square().sum().sqrt()) for n, g in grads.items()}
    gc: dict[str, dict[str, float]] = {t: {} for t in names}
    for i, t in enumerate(names):
        for s in names[i + 1 :]:
            v = float((grads[s] * grads[t]).sum()) / (norms[s] * norms[t])
            gc[t][s] = gc[s][t] = v
    del grads
    scores["grad_cos"] = gc
    secs["grad_cos"] = time.perf_counter() - t0

    # Registry baselines on TaskStreams (float64; subsampled to bound memory).
    streams = {}
    for name in names:
        a, y = tasks[name]["acts"], tasks[name]["labels"]
        if baseline_n is not None:
            a, y = a[:baseline_n], y[:baseline_n]
        streams[name] = TaskStream(acts=a, errors=errors_of(w0, b0, a, y), labels=y, name=name)
    for method in baselines:
        t0 = time.perf_counter()
        fn = BASELINES[method]
        try:
            scores[method] = {t: {s: float(fn(streams[s], streams[t])) for s in names if s != t} for t in names}
        except InputError as exc:
            cannot[method] = str(exc).splitlines()[0]
        secs[method] = time.perf_counter() - t0
        say(f"{method}: {'cannot run' if method in cannot else 'ok'} ({secs[method]:.1f}s)")
    del streams
    scores["random"] = {t: random_scores([s for s in names if s != t], seed, salt=t) for t in names}
    return {
        "scores": scores,
        "cannot_run": cannot,
        "seconds": secs,
        "sketch_alignment": sketch_al,
        "exact_alignment": exact_tab,
        "exact_n": used,
    }


def trivial_scores(
    names: Sequence[str],
    *,
    groups: Mapping[str, str] | None = None,
    per_source: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, dict[str, dict[str, float]]]:
    """The baselines a user has without any model-side computation, as score tables.

    ``groups``: name -> family / collection; method "family" scores 1 for a same-group
    source, 0 otherwise (ties broken at random by the metrics).  ``per_source``: method ->
    {source: value}, a target-independent score (e.g. "easiness" = −base loss on the
    source, "size" = source tokens, "word_prob" = the base model's mass on the source's
    words); every target ranks the sources the same way.
    -> {method: {target: {source: score}}}, self pairs left out.
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    if groups is not None:
        out["family"] = {t: {s: float(groups[s] == groups[t]) for s in names if s != t} for t in names}
    for method, vals in (per_source or {}).items():
        out[method] = {t: {s: float(vals[s]) for s in names if s != t} for t in names}
    return out


def evaluate_methods(
    scores: Mapping[str, Any],
    transfer: Mapping[str, Mapping[str, float]],
    seed: int = 0,
    groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """summarise() for every method against the transfer table (self pairs dropped); with
    ``groups`` also "within_family": top-1, its chance and Spearman among same-group sources."""
    from updatescope.select.metrics import metric_report, summarise, within_group

    tr = {t: {s: v for s, v in row.items() if s != t} for t, row in transfer.items()}
    out = {}
    for method, table in scores.items():
        try:
            out[method] = summarise(table, tr, seed=seed, n_boot=2000)
            if groups is not None:
                w = within_group(table, tr, groups)
                out[method]["within_family"] = {k: metric_report(v, seed=seed) for k, v in w.items()}
        except InputError as exc:
            out[method] = {"error": str(exc).splitlines()[0]}
    return out


def _per_target(m: Mapping[str, Any], metric: str) -> dict[str, float] | None:
    if "error" in m:
        return None
    if metric.startswith("within_"):
        block = m.get("within_family", {}).get(metric[len("within_") :])
    else:
        block = m.get(metric)
    if block is None:
        return None
    out = dict(block["per_target"])
    if metric.endswith("spearman"):
        # constant scores carry no ranking: their expected Spearman under random tie-breaking
        # is 0, so a paired comparison counts them as 0 instead of dropping the target
        out.update({t: 0.0 for t, why in block.get("excluded", {}).items() if why == "constant scores"})
    return out


def paired_comparisons(
    by_method: Mapping[str, Any],
    pairs: Sequence[tuple[str, str]] = PAIRED,
    metrics: Sequence[str] = PAIRED_METRICS,
    seed: int = 0,
) -> dict[str, Any]:
    """Per pair "a - b" and metric: the paired bootstrap of the per-target difference
    (:func:`select.metrics.paired_difference`).  Pairs with a missing method are skipped."""
    from updatescope.select.metrics import paired_difference

    out: dict[str, Any] = {}
    for a, b in pairs:
        if a not in by_method or b not in by_method:
            continue
        row = {}
        for metric in metrics:
            pa, pb = _per_target(by_method[a], metric), _per_target(by_method[b], metric)
            if pa is not None and pb is not None:
                row[metric] = paired_difference(pa, pb, seed=seed)
        out[f"{a} - {b}"] = row
    return out


def truth_noise(
    gt: Mapping[str, Any],
    groups: Mapping[str, str] | None = None,
    seed: int = 0,
    tables: Sequence[Mapping[str, Mapping[str, float]]] | None = None,
) -> dict[str, Any]:
    """How noisy the ground truth is: the noise ceiling (:func:`select.metrics.noise_ceiling`)
    and, per target, the gap between the best and second-best source against the median SE.

    ``tables``: per-seed truth tables (default ``gt["transfer_by_seed"]``).  With one seed,
    {"n_seeds": 1, "ceiling": None}: the noise is not measured.  When ``gt`` carries each
    seed's per-sequence eval losses ("eval_sequences_by_seed"), "ceiling" resamples seeds and
    eval sequences together (:func:`seed_and_eval_ceiling`) and the seed-only ceiling is kept
    as "ceiling_seeds_only"; "ceiling_noise" says which noises the ceiling counts."""
    from updatescope.select.metrics import noise_ceiling

    tables = list(tables if tables is not None else gt.get("transfer_by_seed", []))
    if len(tables) < 2:
        return {"n_seeds": len(tables), "ceiling": None}
    drop = lambda tab: {t: {s: v for s, v in row.items() if s != t} for t, row in tab.items()}  # noqa: E731
    tables = [drop(t) for t in tables]
    mean = drop(gt["transfer"])
    se = drop(gt["transfer_se"])
    gaps, ses, same_best = {}, [], {}
    for t, row in mean.items():
        vals = sorted(row.values(), reverse=True)
        gaps[t] = vals[0] - vals[1] if len(vals) > 1 else math.nan
        ses.extend(v for v in se[t].values() if math.isfinite(v))
        bests = [max(tab[t], key=tab[t].get) for tab in tables]
        same_best[t] = len(set(bests)) == 1
    out = {
        "n_seeds": len(tables),
        "ceiling": noise_ceiling(tables, groups=groups, seed=seed),
        "best_gap": gaps,
        "median_best_gap": float(np.median(list(gaps.values()))),
        "median_se": float(np.median(ses)) if ses else None,
        "best_same_in_every_seed": sum(same_best.values()),
        "n_targets": len(same_best),
    }
    if "eval_sequences" in gt:
        out["eval"] = eval_noise(gt["eval_sequences"], seed=seed)
    by_seed = gt.get("eval_sequences_by_seed")
    if "eval_sequences" in gt and by_seed is not None and len(by_seed) == len(tables):
        out["ceiling_seeds_only"] = out["ceiling"]
        out["ceiling"] = seed_and_eval_ceiling(gt["eval_sequences"], by_seed, groups=groups, seed=seed)
        out["ceiling_noise"] = "seeds and eval sequences"
    else:
        out["ceiling_noise"] = "seeds"
    return out


def seed_and_eval_ceiling(
    seq: Mapping[str, Any],
    by_seed: Sequence[Mapping[str, Mapping[str, Sequence[float]]]],
    *,
    groups: Mapping[str, str] | None = None,
    n_splits: int = 20,
    seed: int = 0,
) -> dict[str, Any]:
    """The noise ceiling under both noises of the truth: fine-tuning seeds and the finite
    evaluation sample.

    ``seq``: the ground truth's "eval_sequences" (its "base" and "tokens" per target are
    used); ``by_seed``: each seed's per-sequence losses {t: {s: [summed CE per sequence]}}.
    Each of ``n_splits`` times, every target's eval sequences are split at random into two
    halves (the same split for the base and every source); for each seed k the predictor is
    seed k's transfer table measured on the first halves and the truth the mean of the other
    seeds' tables on the second halves, so predictor and truth share neither a fine-tuning
    nor an eval sequence.  Metrics as :func:`select.metrics.noise_ceiling`, averaged over the
    k and the splits per target.  Conservative (low) like the seed-only ceiling: predictor and
    truth each see half the eval sequences, and fewer seeds, than the table a method is scored
    against.  Targets with fewer than 2 eval sequences are left out.
    -> the ceiling block plus "n_seeds" and "n_splits"."""
    from updatescope.select.metrics import ceiling_from_pairs, mean_and_se

    n = len(by_seed)
    if n < 2:
        raise InputError(f"seed_and_eval_ceiling needs at least 2 seeds, got {n}")
    rng = np.random.default_rng(seed)
    base = {t: np.asarray(v, dtype=np.float64) for t, v in seq["base"].items() if len(v) >= 2}
    tok = {t: np.asarray(seq["tokens"][t], dtype=np.float64) for t in base}
    loss = [
        {t: {s: np.asarray(v, dtype=np.float64) for s, v in tab[t].items() if s != t} for t in base} for tab in by_seed
    ]
    pairs = []
    for _ in range(n_splits):
        halves = {}
        for t, b in base.items():
            perm = rng.permutation(b.size)
            halves[t] = (perm[: b.size // 2], perm[b.size // 2 :])

        def table(k: int, h: int) -> dict[str, dict[str, float]]:
            out = {}
            for t, b in base.items():
                idx = halves[t][h]
                b_sum, n_tok = b[idx].sum(), tok[t][idx].sum()
                out[t] = {s: float((b_sum - v[idx].sum()) / n_tok) for s, v in loss[k][t].items()}
            return out

        first = [table(k, 0) for k in range(n)]
        second = [table(k, 1) for k in range(n)]
        pairs += [(first[k], mean_and_se([second[j] for j in range(n) if j != k])[0]) for k in range(n)]
    return {"n_seeds": n, "n_splits": n_splits, **ceiling_from_pairs(pairs, groups=groups, seed=seed)}


def eval_noise(seq: Mapping[str, Any], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The evaluation-sample noise of a transfer table, by a bootstrap over eval sequences.

    ``seq``: the ground truth's "eval_sequences" ({"base": {t: [summed CE per sequence]},
    "loss": {t: {s: [...]}}, "tokens": {t: [counted targets per sequence]}}, loss averaged
    over fine-tuning seeds).  Each target's eval sequences are resampled with replacement,
    the same draw for the base loss and every source (the comparison between sources is
    paired), and transfer = (Σ base − Σ loss) / Σ tokens recomputed.

    -> per target: "se" {s: bootstrap sd of the transfer}, "best_stable" (share of draws
    whose best source is the measured best: how often a predictor that knew the population
    truth would match the recorded top-1), "gap_se" (bootstrap sd of the best − second-best
    difference: the sources share the target's eval sequences, so a difference is less noisy
    than either value); overall "median_se", "median_gap_se", "mean_best_stable",
    "n_sequences" (median per target).  The fine-tuning seeds' SE is a separate noise.
    """
    rng = np.random.default_rng(seed)
    per: dict[str, Any] = {}
    ses, stable, n_seq, gap_ses = [], [], [], []
    for t, rows in seq["loss"].items():
        srcs = [s for s in rows if s != t]
        base = np.asarray(seq["base"][t], dtype=np.float64)
        tok = np.asarray(seq["tokens"][t], dtype=np.float64)
        n = base.size
        if not srcs or n < 2:
            continue
        loss = np.asarray([rows[s] for s in srcs], dtype=np.float64)  # (c, n)
        idx = rng.integers(0, n, size=(n_boot, n))
        denom = tok[idx].sum(1)  # (B,)
        boot = (base[idx].sum(1)[:, None] - loss[:, idx].sum(2).T) / denom[:, None]  # (B, c)
        point = (base.sum() - loss.sum(1)) / tok.sum()
        sd = boot.std(0, ddof=1)
        best = int(np.argmax(point))
        share = float((boot.argmax(1) == best).mean())
        per[t] = {"se": {s: float(v) for s, v in zip(srcs, sd)}, "best_stable": share}
        if len(srcs) > 1:
            second = int(np.argsort(point)[-2])
            per[t]["gap_se"] = float((boot[:, best] - boot[:, second]).std(ddof=1))
            gap_ses.append(per[t]["gap_se"])
        ses.extend(sd.tolist())
        stable.append(share)
        n_seq.append(n)
    return {
        "per_target": per,
        "n_boot": n_boot,
        "median_se": float(np.median(ses)) if ses else None,
        "mean_best_stable": float(np.mean(stable)) if stable else None,
        "median_gap_se": float(np.median(gap_ses)) if gap_ses else None,
        "n_sequences": float(np.median(n_seq)) if n_seq else None,
    }


def sketch_vs_exact(sketch: Mapping[str, Any], exact: Mapping[str, Any]) -> dict[str, Any]:
    """Per kind: Spearman and mean/max |difference| between sketch and exact pair values."""
    from scipy import stats

    out = {}
    for kind in SKETCH_KINDS:
        if kind not in exact:
            continue
        xs, ys = [], []
        for t, row in exact[kind].items():
            for s, v in row.items():
                if s < t:  # each unordered pair once
                    xs.append(sketch[kind][t][s])
                    ys.append(v)
        x, y = np.asarray(xs), np.asarray(ys)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        rho = float(stats.spearmanr(x, y).statistic) if x.size >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan
        out[kind] = {
            "spearman": rho,
            "mean_abs_err": float(np.abs(x - y).mean()) if x.size else math.nan,
            "max_abs_err": float(np.abs(x - y).max()) if x.size else math.nan,
            "pairs": int(x.size),
        }
    return out


def _finite_summary(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    return {
        "mean": float(v.mean()) if v.size else None,
        "sd": float(v.std(ddof=1)) if v.size > 1 else None,
        "n": int(v.size),
        "values": [float(x) for x in values],
    }


def sketch_resolution(
    w0: Tensor,
    b0: Tensor | None,
    tasks: Mapping[str, Mapping[str, Tensor]],
    exact: Mapping[str, Any],
    *,
    dims: Sequence[int],
    seeds: int,
    base_seed: int = 0,
    fp: str = "",
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """At which sketch size the sketch resolves the pairs: :func:`sketch_vs_exact` of the
    signatures at each sketch dimension in ``dims``, over ``seeds`` independent bases
    (seeds ``base_seed``, ``base_seed + 1``, …), against the same ``exact`` tables.

    -> {"dims", "seeds", "exact_range": {kind: max − min of the exact pair values},
    "by_dim": {str(m): {kind: {"spearman": {mean, sd, n, values}, "mean_abs_err": {...}}}}}
    (mean and sd over the bases where the value is defined, n of them; a tiny sketch can leave
    a norm estimate ≤ 0 and every pair undefined): a sketch resolves the ranking once its mean
    |error| is well below the exact values' range."""
    out: dict[str, Any] = {"dims": list(dims), "seeds": seeds, "by_dim": {}, "exact_range": {}}
    for kind, tab in exact.items():
        vals = [v for t, row in tab.items() for s, v in row.items() if s < t and math.isfinite(v)]
        out["exact_range"][kind] = float(max(vals) - min(vals)) if vals else None
    for m in dims:
        per: dict[str, dict[str, list[float]]] = {}
        for r in range(seeds):
            got = sketch_vs_exact(sketch_tables(w0, b0, tasks, sketch_dim=m, seed=base_seed + r, fp=fp), exact)
            for kind, v in got.items():
                for key in ("spearman", "mean_abs_err"):
                    per.setdefault(kind, {}).setdefault(key, []).append(v[key])
        out["by_dim"][str(m)] = {kind: {key: _finite_summary(v) for key, v in d.items()} for kind, d in per.items()}
        if log:
            f = out["by_dim"][str(m)].get("fisher", {})
            log(
                f"sketch resolution m={m}: A_F Spearman vs exact {f.get('spearman', {}).get('mean')}, "
                f"mean |err| {f.get('mean_abs_err', {}).get('mean')}"
            )
    return out


def headline(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """method -> {top1, oracle_normalised, regret_mean, regret_max, spearman} means (None = n/a)."""
    out = {}
    for method, m in metrics.items():
        if "error" in m:
            out[method] = {"error": m["error"]}
            continue
        out[method] = {
            "top1": m["top1"]["mean"],
            "chance_top1": m["chance_top1"],
            "oracle_normalised": m["oracle_normalised_transfer"]["mean"],
            "oracle_normalised_n": m["oracle_normalised_transfer"]["n"],
            "regret_mean": m["regret"]["mean"],
            "regret_max": m["regret"]["max"],
            "spearman": m["spearman"]["mean"],
            "pooled_spearman": m["pooled_spearman"]["rho"],
            "pooled_spearman_p": m["pooled_spearman"]["p"],
        }
        if "within_family" in m:
            w = m["within_family"]
            out[method].update(
                within_top1=w["top1"]["mean"],
                within_chance=w["chance_top1"]["mean"],
                within_spearman=w["spearman"]["mean"],
            )
    return out


def method_metrics(
    sc: Mapping[str, Any],
    by_method: Mapping[str, Any],
    summary: Any,
    paired: Mapping[str, Any] | None = None,
    noise: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The metrics every selection runner reports from a ``score_methods`` result ``sc``:
    every method's score table (sketch, exact, baselines, trivial) is kept so any number can
    be recomputed from the record."""
    return {
        "summary": summary,
        "cannot_run": sc["cannot_run"],
        "methods": by_method,
        "paired": dict(paired or {}),
        "truth_noise": dict(noise or {}),
        "scores": sc["scores"],
        "sketch_vs_exact": sketch_vs_exact(sc["sketch_alignment"], sc["exact_alignment"]),
        "sketch_alignment": sc["sketch_alignment"],
        "exact_n": sc["exact_n"],
        "method_seconds": sc["seconds"],
    }
