"""Targets 3 and 4: per-sample sketch time across out_dim 2^12 … 2^17 against the time to
read the error matrix once (a plain ``errors.sum()``, same tensor, same run, alternated),
and the peak memory the sketch adds (RSS high-water mark in a fresh subprocess, after the
inputs exist, minus before).

    python benchmarks/speed_vs_memory_floor.py [--threads 1] [--n 64 --reps 5] [--error-maps auto,fold]
                                               [--cache cold|warm]
    python benchmarks/speed_vs_memory_floor.py --table A.json[+B.json...]

Every error map named in ``--error-maps`` is timed at every out_dim, interleaved with the
read in the same loop (``auto`` is the default basis, the block SRHT beyond m; ``spread`` a
wide-block SRHT with factored signs; ``fold`` the O(K) signed fold + Hadamard option; the
rows record the map each name resolved to).  With ``--cache cold`` (the default on CPU) every
timed call, the read included, gets its own copy of the errors from a rotating pool of
identical copies (≥ 1 GiB in all), so the errors come from memory rather than from a
last-level cache that may hold a whole small batch (this VM reports 480 MiB of L3), while
the sketch's own basis and scratch stay as warm as they are when streaming; ``warm``
reuses one tensor for every call.  Per-sample times are fitted
as t(K) = t0 + b·K over the six out_dims (least squares; R², intercept and slope per error
entry are recorded, next to the read's slope), which is what "grows about linearly" is
judged on.  The load average is recorded with the result, since absolute times on a shared
machine move with it; the ratios are what the targets are about.
"""

from __future__ import annotations

import argparse
import itertools
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
from updatescope.sketch.fishersketch import features, sketch_basis

HERE = Path(__file__).resolve().parent


def _errors(n: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    e, _ = us.error_vectors(3.0 * torch.randn(n, k, generator=g), torch.randint(0, k, (n,), generator=g))
    return e


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_child(d: int, k: int, n: int, m: int) -> None:
    """Runs in a subprocess: peak RSS added by one update of n rows (MB), basis bytes.

    On Linux the peak-RSS counter is reset after the inputs exist (``/proc/self/clear_refs``),
    so the figure is the high-water mark during ``update`` minus the resident size before it,
    not hidden under the peak of making the inputs; elsewhere it falls back to ru_maxrss.
    """
    a, e = torch.randn(n, d), _errors(n, k)
    sk = us.FisherSketch(act_dim=d, out_dim=k, sketch_dim=m, seed=0)
    amap, emap = sketch_basis(sk.config, torch.device("cpu"))  # the basis is part of what the sketch adds
    basis = sum(
        v.numel() * v.element_size() for mp in (amap, emap) for v in vars(mp).values() if isinstance(v, torch.Tensor)
    )
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = _status_kb("VmHWM") is not None
    except OSError:
        reset = False
    before = _status_kb("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sk.update(a, e)
    after = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "added_peak_MB": (after - before) / 1024,
                "peak_reset": reset,
                "basis_MB": basis / 2**20,
                "workspace_MB": workspace.held_bytes() / 2**20,
                "inputs_MB": (a.numel() + e.numel()) * 4 / 2**20,
            }
        )
    )


def linear_fit(ks: list[int], ts: list[float]) -> dict:
    """Least-squares t = t0 + b·K: intercept t0 (µs), slope b (ns per entry), R²."""
    n = len(ks)
    mk, mt = sum(ks) / n, sum(ts) / n
    sxx = sum((k - mk) ** 2 for k in ks)
    b = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sxx
    t0 = mt - b * mk
    ss_res = sum((t - t0 - b * k) ** 2 for k, t in zip(ks, ts))
    ss_tot = sum((t - mt) ** 2 for t in ts)
    return {"intercept_us": t0, "slope_ns_per_entry": 1e3 * b, "r2": 1 - ss_res / ss_tot if ss_tot else 1.0}


#: target 3: update() at K = 2^17 at most this many times one cold read of the errors;
#: target 4: the memory update() adds at most this (plus O(batch x K), which the inputs are)
READ_TARGET, MEMORY_TARGET_MB = 3.0, 64.0


