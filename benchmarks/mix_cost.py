"""Cost of ``mix``: solve time for 100 and 1,000 sources at the real sketch size.

Goal (issue 38): 100 sources in < 50 ms, 1,000 sources in < 1 s.

Synthetic signatures at m = 4096 (N_BLOCKS diagonal blocks, two halves): each source's mean
embedding is a shared component plus one of ``--domains`` domain directions plus its own
direction, so the estimated Fisher alignments between sources spread over roughly 0.5–0.95
as between natural text domains, and the Gram is ill-conditioned as a real one is.  Each
half holds 20k tokens; the diagonal sums make the self-pair kernel 50× the squared mean (a
next-token-like ratio), so the unbiased Gram is the usual slightly-shrunk one.

Timed, median and spread of ``--reps`` runs after one warm-up, on signatures in memory:
- ``mix_s``: the whole ``select.mixture.mix`` call (inner products of all sources and the
  target, eigenvalue clipping, NNLS, the standard errors at the weights, the best single
  source's ``alignment``) — what ``updatescope mix`` does after loading the files;
- ``gram_s``: ``inner_products`` alone; ``solve_s``: ``solve`` alone on that Gram.

    python benchmarks/mix_cost.py [--sizes 100 1000] [--reps 7] [--threads 1]

One thread by default: ``mix`` works on small tensors, where a second intra-op thread adds
synchronisation and, on a busy machine, waits for a core; the record keeps the load average.
    python benchmarks/mix_cost.py --table benchmarks/results/mix_cost.json   # README table
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch import Tensor

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic
from updatescope.select.mixture import mix, solve
from updatescope.sketch.align import inner_products
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import N_BLOCKS, Signature

HERE = Path(__file__).resolve().parent
GOALS = {100: 0.05, 1000: 1.0}


def synthetic(n: int, m: int, domains: int, seed: int = 0) -> tuple[Signature, dict[str, Signature]]:
    g = torch.Generator().manual_seed(seed)
    config = SketchConfig(act_dim=16, out_dim=64, sketch_dim=m, seed=0)
    shared = torch.randn(3, m, generator=g, dtype=torch.float64)
    dirs = torch.randn(domains, 3, m, generator=g, dtype=torch.float64)
    half = 20_000

    def make(mu: Tensor) -> Signature:
        sums = torch.stack([mu * half * (1 + 0.01 * torch.randn(1, generator=g, dtype=torch.float64)) for _ in (0, 1)])
        diag = 50 * half * mu.square().reshape(3, N_BLOCKS, -1).sum(-1)
        return Signature(config, sums, torch.stack([diag, diag]), torch.tensor([half, half]))

    def mean(d: int, own: float) -> Tensor:
        return shared + 0.8 * dirs[d] + own * torch.randn(3, m, generator=g, dtype=torch.float64)

    target = make(mean(0, 0.5))
    sources = {f"s{i}": make(mean(i % domains, 0.3 + 0.4 * float(torch.rand(1, generator=g)))) for i in range(n)}
    return target, sources


def measure(fn, reps: int) -> dict[str, float]:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts)}


def table(rec: dict) -> list[str]:
    lines = [
        "| sources | `mix` (median [min–max]) | of which inner products | of which solve | goal | met |",
        "|---|---|---|---|---|---|",
    ]
    for r in rec["results"]:
        mx, gr, so = r["mix"], r["gram"], r["solve"]
        lines.append(
            f"| {r['sources']:,} | {mx['median_s'] * 1e3:.1f} ms [{mx['min_s'] * 1e3:.1f}–{mx['max_s'] * 1e3:.1f}] "
            f"| {gr['median_s'] * 1e3:.1f} ms | {so['median_s'] * 1e3:.1f} ms | < {r['goal_s'] * 1e3:.0f} ms "
            f"| {'yes' if mx['median_s'] < r['goal_s'] else 'no'} |"
        )
    env = rec["env"]
    lines.append("")
    lines.append(
        f"- m = {rec['config']['m']}, {rec['config']['reps']} repetitions after a warm-up, "
        f"{rec['config']['threads']} thread(s), {env.get('cpu_count', '?')} CPUs, load average "
        f"{rec.get('load_average_1_5_15', ['?'])[0]:.1f} during the run; torch {env.get('torch', '?')}."
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--domains", type=int, default=24)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "mix_cost.json"))
    ap.add_argument("--table", help="print the README table of a mix_cost record and exit")
    args = ap.parse_args(argv)
    if args.table:
        print("\n".join(table(json.loads(Path(args.table).read_text()))))
        return 0
    torch.set_num_threads(args.threads)
    results = []
    for n in args.sizes:
        target, sources = synthetic(n, args.m, args.domains)
        sigs = list(sources.values())
        ip = inner_products([*sigs, target])
        res = mix(target, sources)
        row = {
            "sources": n,
            "goal_s": GOALS.get(n),
            "mix": measure(lambda: mix(target, sources), args.reps),
            "gram": measure(lambda: inner_products([*sigs, target]), args.reps),
            "solve": measure(lambda: solve(ip[:-1, :-1], ip[:-1, -1], float(ip[-1, -1])), args.reps),
            "nonzero_weights": sum(1 for w in res.weights if w > 0),
            "predicted": res.predicted,
            "best_single": res.best_single_value,
            "psd": res.psd,
        }
        results.append(row)
        print(
            f"n={n}: mix {row['mix']['median_s'] * 1e3:.1f} ms (gram {row['gram']['median_s'] * 1e3:.1f} ms, "
            f"solve {row['solve']['median_s'] * 1e3:.1f} ms), {row['nonzero_weights']} sources used, "
            f"predicted {res.predicted:.3f} vs best single {res.best_single_value:.3f}"
        )
    write_json_atomic(
        {
            "name": "mix_cost",
            "command": portable_command("benchmarks/mix_cost.py", argv),
            "config": portable_config(args),
            "results": results,
            "env": env_info(),
            "load_average_1_5_15": list(os.getloadavg()),
            "goal": "100 sources < 50 ms, 1,000 sources < 1 s",
        },
        args.out,
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
