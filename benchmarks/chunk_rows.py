"""Rows per chunk of the wide spread map (the default error map beyond next_pow2(m)): the
error map's time per sample at each chunk size, against the earlier rule (chunks sized by
the input's width, 6–18 rows at these vocabularies) in the same run.

    python benchmarks/chunk_rows.py [--threads 2 --reps 12 --n 256]
    python benchmarks/chunk_rows.py --table benchmarks/results/chunk_rows.json

Per vocabulary K, the same ``SpreadMap(K, 4096)`` maps n rows of softmax-like errors, taken in
turn from a rotating pool of copies (≥ 1 GiB in all, so the errors come from memory), with
its rows per chunk set to each arm's value; the arms are rotated within every repetition
and each arm's figure is the median over repetitions.  The outputs of every arm are
compared with the earlier rule's for equality (``same_output``): chunking changes the
schedule, not the numbers.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import updatescope.sketch.maps as maps
from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cold import error_pool, parse, parser  # noqa: E402

ROWS = (8, 16, 32, 64, 128, 256)


def earlier_rows(mp: maps.SpreadMap) -> int:
    """The rule before: chunks sized by 4·m + 2·dim floats per row."""
    return max(1, maps._CHUNK_ELEMS // (4 * mp.m + 2 * mp.dim))


def measure(k: int, m: int, n: int, reps: int) -> dict:
    pool = error_pool(n, k)
    mp = maps.SpreadMap(k, m, torch.Generator().manual_seed(1))
    default_rows = max(1, maps._CHUNK_ELEMS // mp._width())
    arms = {"earlier": earlier_rows(mp), **{f"{r}": r for r in ROWS}}

    def run(rows: int, x: torch.Tensor) -> torch.Tensor:
        mp._width = lambda: maps._CHUNK_ELEMS // rows  # instance override: this arm's chunk rows
        try:
            return mp(x, tag="err")
        finally:
            del mp._width

    ref = run(arms["earlier"], pool[0]).clone()
    same = {name: bool(torch.equal(run(r, pool[0]), ref)) for name, r in arms.items()}
    times: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    i = 0
    for rep in range(reps + 1):  # the first pass warms every arm's buffers
        for j in range(len(names)):
            name = names[(j + rep) % len(names)]
            x = pool[i % len(pool)]
            i += 1
            t = time.perf_counter()
            run(arms[name], x)
            dt = time.perf_counter() - t
            if rep:
                times[name].append(1e6 * dt / n)
    us_per_sample = {name: statistics.median(v) for name, v in times.items()}
    return {
        "out_dim": k,
        "sketch_dim": m,
        "n": n,
        "rows": arms,
        "default_rows": default_rows,
        "us_per_sample": us_per_sample,
        "all": times,
        "same_output": same,
        "default_over_earlier": us_per_sample[str(default_rows)] / us_per_sample["earlier"]
        if str(default_rows) in us_per_sample
        else None,
    }


def table(paths: list[str]) -> str:
    lines = []
    for path in paths:
        rec = json.loads(Path(path).read_text())
        rows = rec["rows"]
        head = ["K", "earlier rule: rows, µs/sample"] + [f"{r} rows" for r in ROWS] + ["default / earlier"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            us_ = row["us_per_sample"]
            best = min(us_.values())
            cells = [f"{row['out_dim']:,}", f"{row['rows']['earlier']}, {us_['earlier']:.1f}"]
            for r in ROWS:
                v = f"{us_[str(r)]:.1f}"
                v = f"**{v}**" if us_[str(r)] == best else v
                cells.append(v + (" (default)" if r == row["default_rows"] else ""))
            cells.append(f"{row['default_over_earlier']:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
        cfg = rec["config"]
        same = all(all(r["same_output"].values()) for r in rows)
        lines.append(
            f"\n- `{path}`: SpreadMap(K, m = {rows[0]['sketch_dim']:,}), n = {rows[0]['n']} rows per call, "
            f"{cfg['threads']} threads, medians over {cfg['reps']} rotated repetitions, errors cold "
            f"(rotating pool); every arm's output equal to the earlier rule's: {'yes' if same else 'NO'}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser("chunk_rows", reps=12)
    p.add_argument("--out-dims", default="49152,131072,151936")
    args = parse(p, argv, table)
    if args is None:
        return 0
    load_before = os.getloadavg()
    rows = []
    for k in (int(v) for v in args.out_dims.split(",")):
        row = measure(k, args.m, args.n, args.reps)
        rows.append(row)
        print(
            f"K={k}: "
            + ", ".join(f"{name} ({row['rows'][name]} rows) {v:.1f}" for name, v in row["us_per_sample"].items())
            + f" us/sample; same output {all(row['same_output'].values())}",
            flush=True,
        )
    write_json_atomic(
        {
            "name": "chunk_rows",
            "config": {k: v for k, v in portable_config(args).items() if k != "table"},
            "rows": rows,
            "env": env_info(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "command": portable_command("benchmarks/chunk_rows.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
