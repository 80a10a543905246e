"""The faster bases (spread, fold) against the default maps (dense / block SRHT): speed, and
accuracy on the synthetic family and on real SmolLM2 streams, read from the records of the
scripts that measured them (nothing is measured here).

    python benchmarks/default_maps.py --table benchmarks/results

Sources (all under ``benchmarks/results`` unless noted):
- ``speed_vs_forward{,_spread,_fold}.json``: ``sketch`` pipeline tokens/s over the bare forward
  pass on SmolLM2, median of per-repetition ratios, streaming (fingerprint computed once) and
  with the fingerprint's fixed cost added;
- ``speed_vs_memory_floor_maps.json``: ``update()`` over one cold read of the errors at the
  largest K (2^17), 256 rows;
- ``map_accuracy.json`` (d = 128) and ``map_accuracy_576.json`` (d = 576, SmolLM2's width),
  K = 49,152: median |sketch − exact| per kind over 12 bases, and its paired difference to
  the default (dense/srht) with its standard error over the bases;
- ``docs/results/estimator_quick{,_spread,_fold}.json``: SmolLM2 A_F on 45 real domain pairs,
  3 bases each: Spearman vs exact (mean [min–max] over bases) and mean |err|.

Verdicts, per candidate and target: speed "met" when the streaming ratio is ≥ 0.95; read
"met" when update / read ≤ 3 at 2^17; synthetic accuracy "no worse" when every paired
difference of median |err| (fisher, activation, error; both widths) is below 2 SE above 0;
real-stream accuracy "no worse" when the SmolLM2 A_F mean |err| is no larger than the
default's.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = (("dense/srht", "default (dense / block SRHT)", "speed_vs_forward.json", "estimator_quick.json", "srht"),
        ("spread/spread", "spread", "speed_vs_forward_spread.json", "estimator_quick_spread.json", "spread"),
        ("fold/fold", "fold", "speed_vs_forward_fold.json", "estimator_quick_fold.json", "fold"))
KINDS = ("fisher", "activation", "error")


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _real(rec: dict | None) -> str:
    if rec is None:
        return "not run"
    f = rec["metrics"]["accuracy"]["fisher"]
    return f"{f['spearman_mean']:.3f} [{f['spearman_min']:.3f}–{f['spearman_max']:.3f}] / {f['mean_abs_err']:.4f}"


def _synthetic(rec: dict | None, choice: str) -> str:
    if rec is None or choice not in rec["metrics"]["49152"]:
        return "not run"
    r = rec["metrics"]["49152"][choice]
    cells = []
    for kind in KINDS:
        cell = f"{r[kind]['median_abs_err_mean']:.4f}"
        if "median_abs_err_diff_mean" in r[kind]:
            cell += f" ({r[kind]['median_abs_err_diff_mean']:+.4f} ± {r[kind]['median_abs_err_diff_se']:.4f})"
        cells.append(cell)
    return " / ".join(cells)


def _no_worse(recs: list[dict | None], choice: str) -> bool | None:
    seen = False
    for rec in recs:
        if rec is None or choice not in rec["metrics"]["49152"]:
            return None
        r = rec["metrics"]["49152"][choice]
        for kind in KINDS:
            d, se = r[kind].get("median_abs_err_diff_mean"), r[kind].get("median_abs_err_diff_se")
            if d is None or se is None or math.isnan(se):
                return None
            seen = True
            if d > 2 * se:
                return False
    return seen


def _floor_ratio(rec: dict | None, emap: str) -> str:
    if rec is None:
        return "not run"
    rows = [r for r in rec["rows"] if r["error_map"] == emap]
    if not rows:
        return "not run"
    top = max(rows, key=lambda r: r["out_dim"])
    return f"{top['update_over_read']:.1f}× ({top['error_map']})"


def table(results: Path) -> str:
    docs = ROOT / "docs" / "results"
    floor = _load(results / "speed_vs_memory_floor_maps.json")
    acc = [_load(results / "map_accuracy.json"), _load(results / "map_accuracy_576.json")]
    lines = ["| maps (act/error) | sketch / forward, streaming [min–max] | with the fingerprint | update / cold read, K = 2^17 "
             "| synthetic K = 49,152, d = 128: median \\|err\\| fisher / activation / error (Δ vs the default ± SE) "
             "| same, d = 576 | SmolLM2 A_F: Spearman [min–max] / mean \\|err\\| |",
             "|---|---|---|---|---|---|---|"]
    verdicts = []
    for choice, label, speed_file, est_file, floor_key in ARMS:
        sp = _load(results / speed_file)
        if sp is None:
            speed = with_fp = "not run"
        else:
            r = sp["result"]
            spread = r.get("ratio_all", [r["ratio"]])
            speed = f"{r['ratio']:.3f} [{min(spread):.3f}–{max(spread):.3f}]"
            with_fp = f"{r['ratio_with_fingerprint']:.3f}" if "ratio_with_fingerprint" in r else "not recorded"
        lines.append(f"| {label}: {choice} | {speed} | {with_fp} | {_floor_ratio(floor, floor_key)} | "
                     f"{_synthetic(acc[0], choice)} | {_synthetic(acc[1], choice)} | {_real(_load(docs / est_file))} |")
        if choice != ARMS[0][0]:
            fast = None if sp is None else sp["result"]["ratio"] >= 0.95
            rows = [x for x in (floor or {}).get("rows", []) if x["error_map"] == floor_key]
            cheap = None if not rows else max(rows, key=lambda x: x["out_dim"])["update_over_read"] <= 3
            same = _no_worse(acc, choice)
            est, ref = _load(docs / est_file), _load(docs / ARMS[0][3])
            real = None if est is None or ref is None else (
                est["metrics"]["accuracy"]["fisher"]["mean_abs_err"] <= ref["metrics"]["accuracy"]["fisher"]["mean_abs_err"])
            word = {True: "met", False: "not met", None: "not measured"}
            yes = {True: "yes", False: "no", None: "not measured"}
            verdicts.append(f"- {label} as a default: ≥ 0.95× the forward pass (streaming) {word[fast]}; ≤ 3× one "
                            f"cold read at 2^17 {word[cheap]}; synthetic accuracy no worse than the default "
                            f"(every paired Δ median |err| < 2 SE above 0) {yes[same]}; SmolLM2 A_F mean |err| no "
                            f"larger than the default's {yes[real]}.")
    return "\n".join(lines + [""] + verdicts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", required=True, help="the benchmarks/results folder to read")
    args = p.parse_args(argv)
    print(table(Path(args.table)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
