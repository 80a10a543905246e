"""Estimator validation (paper A): FisherSketch against the exact alignments, real LM tasks.

Paper A validates on ViT-B/16; we validate on SmolLM2-135M head inputs (d = 576) and
errors over its full vocabulary (K = 49,152), which is the vocabulary-scale regime the
sketch is for.

Accuracy.  Tasks = the source-selection domains (code, wiki, prose, SMILES, numeric), each
its cached ``sketch`` split (same captures as ``reproduce source-selection``).  For every
unordered pair, the sketch's fisher A_F, activation Scov(M_a), error Scov(Γ_e) and coupling
ρ = A_F / (Scov(M_a)·Scov(Γ_e)) are compared with the exact values from
``us.exact_alignment_matrix`` on the *same* tokens (Gram identity, float64, unbiased
norms): Spearman over pairs and mean/max |sketch − exact|, for several sketch seeds (the
random basis is the only randomness).  Spearman is only as meaningful as the spread of the
exact values, which is reported too.

Speed.  Two streams of ``speed_n`` tokens (default 2000, paper A's n), pooled from the
captures of the first and second half of the domains.  Both methods start from the same
(acts, logits, labels), as they would after one forward pass: the sketch runs
``update_logits`` per task and compares signatures; the exact path forms the errors
softmax(z) − onehot(y) and evaluates ``exact_alignment_matrix``.  Median over repeats
after one warm-up (exact: ``exact_repeats``, it is the slow side); the ratio is the figure
that survives a noisy machine.

Vision (paper A's own setting: an ImageNet classifier, K = 1,000).  EfficientNet-lite0
(head 1280 → 1000) on real photographs shipped inside installed packages
(``updatescope.data.images``): one forward pass over a pool of augmented views, then many
tasks over that pool, each a subset of the photographs and its own label map (the model's
top-1 or k-th class, a class per photograph, a permuted or coarsened top-1; see
``vision``).  Same accuracy and speed measurements as above; the speed streams are two
pools of ``speed_n`` views labelled by the top-1 class and by a class per photograph.  At
K = 1,000 the exact Gram identity costs O(T² n² (d + K)) against the sketch's
O(T n m (d + K)), so with n = 2,000 < m = 4,096 and two tasks the exact path is the cheaper
one; the timing of the whole T-task matrix is recorded as well (``matrix_seconds``).
"""

from __future__ import annotations

import functools
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.experiments import Result, config_record, heads, selection
from updatescope.experiments.estimator import figures
from updatescope.experiments.estimator.config import EstimatorConfig, VisionEstimatorConfig
from updatescope.experiments.scoring import SKETCH_KINDS

NAME = "estimator"
KINDS = SKETCH_KINDS


def _pairs(mat: torch.Tensor, idx: list[int] | None = None) -> np.ndarray:
    """Upper-triangle entries of a (T, T) matrix (or of its ``idx`` rows and columns), each
    unordered pair once."""
    m = mat.numpy() if idx is None else mat.numpy()[np.ix_(idx, idx)]
    i, j = np.triu_indices(m.shape[0], k=1)
    return m[i, j]


