"""Scoring every selection method on the same task streams, and the summaries every
selection runner reports.

``score_methods`` scores each (target, source) pair with FisherSketch (joint,
activation-only, error-only, coupling), the exact Gram identity, mean-gradient cosine, the
``select.baselines.BASELINES`` registry and random.  A method that cannot run is reported
with its reason, never silently dropped.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.experiments.heads import errors_of, sketch_stream

__all__ = ["SKETCH_KINDS", "mean_gradients", "score_methods", "evaluate_methods", "sketch_vs_exact", "headline",
           "method_metrics"]


SKETCH_KINDS = ("fisher", "activation", "error", "coupling")


def _table(names: Sequence[str], mat: Tensor) -> dict[str, dict[str, float]]:
    """(T, T) matrix [target, source] -> {target: {source: value}} without the diagonal."""
    return {t: {s: float(mat[i, j]) for j, s in enumerate(names) if j != i} for i, t in enumerate(names)}


def mean_gradients(w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]],
                   chunk: int = 256) -> dict[str, Tensor]:
    """Per task the mean head gradient G = Eᵀ A / n (K×d), float64, built chunk by chunk."""
    out = {}
    for name, t in tasks.items():
        a, y = t["acts"], t["labels"]
        g = torch.zeros(w0.shape[0], w0.shape[1], dtype=torch.float64)
        for i in range(0, a.shape[0], chunk):
            e = errors_of(w0, b0, a[i : i + chunk], y[i : i + chunk]).double()
            g.addmm_(e.T, a[i : i + chunk].double())
        out[name] = g / a.shape[0]
    return out


def score_methods(w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]], *,
                  fp: str = "", sketch_dim: int = 4096, seed: int = 0, exact_n: int | None = 400,
                  baseline_n: int | None = 400, baselines: Sequence[str] = ("cka", "rsa", "svcca", "logme",
                                                                               "hscore", "leep"),
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
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
    sigs = [sketch_stream(w0, b0, tasks[n]["acts"], tasks[n]["labels"], sketch_dim=sketch_dim, seed=seed, fp=fp,
                          name=n) for n in names]
    mats = us.alignment_matrix(sigs)
    secs["sketch"] = time.perf_counter() - t0
    say(f"sketched {len(names)} tasks ({secs['sketch']:.1f}s)")
    sketch_al = {kind: _table(names, mats[kind]) for kind in SKETCH_KINDS}
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
        for s in names[i + 1:]:
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
    return {"scores": scores, "cannot_run": cannot, "seconds": secs, "sketch_alignment": sketch_al,
            "exact_alignment": exact_tab, "exact_n": used}


def evaluate_methods(scores: Mapping[str, Any], transfer: Mapping[str, Mapping[str, float]],
                     seed: int = 0) -> dict[str, Any]:
    """summarise() for every method against the transfer table (self pairs dropped)."""
    from updatescope.select.metrics import summarise

    tr = {t: {s: v for s, v in row.items() if s != t} for t, row in transfer.items()}
    out = {}
    for method, table in scores.items():
        try:
            out[method] = summarise(table, tr, seed=seed, n_boot=2000)
        except InputError as exc:
            out[method] = {"error": str(exc).splitlines()[0]}
    return out


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
        out[kind] = {"spearman": rho, "mean_abs_err": float(np.abs(x - y).mean()) if x.size else math.nan,
                     "max_abs_err": float(np.abs(x - y).max()) if x.size else math.nan, "pairs": int(x.size)}
    return out


def headline(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """method -> {top1, oracle_normalised, regret_mean, regret_max, spearman} means (None = n/a)."""
    out = {}
    for method, m in metrics.items():
        if "error" in m:
            out[method] = {"error": m["error"]}
            continue
        out[method] = {
            "top1": m["top1"]["mean"], "chance_top1": m["chance_top1"],
            "oracle_normalised": m["oracle_normalised_transfer"]["mean"],
            "oracle_normalised_n": m["oracle_normalised_transfer"]["n"],
            "regret_mean": m["regret"]["mean"], "regret_max": m["regret"]["max"],
            "spearman": m["spearman"]["mean"], "pooled_spearman": m["pooled_spearman"]["rho"],
            "pooled_spearman_p": m["pooled_spearman"]["p"],
        }
    return out


def method_metrics(sc: Mapping[str, Any], by_method: Mapping[str, Any], summary: Any) -> dict[str, Any]:
    """The metrics every selection runner reports from a ``score_methods`` result ``sc``."""
    return {
        "summary": summary,
        "cannot_run": sc["cannot_run"],
        "methods": by_method,
        "sketch_vs_exact": sketch_vs_exact(sc["sketch_alignment"], sc["exact_alignment"]),
        "sketch_alignment": sc["sketch_alignment"],
        "exact_n": sc["exact_n"],
        "method_seconds": sc["seconds"],
    }
