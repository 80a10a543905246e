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
``_vision``).  Same accuracy and speed measurements as above; the speed streams are two
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

from updatescope.errors import InputError
from updatescope.experiments import _lm, source_selection
from updatescope.experiments._common import finish, merge_config

NAME = "estimator"
KINDS = _lm.SKETCH_KINDS


def _pairs(mat: torch.Tensor) -> np.ndarray:
    """Upper-triangle entries of a (T, T) matrix, each unordered pair once."""
    i, j = np.triu_indices(mat.shape[0], k=1)
    return mat.numpy()[i, j]


def accuracy(w0: torch.Tensor, b0: torch.Tensor | None, tasks: dict[str, dict[str, torch.Tensor]], *,
             sketch_dim: int, seeds: list[int], fp: str = "",
             timings: dict[str, Any] | None = None, act_map: str = "auto",
             error_map: str = "auto") -> dict[str, Any]:
    """Per kind: Spearman / mean|err| / max|err| of sketch vs exact, per seed and averaged.

    ``timings``, if given, receives the wall seconds of the whole exact T×T matrix
    (``exact_s``, errors formed from the same logits) and of sketching all T tasks and
    comparing them, per seed (``sketch_s``).
    """
    import updatescope as us
    from scipy import stats

    names = list(tasks)
    k, d = w0.shape
    t0 = time.perf_counter()
    ex = us.exact_alignment_matrix([(t["acts"], _lm.errors_of(w0, b0, t["acts"], t["labels"]))
                                    for t in tasks.values()])
    if timings is not None:
        timings["exact_s"] = time.perf_counter() - t0
        timings["sketch_s"] = []
    exact = {kind: _pairs(ex[kind]) for kind in KINDS}
    per_seed: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for seed in seeds:
        t0 = time.perf_counter()
        sigs = []
        for name in names:
            sk = us.FisherSketch(d, k, sketch_dim, seed, fingerprint=fp, act_map=act_map, error_map=error_map)
            a, y = tasks[name]["acts"], tasks[name]["labels"]
            for i in range(0, a.shape[0], 256):
                sk.update_logits(a[i : i + 256], _lm.logits_of(w0, b0, a[i : i + 256]), y[i : i + 256])
            sigs.append(sk.signature(name=name))
        est = us.alignment_matrix(sigs)
        if timings is not None:
            timings["sketch_s"].append(time.perf_counter() - t0)
        for kind in KINDS:
            x, y_ = _pairs(est[kind]), exact[kind]
            ok = np.isfinite(x) & np.isfinite(y_)
            rho = float(stats.spearmanr(x[ok], y_[ok]).statistic) if ok.sum() >= 3 else float("nan")
            per_seed[kind].append({"seed": seed, "spearman": rho,
                                   "mean_abs_err": float(np.abs(x[ok] - y_[ok]).mean()),
                                   "max_abs_err": float(np.abs(x[ok] - y_[ok]).max()),
                                   "sketch": x.tolist()})
    out = {}
    for kind in KINDS:
        rs = [r["spearman"] for r in per_seed[kind]]
        ea = [r["mean_abs_err"] for r in per_seed[kind]]
        out[kind] = {"spearman_mean": float(np.mean(rs)), "spearman_min": float(np.min(rs)),
                     "spearman_max": float(np.max(rs)), "mean_abs_err": float(np.mean(ea)),
                     "exact_min": float(np.nanmin(exact[kind])), "exact_max": float(np.nanmax(exact[kind])),
                     "exact": exact[kind].tolist(), "per_seed": per_seed[kind], "pairs": int(exact[kind].size)}
    return out


def speed(w0: torch.Tensor, b0: torch.Tensor | None, streams: list[dict[str, torch.Tensor]], *,
          sketch_dim: int, repeats: int, exact_repeats: int, fp: str = "", act_map: str = "auto",
          error_map: str = "auto") -> dict[str, Any]:
    """Wall time (s) of sketch vs exact for the given task streams; median over repeats."""
    import updatescope as us

    k, d = w0.shape
    logits = [_lm.logits_of(w0, b0, s["acts"]) for s in streams]

    def run_sketch() -> None:
        sigs = []
        for s, z in zip(streams, logits):
            sk = us.FisherSketch(d, k, sketch_dim, 0, fingerprint=fp, act_map=act_map, error_map=error_map)
            for i in range(0, z.shape[0], 256):
                sk.update_logits(s["acts"][i : i + 256], z[i : i + 256], s["labels"][i : i + 256])
            sigs.append(sk.signature())
        us.alignment_matrix(sigs)

    def run_exact() -> None:
        pairs = []
        for s, z in zip(streams, logits):
            e = torch.softmax(z, dim=-1)
            e[torch.arange(z.shape[0]), s["labels"]] -= 1.0
            pairs.append((s["acts"], e))
        us.exact_alignment_matrix(pairs)

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
    return {"n_per_task": [int(s["labels"].numel()) for s in streams], "tasks": len(streams),
            "sketch_s": ts, "exact_s": te, "sketch_median_s": ms, "exact_median_s": me,
            "speedup": me / ms, "threads": torch.get_num_threads()}


