"""Markdown tables for docs/network.md from the network-selection records.

    python docs/network_table.py --write   # regenerate every generated block
    python docs/network_table.py --check   # exit 1 if a block differs from its record

Blocks look like

    <!-- generated: selection network_selection_quick -->
    ...
    <!-- end generated -->

the first word names the table kind (:data:`KINDS`), the second the record
``docs/results/NAME.json``.  The verdict is computed here from the paired bootstrap in the
record by the rule written next to it, so it changes when the numbers do
(tests/test_network_docs.py runs ``--check``).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # docs/_blocks.py, also when loaded by path from the tests
import _blocks  # noqa: E402

DOC = HERE / "network.md"

LABELS = {"head": "head sketch (FisherSketch, as source-selection)",
          "lora_layers": "LoRA-targeted layers, A_F",
          "lora_layers_bd": "LoRA-targeted layers, A_BD",
          "last_blocks_head": "last blocks' linear layers + head, A_F",
          "family": "same family (trivial)", "random": "random"}


def _f(x: float | None, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _ci(block: dict | None, fmt: str = "{:+.3f}") -> str:
    if not block or block.get("mean") is None:
        return "n/a"
    ci = block.get("ci")
    return fmt.format(block["mean"]) + ("" if ci is None else f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]")


def verdict(m: dict, method: str = "lora_layers", label: str = "LoRA-layer sketch") -> str:
    """Rule: 'better' / 'worse' only if the 95% paired-bootstrap CI of the per-target
    Spearman difference (method − head) excludes 0; otherwise no resolvable difference."""
    sp = m["paired"].get(f"{method} - head", {}).get("spearman")
    if not sp or sp.get("ci") is None:
        return f"no paired comparison for the {label}"
    lo, hi = sp["ci"]
    if lo > 0:
        return f"the {label} predicts LoRA transfer **better** than the head sketch"
    if hi < 0:
        return f"the {label} predicts LoRA transfer **worse** than the head sketch"
    return f"**no resolvable difference** between the {label} and the head sketch"


def selection_table(m: dict) -> list[str]:
    gt = m["ground_truth"]
    lora = gt["lora"]
    tok = m["tokens_sketched"]["head"]
    rows = [
        f"Ground truth: `{gt['record']}` (LoRA rank {lora.get('r')} on {', '.join(lora['targets'])} of the last "
        f"{lora['n_last']} blocks, mean of {gt.get('n_seeds') or 1} seeds). {m['n_domains']} domains, "
        f"{min(tok.values())}–{max(tok.values())} sketch tokens each, m = {m['sketch_dim']}, network sketch mode "
        f"`{m['mode']}`; {len(m['layers']['lora_layers'])} LoRA-targeted layers"
        + (f", {len(m['layers']['last_blocks_head'])} in the last-blocks + head sketch" if "last_blocks_head"
           in m["layers"] else "") + ".",
        "",
        "| method | Spearman (mean, 95% CI) | top-1 (chance) | oracle-normalised transfer | within-family top-1 |",
        "|---|---|---|---|---|",
    ]
    for k in ("head", "lora_layers", "lora_layers_bd", "last_blocks_head", "family", "random"):
        if k not in m["methods"] or "error" in m["methods"][k]:
            continue
        x = m["methods"][k]
        w = x.get("within_family", {}).get("top1", {})
        rows.append(f"| {LABELS[k]} | {_ci(x['spearman'])} | {_f(x['top1']['mean'], '{:.2f}')} "
                    f"({_f(x['chance_top1'], '{:.2f}')}) | {_ci(x['oracle_normalised_transfer'], '{:.2f}')} | "
                    f"{_f(w.get('mean'), '{:.2f}')} |")
    ceil = (m.get("truth_noise") or {}).get("ceiling") or {}
    if ceil:
        rows.append(f"| noise ceiling (one seed predicts the others) | {_ci(ceil.get('spearman'))} | "
                    f"{_f(ceil.get('top1', {}).get('mean'), '{:.2f}')} | "
                    f"{_ci(ceil.get('oracle_normalised_transfer'), '{:.2f}')} | "
                    f"{_f(ceil.get('within_top1', {}).get('mean'), '{:.2f}')} |")
    rows += ["", "Paired bootstrap over targets (difference of per-target metrics, 95% CI):", "",
             "| comparison | Spearman | top-1 | oracle-normalised transfer |", "|---|---|---|---|"]
    for pair, row in m["paired"].items():
        rows.append(f"| {pair} | {_ci(row.get('spearman'))} | {_ci(row.get('top1'), '{:+.2f}')} | "
                    f"{_ci(row.get('oracle_normalised_transfer'), '{:+.2f}')} |")
    hv = m.get("head_vs_record")
    if hv and hv.get("max_abs_diff") is not None:
        rows += ["", f"The head sketch re-made here against the record's: max abs difference "
                     f"{hv['max_abs_diff']:.1e} over {hv['pairs']} pairs (same tokens, m and seed: "
                     f"{'yes' if hv['same_tokens_and_dim'] else 'no'})."]
    rows += ["", "Verdict (rule: better/worse only if the paired CI of the Spearman difference excludes 0): "
             + verdict(m) + (("; " + verdict(m, "last_blocks_head", "last-blocks + head sketch"))
                             if "last_blocks_head" in m["paired"].get("last_blocks_head - head", {}) or
                             "last_blocks_head - head" in m["paired"] else "") + "."]
    return rows


def profile_table(m: dict) -> list[str]:
    rows = ["| pair (source / target) | mean transfer | head A | LoRA A_F | LoRA A_BD | sketch | A_F | A_BD | "
            "profile cosine π | discrepancy A_F − A_BD | ω_S / ω_T |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in m["profiles"]:
        lo = p["lora_layers"]
        rows.append(f"| {p['pair'][0]} / {p['pair'][1]} | {p['transfer_mean']:+.4f} | {p['head']:.3f} | "
                    f"{lo['full']:.3f} | {lo['block_diagonal']:.3f} | {p['sketch']} | {p['full']:.3f} | "
                    f"{p['block_diagonal']:.3f} | {p['profile_cosine']:.3f} | {p['discrepancy']:+.3f} | "
                    f"{p['offdiag_share_source']:.2f} / {p['offdiag_share_target']:.2f} |")
    rows += ["", "| sketch | pairs | π min | π median | discrepancy median | max abs discrepancy |",
             "|---|---|---|---|---|---|"]
    for k, d in m["diagnostics"].items():
        rows.append(f"| {k} | {d['pairs']} | {_f(d['profile_cosine_min'])} | {_f(d['profile_cosine_median'])} | "
                    f"{_f(d['discrepancy_median'], '{:+.3f}')} | {_f(d['discrepancy_max_abs'])} |")
    return rows


def cost_table(m: dict) -> list[str]:
    c = m["cost"]
    head = c["total"]["head"]
    rows = ["| sketch | total s (all domains) | median s per domain | × head |", "|---|---|---|---|"]
    per_head = [a + b for a, b in zip(c["seconds"]["head_capture"].values(), c["seconds"]["head_sketch"].values())]
    rows.append(f"| head (forward-only capture + FisherSketch) | {head:.1f} | {sorted(per_head)[len(per_head) // 2]:.2f} "
                f"| 1.00 |")
    for k, total in c["total"].items():
        if k == "head":
            continue
        per = sorted(c["seconds"][k].values())
        rows.append(f"| {k} (forward + backward + projections) | {total:.1f} | {per[len(per) // 2]:.2f} | "
                    f"{total / head:.2f} |")
    return rows


def layer_cost_table(rec: dict) -> list[str]:
    """``benchmarks/layer_sketch_cost.py``'s record: seconds per batch and ratios to the
    forward pass, the forward + backward pass and the head sketch (medians of per-repetition
    ratios; the arms alternate within each repetition)."""
    r = rec["result"]
    env = rec.get("env", {})
    labels = {"forward": "bare forward (logits)", "forward_backward": "forward + backward (summed CE)",
              "head_sketch": "head sketch (capture + update_logits)",
              "layers_last_block": f"layer sketch: last block's linear layers + head ({r['layers']['layers_last_block']})",
              "layers_lora_targets": f"layer sketch: q/v of the last 2 blocks + head ({r['layers']['layers_lora_targets']})",
              "layers_all": f"layer sketch: every linear layer + head, per sequence ({r['layers']['layers_all']})"}
    rows = [f"`{rec['command']}` — SmolLM2-135M, {r['tokens_per_batch']:,} tokens per batch, m = "
            f"{rec['config']['sketch_dim']}, {rec['config']['threads']} threads, {rec['config']['reps']} repetitions, "
            f"load average {r['loadavg_before'][0]:.1f} before / {r['loadavg_after'][0]:.1f} after, commit "
            f"{str(env.get('git_commit'))[:8]}.", "",
            "| step | median s per batch | × forward | × forward + backward | × head sketch |", "|---|---|---|---|---|"]
    for arm, label in labels.items():
        q = r["ratios"][arm]
        rows.append(f"| {label} | {r['median_s'][arm]:.3f} | {q['forward']:.2f} | {q['forward_backward']:.2f} | "
                    f"{q['head_sketch']:.2f} |")
    return rows


BENCH = HERE.parent / "benchmarks" / "results"
KINDS = {"selection": selection_table, "profiles": profile_table, "cost": cost_table}
#: kinds rendered from a benchmark record (benchmarks/results/NAME.json), whole
BENCH_KINDS = {"layercost": layer_cost_table}


def block(kind: str, name: str) -> list[str]:
    """The lines of one generated block: table ``kind`` of record ``name``."""
    if kind in BENCH_KINDS:
        return BENCH_KINDS[kind](_blocks.load(name, BENCH))
    return KINDS[kind](_blocks.load(name)["metrics"])


def render(text: str) -> str:
    """``text`` with every generated block re-rendered from its record."""
    return _blocks.regenerate(text, block)


def main(argv: list[str] | None = None) -> int:
    return _blocks.run(sys.argv[1:] if argv is None else argv, [DOC], block, "docs/network_table.py")


if __name__ == "__main__":
    sys.exit(main())
