"""Estimator accuracy: FisherSketch vs the exact float64 Gram reference.

Tasks come from the synthetic head-task family (``updatescope.models.head_tasks``), mixed
between anchor tasks so that the pairs span low to high true alignment.  For every pair
we compare the sketch's fisher / activation / error (and coupling) with the exact values
(unbiased norms, same samples), and report Spearman and median |sketch − exact|, at
sketch_dim 4096 and along a sketch_dim curve.

    python benchmarks/estimator_accuracy.py [--quick] [--out benchmarks/results/estimator_accuracy.json]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

import updatescope as us
from updatescope.records import env_info, write_json_atomic
from updatescope.models.head_tasks import HeadTaskFamily

KINDS = ("fisher", "activation", "error", "coupling")


def make_tasks(fam: HeadTaskFamily, n: int) -> list[tuple[str, tuple]]:
    """12 tasks: target-like anchor (0,0) mixed towards (1,1), (0,1) and (2,2) at 4 weights."""
    tasks = []
    for k, (to, mixes) in enumerate((((1, 1), (0.0, 0.3, 0.6, 1.0)), ((0, 1), (0.15, 0.45, 0.75, 1.0)),
                                     ((2, 2), (0.1, 0.4, 0.7, 1.0)))):
        for j, w in enumerate(mixes):
            tasks.append((f"mix{to}-{w}", fam.sample(0, 0, n, seed=100 * k + j, mix_to=to, mix=w)))
    return tasks


def pairs_of(t: int, max_pairs: int) -> list[tuple[int, int]]:
    allp = [(i, j) for i in range(t) for j in range(i + 1, t)]
    return allp[:max_pairs]


def evaluate(fam: HeadTaskFamily, n: int, dims: list[int], seeds: int, max_pairs: int, error_map: str,
             act_map: str = "auto") -> dict:
    tasks = make_tasks(fam, n)
    streams = [(a, us.error_vectors(z, y)[0]) for _, (a, z, y) in tasks]
    t0 = time.perf_counter()
    exact = us.exact_alignment_matrix(streams)
    t_exact = time.perf_counter() - t0
    pairs = pairs_of(len(tasks), max_pairs)
    truth = {k: np.array([float(exact[k][i, j]) for i, j in pairs]) for k in KINDS}
    out = {"n_per_task": n, "n_tasks": len(tasks), "n_pairs": len(pairs), "exact_seconds": round(t_exact, 2),
           "exact_range": {k: [float(np.nanmin(v)), float(np.nanmax(v))] for k, v in truth.items()}, "by_dim": {}}
    for m in dims:
        rows = []
        t_sk = 0.0
        for seed in range(seeds):
            t1 = time.perf_counter()
            sigs = [us.FisherSketch(fam.act_dim, fam.out_dim, m, seed, error_map=error_map, act_map=act_map)
                    .update_logits(*task).signature() for _, task in tasks]
            t_sk += time.perf_counter() - t1
            est = us.alignment_matrix(sigs)
            rows.append({k: np.array([float(est[k][i, j]) for i, j in pairs]) for k in KINDS})
        res = {}
        for k in KINDS:
            sp = [spearmanr(r[k], truth[k]).statistic for r in rows]
            err = [np.nanmedian(np.abs(r[k] - truth[k])) for r in rows]
            res[k] = {"spearman_mean": float(np.mean(sp)), "spearman_min": float(np.min(sp)),
                      "median_abs_err_mean": float(np.mean(err)), "median_abs_err_max": float(np.max(err))}
        res["sketch_seconds_per_seed"] = round(t_sk / seeds, 2)
        out["by_dim"][str(m)] = res
        print(f"  K={fam.out_dim:>6} m={m:>5}: " + "  ".join(
            f"{k} ρs={res[k]['spearman_mean']:.3f} |err|={res[k]['median_abs_err_mean']:.3f}" for k in KINDS), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer seeds and dims, smaller n")
    p.add_argument("--out", default="benchmarks/results/estimator_accuracy.json")
    args = p.parse_args()
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    seeds = 1 if args.quick else 3
    dims = [256, 1024, 4096] if args.quick else [256, 512, 1024, 2048, 4096, 8192]
    configs = [
        ("K=1000", HeadTaskFamily(act_dim=128, out_dim=1000), 1000 if not args.quick else 600, "auto"),
        ("K=49152", HeadTaskFamily(act_dim=128, out_dim=49152), 500 if not args.quick else 300, "auto"),
    ]
    results = {}
    for name, fam, n, emap in configs:
        print(f"{name}: d={fam.act_dim}, n={n} per task", flush=True)
        results[name] = evaluate(fam, n, dims, seeds, max_pairs=66, error_map=emap)
        results[name]["error_map"] = us.SketchConfig(fam.act_dim, fam.out_dim).error_map
    record = {"name": "estimator_accuracy", "config": {"quick": args.quick, "seeds": seeds, "dims": dims,
              "family": "HeadTaskFamily (synthetic, Zipf label blocks, shared random head)"},
              "metrics": results, "env": env_info(), "seconds": round(time.perf_counter() - t0, 1)}
    write_json_atomic(record, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
