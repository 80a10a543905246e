"""Markdown tables for docs/results.md from a `updatescope reproduce` JSON record.

    python docs/results_table.py docs/results/source_selection_full.json

Prints the method table (top-1 with its bootstrap CI over targets, chance, oracle-normalised
transfer, regret, per-target and pooled Spearman) and, when present, the transfer matrix
(target rows, source columns, in millinats) and the sketch-vs-exact agreement.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _ci(block: dict, fmt: str = "{:.2f}") -> str:
    ci = block.get("ci")
    return "" if not ci else f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def _num(x: object, fmt: str) -> str:
    return "n/a" if x is None else fmt.format(x)


def method_table(metrics: dict) -> list[str]:
    rows = ["| method | top-1 (95% CI) | chance | oracle-norm. mean (n, CI) | mean regret (CI) | max regret "
            "| Spearman mean ± sd (CI) | pooled Spearman (p) |", "|---|---|---|---|---|---|---|---|"]
    for name, m in metrics["methods"].items():
        t1, on, rg, sp, ps = (m["top1"], m["oracle_normalised_transfer"], m["regret"], m["spearman"],
                              m["pooled_spearman"])
        on_s = (f"{on['mean']:.3f} ({on['n']}, {_ci(on)})" if on.get("n") else "n/a (0)")
        sp_s = "n/a" if sp.get("mean") is None else f"{sp['mean']:.2f} ± {_num(sp.get('sd'), '{:.2f}')} {_ci(sp)}"
        rows.append(f"| {name} | {t1['mean']:.3f} {_ci(t1)} | {m['chance_top1']:.3f} | {on_s} "
                    f"| {rg['mean']:.4f} {_ci(rg, '{:.4f}')} | {rg['max']:.4f} "
                    f"| {sp_s} | {_num(ps.get('rho'), '{:.2f}')} ({_num(ps.get('p'), '{:.3g}')}) |")
    for name, why in metrics.get("cannot_run", {}).items():
        rows.append(f"| {name} | cannot run: {why} | | | | | | |")
    return rows


def correlation_table(metrics: dict) -> list[str]:
    rows = ["| method | pooled ρ_s | p (scipy) | p (permutation) | per-target ρ_s mean ± sd |", "|---|---|---|---|---|"]
    for name, c in metrics["correlation"].items():
        po, pt = c["pooled"], c["per_target"]
        rows.append(f"| {name} | {po['rho']:.3f} | {po['p']:.2g} | {po['p_perm']:.3f} | {pt['mean']:.2f} ± {pt['sd']:.2f} |")
    for name, why in metrics.get("cannot_run", {}).items():
        rows.append(f"| {name} | cannot run: {why} | | | |")
    return rows


def transfer_table(metrics: dict) -> list[str]:
    tr = metrics["ground_truth"]["transfer"]
    names = list(tr)
    rows = ["| target \\ source | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for t in names:
        rows.append(f"| {t} | " + " | ".join(f"{1000 * tr[t][s]:+.0f}" for s in names) + " |")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python docs/results_table.py RESULT.json", file=sys.stderr)
        return 2
    rec = json.loads(Path(argv[0]).read_text())
    m = rec["metrics"]
    print(f"<!-- {rec['name']}: {rec.get('seconds')} s, git {rec.get('env', {}).get('git_commit', '?')} -->")
    print("\n".join(correlation_table(m) if "correlation" in m else method_table(m)))
    if "ground_truth" in m and "transfer" in m["ground_truth"]:
        print()
        print("\n".join(transfer_table(m)))
    if "sketch_vs_exact" in m:
        print()
        print(json.dumps(m["sketch_vs_exact"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