def _agreement(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Sketch ``x`` vs exact ``y`` over pairs: Spearman, mean and max |err|, and the error
    relative to the truth's own spread (RMSE / sd of the exact values): an error of 0.02 is
    small when the truth spans [0, 1] and large when it sits in [0, 0.05]."""
    from scipy import stats

    ok = np.isfinite(x) & np.isfinite(y)
    err = x[ok] - y[ok]
    sd = float(np.std(y[ok])) if ok.sum() >= 2 else float("nan")
    rmse = float(np.sqrt(np.mean(err**2))) if ok.any() else float("nan")
    return {
        "spearman": float(stats.spearmanr(x[ok], y[ok]).statistic) if ok.sum() >= 3 else float("nan"),
        "mean_abs_err": float(np.abs(err).mean()) if ok.any() else float("nan"),
        "max_abs_err": float(np.abs(err).max()) if ok.any() else float("nan"),
        "rmse": rmse,
        "truth_sd": sd,
        "rel_err": rmse / sd if sd > 0 else float("nan"),
    }


def _summary(per_seed: list[dict[str, Any]], exact: np.ndarray) -> dict[str, Any]:
    rs = [r["spearman"] for r in per_seed]
    return {
        "spearman_mean": float(np.mean(rs)),
        "spearman_min": float(np.min(rs)),
        "spearman_max": float(np.max(rs)),
        "mean_abs_err": float(np.mean([r["mean_abs_err"] for r in per_seed])),
        "rel_err": float(np.mean([r["rel_err"] for r in per_seed])),
        "truth_sd": per_seed[0]["truth_sd"],
        "exact_min": float(np.nanmin(exact)),
        "exact_max": float(np.nanmax(exact)),
        "exact_median": float(np.nanmedian(exact)),
        "exact": exact.tolist(),
        "per_seed": per_seed,
        "pairs": int(exact.size),
    }


def accuracy(
    w0: torch.Tensor,
    b0: torch.Tensor | None,
    tasks: dict[str, dict[str, torch.Tensor]],
    *,
    sketch_dim: int,
    seeds: list[int],
    fp: str = "",
    timings: dict[str, Any] | None = None,
    act_map: str = "auto",
    error_map: str = "auto",
    groups: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Per kind: Spearman / mean|err| / max|err| / RMSE relative to the truth's spread of
    sketch vs exact, per seed and averaged, over every pair of tasks.

    ``groups`` (name -> task names): the same metrics over the pairs within each group,
    from the same matrices, under ``out["groups"][name][kind]``.
    ``timings``, if given, receives the wall seconds of the whole exact T×T matrix
    (``exact_s``, errors formed from the same logits) and of sketching all T tasks and
    comparing them, per seed (``sketch_s``).
    """
    import updatescope as us

    names = list(tasks)
    t0 = time.perf_counter()
    ex = us.exact_alignment_matrix(
        [(t["acts"], heads.errors_of(w0, b0, t["acts"], t["labels"])) for t in tasks.values()]
    )
    if timings is not None:
        timings["exact_s"] = time.perf_counter() - t0
        timings["sketch_s"] = []
    subsets: dict[str, list[int] | None] = {"": None}
    for g, members in (groups or {}).items():
        subsets[g] = [names.index(n) for n in members]
    exact = {(g, kind): _pairs(ex[kind], idx) for g, idx in subsets.items() for kind in KINDS}
    per_seed: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in exact}
    for seed in seeds:
        t0 = time.perf_counter()
        sigs = [
            heads.sketch_stream(
                w0,
                b0,
                tasks[n]["acts"],
                tasks[n]["labels"],
                sketch_dim=sketch_dim,
                seed=seed,
                fp=fp,
                name=n,
                act_map=act_map,
                error_map=error_map,
            )
            for n in names
        ]
        est = us.alignment_matrix(sigs)
        if timings is not None:
            timings["sketch_s"].append(time.perf_counter() - t0)
        for (g, kind), y_ in exact.items():
            x = _pairs(est[kind], subsets[g])
            per_seed[g, kind].append({"seed": seed, **_agreement(x, y_), "sketch": x.tolist()})
    out: dict[str, Any] = {kind: _summary(per_seed["", kind], exact["", kind]) for kind in KINDS}
    if groups:
        out["groups"] = {
            g: {"tasks": list(groups[g]), **{kind: _summary(per_seed[g, kind], exact[g, kind]) for kind in KINDS}}
            for g in groups
        }
    return out


