"""Where ``update()`` spends its time at the memory-floor shape, per error map: one cold read
of the errors, the whole update, the error map alone, the activation map alone, and the rest
(the update minus both maps: the products, the per-half sums and sums of squares, the
finiteness check), each per sample and as a multiple of the read.

    python benchmarks/update_breakdown.py [--threads 2 --reps 15 --n 256 --d 64 --k 131072]
    python benchmarks/update_breakdown.py --table benchmarks/results/update_breakdown.json

Every timed call gets its own copy of the errors from a rotating pool (≥ 1 GiB in all), as in
``speed_vs_memory_floor.py``; the parts are timed in a rotated order within each repetition
and each figure is the median over repetitions.  The maps run exactly as ``update()`` runs
them (same basis, same workspace tags).  The error map alone is what bounds the
update-over-read ratio from below: a map that costs more than 3 reads cannot meet a 3×
target however cheap the rest becomes.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import updatescope as us
from updatescope.records import env_info, portable_command, portable_config, write_json_atomic
from updatescope.sketch.fishersketch import sketch_basis, with_bias

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cold import error_pool, parse, parser  # noqa: E402

PARTS = ("read", "update", "error_map", "act_map")


def measure(kind: str, d: int, k: int, m: int, n: int, reps: int, pool: list[torch.Tensor], a: torch.Tensor) -> dict:
    sk = us.FisherSketch(act_dim=d, out_dim=k, sketch_dim=m, seed=0, error_map=kind)
    amap, emap = sketch_basis(sk.config, a.device)
    calls = {
        "read": lambda x: float(x.sum()),
        "update": lambda x: sk.update(a, x),
        "error_map": lambda x: emap(x, tag="err"),
        "act_map": lambda x: amap(with_bias(sk.config, a), tag="act"),
    }
    times: dict[str, list[float]] = {p: [] for p in PARTS}
    i = 0
    for rep in range(reps + 1):  # the first pass warms the basis and the workspace
        for j in range(len(PARTS)):
            part = PARTS[(j + rep) % len(PARTS)]
            x = pool[i % len(pool)]
            i += 1
            t = time.perf_counter()
            calls[part](x)
            dt = time.perf_counter() - t
            if rep:
                times[part].append(1e6 * dt / n)
    med = {p: statistics.median(v) for p, v in times.items()}
    med["rest"] = med["update"] - med["error_map"] - med["act_map"]
    return {
        "error_map_requested": kind,
        "error_map": sk.config.error_map,
        "act_map": sk.config.act_map,
        "us_per_sample": med,
        "over_read": {p: v / med["read"] for p, v in med.items() if p != "read"},
        "all": times,
    }


def table(paths: list[str]) -> str:
    lines = [
        "| maps (act/error), threads | read, µs/sample | update (× read) | error map alone (× read) | activation map "
        "alone "
        "(× read) | rest: products, sums, checks (× read) |",
        "|---|---|---|---|---|---|",
    ]
    notes = []
    for path in paths:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        cfg = rec["config"]
        for row in rec["rows"]:
            t, r = row["us_per_sample"], row["over_read"]
            cell = lambda p: f"{t[p]:.1f} ({r[p]:.1f}×)"  # noqa: E731
            threads = f"{cfg['threads']} thread" + ("s" if cfg["threads"] != 1 else "")
            lines.append(
                f"| {row['act_map']}/{row['error_map']}, {threads} | {t['read']:.1f} | {cell('update')} | "
                f"{cell('error_map')} | {cell('act_map')} | {cell('rest')} |"
            )
        over = [f"{row['error_map']} {row['over_read']['error_map']:.1f}×" for row in rec["rows"]]
        notes.append(
            f"- `{path}`: d = {cfg['d']}, K = {cfg['k']:,}, m = {cfg['m']:,}, n = {cfg['n']} rows per call, "
            f"{cfg['threads']} thread{'s' if cfg['threads'] != 1 else ''}, medians over {cfg['reps']} rotated "
            "repetitions, errors cold. The error "
            f"map alone over the read: {', '.join(over)}."
        )
    return "\n".join(lines + [""] + notes)


def main(argv: list[str] | None = None) -> int:
    p = parser("update_breakdown", reps=15)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--k", type=int, default=1 << 17)
    p.add_argument("--error-maps", default="auto,srht,fold,foldspread")
    args = parse(p, argv, table)
    if args is None:
        return 0
    load_before = os.getloadavg()
    pool = error_pool(args.n, args.k)
    a = torch.randn(args.n, args.d, generator=torch.Generator().manual_seed(1))
    rows = []
    for kind in args.error_maps.split(","):
        row = measure(kind, args.d, args.k, args.m, args.n, args.reps, pool, a)
        rows.append(row)
        print(
            f"{row['act_map']}/{row['error_map']}: "
            + ", ".join(f"{p} {v:.1f} us" for p, v in row["us_per_sample"].items()),
            flush=True,
        )
    write_json_atomic(
        {
            "name": "update_breakdown",
            "config": {k: v for k, v in portable_config(args).items() if k != "table"},
            "rows": rows,
            "env": env_info(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "command": portable_command("benchmarks/update_breakdown.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