def plot_estimator(acc: dict[str, Any], sp: dict[str, Any], out_png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, len(KINDS), figsize=(4 * len(KINDS), 4))
    for a_, kind in zip(ax, KINDS):
        x = np.asarray(acc[kind]["exact"])
        for r in acc[kind]["per_seed"]:
            a_.scatter(x, r["sketch"], s=10, alpha=0.6, label=f"seed {r['seed']}")
        lo, hi = np.nanmin(x), np.nanmax(x)
        a_.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        a_.set_title(f"{kind}: Spearman {acc[kind]['spearman_mean']:.2f}", fontsize=9)
        a_.set_xlabel("exact")
        a_.set_ylabel("sketch")
    ax[0].legend(fontsize=7)
    fig.suptitle(f"{title}; speed-up at n={sp['n_per_task'][0]}/task: {sp['speedup']:.1f}x", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def _log_accuracy(acc: dict[str, Any], log: Any) -> None:
    for kind in KINDS:
        a = acc[kind]
        log(f"{kind:10s} Spearman {a['spearman_mean']:.3f} [{a['spearman_min']:.3f}, {a['spearman_max']:.3f}] "
            f"mean|err| {a['mean_abs_err']:.4f}  exact range [{a['exact_min']:.3f}, {a['exact_max']:.3f}]")


def _maps(d: int, k: int, sketch_dim: int, act_map: str = "auto", error_map: str = "auto") -> dict[str, str]:
    """The projection families the sketch resolves to at this size (they set its cost)."""
    import updatescope as us

    cfg = us.FisherSketch(d, k, sketch_dim, 0, act_map=act_map, error_map=error_map).config
    return {"act_map": cfg.act_map, "error_map": cfg.error_map}


def _log_speed(sp: dict[str, Any], log: Any) -> None:
    log(f"speed at n={sp['n_per_task']}: sketch {sp['sketch_median_s']:.2f}s, exact {sp['exact_median_s']:.2f}s, "
        f"speed-up {sp['speedup']:.2f}x")


def run_lm(cfg: dict[str, Any], out_dir: Path, log: Any) -> dict[str, Any]:
    """The SmolLM2 block: source-selection domains as tasks."""
    domains = list(cfg["domains"])
    model, tok = _lm.load_model(cfg["model"])
    fp = _lm.fingerprint(model, tok)
    w0, b0 = _lm.head_weights(model)
    data = source_selection.capture_domains(model, tok, fp, domains, cfg["tokens"], log)
    del model

    maps = {"act_map": cfg["act_map"], "error_map": cfg["error_map"]}
    acc = accuracy(w0, b0, data["sketch"], sketch_dim=cfg["sketch_dim"], seeds=list(cfg["seeds"]), fp=fp, **maps)
    _log_accuracy(acc, log)

    half = len(domains) // 2
    streams = []
    for group in (domains[:half], domains[half:]):
        acts = torch.cat([data[s][n]["acts"] for n in group for s in data])
        labels = torch.cat([data[s][n]["labels"] for n in group for s in data])
        n = min(int(cfg["speed_n"]), acts.shape[0])
        streams.append({"acts": acts[:n], "labels": labels[:n]})
    sp = speed(w0, b0, streams, sketch_dim=cfg["sketch_dim"], repeats=cfg["repeats"],
               exact_repeats=cfg["exact_repeats"], fp=fp, **maps)
    _log_speed(sp, log)

    fig = out_dir / "estimator.png"
    plot_estimator(acc, sp, fig, f"SmolLM2-135M, {len(domains)} domains, m={cfg['sketch_dim']}")
    return {
        "n_domains": len(domains), "d": int(w0.shape[1]), "K": int(w0.shape[0]),
        "tokens_per_task": {n: int(v["labels"].numel()) for n, v in data["sketch"].items()},
        "accuracy": acc, "speed": sp, "speed_groups": [domains[:half], domains[half:]],
        "maps": _maps(int(w0.shape[1]), int(w0.shape[0]), int(cfg["sketch_dim"]), **maps), "figures": [fig.name],
    }


def run_vision(cfg: dict[str, Any], out_dir: Path, log: Any) -> dict[str, Any]:
    """The EfficientNet-lite0 block: tasks over a pool of augmented photographs (see ``_vision``)."""
    from updatescope.experiments import _vision

    photos = list(cfg["photos"])
    model = _vision.load_model()
    fp = _vision.fingerprint(model)
    w0, b0 = _lm.head_weights(model)
    t0 = time.perf_counter()
    pool = _vision.capture_pool(model, fp, photos, int(cfg["per_photo"]), seed=int(cfg["seed"]),
                                size=int(cfg["size"]), batch=int(cfg["batch"]), log=log)
    capture_s = time.perf_counter() - t0
    del model
    log(f"vision pool: {pool['acts'].shape[0]} views of {len(photos)} photos ({capture_s:.1f}s)")
    specs = _vision.task_specs(int(cfg["tasks"]), len(photos), int(cfg["per_photo"]), int(cfg["n"]),
                               seed=int(cfg["seed"]))
    tasks, info = _vision.make_tasks(pool, w0, b0, specs, len(photos), seed=int(cfg["seed"]))

    timings: dict[str, Any] = {}
    maps = {"act_map": cfg["act_map"], "error_map": cfg["error_map"]}
    acc = accuracy(w0, b0, tasks, sketch_dim=cfg["sketch_dim"], seeds=list(cfg["seeds"]), fp=fp, timings=timings,
                   **maps)
    _log_accuracy(acc, log)
    log(f"{len(tasks)}-task matrix: exact {timings['exact_s']:.2f}s, "
        f"sketch {statistics.median(timings['sketch_s']):.2f}s (median over bases)")

    streams, distinct = _vision.speed_streams(pool, w0, b0, int(cfg["speed_n"]), len(photos), seed=int(cfg["seed"]))
    sp = speed(w0, b0, streams, sketch_dim=cfg["sketch_dim"], repeats=cfg["repeats"],
               exact_repeats=cfg["exact_repeats"], fp=fp, **maps)
    sp["distinct_rows"] = distinct
    _log_speed(sp, log)

    fig = out_dir / "estimator_vision.png"
    plot_estimator(acc, sp, fig, f"EfficientNet-lite0, {len(tasks)} tasks x {cfg['n']} views, "
                                 f"m={cfg['sketch_dim']}")
    return {
        "model": "efficientnet-lite0", "n_tasks": len(tasks), "n_per_task": int(cfg["n"]),
        "d": int(w0.shape[1]), "K": int(w0.shape[0]), "pool_views": int(pool["acts"].shape[0]),
        "capture_seconds": capture_s, "tasks": info, "accuracy": acc, "matrix_seconds": timings,
        "speed": sp, "maps": _maps(int(w0.shape[1]), int(w0.shape[0]), int(cfg["sketch_dim"]), **maps),
        "figures": [fig.name],
    }


def run(quick: bool, out_dir: Path, seed: int = 0, *, config: dict[str, Any] | None = None) -> dict[str, Any]:
    from updatescope.data.images import photo_names

    t0 = time.perf_counter()
    seeds = [seed, seed + 1, seed + 2]
    cfg: dict[str, Any] = {
        "parts": ["smollm2", "vision"],
        "model": "smollm2",
        "domains": list(source_selection.QUICK_DOMAINS if quick else source_selection.FULL_DOMAINS),
        # quick: same sizes as source-selection (cache hits); speed streams pool all three
        # splits.  full: the sketch split only, 1,000 tokens per domain: the exact 24-task
        # matrix at K = 49,152 costs O(T² n² (d + K)), ~14 min on 2 idle cores at n = 1,000
        # against ~32 min at source-selection's 1,500 (and the train/eval captures are unused)
        "tokens": {"sketch": 300, "train": 400, "eval": 300} if quick else {"sketch": 1000},
        "sketch_dim": 4096, "seeds": seeds,
        # projection families ("auto", "dense", "srht", "fold", "countsketch"; see SketchConfig)
        "act_map": "auto", "error_map": "auto",
        "speed_n": 2000, "repeats": 3, "exact_repeats": 1 if quick else 3, "quick": quick,
        # EfficientNet-lite0: tasks x n views from a pool of photos x per_photo views (one forward each)
        "vision": {"photos": photo_names(), "per_photo": 64 if quick else 200, "tasks": 8 if quick else 24,
                   "n": 300 if quick else 1000, "size": 224, "batch": 32, "seed": seed, "sketch_dim": 4096,
                   "act_map": "auto", "error_map": "auto",
                   "seeds": seeds, "speed_n": 2000, "repeats": 3, "exact_repeats": 3},
    }
    merge_config(cfg, config)  # dicts merge key by key: {"vision": {"tasks": 4}} keeps the rest
    unknown = set(cfg["parts"]) - {"smollm2", "vision"}
    if unknown or not cfg["parts"]:
        raise InputError(f"estimator parts must be among smollm2, vision; got {cfg['parts']}")
    log = functools.partial(print, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)

    metrics: dict[str, Any] = {"figures": []}
    if "smollm2" in cfg["parts"]:
        metrics.update(run_lm(cfg, out_dir, log))
    if "vision" in cfg["parts"]:
        vis = run_vision(cfg["vision"], out_dir, log)
        metrics["vision"] = vis
        metrics["figures"] = [*metrics["figures"], *vis["figures"]]
    return finish(NAME, cfg, metrics, t0)
