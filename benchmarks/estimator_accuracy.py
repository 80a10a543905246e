"""Estimator accuracy: FisherSketch vs the exact float64 Gram reference.

Tasks come from the synthetic head-task family (``updatescope.models.head_tasks``), mixed
between anchor tasks so that the pairs span low to high true alignment.  For every pair
we compare the sketch's fisher / activation / error (and coupling) with the exact values
(unbiased norms, same samples), and report Spearman and median |sketch − exact|, at
sketch_dim 4096 and along a sketch_dim curve.  Each sketch_dim's entry records the map kinds
the sketches resolved to (``maps``: activation/error).

    python benchmarks/estimator_accuracy.py [--quick] [--out benchmarks/results/estimator_accuracy.json]
    python benchmarks/estimator_accuracy.py --table A.json[+B.json...]   # README table, one row group per record

The ``--table`` helpers here (map labels, ``+``-joined record paths) are shared with
accuracy_vs_reference.py and speed_vs_reference.py.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

import updatescope as us
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.records import env_info, write_json_atomic

KINDS = ("fisher", "activation", "error", "coupling")
ACT_DIM = 128  # d of both families below (records made before they stored it)
EARLIER_DENSE_MAX = 1024  # the earlier default: dense up to 1,024 inputs per side, block SRHT beyond
EARLIER_SUFFIX = "_dense_srht"  # records measured with the earlier default, before records named their maps
TABLE_DIMS = (256, 1024, 4096, 8192)  # sketch_dims shown in the README table (all are in the record)
BOLD_DIM = 4096


# ------------------------------------------------------------------ map labels (--table modes)
def resolved_maps(d: int, k: int, m: int, act_map: str = "auto", error_map: str = "auto") -> str:
    """ "act/error": the map kinds the library resolves these requests to (``auto`` by width and m)."""
    cfg = us.SketchConfig(d, k, m, act_map=act_map, error_map=error_map)
    return f"{cfg.act_map}/{cfg.error_map}"


def earlier_maps(d: int, k: int) -> str:
    """ "act/error" of the earlier default: dense up to 1,024 inputs, block SRHT ("srht") beyond."""
    return "/".join("dense" if n <= EARLIER_DENSE_MAX else "srht" for n in (d, k))


def maps_note(maps: str, d: int, k: int, m: int) -> str:
    """ "default" when ``maps`` is what ``auto`` resolves to now, "earlier default" when it is
    what it resolved to before the stack map, else ""."""
    if maps == resolved_maps(d, k, m):
        return "default"
    return "earlier default" if maps == earlier_maps(d, k) else ""


def map_label(maps: str, d: int, k: int, m: int) -> str:
    note = maps_note(maps, d, k, m)
    return f"{maps} ({note})" if note else maps


def group_label(labelled: list[tuple[str, str]]) -> str:
    """One label for a record from its rows' (maps, note): the distinct maps, then the note
    when every row shares it."""
    maps = list(dict.fromkeys(m for m, _ in labelled))
    notes = {n for _, n in labelled}
    note = notes.pop() if len(notes) == 1 else ""
    return ", ".join(maps) + (f" ({note})" if note else "")


def record_paths(spec: str) -> list[Path]:
    """``A.json+B.json`` -> [A.json, B.json]."""
    paths = [Path(p) for p in spec.split("+") if p]
    if not paths:
        raise SystemExit("--table needs one or more record paths joined with +")
    return paths


def earlier_record(path: Path) -> bool:
    """A record of the earlier default maps kept beside the new ones (named *_dense_srht.json);
    only these may omit their maps, which are then derived from the earlier default's rule."""
    return path.stem.endswith(EARLIER_SUFFIX)


def missing_maps(path: Path) -> SystemExit:
    return SystemExit(
        f"{path}: the record does not say which maps it used (only *{EARLIER_SUFFIX}.json "
        "records of the earlier default may omit them)"
    )


def fmt_rho(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}".replace("-", "−")


