"""Peak memory and rows/s of ``updatescope select`` streaming pools of short synthetic rows.

    python benchmarks/select_stream.py [--sizes 10000,100000,1000000] [--threads 1]
    python benchmarks/select_stream.py --table benchmarks/results/select_stream.json   # README table

For each size a JSONL pool of ``--words`` words per row is written to a temporary folder, and
``updatescope select`` (the command itself, ``cli.main``) runs on it in a fresh process,
keeping the top ``--top`` and writing the score file of every row.  The process's peak resident
memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, read after the command returns) and its
wall time are recorded; rows/s counts the whole command (the validating pass over the pool, the
model load, the scoring pass, the score file), and the scoring pass alone is reported beside
it.  For contrast, a second fresh process reads the same pool into memory the way the earlier
``select`` did (``pipeline.Corpus.from_files``) and records its peak.

The model is a tiny random Llama (``_tiny_select``: 1 layer, width 32, 512 words): the
packaged SmolLM2-135M forwards about 400 tokens/s on 2 cores, so a million rows through it
would take days; memory and the work around the forward pass do not depend on the model's
size beyond its own weights and one batch.  Memory is flat when the peak at the largest pool
is within ``FLAT_MIB`` of the peak at the smallest (the verdict is computed, not typed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAT_MIB = 32.0  # peak growth from the smallest to the largest pool still called flat


def _child_select(argv: list[str], threads: int) -> dict:
    import torch

    from updatescope.cli import main

    torch.set_num_threads(threads)
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"select failed ({rc}): {out.getvalue()[-500:]}")
    m = re.search(r"(\d+) tokens scored in ([\d.]+) s", out.getvalue())
    return {
        "seconds": seconds,
        "tokens": int(m.group(1)),
        "scoring_seconds": float(m.group(2)),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child_in_memory(pool: str) -> dict:
    import torch  # noqa: F401  (the same imports as the select process, so the floors compare)

    from updatescope.pipeline import Corpus

    t0 = time.perf_counter()
    corpus = Corpus.from_files([pool])
    return {
        "seconds": time.perf_counter() - t0,
        "documents": len(corpus),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _spawn(args: list[str], threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(args), "--threads", str(threads)],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    sys.path.insert(0, str(HERE))
    from _tiny_select import save_target, save_tiny_model, write_pool
    from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

    lo, hi = (int(x) for x in args.words.split("-"))
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="select-stream-") as tmp:
        root = Path(tmp)
        model = save_tiny_model(root / "model")
        target = save_target(model, root / "target.safetensors", args.sketch_dim)
        for n in sizes:
            pool = write_pool(root / f"pool{n}.jsonl", n, lo, hi, seed=n)
            out = root / f"top{n}.jsonl"
            argv_sel = [
                "select", "--model", str(model), "--data", str(pool), "--target", str(target),
                "--top", str(args.top), "--out", str(out), "--quiet",
                "--chunk-docs", str(args.chunk_docs), "--token-budget", str(args.token_budget),
            ]  # fmt: skip
            sel = _spawn(["select", argv_sel], args.threads)
            mem = _spawn(["in_memory", str(pool)], args.threads)
            scores = out.with_name(f"top{n}.scores.jsonl")
            with open(scores, "rb") as fh:
                n_scores = sum(1 for _ in fh)
            row = {
                "rows": n,
                "pool_bytes": pool.stat().st_size,
                "score_file_rows": n_scores,
                "score_file_bytes": scores.stat().st_size,
                "select": sel,
                "rows_per_s": n / sel["seconds"],
                "scoring_rows_per_s": n / sel["scoring_seconds"],
                "scoring_tokens_per_s": sel["tokens"] / sel["scoring_seconds"],
                "in_memory_read": mem,
            }
            rows.append(row)
            print(
                f"{n:>9,} rows: select peak {sel['peak_rss_mib']:.0f} MiB, {row['rows_per_s']:,.0f} rows/s "
                f"(scoring {row['scoring_rows_per_s']:,.0f}); in-memory read peak {mem['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
            pool.unlink()
    growth = rows[-1]["select"]["peak_rss_mib"] - rows[0]["select"]["peak_rss_mib"]
    res = {
        "sizes": rows,
        "peak_growth_mib": growth,
        "flat_mib": FLAT_MIB,
        "flat": bool(growth <= FLAT_MIB),
        "model": "tiny random Llama (1 layer, width 32, 512 words); the packaged SmolLM2 would take days at 1M rows",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    write_json_atomic(
        {
            "name": "select_stream",
            "command": portable_command("benchmarks/select_stream.py", argv),
            "config": portable_config(args),
            "results": res,
            "env": env_info(),
        },
        args.out,
    )
    print(f"wrote {args.out}")
    return 0


def table(path: str) -> str:
    rec = json.loads(Path(path).read_text())
    res, cfg = rec["results"], rec["config"]
    lines = [
        "| rows | pool file | `select` peak memory | rows/s (whole command) | rows/s (scoring pass) "
        "| in-memory read of the pool: peak |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["sizes"]:
        lines.append(
            f"| {r['rows']:,} | {r['pool_bytes'] / 2**20:,.1f} MiB | {r['select']['peak_rss_mib']:,.0f} MiB "
            f"| {r['rows_per_s']:,.0f} | {r['scoring_rows_per_s']:,.0f} "
            f"| {r['in_memory_read']['peak_rss_mib']:,.0f} MiB |"
        )
    first, last = res["sizes"][0], res["sizes"][-1]
    verdict = "flat" if res["flat"] else "not flat"
    lines += [
        "",
        f"- `{path}`: peak memory {verdict} from {first['rows']:,} to {last['rows']:,} rows "
        f"({res['peak_growth_mib']:+.0f} MiB; flat means within {res['flat_mib']:.0f} MiB); rows of "
        f"{cfg['words']} words, top {cfg['top']}, chunks of {cfg['chunk_docs']:,} documents, token budget "
        f"{cfg['token_budget']}, target sketch_dim {cfg['sketch_dim']}, {cfg['threads']} thread(s), "
        f"{rec['env']['cpu_count']} CPUs, load average {res['loadavg_before'][0]:.1f} before and "
        f"{res['loadavg_after'][0]:.1f} after; model: {res['model']}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="pool sizes (rows), comma-separated")
    ap.add_argument("--words", default="4-12", help="words per row, LO-HI")
    ap.add_argument("--top", type=int, default=1000)
    ap.add_argument("--chunk-docs", type=int, default=1024)
    ap.add_argument("--token-budget", type=int, default=1024)
    ap.add_argument("--sketch-dim", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(HERE / "results" / "select_stream.json"))
    ap.add_argument("--table", default=None, metavar="JSON", help="print the README table of this record")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if args.child:
        kind, payload = json.loads(args.child)
        res = _child_select(payload, args.threads) if kind == "select" else _child_in_memory(payload)
        print(json.dumps(res))
        return 0
    return run(args, argv)


if __name__ == "__main__":
    raise SystemExit(main())
