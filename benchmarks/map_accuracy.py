"""Accuracy vs exact of each projection choice, on the estimator benchmark's task family.

Same 12 synthetic tasks and 66 pairs as ``estimator_accuracy.py`` (d = 128), exact values
computed once per K, then every (act_map, error_map) choice sketched with the same seeds at
m = 4096: Spearman and median |sketch − exact| for fisher / activation / error / coupling.
The default maps (dense/SRHT at K = 49,152, dense/dense at K = 1,000) are the reference of
the paired differences; ``spread`` and ``fold`` are the faster options measured against them.

    python benchmarks/map_accuracy.py [--seeds 3] [--out benchmarks/results/map_accuracy.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

import updatescope as us
from updatescope.records import env_info, portable_config, write_json_atomic
from updatescope.models.head_tasks import HeadTaskFamily

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from estimator_accuracy import KINDS, make_tasks  # noqa: E402

# Explicit kinds (what "auto" resolves to changes between versions; the record names both).
# The first choice at each K is the reference of the paired differences.
CHOICES = {1000: ["dense/dense", "spread/spread", "fold/fold"],
           49152: ["dense/srht", "spread/spread", "spread/srht", "dense/fold", "fold/fold"]}
N = {1000: 1000, 49152: 500}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--act-dim", type=int, default=128, help="d of the synthetic family (SmolLM2's is 576)")
    p.add_argument("--k", type=int, nargs="+", default=sorted(CHOICES), choices=sorted(CHOICES),
                   help="vocabulary sizes to run (default: all)")
    p.add_argument("--choices", nargs="+", default=None,
                   help="act/error pairs to run at every K (default: CHOICES; the first is the reference)")
    p.add_argument("--out", default=str(HERE / "results" / "map_accuracy.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    out = {}
    for k in args.k:
        choices = args.choices or CHOICES[k]
        fam = HeadTaskFamily(act_dim=args.act_dim, out_dim=k)
        tasks = [t for _, t in make_tasks(fam, N[k])]
        exact = us.exact_alignment_matrix([(a, us.error_vectors(z, y)[0]) for a, z, y in tasks])
        iu = np.triu_indices(len(tasks), 1)
        out[str(k)] = {}
        for choice in choices:
            act_map, error_map = choice.split("/")
            vals = {kind: [] for kind in KINDS}
            t1 = time.perf_counter()
            for seed in range(args.seeds):
                sigs = [us.FisherSketch(fam.act_dim, k, args.m, seed, act_map=act_map, error_map=error_map)
                        .update_logits(*t).signature() for t in tasks]
                est = us.alignment_matrix(sigs)
                for kind in KINDS:
                    e_, x_ = est[kind].numpy()[iu], exact[kind].numpy()[iu]
                    ok = np.isfinite(e_)
                    vals[kind].append((float(spearmanr(e_[ok], x_[ok]).statistic), float(np.median(np.abs(e_ - x_))),
                                       int((~ok).sum())))
            cfg = us.SketchConfig(fam.act_dim, k, args.m, act_map=act_map, error_map=error_map)
            res = {"act_map": cfg.act_map, "error_map": cfg.error_map,
                   "sketch_seconds_per_seed": round((time.perf_counter() - t1) / args.seeds, 2)}
            for kind, v in vals.items():
                res[kind] = {"spearman_mean": float(np.mean([x[0] for x in v])),
                             "median_abs_err_mean": float(np.mean([x[1] for x in v])),
                             "nan_pairs": int(sum(x[2] for x in v))}
            res["per_seed"] = {kind: [[x[0], x[1]] for x in v] for kind, v in vals.items()}
            ref = out[str(k)].get(choices[0])
            if ref is not None:  # paired over seeds (same basis seed, same streams): this − reference
                res["paired_vs"] = choices[0]
                for kind in KINDS:
                    for j, name in ((0, "spearman"), (1, "median_abs_err")):
                        d = np.array([x[j] for x in res["per_seed"][kind]]) - np.array([x[j] for x in ref["per_seed"][kind]])
                        res[kind][f"{name}_diff_mean"] = float(d.mean())
                        res[kind][f"{name}_diff_se"] = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
            out[str(k)][choice] = res
            print(f"K={k:>6} {choice:>17} ({cfg.act_map}/{cfg.error_map}): " + "  ".join(
                f"{kind} {res[kind]['spearman_mean']:.3f}/{res[kind]['median_abs_err_mean']:.4f}"
                + (f" (Δ|err| {res[kind]['median_abs_err_diff_mean']:+.4f}±{res[kind]['median_abs_err_diff_se']:.4f})"
                   if "paired_vs" in res else "") for kind in KINDS[:3]),
                flush=True)
    write_json_atomic({"name": "map_accuracy", "config": {**portable_config(args), "n_per_task": N, "pairs": 66},
                       "metrics": out, "env": env_info(), "loadavg_before": load_before,
                       "loadavg_after": os.getloadavg(), "seconds": round(time.perf_counter() - t0, 1)},
                      Path(args.out))


if __name__ == "__main__":
    main()