def table(paths: list[Path]) -> str:
    """The README accuracy table: one row group per record, each row labelled with its maps."""
    lines = [
        "| K | maps | n / task | sketch_dim | fisher ρ_s / median \\|err\\| | activation | error | coupling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for path in paths:
        rec = json.loads(path.read_text())
        labelled, ranges = [], []
        for name, fam in rec["metrics"].items():
            k, d = int(name.split("=")[1]), int(fam.get("act_dim", ACT_DIM))
            for m in (m for m in TABLE_DIMS if str(m) in fam["by_dim"]):
                res = fam["by_dim"][str(m)]
                if "maps" in res:
                    maps = res["maps"]
                elif earlier_record(path) and "error_map" in fam:
                    maps = f"{earlier_maps(d, k).split('/')[0]}/{fam['error_map']}"
                else:
                    raise missing_maps(path)
                labelled.append((maps, maps_note(maps, d, k, m)))
                cells = [
                    f"{res[kind]['spearman_mean']:.3f} / {res[kind]['median_abs_err_mean']:.3f}" for kind in KINDS[:3]
                ]
                cells.append(
                    f"{fmt_rho(res['coupling']['spearman_mean'], 2)} / {res['coupling']['median_abs_err_mean']:.3f}"
                )
                dim = f"{m:,}"
                if m == BOLD_DIM:
                    dim, cells[0] = f"**{dim}**", f"**{cells[0]}**"
                lines.append(
                    f"| {k:,} | {map_label(maps, d, k, m)} | {fam['n_per_task']:,} | {dim} | "
                    + " | ".join(cells)
                    + " |"
                )
            lo, hi = fam["exact_range"]["coupling"]
            ranges.append(f"{lo:.2f}–{hi:.2f} at K = {k:,}")
        pairs = {fam["n_pairs"] for fam in rec["metrics"].values()}
        notes.append(
            f"- {group_label(labelled)}: `{path.as_posix()}`, mean over {rec['config']['seeds']} random "
            f"bases; exact coupling ρ across the {'/'.join(map(str, sorted(pairs)))} pairs: " + ", ".join(ranges) + "."
        )
    return "\n".join(lines + [""] + notes)


def make_tasks(fam: HeadTaskFamily, n: int) -> list[tuple[str, tuple]]:
    """12 tasks: target-like anchor (0,0) mixed towards (1,1), (0,1) and (2,2) at 4 weights."""
    tasks = []
    for k, (to, mixes) in enumerate(
        (((1, 1), (0.0, 0.3, 0.6, 1.0)), ((0, 1), (0.15, 0.45, 0.75, 1.0)), ((2, 2), (0.1, 0.4, 0.7, 1.0)))
    ):
        for j, w in enumerate(mixes):
            tasks.append((f"mix{to}-{w}", fam.sample(0, 0, n, seed=100 * k + j, mix_to=to, mix=w)))
    return tasks


def pairs_of(t: int, max_pairs: int) -> list[tuple[int, int]]:
    allp = [(i, j) for i in range(t) for j in range(i + 1, t)]
    return allp[:max_pairs]


def evaluate(
    fam: HeadTaskFamily, n: int, dims: list[int], seeds: int, max_pairs: int, error_map: str, act_map: str = "auto"
) -> dict:
    tasks = make_tasks(fam, n)
    streams = [(a, us.error_vectors(z, y)[0]) for _, (a, z, y) in tasks]
    t0 = time.perf_counter()
    exact = us.exact_alignment_matrix(streams)
    t_exact = time.perf_counter() - t0
    pairs = pairs_of(len(tasks), max_pairs)
    truth = {k: np.array([float(exact[k][i, j]) for i, j in pairs]) for k in KINDS}
    out = {
        "n_per_task": n,
        "n_tasks": len(tasks),
        "n_pairs": len(pairs),
        "exact_seconds": round(t_exact, 2),
        "exact_range": {k: [float(np.nanmin(v)), float(np.nanmax(v))] for k, v in truth.items()},
        "by_dim": {},
    }
    for m in dims:
        rows = []
        t_sk = 0.0
        for seed in range(seeds):
            t1 = time.perf_counter()
            sigs = [
                us.FisherSketch(fam.act_dim, fam.out_dim, m, seed, error_map=error_map, act_map=act_map)
                .update_logits(*task)
                .signature()
                for _, task in tasks
            ]
            t_sk += time.perf_counter() - t1
            est = us.alignment_matrix(sigs)
            rows.append({k: np.array([float(est[k][i, j]) for i, j in pairs]) for k in KINDS})
        res = {"maps": f"{sigs[0].config.act_map}/{sigs[0].config.error_map}"}  # as resolved by the library
        for k in KINDS:
            sp = [spearmanr(r[k], truth[k]).statistic for r in rows]
            err = [np.nanmedian(np.abs(r[k] - truth[k])) for r in rows]
            res[k] = {
                "spearman_mean": float(np.mean(sp)),
                "spearman_min": float(np.min(sp)),
                "median_abs_err_mean": float(np.mean(err)),
                "median_abs_err_max": float(np.max(err)),
            }
        res["sketch_seconds_per_seed"] = round(t_sk / seeds, 2)
        out["by_dim"][str(m)] = res
        print(
            f"  K={fam.out_dim:>6} m={m:>5}: "
            + "  ".join(
                f"{k} ρs={res[k]['spearman_mean']:.3f} |err|={res[k]['median_abs_err_mean']:.3f}" for k in KINDS
            ),
            flush=True,
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer seeds and dims, smaller n")
    p.add_argument("--out", default="benchmarks/results/estimator_accuracy.json")
    p.add_argument(
        "--table", metavar="PATHS", help="print the README table of one or more records (paths joined with +) and exit"
    )
    args = p.parse_args()
    if args.table:
        print(table(record_paths(args.table)))
        return
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    seeds = 1 if args.quick else 3
    dims = [256, 1024, 4096] if args.quick else [256, 512, 1024, 2048, 4096, 8192]
    configs = [
        ("K=1000", HeadTaskFamily(act_dim=128, out_dim=1000), 1000 if not args.quick else 600, "auto"),
        ("K=49152", HeadTaskFamily(act_dim=128, out_dim=49152), 500 if not args.quick else 300, "auto"),
    ]
    results = {}
    for name, fam, n, emap in configs:
        print(f"{name}: d={fam.act_dim}, n={n} per task", flush=True)
        results[name] = evaluate(fam, n, dims, seeds, max_pairs=66, error_map=emap)
        results[name]["act_dim"] = fam.act_dim
    record = {
        "name": "estimator_accuracy",
        "config": {
            "quick": args.quick,
            "seeds": seeds,
            "dims": dims,
            "family": "HeadTaskFamily (synthetic, Zipf label blocks, shared random head)",
        },
        "metrics": results,
        "env": env_info(),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json_atomic(record, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
