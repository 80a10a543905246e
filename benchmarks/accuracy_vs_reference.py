"""Target 1, accuracy half: error vs the exact alignment, updatescope vs fishersketch 0.2.1,
at equal state size (sketch_dim m on both sides), on identical task streams.

Tasks: the synthetic head-task family (``updatescope.models.head_tasks``), 12 tasks mixed
between anchors so pairs span low to high alignment (as in estimator_accuracy.py).  For
each of several seeds both sketches are built; the error of every pair estimate against the
exact float64 value (unbiased norms) is summarised as median |error| and Spearman.  The
config records the map kinds updatescope's sketches resolved to (``maps``: activation/error).

    python benchmarks/accuracy_vs_reference.py --peer-python PEER/bin/python [--k 8192 --n 300 --seeds 3]
    python benchmarks/accuracy_vs_reference.py --table A.json[+B.json...]   # README table, one row group per record
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
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
from estimator_accuracy import (
    earlier_maps,
    earlier_record,
    make_tasks,
    map_label,
    missing_maps,  # noqa: E402
    record_paths,
)

KEYS = {"fisher": "S_ae", "activation": "S_a", "error": "S_e"}


def summarise(est: dict[str, np.ndarray], exact: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    iu = np.triu_indices(exact["fisher"].shape[0], 1)
    out = {}
    for k in KEYS:
        e, x = est[k][iu], exact[k][iu]
        ok = np.isfinite(e) & np.isfinite(x)
        out[k] = {
            "median_abs_err": float(np.median(np.abs(e[ok] - x[ok]))) if ok.any() else float("nan"),
            "spearman": float(spearmanr(e[ok], x[ok]).statistic) if ok.sum() > 2 else float("nan"),
            "n_undefined": int((~ok).sum()),
        }
    return out


def record_maps(path: Path, rec: dict) -> str:
    """The record's "act/error" maps, with its note (default / earlier default)."""
    cfg = rec["config"]
    if "maps" in cfg:
        maps = cfg["maps"]
    elif earlier_record(path):
        maps = earlier_maps(cfg["d"], cfg["k"])
    else:
        raise missing_maps(path)
    return map_label(maps, cfg["d"], cfg["k"], cfg["m"])


def table(paths: list[Path]) -> str:
    """The README comparison: an updatescope row per record (labelled with its maps), then the
    reference package's row (one per record when their runs of it differ)."""
    stat = "median \\|err\\| / Spearman"
    lines = ["| | " + " | ".join(KEYS) + " |", "|---|" + "---|" * len(KEYS)]
    peers, notes = {}, []
    for path in paths:
        rec = json.loads(path.read_text())
        label, cfg, mean = record_maps(path, rec), rec["config"], rec["metrics"]["mean_over_seeds"]
        row = lambda side: " | ".join(  # noqa: E731
            f"{mean[side][k]['median_abs_err']:.4f} / {mean[side][k]['spearman']:.3f}" for k in KEYS
        )
        lines.append(f"| updatescope, {label}: {stat} | {row('updatescope')} |")
        peers.setdefault(row("fishersketch"), []).append(label)
        notes.append(
            f"- {label}: `{path.as_posix()}`; K = {cfg['k']:,}, d = {cfg['d']}, m = {cfg['m']:,} on both "
            f"sides, n = {cfg['n']} per task, {cfg['n_tasks']} tasks, {cfg['n_pairs']} pairs, mean over "
            f"{cfg['seeds']} seeds."
        )
    for cells, labels in peers.items():
        beside = f", run beside {' and '.join(labels)}" if len(peers) > 1 else ""
        lines.append(f"| fishersketch{beside}: {stat} | {cells} |")
    return "\n".join(lines + [""] + notes)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--peer-python", default=str(HERE / ".venv-peer" / "bin" / "python"))
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "accuracy_vs_reference.json"))
    p.add_argument(
        "--table", metavar="PATHS", help="print the README table of one or more records (paths joined with +) and exit"
    )
    args = p.parse_args()
    if args.table:
        print(table(record_paths(args.table)))
        return 0
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    fam = HeadTaskFamily(act_dim=args.d, out_dim=args.k)
    tasks = [(a, us.error_vectors(z, y)[0]) for _, (a, z, y) in make_tasks(fam, args.n)]
    exact = {k: v.numpy() for k, v in us.exact_alignment_matrix(tasks).items()}
    rows, maps = [], None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tasks.pt"
        torch.save({"tasks": tasks}, path)
        for seed in range(args.seeds):
            sigs = [us.FisherSketch(args.d, args.k, args.m, seed).update(a, e).signature() for a, e in tasks]
            maps = f"{sigs[0].config.act_map}/{sigs[0].config.error_map}"  # as resolved by the library
            ours = {k: v.numpy() for k, v in us.alignment_matrix(sigs).items()}
            run = subprocess.run(
                [
                    args.peer_python,
                    str(HERE / "_peer_accuracy.py"),
                    str(path),
                    str(args.m),
                    str(seed),
                    str(args.threads),
                ],
                capture_output=True,
                text=True,
            )
            if run.returncode != 0:
                print(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "peer failed", file=sys.stderr)
                return 1
            peer_raw = json.loads(run.stdout.strip().splitlines()[-1])
            peer = {k: np.array(peer_raw[v], dtype=float) for k, v in KEYS.items()}
            rows.append({"seed": seed, "updatescope": summarise(ours, exact), "fishersketch": summarise(peer, exact)})
            print(
                f"seed {seed}: "
                + "  ".join(
                    f"{k}: ours {rows[-1]['updatescope'][k]['median_abs_err']:.4f} / ref "
                    f"{rows[-1]['fishersketch'][k]['median_abs_err']:.4f}"
                    for k in KEYS
                ),
                flush=True,
            )
    mean = {
        side: {
            k: {stat: float(np.mean([r[side][k][stat] for r in rows])) for stat in ("median_abs_err", "spearman")}
            for k in KEYS
        }
        for side in ("updatescope", "fishersketch")
    }
    record = {
        "name": "accuracy_vs_reference",
        "config": portable_config(args)
        | {"n_tasks": len(tasks), "n_pairs": len(tasks) * (len(tasks) - 1) // 2, "maps": maps},
        "metrics": {"per_seed": rows, "mean_over_seeds": mean},
        "env": env_info(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json_atomic(record, Path(args.out))
    print(json.dumps(mean, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
