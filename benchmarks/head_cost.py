"""The sketch's cost against what the output head computes anyway, per token, float32 CPU.

    python benchmarks/head_cost.py [--threads 1] [--n 256 --reps 9] [--grid-reps 9]
    python benchmarks/head_cost.py --table benchmarks/results/head_cost.json   # README table

Part 1, head shapes (random head weight, one head in memory at a time): the head's own work,
``logits = a @ W.T`` then ``softmax(logits)`` (what a forward plus any loss computes), against
``FisherSketch.update_logits(acts, logits, labels)`` (softmax − onehot, both random maps, the
float64 sums) with the default maps (``auto``: stack / spread since the stack map; dense / block
SRHT before, in ``results/head_cost_dense_srht.json``) and with ``act_map="fold", error_map="fold"``,
m = 4096.  Same batch for every arm, the sketch reads the logits the head just wrote, arms
alternated within each repetition after a warm-up; the ratio is the median over repetitions
of the per-repetition ratio sketch / head.  The head writes into preallocated buffers
(``mm(out=)``, ``_softmax.out``), so it pays no page faults for fresh 100 MB outputs: the
head is as cheap as it can be, which makes the ratio an upper bound.  ``update_logits``
computes its own softmax; the head's softmax time is recorded apart so it can be subtracted
where a loss's softmax is shared.

Part 2, growth: per-token ``update_logits`` time on a grid of (K, d, m) for both map
families, on random logits, configs of one (K, d) cell alternated within each repetition
(six configs: the sketch's basis cache holds eight), in two passes over the cells (in order,
then reversed) so that a drifting load does not line up with K or d.  Each family is fitted by least squares
as t = c0 + c_K·K + c_m·m + c_f·W, with W the multiply-adds per token of the two maps'
GEMMs, counted from the map objects (dense: 2·d·2m; block SRHT: per factor 2·s·B·A +
2·s·A·(A1 + A2), s = m/A, A ≈ √dim; fold: per factor 2·dim for the fold + 2·F·(P + Q) for
H_P ⊗ H_Q; stack: per factor G·R·N2·(N2 + N1); spread, wide: s·B·A + s·A·(A1 + A2) per factor):
c_K is the per-vocabulary-entry work (softmax, signs, layout passes), c_m the per-feature
work (products, the six (2, r) @ (r, m) sums), c_f the inverse GEMM throughput.  The fit's
coefficients (constrained ≥ 0), R², and its predictions at the part 1 shapes (outside the grid) are recorded.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from updatescope.records import make_record, portable_command, portable_config, write_json_atomic
from updatescope.sketch.fishersketch import FisherSketch, sketch_basis
from updatescope.sketch.hadamard import radix_digits
from updatescope.sketch.maps import _STACK_DENSE_DIM

HERE = Path(__file__).resolve().parent
SHAPES = {"SmolLM2-135M": (576, 49152), "Qwen2-0.5B": (896, 151936), "Llama-3-8B": (4096, 128256)}
FAMILIES = {"auto": ("auto", "auto"), "fold": ("fold", "fold")}


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "all": xs}


def _map_madds(mp) -> float:
    """Multiply-adds per token of one map's GEMMs (both factors u and v); ``fwht`` over n
    costs n·Σ(its radix factors) per transform."""
    fw = lambda n: n * sum(radix_digits(n))  # noqa: E731
    if mp.kind == "dense":
        return 2.0 * mp.dim * 2 * mp.m
    if mp.kind == "srht":  # H_Bp[S] stage, then H_A = H_A1 ⊗ H_A2
        return 2 * (2.0 * mp.s * mp.b * mp.a + 2.0 * mp.s * mp.a * (mp.h_a1.shape[0] + mp.h_a2.shape[0]))
    if mp.kind == "fold" and mp.c > 1:  # the fold (2 rows), then H_F on both folded vectors
        return 2.0 * mp.dim + 2.0 * fw(mp.f)
    if mp.kind == "fold":
        return 2 * (2.0 * mp.dim + 2.0 * mp.pu * mp.q * (mp.q + mp.p))
    if mp.kind == "stack" and mp.dim <= _STACK_DENSE_DIM:  # its explicit (dim, 2m) matrix
        return 2.0 * mp.dim * mp.m
    if mp.kind == "stack":  # G blocks per factor: H_N2 on the R used rows, then H_N1
        return 2.0 * mp.g * mp.r * mp.n2 * (mp.n2 + mp.n1)
    if mp.kind == "spread" and mp.wide:  # one (2s, B) @ (B, A) stage for both factors, then H_A1 ⊗ H_A2
        return 2.0 * mp.s * mp.b * mp.a + 2.0 * mp.s * mp.a * (mp.a1 + mp.a2)
    if mp.kind == "spread":  # H_Q on the R runs, H_P restricted to them
        return 2.0 * mp.runs * mp.q * (mp.q + mp.p)
    if mp.kind == "foldspread":  # the fold (2 rows) when there is one, then the spread map on W
        return (2.0 * mp.dim if mp.c > 1 else 0.0) + _map_madds(mp.inner)
    raise ValueError(f"no work count for map kind {mp.kind!r}")


def _work(sk: FisherSketch) -> dict:
    amap, emap = sketch_basis(sk.config, sk.device)
    return {
        "act_map": amap.kind,
        "error_map": emap.kind,
        "act_madds": _map_madds(amap),
        "error_madds": _map_madds(emap),
    }


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def head_shapes(args, g: torch.Generator) -> dict:
    out = {}
    n = args.n
    for name, (d, k) in SHAPES.items():
        w = torch.randn(k, d, generator=g).div_(d**0.5)  # logits ~ N(0, 1) for unit acts
        a = torch.randn(n, d, generator=g)
        y = torch.randint(0, k, (n,), generator=g)
        z = torch.empty(n, k)
        p = torch.empty(n, k)
        sks = {fam: FisherSketch(d, k, args.m, act_map=am, error_map=em) for fam, (am, em) in FAMILIES.items()}
        mm = lambda: torch.mm(a, w.t(), out=z)  # noqa: E731
        sm = lambda: torch.ops.aten._softmax.out(z, -1, False, out=p)  # noqa: E731
        for _ in range(args.warmup):
            mm(), sm()
            for sk in sks.values():
                sk.update_logits(a, z, y)
        t_mm, t_sm, t_sk = [], [], {fam: [] for fam in sks}
        for r in range(args.reps):
            t_mm.append(_timed(mm) / n * 1e6)
            t_sm.append(_timed(sm) / n * 1e6)
            fams = list(sks) if r % 2 == 0 else list(sks)[::-1]  # alternate which sketch follows the head
            for fam in fams:
                t_sk[fam].append(_timed(lambda: sks[fam].update_logits(a, z, y)) / n * 1e6)
        head = [x + s for x, s in zip(t_mm, t_sm)]
        res = {
            "d": d,
            "K": k,
            "n": n,
            "head_matmul_us": _spread(t_mm),
            "head_softmax_us": _spread(t_sm),
            "head_us": _spread(head),
            "head_gflops": 2.0 * d * k / statistics.median(t_mm) / 1e3,
            "sketch": {},
        }
        for fam, ts in t_sk.items():
            res["sketch"][fam] = {
                "us": _spread(ts),
                **_work(sks[fam]),
                "ratio_to_head": _spread([s / h for s, h in zip(ts, head)]),
                "ratio_to_matmul": _spread([s / h for s, h in zip(ts, t_mm)]),
            }
        res["loadavg"] = os.getloadavg()
        out[name] = res
        print(
            f"{name} (d={d}, K={k}): head {res['head_us']['median']:.0f} us/token "
            f"(matmul {res['head_matmul_us']['median']:.0f}, softmax {res['head_softmax_us']['median']:.0f}); "
            + "; ".join(
                f"{fam} sketch {r['us']['median']:.0f} us = {r['ratio_to_head']['median']:.3f} "
                f"of the head [{r['ratio_to_head']['min']:.3f}-{r['ratio_to_head']['max']:.3f}]"
                for fam, r in res["sketch"].items()
            ),
            flush=True,
        )
        del w, a, y, z, p, sks, mm, sm
        gc.collect()
    return out


def grid(args, g: torch.Generator) -> list[dict]:
    """Two passes over the (K, d) cells, in order then reversed, half the repetitions each, so
    that a load that drifts during the run does not line up with K or d."""
    n = args.n
    cells = list(itertools.product(args.grid_k, args.grid_d))
    cfgs = [(fam, m) for fam in FAMILIES for m in args.grid_m]
    ts = {(k, d, c): [] for k, d in cells for c in cfgs}
    work, load = {}, {}
    for order, reps in ((cells, (args.grid_reps + 1) // 2), (cells[::-1], args.grid_reps // 2)):
        for k, d in order:
            z = torch.randn(n, k, generator=g)
            y = torch.randint(0, k, (n,), generator=g)
            a = torch.randn(n, d, generator=g)
            sks = {c: FisherSketch(d, k, c[1], act_map=FAMILIES[c[0]][0], error_map=FAMILIES[c[0]][1]) for c in cfgs}
            for sk in sks.values():  # warm-up: basis built, workspace grown
                sk.update_logits(a, z, y)
            for r in range(reps):
                for c in cfgs[r % len(cfgs) :] + cfgs[: r % len(cfgs)]:  # rotate: no config always first
                    ts[(k, d, c)].append(_timed(lambda: sks[c].update_logits(a, z, y)) / n * 1e6)
            for c, sk in sks.items():
                work[(k, d, c)] = _work(sk)
            load.setdefault((k, d), []).append(os.getloadavg()[0])
            print(
                f"K={k} d={d}: "
                + ", ".join(f"{fam}/m={m} {statistics.median(ts[(k, d, (fam, m))]):.0f}" for fam, m in cfgs)
                + " us/token",
                flush=True,
            )
            del sks, z, y, a
            gc.collect()
    return [
        {
            "family": c[0],
            "K": k,
            "d": d,
            "m": c[1],
            "us": _spread(ts[(k, d, c)]),
            **work[(k, d, c)],
            "loadavg_1min": load[(k, d)],
        }
        for (k, d, c) in ts
    ]


def _design(row: dict) -> list[float]:
    return [1.0, float(row["K"]), float(row["m"]), row["act_madds"] + row["error_madds"]]


TERMS = ["c0_us", "c_K_ns_per_entry", "c_m_ns_per_feature", "c_f_ns_per_madd"]
SCALE = [1.0, 1e3, 1e3, 1e3]  # fitted in µs per unit; recorded in the units the names say


def _nnls(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Least squares with every coefficient ≥ 0 (a cost cannot be negative): the best
    unconstrained solution over the subsets of columns whose solution is non-negative
    (exact for the four columns here: 16 subsets)."""
    col = x.abs().amax(0)  # column scaling for a well-conditioned solve
    best, best_err = torch.zeros(x.shape[1], dtype=x.dtype), float(t.square().sum())
    for mask in range(1, 1 << x.shape[1]):
        keep = [j for j in range(x.shape[1]) if mask >> j & 1]
        sol = torch.linalg.lstsq(x[:, keep] / col[keep], t.unsqueeze(1)).solution.squeeze(1) / col[keep]
        if (sol < 0).any():
            continue
        c = torch.zeros(x.shape[1], dtype=x.dtype)
        c[keep] = sol
        err = float((t - x @ c).square().sum())
        if err < best_err:
            best, best_err = c, err
    return best


