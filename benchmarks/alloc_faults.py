"""What the scratch workspace saves: ``update_logits`` time and minor page faults per token
with the workspace on and off (off: every temporary is a fresh allocation, as before the
workspace existed), each in a fresh process (alternated pairs, so both start from the same
allocator state a user's process starts from), at (576, 49,152) and (4096, 128,256),
m = 4096, for the default maps and the fold maps.

    python benchmarks/alloc_faults.py [--threads 2 --n 1024 --reps 5]
    python benchmarks/alloc_faults.py --table benchmarks/results/alloc_faults.json

Whether freed temporaries go back to the kernel depends on the C allocator's state, so the
"off" figures vary from run to run; the faults per token say which state a run was in.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import updatescope as us
from updatescope.records import env_info, portable_command, portable_config, write_json_atomic
from updatescope.sketch import workspace

HERE = Path(__file__).resolve().parent


def child(d: int, k: int, maps: str, on: bool, n: int, reps: int) -> dict:
    """In a fresh process: median µs and minor faults per token of update_logits."""
    workspace.enabled = on
    g = torch.Generator().manual_seed(0)
    a, z = torch.randn(n, d, generator=g), 3.0 * torch.randn(n, k, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    sk = us.FisherSketch(act_dim=d, out_dim=k, sketch_dim=4096, seed=0, act_map=maps, error_map=maps)
    sk.update_logits(a, z, y)  # warm-up
    times, faults = [], []
    for _ in range(reps):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        sk.update_logits(a, z, y)
        times.append(time.perf_counter() - t)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    return {
        "maps": f"{sk.config.act_map}/{sk.config.error_map}",
        "us_per_token": 1e6 * statistics.median(times) / n,
        "faults_per_token": statistics.median(faults) / n,
    }


def table(path: str) -> str:
    """The README table of the record (every figure read from it)."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    lines = [
        "| (d, K), maps | workspace: µs / token (faults / token) | fresh allocations | fresh / workspace |",
        "|---|---|---|---|",
    ]
    for r in rec["rows"]:
        lines.append(
            f"| ({r['act_dim']}, {r['out_dim']:,}), {r['maps']} | {r['workspace_us_per_token']:.0f} "
            f"({r['workspace_faults_per_token']:.2f}) | {r['fresh_us_per_token']:.0f} "
            f"({r['fresh_faults_per_token']:.1f}) "
            f"| {r['fresh_over_workspace']:.2f}× |"
        )
    cfg, env = rec["config"], rec["env"]
    lines += [
        "",
        f"- `{path}`: {cfg['n']:,} tokens, medians of {cfg['reps']} calls in each of {cfg['rounds']} "
        f"alternated process pairs, {cfg['threads']} threads, load average {rec['loadavg_before'][0]:.1f} before; "
        f"commit {str(env.get('git_commit'))[:7]}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="alternated (workspace, fresh) process pairs per case")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "alloc_faults.json"))
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--table", default=None, metavar="JSON", help="print the README table of this record")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    torch.set_num_threads(args.threads)
    if args.child:
        d, k, maps, on = args.child
        print(json.dumps(child(int(d), int(k), maps, on == "1", args.n, args.reps)))
        return 0
    load_before = os.getloadavg()
    rows = []
    for d, k in ((576, 49152), (4096, 128256)):
        for maps in ("auto", "fold"):
            runs = {True: [], False: []}
            for _ in range(args.rounds):
                for on in (True, False):
                    out = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--threads",
                            str(args.threads),
                            "--n",
                            str(args.n),
                            "--reps",
                            str(args.reps),
                            "--child",
                            str(d),
                            str(k),
                            maps,
                            "1" if on else "0",
                        ],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    runs[on].append(json.loads(out.stdout.strip().splitlines()[-1]))
            row = {"act_dim": d, "out_dim": k, "maps": runs[True][0]["maps"], "n": args.n}
            for on, name in ((True, "workspace"), (False, "fresh")):
                row[f"{name}_us_per_token"] = statistics.median(r["us_per_token"] for r in runs[on])
                row[f"{name}_faults_per_token"] = statistics.median(r["faults_per_token"] for r in runs[on])
                row[f"{name}_runs"] = runs[on]
            row["fresh_over_workspace"] = row["fresh_us_per_token"] / row["workspace_us_per_token"]
            rows.append(row)
            print(
                f"({d}, {k}) {row['maps']:>11}: workspace {row['workspace_us_per_token']:.0f} us/token "
                f"({row['workspace_faults_per_token']:.2f} faults/token), fresh {row['fresh_us_per_token']:.0f} "
                f"({row['fresh_faults_per_token']:.2f}), x{row['fresh_over_workspace']:.2f}",
                flush=True,
            )
    write_json_atomic(
        {
            "name": "alloc_faults",
            "config": {k: v for k, v in portable_config(args).items() if k != "child"},
            "rows": rows,
            "env": env_info(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "command": portable_command("benchmarks/alloc_faults.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
