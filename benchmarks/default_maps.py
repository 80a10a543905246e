"""The default maps (stack / spread) against the earlier default (dense / block SRHT) and the
other fast bases: speed, and accuracy on the synthetic family and on real SmolLM2 streams,
read from the records of the scripts that measured them (nothing is measured here).

    python benchmarks/default_maps.py --table benchmarks/results

Sources (all under ``benchmarks/results``):
- ``speed_vs_forward_arms.json`` (every arm in one run, rotated within each repetition; an
  arm it lacks falls back to ``speed_vs_forward{,_dense_srht,_spread,_fold}.json``): ``sketch``
  pipeline tokens/s over the bare forward pass on SmolLM2, median of per-repetition ratios,
  streaming (fingerprint computed once) and with the fingerprint's fixed cost added;
- ``speed_vs_memory_floor_maps.json``: ``update()`` over one cold read of the errors at the
  largest K (2^17), 256 rows;
- ``map_accuracy.json`` (d = 128) and ``map_accuracy_576.json`` (d = 576, SmolLM2's width),
  K = 49,152: median |sketch − exact| per kind over the bases, and its paired difference to
  the earlier default (dense/srht) with its standard error over the bases;
- ``map_accuracy_smollm2.json``: the same on SmolLM2's real streams (45 domain pairs of
  ``reproduce estimator --quick``), fisher Spearman vs exact and median |err|, paired by basis.

Verdicts, per candidate and target: speed "met" when the streaming ratio is ≥ 0.95; read
"met" when update / read ≤ 3 at 2^17; accuracy "no worse" (synthetic: both widths; real
streams) when every paired difference of median |err| (fisher, activation, error) is below
2 SE above 0.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

REFERENCE = "dense/srht"
ARMS = (
    ("stack/spread", "default (stack / spread)", "speed_vs_forward.json", "spread"),
    ("dense/srht", "earlier default (dense / block SRHT)", "speed_vs_forward_dense_srht.json", "srht"),
    ("spread/spread", "spread", "speed_vs_forward_spread.json", "spread"),
    ("fold/fold", "fold", "speed_vs_forward_fold.json", "fold"),
    ("stack/foldspread", "foldspread (stack / foldspread)", "speed_vs_forward_foldspread.json", "foldspread"),
)
KINDS = ("fisher", "activation", "error")
ARMS_FILE = "speed_vs_forward_arms.json"  # every arm in one run (benchmarks/speed_vs_forward.py --arms)


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _speed(results: Path, both: dict | None, choice: str, speed_file: str) -> dict | None:
    """The arm's speed record: from the one-run comparison of every arm when it has it, else
    from the arm's own record (which must be of these maps: a record of ``auto`` before the
    default changed does not count)."""
    if both is not None and choice in both["result"].get("arms", {}):
        return {"result": both["result"]["arms"][choice]}
    sp = _load(results / speed_file)
    if sp is not None and "/".join(sp["result"].get("maps", [])) != choice:
        return None
    return sp


def _choice(rec: dict | None, choice: str) -> dict | None:
    if rec is None:
        return None
    return rec["metrics"]["49152"].get(choice)


def _cell(r: dict, kind: str) -> str:
    cell = f"{r[kind]['median_abs_err_mean']:.4f}"
    if "median_abs_err_diff_mean" in r[kind]:
        cell += f" ({r[kind]['median_abs_err_diff_mean']:+.4f} ± {r[kind]['median_abs_err_diff_se']:.4f})"
    return cell


def _synthetic(rec: dict | None, choice: str) -> str:
    r = _choice(rec, choice)
    return "not run" if r is None else " / ".join(_cell(r, kind) for kind in KINDS)


def _real(rec: dict | None, choice: str) -> str:
    r = _choice(rec, choice)
    if r is None:
        return "not run"
    f = r["fisher"]
    rho = f"{f['spearman_mean']:.3f}"
    if "spearman_diff_mean" in f:
        rho += f" ({f['spearman_diff_mean']:+.3f} ± {f['spearman_diff_se']:.3f})"
    return f"{rho} / " + " / ".join(_cell(r, kind) for kind in KINDS)


def _no_worse(recs: list[dict | None], choice: str) -> bool | None:
    seen = False
    for rec in recs:
        r = _choice(rec, choice)
        if r is None:
            return None
        for kind in KINDS:
            d, se = r[kind].get("median_abs_err_diff_mean"), r[kind].get("median_abs_err_diff_se")
            if d is None or se is None or math.isnan(se):
                return None
            seen = True
            if d > 2 * se:
                return False
    return seen


def _floor_rows(rec: dict | None, emap: str) -> list[dict]:
    return [r for r in (rec or {}).get("rows", []) if r["error_map"] == emap]


def _floor_ratio(rec: dict | None, emap: str) -> str:
    rows = _floor_rows(rec, emap)
    if not rows:
        return "not run"
    top = max(rows, key=lambda r: r["out_dim"])
    fits = rec.get("fits", {})
    fit, read = fits.get(top["error_map_requested"]), fits.get("read")
    parts = ""
    if fit and read and read["slope_ns_per_entry"] > 0:
        fixed = fit["intercept_us"] / top["read_us_per_sample"]
        parts = (
            f"; fixed part {fixed:.1f}×, per entry {fit['slope_ns_per_entry'] / read['slope_ns_per_entry']:.1f}× "
            "the read's"
        )
    return f"{top['update_over_read']:.1f}× ({top['error_map']}{parts})"


def table(results: Path) -> str:
    floor = _load(results / "speed_vs_memory_floor_maps.json")
    acc = [_load(results / "map_accuracy.json"), _load(results / "map_accuracy_576.json")]
    real = _load(results / "map_accuracy_smollm2.json")
    arms = _load(results / ARMS_FILE)
    lines = [
        "| maps (act/error) | sketch / forward, streaming [min–max] | with the fingerprint | update / cold read, K = "
        "2^17 (fit t = t0 + b·K: t0 over the read at 2^17, b over the read's b) "
        "| synthetic K = 49,152, d = 128: median \\|err\\| fisher / activation / error (Δ vs the earlier default ± SE) "
        "| same, d = 576 | SmolLM2 real streams: fisher Spearman (Δ ± SE) / median \\|err\\| fisher / activation / "
        "error (Δ ± SE) |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    word = {True: "met", False: "not met", None: "not measured"}
    yes = {True: "yes", False: "no", None: "not measured"}
    for choice, label, speed_file, floor_key in ARMS:
        sp = _speed(results, arms, choice, speed_file)
        if sp is None:
            speed = with_fp = "not run"
        else:
            r = sp["result"]
            spread = r.get("ratio_all", [r["ratio"]])
            speed = f"{r['ratio']:.3f} [{min(spread):.3f}–{max(spread):.3f}]"
            with_fp = f"{r['ratio_with_fingerprint']:.3f}" if "ratio_with_fingerprint" in r else "not recorded"
        lines.append(
            f"| {label}: {choice} | {speed} | {with_fp} | {_floor_ratio(floor, floor_key)} | "
            f"{_synthetic(acc[0], choice)} | {_synthetic(acc[1], choice)} | {_real(real, choice)} |"
        )
        if choice == REFERENCE:
            continue
        fast = None if sp is None else sp["result"]["ratio"] >= 0.95
        rows = _floor_rows(floor, floor_key)
        cheap = None if not rows else max(rows, key=lambda x: x["out_dim"])["update_over_read"] <= 3
        verdicts.append(
            f"- {label} against the earlier default: ≥ 0.95× the forward pass (streaming) {word[fast]}; "
            f"≤ 3× one cold read at 2^17 {word[cheap]}; accuracy no worse (every paired Δ median |err| "
            f"< 2 SE above 0): synthetic {yes[_no_worse(acc, choice)]}, SmolLM2 real streams "
            f"{yes[_no_worse([real], choice)]}."
        )
    return "\n".join(lines + [""] + verdicts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True, help="the benchmarks/results folder to read")
    args = p.parse_args(argv)
    print(table(Path(args.table)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