def fit(rows: list[dict], stat: str = "median") -> dict:
    out = {}
    for fam in FAMILIES:
        rs = [r for r in rows if r["family"] == fam]
        x = torch.tensor([_design(r) for r in rs], dtype=torch.float64)
        t = torch.tensor([r["us"][stat] for r in rs], dtype=torch.float64)
        c = _nnls(x, t)
        pred = x @ c
        r2 = 1 - float(((t - pred) ** 2).sum() / ((t - t.mean()) ** 2).sum())
        out[fam] = {
            "coef": {name: float(v) * s for name, v, s in zip(TERMS, c, SCALE)},
            "r2": r2,
            "points": len(rs),
            "max_rel_residual": float(((t - pred) / t).abs().max()),
            "coef_us_per_unit": c.tolist(),
        }
    return out


def predict(model: dict, row: dict) -> float:
    return float(sum(ci * xi for ci, xi in zip(model["coef_us_per_unit"], _design(row))))


def table(rec: dict) -> list[str]:
    """The README table, rendered from a head_cost record."""
    m = rec["metrics"]
    first = next(iter(m["heads"].values()))["sketch"]
    fams = list(first)
    head = ["head (d, K)", "head: matmul + softmax, µs/token"]
    for fam in fams:
        maps = f"{first[fam]['act_map']}/{first[fam]['error_map']}"
        head += [f"sketch {fam} ({maps}), µs/token", f"{fam} / head [min–max]", f"{fam} / matmul"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in m["heads"].items():
        cells = [
            f"{name} ({r['d']}, {r['K']:,})",
            f"{r['head_us']['median']:,.0f} ({r['head_matmul_us']['median']:,.0f} + "
            f"{r['head_softmax_us']['median']:,.0f})",
        ]
        for fam in fams:
            s = r["sketch"][fam]
            q = s["ratio_to_head"]
            cells += [
                f"{s['us']['median']:,.0f}",
                f"**{q['median']:.3f}** [{q['min']:.3f}–{q['max']:.3f}]",
                f"{s['ratio_to_matmul']['median']:.3f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| maps | c0, µs | per vocabulary entry, ns | per feature, ns | per GEMM multiply-add, ns | R² "
        "(points) | max \\|residual\\| | fit / measured at the three heads |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for fam, f in m["fit"].items():
        c = f["coef"]
        chk = ", ".join(f"{p['predicted_us'] / p['measured_us']:.2f}" for p in m["fit_check"][fam].values())
        lines.append(
            f"| {fam} | {c['c0_us']:.1f} | {c['c_K_ns_per_entry']:.3f} | {c['c_m_ns_per_feature']:.2f} | "
            f"{c['c_f_ns_per_madd']:.4f} | {f['r2']:.3f} ({f['points']}) | {100 * f['max_rel_residual']:.0f}% | "
            f"{chk} |"
        )
    lines.append("")
    for fam in fams:
        cells = []
        for name, r in m["heads"].items():
            q = r["sketch"][fam]["ratio_to_matmul"]["median"]
            cells.append(f"{name} {'met' if q <= 0.10 else 'not met'} ({100 * q:.1f} %)")
        lines.append(
            f"- {fam} maps ({first[fam]['act_map']}/{first[fam]['error_map']}), sketch ≤ 10 % of the head "
            f"matmul: " + "; ".join(cells) + "."
        )
    return lines


def draw(rec: dict, path: Path) -> None:
    from updatescope.report.figures import pyplot

    plt = pyplot()
    m = rec["metrics"]
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.4))
    names = list(m["heads"])
    xs = range(len(names))
    w = 0.27
    mm = [m["heads"][nm]["head_matmul_us"]["median"] for nm in names]
    sm = [m["heads"][nm]["head_softmax_us"]["median"] for nm in names]
    ax[0].bar([x - w for x in xs], mm, w, label="head matmul", color="0.45")
    ax[0].bar([x - w for x in xs], sm, w, bottom=mm, label="head softmax", color="0.75")
    for j, (fam, col) in enumerate(zip(FAMILIES, ("tab:blue", "tab:orange"))):
        ys = [m["heads"][nm]["sketch"][fam]["us"]["median"] for nm in names]
        ax[0].bar([x + j * w for x in xs], ys, w, label=f"sketch ({fam} maps)", color=col)
        for x, nm, yv in zip(xs, names, ys):
            ax[0].text(
                x + j * w,
                yv,
                f"{m['heads'][nm]['sketch'][fam]['ratio_to_head']['median']:.2f}",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax[0].set_yscale("log")
    ax[0].set_xticks(
        list(xs), [f"{nm}\n(d={m['heads'][nm]['d']}, K={m['heads'][nm]['K']})" for nm in names], fontsize=8
    )
    ax[0].set_ylabel("µs per token (median)")
    ax[0].set_title("head vs sketch (label: sketch / head)")
    ax[0].legend(fontsize=8)
    for fam, col in zip(FAMILIES, ("tab:blue", "tab:orange")):
        rs = [r for r in m["grid"] if r["family"] == fam]
        meas = [r["us"]["median"] for r in rs]
        ax[1].scatter(
            [predict(m["fit"][fam], r) for r in rs], meas, s=14, color=col, label=f"{fam}: R² {m['fit'][fam]['r2']:.3f}"
        )
        chk = m["fit_check"][fam]
        ax[1].scatter(
            [p["predicted_us"] for p in chk.values()],
            [p["measured_us"] for p in chk.values()],
            marker="x",
            s=40,
            color=col,
        )
    lo, hi = ax[1].get_xlim()
    ax[1].plot([lo, hi], [lo, hi], color="0.5", lw=0.8)
    ax[1].set_xlabel("fit: c0 + c_K·K + c_m·m + c_f·(map multiply-adds), µs")
    ax[1].set_ylabel("measured µs per token (median)")
    ax[1].set_title("sketch cost model on the grid (x: head shapes, not fitted)")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--table", help="print the README table of a head_cost record and exit")
    p.add_argument("--n", type=int, default=256, help="tokens per batch")
    p.add_argument("--m", type=int, default=4096, help="sketch_dim for the head shapes")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--grid-reps", type=int, default=9)
    p.add_argument("--grid-k", type=int, nargs="+", default=[8192, 32768, 131072])
    p.add_argument("--grid-d", type=int, nargs="+", default=[576, 2048, 4096])
    p.add_argument("--grid-m", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "head_cost.json"))
    args = p.parse_args(argv)
    if args.table:
        print("\n".join(table(json.loads(Path(args.table).read_text()))))
        return 0
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    heads = head_shapes(args, g)
    rows = grid(args, g)
    fits = fit(rows)
    fits_min = fit(rows, "min")  # the fastest repetition: least disturbed by other jobs on a shared machine
    check = {fam: {} for fam in FAMILIES}
    for name, r in heads.items():
        for fam in FAMILIES:
            s = r["sketch"][fam]
            row = {"K": r["K"], "d": r["d"], "m": args.m, **{k: s[k] for k in ("act_madds", "error_madds")}}
            check[fam][name] = {"predicted_us": predict(fits[fam], row), "measured_us": s["us"]["median"]}
    metrics = {
        "heads": heads,
        "grid": rows,
        "fit": fits,
        "fit_on_min": fits_min,
        "fit_check": check,
        "fit_terms": "t_us = c0 + c_K·K + c_m·m + c_f·(act_madds + error_madds), per token",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    config = {**portable_config(args), "command": portable_command("benchmarks/head_cost.py", argv)}
    config.pop("table")
    rec = make_record("head_cost", config, metrics, time.perf_counter() - t0)
    out = Path(args.out)
    write_json_atomic(rec, out)
    draw(rec, out.with_suffix(".png"))
    print("\n".join(table(rec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