def speed(
    w0: torch.Tensor,
    b0: torch.Tensor | None,
    streams: list[dict[str, torch.Tensor]],
    *,
    sketch_dim: int,
    repeats: int,
    exact_repeats: int,
    fp: str = "",
    act_map: str = "auto",
    error_map: str = "auto",
) -> dict[str, Any]:
    """Wall time (s) of sketch vs exact for the given task streams; median over repeats."""
    import updatescope as us
    from updatescope.sketch.inputs import softmax_minus_onehot

    logits = [heads.logits_of(w0, b0, s["acts"]) for s in streams]

    def run_sketch() -> None:
        us.alignment_matrix(
            [
                heads.sketch_stream(
                    w0,
                    b0,
                    s["acts"],
                    s["labels"],
                    sketch_dim=sketch_dim,
                    seed=0,
                    fp=fp,
                    act_map=act_map,
                    error_map=error_map,
                    logits=z,
                )
                for s, z in zip(streams, logits)
            ]
        )

    def run_exact() -> None:
        us.exact_alignment_matrix([(s["acts"], softmax_minus_onehot(z, s["labels"])) for s, z in zip(streams, logits)])

    def timed(fn: Any, n: int) -> list[float]:
        fn()  # warm-up
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    ts, te = timed(run_sketch, repeats), timed(run_exact, exact_repeats)
    ms, me = statistics.median(ts), statistics.median(te)
    return {
        "n_per_task": [int(s["labels"].numel()) for s in streams],
        "tasks": len(streams),
        "sketch_s": ts,
        "exact_s": te,
        "sketch_median_s": ms,
        "exact_median_s": me,
        "speedup": me / ms,
        "threads": torch.get_num_threads(),
    }


def _log_accuracy(acc: dict[str, Any], log: Any) -> None:
    for kind in KINDS:
        a = acc[kind]
        log(
            f"{kind:10s} Spearman {a['spearman_mean']:.3f} [{a['spearman_min']:.3f}, {a['spearman_max']:.3f}] "
            f"mean|err| {a['mean_abs_err']:.4f}  exact range [{a['exact_min']:.3f}, {a['exact_max']:.3f}]"
        )


def _maps(d: int, k: int, sketch_dim: int, act_map: str = "auto", error_map: str = "auto") -> dict[str, str]:
    """The projection families the sketch resolves to at this size (they set its cost)."""
    import updatescope as us

    cfg = us.FisherSketch(d, k, sketch_dim, 0, act_map=act_map, error_map=error_map).config
    return {"act_map": cfg.act_map, "error_map": cfg.error_map}


def _log_speed(sp: dict[str, Any], log: Any) -> None:
    log(
        f"speed at n={sp['n_per_task']}: sketch {sp['sketch_median_s']:.2f}s, exact {sp['exact_median_s']:.2f}s, "
        f"speed-up {sp['speedup']:.2f}x"
    )


