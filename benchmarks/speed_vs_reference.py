"""Target 1: samples/s of updatescope vs the reference package fishersketch 0.2.1, same streams.

The reference runs in its own venv (never a project dependency), in a subprocess, on the
same saved (acts, errors) tensors; the two are timed alternately so the ratio survives a
noisy machine.  Both use sketch_dim m = 4096 (equal state: 2 halves × 3 kinds × m float64).
Each row records the map kinds updatescope's sketch resolved to (``maps``: activation/error).

    python benchmarks/speed_vs_reference.py --peer-python PEER/bin/python [--n 64 --reps 3]
    python benchmarks/speed_vs_reference.py --table A.json[+B.json...]   # README table, one row group per record
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import updatescope as us
from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from estimator_accuracy import group_label, map_label, maps_note, record_paths  # noqa: E402

SHAPES = ((576, 49152), (4096, 128256))


def stream(d: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Head-like stream: logits of a random head on random activations, next-token errors."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g)
    logits = 3.0 * torch.randn(n, k, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    e, _ = us.error_vectors(logits, y)
    return a, e


def time_ours(a: torch.Tensor, e: torch.Tensor, m: int) -> float:
    sk = us.FisherSketch(act_dim=a.shape[1], out_dim=e.shape[1], sketch_dim=m, seed=0)
    t = time.perf_counter()
    sk.update(a, e)
    return time.perf_counter() - t


def rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def table(paths: list[Path]) -> str:
    """The README speed table: one row group per record, each row labelled with its maps."""
    lines = [
        "| (d, K) | updatescope maps | updatescope, samples/s | fishersketch, samples/s | speed-up |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for path in paths:
        rec = json.loads(path.read_text())
        cfg, labelled = rec["config"], []
        for r in rec["rows"]:
            d, k, m = r["act_dim"], r["out_dim"], r["sketch_dim"]
            labelled.append((r["maps"], maps_note(r["maps"], d, k, m)))
            lines.append(
                f"| ({d}, {k:,}) | {map_label(r['maps'], d, k, m)} | {rate(r['ours_samples_per_s'])} | "
                f"{rate(r['ref_samples_per_s'])} | **{r['speedup']:.1f}×** |"
            )
        versions = ", ".join(dict.fromkeys(r["ref_version"] for r in rec["rows"]))
        notes.append(
            f"- {group_label(labelled)}: `{path.as_posix()}`; fishersketch {versions}, m = {cfg['m']:,}, "
            f"n = {cfg['n']} samples per update, {cfg['threads']} thread{'s' * (cfg['threads'] != 1)}, "
            f"medians over {cfg['reps']} alternated repetitions (speed-up: median of the per-repetition "
            "ratios)."
        )
    return "\n".join(lines + [""] + notes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-python", default=str(HERE / ".venv-peer" / "bin" / "python"))
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "speed_vs_reference.json"))
    p.add_argument(
        "--table", metavar="PATHS", help="print the README table of one or more records (paths joined with +) and exit"
    )
    args = p.parse_args(argv)
    if args.table:
        print(table(record_paths(args.table)))
        return 0
    torch.set_num_threads(args.threads)
    rows = []
    for d, k in SHAPES:
        a, e = stream(d, k, args.n)
        time_ours(a[:8], e[:8], args.m)  # warm-up: builds and caches the basis
        ours, ref = [], []
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "stream.pt"
            torch.save({"acts": a, "errors": e, "m": args.m}, path)
            for _ in range(args.reps):  # alternate: ours, then one peer process
                ours.append(args.n / time_ours(a, e, args.m))
                out = subprocess.run(
                    [args.peer_python, str(HERE / "_peer_fishersketch.py"), str(path), "1", str(args.threads)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                ref.append(r["n"] / r["times"][0])
        row = {
            "act_dim": d,
            "out_dim": k,
            "sketch_dim": args.m,
            "n": args.n,
            "maps": "/".join(us.SketchConfig(d, k, args.m).__dict__[f] for f in ("act_map", "error_map")),
            "ours_samples_per_s": statistics.median(ours),
            "ours_all": ours,
            "ref_samples_per_s": statistics.median(ref),
            "ref_all": ref,
            "speedup": statistics.median(o / r for o, r in zip(ours, ref)),
            "ref_version": r["version"],
        }
        rows.append(row)
        print(
            f"d={d} K={k}: ours {row['ours_samples_per_s']:.0f}/s  fishersketch {row['ref_samples_per_s']:.1f}/s  "
            f"speedup {row['speedup']:.1f}x",
            flush=True,
        )
    write_json_atomic(
        {
            "name": "speed_vs_reference",
            "config": portable_config(args),
            "rows": rows,
            "env": env_info(),
            "command": portable_command("benchmarks/speed_vs_reference.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
