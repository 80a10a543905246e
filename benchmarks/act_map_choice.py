"""Dense vs block-SRHT activation map at d = 576: cost per token and accuracy vs exact.

Accuracy on the synthetic head-task family (12 tasks, 66 pairs, K = 1,000, n = 600, 3 bases);
cost: one (1024, 576) batch through the activation map, best of 5.

    python benchmarks/act_map_choice.py [--out benchmarks/results/act_map_choice.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

import updatescope as us
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.records import env_info, portable_config, write_json_atomic
from updatescope.sketch.maps import build_maps

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from estimator_accuracy import make_tasks  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--out", default=str(HERE / "results" / "act_map_choice.json"))
    args = p.parse_args()
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    fam = HeadTaskFamily(act_dim=args.d, out_dim=1000)
    tasks = [(a, us.error_vectors(z, y)[0]) for _, (a, z, y) in make_tasks(fam, 600)]
    ex = us.exact_alignment_matrix(tasks)
    iu = np.triu_indices(len(tasks), 1)
    batch = torch.randn(1024, args.d)
    out = {}
    for kind in ("dense", "srht"):
        amap, _ = build_maps(args.d, 16, 4096, 0, kind, "dense")
        amap(batch[:8])
        best = min((lambda s: (amap(batch), time.perf_counter() - s)[1])(time.perf_counter()) for _ in range(5))
        acc = {k: [] for k in ("fisher", "activation", "error")}
        for seed in range(3):
            sigs = [us.FisherSketch(args.d, 1000, 4096, seed, act_map=kind).update(a, e).signature() for a, e in tasks]
            est = us.alignment_matrix(sigs)
            for k in acc:
                e_, x_ = est[k].numpy()[iu], ex[k].numpy()[iu]
                acc[k].append([float(spearmanr(e_, x_).statistic), float(np.median(np.abs(e_ - x_)))])
        out[kind] = {
            "us_per_token": best * 1e6 / len(batch),
            **{
                k: {
                    "spearman": float(np.mean([v[0] for v in vals])),
                    "median_abs_err": float(np.mean([v[1] for v in vals])),
                }
                for k, vals in acc.items()
            },
        }
        print(
            kind,
            f"{out[kind]['us_per_token']:.1f} us/token",
            {k: (round(out[kind][k]["spearman"], 4), round(out[kind][k]["median_abs_err"], 4)) for k in acc},
            flush=True,
        )
    write_json_atomic(
        {
            "name": "act_map_choice",
            "config": portable_config(args),
            "metrics": out,
            "env": env_info(),
            "seconds": round(time.perf_counter() - t0, 1),
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
