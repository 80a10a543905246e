"""What `make demo` costs and what it finds: `updatescope demo` run as a user runs it, in a
fresh process, with its wall clock, the peak resident memory of that process, and every
domain's top-ranked source from the `ranking.json` it writes.

    python benchmarks/demo_cost.py [--threads 2]          # -> results/demo_cost.json
    python benchmarks/demo_cost.py --table benchmarks/results/demo_cost.json

The model cache (the dequantised SmolLM2 that `make setup` builds) is warmed first by a
separate process, so the figure is the demo's own work, as after `make setup`.  The load
average before and after is recorded: on a shared machine the wall clock moves with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent
# the demo exactly as `updatescope demo --out OUT` runs it, then the process's own peak RSS (KiB on Linux)
_CHILD = (
    "import contextlib, io, resource, sys\n"
    "from pathlib import Path\n"
    "from updatescope.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    rc = main(['demo', '--out', sys.argv[1]])\n"
    "Path(sys.argv[2]).write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))\n"
    "raise SystemExit(rc)\n"
)


def _top_sources(summary: dict) -> list[dict]:
    """Per target domain: its top-ranked source, that source's fisher, and whether the two
    share a family (the demo's family labels)."""
    fam = summary["families"]
    out = []
    for r in summary["rankings"]:
        top = r["rows"][0]
        out.append(
            {
                "target": r["target"],
                "source": top["source"],
                "fisher": top["fisher"],
                "same_family": bool(fam.get(r["target"])) and fam.get(r["target"]) == fam.get(top["source"]),
            }
        )
    return out


def table(path: str) -> str:
    """The record as the guide's sentences (every figure read from it)."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    res, cfg = rec["result"], rec["config"]
    wall = res["wall_s"]
    mins, secs = divmod(round(wall), 60)
    tops = res["top_sources"]
    same = sum(t["same_family"] for t in tops)
    picks = "; ".join(
        f"{t['target']} → {t['source']} ({'n/a' if t['fisher'] is None else format(t['fisher'], '.2f')})" for t in tops
    )
    return (
        f"`updatescope demo` took {mins} min {secs} s wall clock in all and {res['peak_rss_bytes'] / 2**30:.1f} GB "
        f"peak memory ({cfg['threads']} threads, {rec['env']['cpu_count']} CPU cores, model cache built, load "
        f"average {res['loadavg_before'][0]:.1f} before; `{path}`). Top source of each domain (fisher): {picks}. "
        f"{same} of {len(tops)} domains pick a source of their own family."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "demo_cost.json"))
    ap.add_argument("--table", default=None, metavar="JSON", help="print the guide's sentences of this record")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    warm = "from updatescope.models.smollm2 import load_smollm2; load_smollm2()"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo-report"
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        peak_file = Path(tmp) / "peak"
        subprocess.run([sys.executable, "-c", _CHILD, str(out), str(peak_file)], env=env, check=True)
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()
        peak = int(peak_file.read_text())
        summary = json.loads((out / "ranking.json").read_text(encoding="utf-8"))
    result = {
        "wall_s": wall,
        "peak_rss_bytes": peak,
        "domains": summary["names"],
        "top_sources": _top_sources(summary),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }
    write_json_atomic(
        {
            "name": "demo_cost",
            "config": portable_config(args),
            "result": result,
            "env": env_info(),
            "command": portable_command("benchmarks/demo_cost.py", argv),
        },
        Path(args.out),
    )
    print(table(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
