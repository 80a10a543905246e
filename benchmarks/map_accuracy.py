"""Accuracy vs exact of each projection choice, on the estimator benchmark's task family.

Same 12 synthetic tasks and 66 pairs as ``estimator_accuracy.py`` (d = 128), exact values
computed once per K, then every (act_map, error_map) choice sketched with the same seeds at
m = 4096: Spearman and median |sketch − exact| for fisher / activation / error / coupling.
The earlier default maps (dense/SRHT at K = 49,152, dense/dense at K = 1,000) are the
reference of the paired differences; the default (``auto``: stack/spread at K = 49,152,
stack/stack at K = 1,000) and the other fast options are measured against them.

``--streams smollm2``: the same comparison on real streams instead, SmolLM2-135M's head
(d = 576, K = 49,152) on the 10 domains of ``reproduce estimator --quick`` (300 tokens each,
45 pairs, captured through the experiment cache), exact values once, every choice with the
same basis seeds: the streams the default maps must be accurate on, beside the synthetic
family.

    python benchmarks/map_accuracy.py [--seeds 3] [--out benchmarks/results/map_accuracy.json]
    python benchmarks/map_accuracy.py --streams smollm2 --seeds 12 --out benchmarks/results/map_accuracy_smollm2.json
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
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.records import env_info, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from estimator_accuracy import KINDS, make_tasks  # noqa: E402

# Explicit kinds (what "auto" resolves to changes between versions; the record names both).
# The first choice at each K is the reference of the paired differences.
CHOICES = {
    1000: ["dense/dense", "stack/stack", "spread/spread", "fold/fold"],
    49152: [
        "dense/srht",
        "stack/spread",
        "stack/srht",
        "dense/spread",
        "spread/spread",
        "fold/fold",
        "stack/foldspread",
    ],
}
N = {1000: 1000, 49152: 500}


def smollm2_tasks() -> tuple[int, int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], dict]:
    """(d, K, [(acts, logits, labels)] per domain, description) of the estimator's quick SmolLM2 streams."""
    from updatescope.experiments import heads
    from updatescope.experiments import selection as source_selection
    from updatescope.experiments.estimator.config import EstimatorConfig

    cfg = EstimatorConfig.defaults(quick=True)
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    data = source_selection.capture_domains(
        model, tok, fp, list(cfg.domains), {"sketch": cfg.tokens.sketch}, log=lambda *_: None
    )["sketch"]
    del model
    tasks = [(v["acts"], heads.logits_of(w0, b0, v["acts"]), v["labels"]) for v in data.values()]
    return (
        int(w0.shape[1]),
        int(w0.shape[0]),
        tasks,
        {"model": cfg.model, "domains": list(cfg.domains), "tokens_per_task": cfg.tokens.sketch},
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--act-dim", type=int, default=128, help="d of the synthetic family (SmolLM2's is 576)")
    p.add_argument(
        "--k",
        type=int,
        nargs="+",
        default=sorted(CHOICES),
        choices=sorted(CHOICES),
        help="vocabulary sizes to run (default: all)",
    )
    p.add_argument(
        "--streams",
        choices=["synthetic", "smollm2"],
        default="synthetic",
        help="the synthetic family (default) or SmolLM2's real streams (d = 576, K = 49,152)",
    )
    p.add_argument(
        "--choices",
        nargs="+",
        default=None,
        help="act/error pairs to run at every K (default: CHOICES; the first is the reference)",
    )
    p.add_argument("--out", default=str(HERE / "results" / "map_accuracy.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    out = {}
    real = None
    if args.streams == "smollm2":
        real = smollm2_tasks()
        args.k = [real[1]]
    for k in args.k:
        choices = args.choices or CHOICES[k]
        if real is not None:
            dim, _, tasks, streams = real
        else:
            fam = HeadTaskFamily(act_dim=args.act_dim, out_dim=k)
            dim, tasks, streams = fam.act_dim, [t for _, t in make_tasks(fam, N[k])], {"n_per_task": N[k]}
        exact = us.exact_alignment_matrix([(a, us.error_vectors(z, y)[0]) for a, z, y in tasks])
        iu = np.triu_indices(len(tasks), 1)
        out[str(k)] = {"streams": {"kind": args.streams, "act_dim": dim, "pairs": int(len(iu[0])), **streams}}
        for choice in choices:
            act_map, error_map = choice.split("/")
            vals = {kind: [] for kind in KINDS}
            t1 = time.perf_counter()
            for seed in range(args.seeds):
                sigs = [
                    us.FisherSketch(dim, k, args.m, seed, act_map=act_map, error_map=error_map)
                    .update_logits(*t)
                    .signature()
                    for t in tasks
                ]
                est = us.alignment_matrix(sigs)
                for kind in KINDS:
                    e_, x_ = est[kind].numpy()[iu], exact[kind].numpy()[iu]
                    ok = np.isfinite(e_)
                    vals[kind].append(
                        (
                            float(spearmanr(e_[ok], x_[ok]).statistic),
                            float(np.median(np.abs(e_ - x_))),
                            int((~ok).sum()),
                        )
                    )
            cfg = us.SketchConfig(dim, k, args.m, act_map=act_map, error_map=error_map)
            res = {
                "act_map": cfg.act_map,
                "error_map": cfg.error_map,
                "sketch_seconds_per_seed": round((time.perf_counter() - t1) / args.seeds, 2),
            }
            for kind, v in vals.items():
                res[kind] = {
                    "spearman_mean": float(np.mean([x[0] for x in v])),
                    "median_abs_err_mean": float(np.mean([x[1] for x in v])),
                    "nan_pairs": int(sum(x[2] for x in v)),
                }
            res["per_seed"] = {kind: [[x[0], x[1]] for x in v] for kind, v in vals.items()}
            ref = out[str(k)].get(choices[0]) if choice != choices[0] else None
            if ref is not None:  # paired over seeds (same basis seed, same streams): this − reference
                res["paired_vs"] = choices[0]
                for kind in KINDS:
                    for j, name in ((0, "spearman"), (1, "median_abs_err")):
                        d = np.array([x[j] for x in res["per_seed"][kind]]) - np.array(
                            [x[j] for x in ref["per_seed"][kind]]
                        )
                        res[kind][f"{name}_diff_mean"] = float(d.mean())
                        res[kind][f"{name}_diff_se"] = (
                            float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
                        )
            out[str(k)][choice] = res
            print(
                f"K={k:>6} {choice:>17} ({cfg.act_map}/{cfg.error_map}): "
                + "  ".join(
                    f"{kind} {res[kind]['spearman_mean']:.3f}/{res[kind]['median_abs_err_mean']:.4f}"
                    + (
                        " (Δ|err| "
                        f"{res[kind]['median_abs_err_diff_mean']:+.4f}±{res[kind]['median_abs_err_diff_se']:.4f})"
                        if "paired_vs" in res
                        else ""
                    )
                    for kind in KINDS[:3]
                ),
                flush=True,
            )
    write_json_atomic(
        {
            "name": "map_accuracy",
            "config": portable_config(args),
            "metrics": out,
            "env": env_info(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "seconds": round(time.perf_counter() - t0, 1),
        },
        Path(args.out),
    )


if __name__ == "__main__":
    main()
