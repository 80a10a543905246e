"""Planning cost: ``plan`` for 50 tasks, beyond loading the signatures.

Goal (issue 39): planning for 50 tasks takes < 1 s.  Synthetic signatures at m = 4096:
FisherSketch on streams of the synthetic head-task family (d = 16, K = 64, 200 samples
each; task i is cluster i mod 4, label block ⌊i/4⌋ mod 4, mixed towards another task by a
random amount), made once before timing.  Measured, after one warm-up, median and spread
of ``--reps`` runs:
- ``plan_s``: the whole :func:`updatescope.select.plan` (table, best and worst order search,
  replay shares) with ``--replay-budget``;
- ``table_s`` and ``search_s``: its two parts, :func:`interference_table` and one
  :func:`search_order` of the damage matrix (the heuristic beyond 14 tasks);
- baseline, same run: the table's three cosines by one ``alignment`` call per pair (what a
  script looping over pairs would do), timed once on ``--baseline-pairs`` pairs and
  extrapolated linearly to all pairs.

    python benchmarks/plan_cost.py [--tasks 50] [--m 4096] [--reps 7] [--threads 2]
    python benchmarks/plan_cost.py --table benchmarks/results/plan_cost.json   # README table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

import updatescope as us
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.records import env_info, portable_command, portable_config, write_json_atomic
from updatescope.select.interference import interference_table, plan, search_order

HERE = Path(__file__).resolve().parent


def signatures(n: int, m: int, samples: int) -> list:
    fam = HeadTaskFamily(act_dim=16, out_dim=64)
    g = torch.Generator().manual_seed(0)
    sigs = []
    for i in range(n):
        other = int(torch.randint(0, 16, (1,), generator=g))
        mix = float(torch.rand(1, generator=g)) * 0.5
        acts, logits, labels = fam.sample(i % 4, (i // 4) % 4, samples, seed=i, mix_to=(other % 4, other // 4), mix=mix)
        sigs.append(us.FisherSketch(16, 64, sketch_dim=m, seed=0).update_logits(acts, logits, labels).signature())
    return sigs


def measure(fn, reps: int) -> dict[str, float]:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}


def table(paths: list[str]) -> str:
    lines = [
        "| tasks | m | threads | plan (median, min–max) | table | order search "
        "| pairwise alignment() (extrapolated) | search | load average |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        rec = json.loads(Path(path).read_text())
        c, r = rec["config"], rec["results"]
        p = r["plan"]
        lines.append(
            f"| {c['tasks']} | {c['m']} | {c['threads']} | {p['median_s']:.3f} s ({p['min_s']:.3f}–{p['max_s']:.3f}) "
            f"| {r['table']['median_s']:.3f} s | {r['search']['median_s']:.3f} s "
            f"| {r['pairwise_alignment_s_extrapolated']:.2f} s | {r['search_method']} "
            f"| {r['load_average_before']:.1f} → {r['load_average_after']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--replay-budget", type=float, default=0.1)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--baseline-pairs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "plan_cost.json"))
    ap.add_argument("--table", default=None, metavar="JSON[+JSON]", help="print the README table of these records")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table.split("+")))
        return 0
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]  # other jobs on the machine slow every figure below
    t = time.perf_counter()
    sigs = signatures(args.tasks, args.m, args.samples)
    make_s = time.perf_counter() - t
    names = [f"task{i}" for i in range(args.tasks)]
    result = plan(sigs, names, replay_budget=args.replay_budget)
    damage = result.table.damage("inner").numpy()
    timings = {
        "plan": measure(lambda: plan(sigs, names, replay_budget=args.replay_budget), args.reps),
        "table": measure(lambda: interference_table(sigs, names), args.reps),
        "search": measure(lambda: search_order(damage), args.reps),
    }
    pairs = [(i, j) for i in range(args.tasks) for j in range(i + 1, args.tasks)][: args.baseline_pairs]
    t = time.perf_counter()
    for i, j in pairs:
        us.alignment(sigs[i], sigs[j])
    per_pair = (time.perf_counter() - t) / len(pairs)
    n_pairs = args.tasks * (args.tasks - 1) // 2
    results = {
        **timings,
        "search_method": result.search,
        "make_signatures_s": make_s,
        "pairwise_alignment_s_per_pair": per_pair,
        "pairwise_alignment_s_extrapolated": per_pair * n_pairs,
        "cost_plan": result.cost_plan,
        "cost_input": result.cost_input,
        "cost_worst": result.cost_worst,
        "significant_pairs": int((damage > 0).sum() // 2),
        "pairs": n_pairs,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg()[0],
    }
    print(
        f"{args.tasks} tasks, m={args.m}: plan {timings['plan']['median_s']:.3f} s "
        f"(table {timings['table']['median_s']:.3f} s, search {timings['search']['median_s']:.3f} s, "
        f"{result.search}); pairwise alignment() ~{per_pair * n_pairs:.2f} s; "
        f"predicted forgetting plan {result.cost_plan:.3g}, given {result.cost_input:.3g}, "
        f"worst {result.cost_worst:.3g}"
    )
    write_json_atomic(
        {
            "name": "plan_cost",
            "command": portable_command("benchmarks/plan_cost.py", argv),
            "config": portable_config(args),
            "results": results,
            "env": env_info(),
            "goal": "plan for 50 tasks in under 1 s beyond loading the signatures",
        },
        args.out,
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
