"""The reading of the estimator-accuracy benchmark records for docs/accuracy.md: every figure
read from the records and every claim decided by the rule written in its sentence.

    python docs/accuracy_reading.py --table CURRENT.json+EARLIER.json

with the ``estimator_accuracy`` or the ``accuracy_vs_reference`` records of
``benchmarks/results/`` (the exact command of each block is in its marker in docs/accuracy.md).

The first record of ``estimator_accuracy`` is read against the second (the current default
maps against the earlier default); ``accuracy_vs_reference`` records are each read against
the reference package's run beside them.  tests/test_benchmark_docs.py checks the blocks."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

KINDS = ("fisher", "activation", "error")
#: a Spearman difference below this is "about equal" (the table prints three decimals)
EQUAL_RHO = 0.005
#: |Spearman| below this is "near 0": the estimate does not rank the pairs
NEAR_ZERO = 0.25
#: a log-log slope of the median error against m within this of -1/2 is "about 1/√m"
SLOPE_TOL = 0.15


def _name(path: str | Path) -> str:
    return f"`{Path(path).name}`"


def _k(key: str) -> str:
    return f"K = {int(key.split('=')[1]):,}"


def _slope(by_dim: dict, kind: str) -> float:
    """Least-squares slope of log(median |err|) against log(m) over the record's sketch sizes."""
    pts = [(math.log(int(m)), math.log(v[kind]["median_abs_err_mean"])) for m, v in by_dim.items()]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def estimator_lines(recs: list[dict], paths: list[str]) -> list[str]:
    """The current record (first) at sketch_dim 4096, the error's fall with m, the coupling's
    ranking, and the current record against the earlier default's (second) at the largest K."""
    cur = recs[0]["metrics"]
    out = []
    for key, block in cur.items():
        at = block["by_dim"]["4096"]
        rho = min(at[k]["spearman_min"] for k in KINDS)
        err = max(at[k]["median_abs_err_mean"] for k in KINDS)
        slopes = {k: _slope(block["by_dim"], k) for k in KINDS}
        about = [k for k, s in slopes.items() if abs(s + 0.5) <= SLOPE_TOL]
        c = at["coupling"]
        near = abs(c["spearman_mean"]) < NEAR_ZERO
        lo, hi = block["exact_range"]["fisher"]
        out.append(
            f"- {_k(key)} (exact fisher alignment over the {block['n_pairs']} pairs {lo:.2f} to {hi:.2f}), "
            f"sketch_dim 4096 ({_name(paths[0])}): fisher, activation and error rank the pairs with "
            f"Spearman ≥ {rho:.3f} (worst basis) and a median |err| ≤ {err:.3f} (mean over bases). The median "
            "error's log-log slope against m: "
            + ", ".join(f"{k} {s:+.2f}" for k, s in slopes.items())
            + f" (about 1/√m, rule: within {SLOPE_TOL} of −0.5: "
            + (", ".join(about) if about else "none")
            + f"). The coupling ρ: median |err| {c['median_abs_err_mean']:.3f}, Spearman {c['spearman_mean']:+.2f}, "
            + (
                f"near 0 (rule: |ρ_s| < {NEAR_ZERO}): it does not rank the pairs here"
                if near
                else f"not near 0 (rule: |ρ_s| ≥ {NEAR_ZERO})"
            )
            + "."
        )
    if len(recs) > 1:
        old = recs[1]["metrics"]
        key = max(cur, key=lambda s: int(s.split("=")[1]))
        a, b = cur[key]["by_dim"], old[key]["by_dim"]
        dims = [m for m in a if m in b]
        larger = [m for m in dims if a[m]["fisher"]["median_abs_err_mean"] > b[m]["fisher"]["median_abs_err_mean"]]
        diff = {m: a[m]["fisher"]["spearman_mean"] - b[m]["fisher"]["spearman_mean"] for m in dims}
        lower = [m for m in dims if diff[m] <= -EQUAL_RHO]
        higher = [m for m in dims if diff[m] >= EQUAL_RHO]
        equal = [m for m in dims if abs(diff[m]) < EQUAL_RHO]

        def _dims(ms: list[str]) -> str:
            return ", ".join(f"{int(m):,}" for m in ms) or "none"

        out.append(
            f"- {_k(key)}, {_name(paths[0])} against {_name(paths[1])}: fisher median |err| larger at "
            f"{len(larger)} of {len(dims)} sketch sizes ({_dims(larger)}); fisher Spearman lower at {_dims(lower)}, "
            f"higher at {_dims(higher)}, about equal (rule: |Δ| < {EQUAL_RHO}) at {_dims(equal)}."
        )
    return out


def reference_lines(recs: list[dict], paths: list[str]) -> list[str]:
    """Each record's median |err| against the reference package's in the same run, per alignment."""
    out = []
    for rec, path in zip(recs, paths):
        mean = rec["metrics"]["mean_over_seeds"]
        ours, peer = mean["updatescope"], mean["fishersketch"]
        smaller = [k for k in KINDS if ours[k]["median_abs_err"] < peer[k]["median_abs_err"]]
        out.append(
            f"- {_name(path)}: updatescope's median |err| is smaller than the reference package's on "
            f"{len(smaller)} of {len(KINDS)} alignments ({', '.join(smaller) or 'none'}; rule: mean over seeds, "
            "strictly smaller)."
        )
    return out


def lines(paths: list[str]) -> list[str]:
    recs = [json.loads(Path(p).read_text()) for p in paths]
    if "mean_over_seeds" in recs[0]["metrics"]:
        return reference_lines(recs, paths)
    return estimator_lines(recs, paths)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--table":
        print("usage: python docs/accuracy_reading.py --table JSON[+JSON]", file=sys.stderr)
        return 2
    paths = argv[1].split("+")
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        print(f"accuracy_reading: no such record: {missing[0]}", file=sys.stderr)
        return 2
    print("\n".join(lines(paths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