def run_lm(cfg: EstimatorConfig, log: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The SmolLM2 block: source-selection domains as tasks.  -> (metrics, figures)."""
    domains = list(cfg.domains)
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    data = selection.capture_domains(model, tok, fp, domains, cfg.tokens.used(), log)
    del model

    maps = {"act_map": cfg.act_map, "error_map": cfg.error_map}
    acc = accuracy(w0, b0, data["sketch"], sketch_dim=cfg.sketch_dim, seeds=list(cfg.seeds), fp=fp, **maps)
    _log_accuracy(acc, log)

    half = len(domains) // 2
    streams = []
    for group in (domains[:half], domains[half:]):
        acts = torch.cat([data[s][n]["acts"] for n in group for s in data])
        labels = torch.cat([data[s][n]["labels"] for n in group for s in data])
        n = min(cfg.speed_n, acts.shape[0])
        streams.append({"acts": acts[:n], "labels": labels[:n]})
    sp = speed(
        w0, b0, streams, sketch_dim=cfg.sketch_dim, repeats=cfg.repeats, exact_repeats=cfg.exact_repeats, fp=fp, **maps
    )
    _log_speed(sp, log)

    title = f"SmolLM2-135M, {len(domains)} domains, m={cfg.sketch_dim}"
    metrics = {
        "n_domains": len(domains),
        "d": int(w0.shape[1]),
        "K": int(w0.shape[0]),
        "tokens_per_task": {n: int(v["labels"].numel()) for n, v in data["sketch"].items()},
        "accuracy": acc,
        "speed": sp,
        "speed_groups": [domains[:half], domains[half:]],
        "maps": _maps(int(w0.shape[1]), int(w0.shape[0]), cfg.sketch_dim, **maps),
    }
    return metrics, {"estimator.png": lambda path: figures.plot_estimator(acc, sp, path, title)}


def run_vision(cfg: VisionEstimatorConfig, log: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The EfficientNet-lite0 block: tasks over a pool of augmented photographs (see ``estimator.vision``)."""
    from updatescope.data.images import photo_names
    from updatescope.experiments.estimator import vision as _vision

    photos = list(cfg.photos or photo_names())
    model = _vision.load_model()
    fp = _vision.fingerprint(model)
    w0, b0 = heads.head_weights(model)
    t0 = time.perf_counter()
    pool = _vision.capture_pool(
        model, fp, photos, cfg.per_photo, seed=cfg.seed, size=cfg.size, batch=cfg.batch, log=log
    )
    capture_s = time.perf_counter() - t0
    del model
    log(f"vision pool: {pool['acts'].shape[0]} views of {len(photos)} photos ({capture_s:.1f}s)")
    specs = _vision.task_specs(cfg.tasks, len(photos), cfg.per_photo, cfg.n, seed=cfg.seed, spanning=cfg.spanning)
    tasks, info = _vision.make_tasks(pool, w0, b0, specs, len(photos), seed=cfg.seed)
    # label-map tasks alone (their exact A_F sits near 0) and the spanning family alone
    # (its exact A_F covers the range): the same matrices, two readings
    groups = {"label_maps": [s.name for s in specs if s.rule != _vision.MIX]}
    if cfg.spanning:
        groups["spanning"] = [s.name for s in specs if s.rule == _vision.MIX]

    timings: dict[str, Any] = {}
    maps = {"act_map": cfg.act_map, "error_map": cfg.error_map}
    acc = accuracy(
        w0, b0, tasks, sketch_dim=cfg.sketch_dim, seeds=list(cfg.seeds), fp=fp, timings=timings, groups=groups, **maps
    )
    _log_accuracy(acc, log)
    for g, block in acc["groups"].items():
        f = block["fisher"]
        log(
            f"  {g}: fisher Spearman {f['spearman_mean']:.3f}, RMSE / truth sd {f['rel_err']:.3f}, "
            f"exact range [{f['exact_min']:.3f}, {f['exact_max']:.3f}]"
        )
    log(
        f"{len(tasks)}-task matrix: exact {timings['exact_s']:.2f}s, "
        f"sketch {statistics.median(timings['sketch_s']):.2f}s (median over bases)"
    )

    streams, distinct = _vision.speed_streams(pool, w0, b0, cfg.speed_n, len(photos), seed=cfg.seed)
    sp = speed(
        w0, b0, streams, sketch_dim=cfg.sketch_dim, repeats=cfg.repeats, exact_repeats=cfg.exact_repeats, fp=fp, **maps
    )
    sp["distinct_rows"] = distinct
    _log_speed(sp, log)

    title = f"EfficientNet-lite0, {len(tasks)} tasks x {cfg.n} views, m={cfg.sketch_dim}"
    metrics = {
        "model": "efficientnet-lite0",
        "n_tasks": len(tasks),
        "n_per_task": cfg.n,
        "d": int(w0.shape[1]),
        "K": int(w0.shape[0]),
        "pool_views": int(pool["acts"].shape[0]),
        "capture_seconds": capture_s,
        "tasks": info,
        "accuracy": acc,
        "matrix_seconds": timings,
        "speed": sp,
        "maps": _maps(int(w0.shape[1]), int(w0.shape[0]), cfg.sketch_dim, **maps),
        "photos": photos,
    }
    return metrics, {"estimator_vision.png": lambda path: figures.plot_estimator(acc, sp, path, title)}


def run(cfg: EstimatorConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    metrics: dict[str, Any] = {}
    figs: dict[str, Any] = {}
    if "smollm2" in cfg.parts:
        lm, f = run_lm(cfg, log)
        metrics.update(lm)
        figs.update(f)
    if "vision" in cfg.parts:
        vis, f = run_vision(cfg.vision, log)
        metrics["vision"] = {**vis, "figures": list(f)}
        figs.update(f)
    return Result(NAME, config_record(cfg), metrics, time.perf_counter() - t0, figures=figs)