def table(paths: list[str]) -> str:
    """Targets 3 and 4 from the records, one row per record and error map; met is computed."""
    lines = [
        "| record | rows n | error map | update at K = 2^17, µs/sample (× the read) | fit t0 + b·K (R²) "
        "| the read's b | ≤ 3× the read |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        n, fits = rec["config"]["n"], rec["fits"]
        kmax = max(r["out_dim"] for r in rec["rows"])
        for r in (r for r in rec["rows"] if r["out_dim"] == kmax):
            f = fits[r["error_map_requested"]]
            name = r["error_map"] + (" (auto)" if r["error_map_requested"] == "auto" else "")
            lines.append(
                f"| `{Path(path).name}` | {n} | {name} | {r['update_us_per_sample']:.1f} ({r['update_over_read']:.1f}×)"
                f" | {f['intercept_us']:.1f} µs + {f['slope_ns_per_entry']:.3f} ns·K ({f['r2']:.3f})"
                f" | {fits['read']['slope_ns_per_entry']:.3f} ns"
                f" | {'yes' if r['update_over_read'] <= READ_TARGET else 'no'} |"
            )
    lines.append("")
    for path in paths:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        env, mem = rec["env"], rec["memory"]
        mem_s = ", ".join(
            f"+{m['added_peak_MB']:.0f} MB at ({m['act_dim']}, {m['out_dim']:,}), n = {m['n']}" for m in mem
        )
        mem_met = "met" if all(m["added_peak_MB"] <= MEMORY_TARGET_MB for m in mem) else "not met"
        lines.append(
            f"- `{Path(path).name}`: memory added by `update()` {mem_s} (≤ {MEMORY_TARGET_MB:g} MB: {mem_met}); "
            f"{rec['config']['threads']} thread(s), {rec['config']['reps']} repetitions, "
            f"errors {rec['config']['cache']}, "
            f"load average {rec['loadavg_before'][0]:.1f} before; commit {str(env.get('git_commit'))[:7]}."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--error-maps", default="auto,fold")
    p.add_argument(
        "--cache",
        choices=("cold", "warm"),
        default=None,
        help="cold: evict caches (1 GiB write) before every timed call; default cold on CPU",
    )
    p.add_argument("--out", default=str(HERE / "results" / "speed_vs_memory_floor.json"))
    p.add_argument("--child", nargs=4, type=int, help=argparse.SUPPRESS)
    p.add_argument("--table", default=None, metavar="JSON[+JSON]", help="print the README table of these records")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table.split("+")))
        return 0
    torch.set_num_threads(args.threads)
    if args.child:
        memory_child(*args.child)
        return 0
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    cache = args.cache or ("cold" if dev.type == "cpu" else "warm")
    args.cache = cache
    rows = []
    load_before = os.getloadavg()
    kinds = args.error_maps.split(",")
    for bits in range(12, 18):
        k = 1 << bits
        a, e = torch.randn(args.n, args.d, device=dev), _errors(args.n, k).to(dev)
        copies = 1 if cache == "warm" else max(2, min(4096, -(-(1 << 30) // (e.numel() * e.element_size()))))
        pool = [e] + [e.clone() for _ in range(copies - 1)]
        fresh = itertools.cycle(pool).__next__  # the next copy in the rotation
        sks = {
            kind: us.FisherSketch(act_dim=args.d, out_dim=k, sketch_dim=args.m, seed=0, device=dev, error_map=kind)
            for kind in kinds
        }
        for sk in sks.values():
            sk.update(a[:8], e[:8])
        t_up = {kind: [] for kind in kinds}
        t_feat = {kind: [] for kind in kinds}
        t_read = []
        for _ in range(args.reps):
            for kind, sk in sks.items():
                x = fresh()
                sync()
                t = time.perf_counter()
                sk.update(a, x)
                sync()
                t_up[kind].append(time.perf_counter() - t)
                x = fresh()
                t = time.perf_counter()
                features(sk.config, a, x)
                sync()
                t_feat[kind].append(time.perf_counter() - t)
            x = fresh()
            t = time.perf_counter()
            float(x.sum())
            sync()
            t_read.append(time.perf_counter() - t)
        del pool, fresh  # the cycle holds the copies too
        us_ = lambda xs: 1e6 * statistics.median(xs) / args.n  # noqa: E731
        for kind, sk in sks.items():
            cfg = sk.config
            row = {
                "out_dim": k,
                "error_map_requested": kind,
                "error_map": cfg.error_map,
                "act_map": cfg.act_map,
                "update_us_per_sample": us_(t_up[kind]),
                "features_us_per_sample": us_(t_feat[kind]),
                "read_us_per_sample": us_(t_read),
                "update_over_read": statistics.median(t_up[kind]) / statistics.median(t_read),
                "features_over_read": statistics.median(t_feat[kind]) / statistics.median(t_read),
            }
            rows.append(row)
            print(
                f"K=2^{bits} {cfg.error_map:>6}: update {row['update_us_per_sample']:.0f} us/sample, features "
                f"{row['features_us_per_sample']:.0f}, read {row['read_us_per_sample']:.1f} "
                f"(x{row['update_over_read']:.1f} / x{row['features_over_read']:.1f})",
                flush=True,
            )
    load_after = os.getloadavg()
    fits = {}
    for kind in kinds + ["read"]:
        sel = [r for r in rows if r["error_map_requested"] == (kind if kind != "read" else kinds[0])]
        key = "read_us_per_sample" if kind == "read" else "update_us_per_sample"
        fits[kind] = linear_fit([r["out_dim"] for r in sel], [r[key] for r in sel])
        top = sel[-1]
        fits[kind]["intercept_share_at_max"] = fits[kind]["intercept_us"] / top[key]
        print(
            f"fit {kind:>5}: t = {fits[kind]['intercept_us']:.1f} us + {fits[kind]['slope_ns_per_entry']:.3f} ns x K "
            f"(R2 {fits[kind]['r2']:.3f})",
            flush=True,
        )
    mem = []
    if dev.type == "cpu":
        for d, k, n in ((args.d, 1 << 17, args.n), (576, 49152, 256), (4096, 128256, 256)):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--threads",
                    str(args.threads),
                    "--child",
                    str(d),
                    str(k),
                    str(n),
                    str(args.m),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            r = {"act_dim": d, "out_dim": k, "n": n, **json.loads(out.stdout.strip().splitlines()[-1])}
            mem.append(r)
            print(
                f"memory d={d} K={k} n={n}: +{r['added_peak_MB']:.1f} MB peak (basis {r['basis_MB']:.1f} MB, "
                f"workspace {r['workspace_MB']:.1f} MB, "
                f"inputs {r['inputs_MB']:.0f} MB)",
                flush=True,
            )
    write_json_atomic(
        {
            "name": "speed_vs_memory_floor",
            "config": {k: v for k, v in portable_config(args).items() if k != "child"},
            "rows": rows,
            "fits": fits,
            "memory": mem,
            "env": env_info(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "command": portable_command("benchmarks/speed_vs_memory_floor.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
