"""Markdown tables for docs/results.md from a `updatescope reproduce` JSON record.

    python docs/results_table.py docs/results/source_selection_full.json   # print one record
    python docs/results_table.py --write     # regenerate every generated block of the pages in DOCS
    python docs/results_table.py --check     # exit 1 if a block differs from its record
    python docs/results_table.py --reanalyse OUT.json RUN.json...   # evidence tables from older runs

Printing a record gives the method table (top-1 with its bootstrap CI over targets, chance,
oracle-normalised transfer, regret, per-target and pooled Spearman) and, when present, the
transfer matrix (target rows, source columns, in millinats) and the sketch-vs-exact agreement.

Generated blocks in docs/results.md look like

    <!-- generated: evidence source_selection_quick -->
    ...
    <!-- end generated -->

where the first word names the table kind (:data:`KINDS`, :data:`RECORD_KINDS`,
:data:`MULTI_KINDS`) and the second the record
``docs/results/NAME.json``; ``--write`` replaces what lies between the markers, ``--check``
(run by tests/test_results_docs.py) compares it.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # docs/_blocks.py, also when loaded by path from the tests
import _blocks  # noqa: E402


def _bracket(ci: list | None, fmt: str) -> str:
    """'[lo, hi]' in ``fmt``, or '' when there is no interval."""
    return "" if not ci else "[" + fmt.format(ci[0]) + ", " + fmt.format(ci[1]) + "]"


def _ci(block: dict, fmt: str = "{:.2f}") -> str:
    ci = block.get("ci")
    return "" if not ci else f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def _num(x: object, fmt: str) -> str:
    return "n/a" if x is None else fmt.format(x)


def method_table(metrics: dict, label: dict[str, str] | None = None) -> list[str]:
    """One row per method of the record, in its order; ``label`` gives display names
    (default: the record's own names)."""
    label = label or {}
    rows = [
        "| method | top-1 (95% CI) | chance | oracle-norm. mean (n, CI) | mean regret (CI) | max regret "
        "| Spearman mean ± sd (CI) | pooled Spearman (p) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in metrics["methods"].items():
        t1, on, rg, sp, ps = (
            m["top1"],
            m["oracle_normalised_transfer"],
            m["regret"],
            m["spearman"],
            m["pooled_spearman"],
        )
        on_s = f"{on['mean']:.3f} ({on['n']}, {_ci(on)})" if on.get("n") else "n/a (0)"
        sp_s = "n/a" if sp.get("mean") is None else f"{sp['mean']:.2f} ± {_num(sp.get('sd'), '{:.2f}')} {_ci(sp)}"
        rows.append(
            f"| {label.get(name, name)} | {t1['mean']:.3f} {_ci(t1)} | {m['chance_top1']:.3f} | {on_s} "
            f"| {rg['mean']:.4f} {_ci(rg, '{:.4f}')} | {rg['max']:.4f} "
            f"| {sp_s} | {_num(ps.get('rho'), '{:.2f}')} ({_num(ps.get('p'), '{:.3g}')}) |"
        )
    for name, why in metrics.get("cannot_run", {}).items():
        rows.append(f"| {label.get(name, name)} | cannot run: {why} | | | | | | |")
    return rows


def methods_table(metrics: dict) -> list[str]:
    """:func:`method_table` with the display names of :func:`labels`."""
    return method_table(metrics, labels(metrics))


def correlation_table(metrics: dict, label: dict[str, str] | None = None) -> list[str]:
    label = label or {}
    rows = ["| method | pooled ρ_s | p (scipy) | p (permutation) | per-target ρ_s mean ± sd |", "|---|---|---|---|---|"]
    for name, c in metrics["correlation"].items():
        po, pt = c["pooled"], c["per_target"]
        per = (
            "n/a"
            if pt.get("mean") is None
            else (f"{pt['mean']:.2f}" + ("" if pt.get("sd") is None else f" ± {pt['sd']:.2f}"))
        )
        rows.append(
            f"| {label.get(name, name)} | {_num(po.get('rho'), '{:.3f}')} | {_num(po.get('p'), '{:.2g}')} "
            f"| {_num(po.get('p_perm'), '{:.3f}')} | {per} |"
        )
    for name, why in metrics.get("cannot_run", {}).items():
        rows.append(f"| {label.get(name, name)} | cannot run: {why} | | | |")
    return rows


def transfer_table(metrics: dict) -> list[str]:
    """Transfer in millinats, target × source; "·" where the pair was not fine-tuned (a
    record with candidate subsets measures only each target's candidates)."""
    tr = metrics["ground_truth"]["transfer"]
    names = list(tr)
    rows = ["| target \\ source | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for t in names:
        rows.append(f"| {t} | " + " | ".join(f"{1000 * tr[t][s]:+.0f}" if s in tr[t] else "·" for s in names) + " |")
    return rows


# ------------------------------------------------- evidence tables (generated blocks)
#: methods in the evidence table, in this order (others present in the record follow)
ORDER = (
    "fisher",
    "exact_fisher",
    "activation",
    "exact_activation",
    "error",
    "exact_error",
    "cka",
    "rsa",
    "svcca",
    "grad_cos",
    "family",
    "easiness",
    "size",
    "word_prob",
    "random",
)
LABEL = {
    "fisher": "FisherSketch A_F",
    "exact_fisher": "exact A_F",
    "activation": "activation-only Scov(M_a), sketch",
    "exact_activation": "exact Scov(M_a)",
    "error": "error-only Scov(Γ_e), sketch",
    "exact_error": "exact Scov(Γ_e)",
    "cka": "linear CKA",
    "rsa": "RSA",
    "svcca": "SVCCA",
    "grad_cos": "mean-gradient cosine",
    "family": "*trivial:* same family / collection",
    "easiness": "*trivial:* easiness (−base loss on source)",
    "size": "*trivial:* source size (tokens)",
    "word_prob": "*trivial:* base prob. of source's words",
    "random": "random",
    "logme": "LogME",
    "hscore": "H-score",
    "leep": "LEEP",
    "family1": "*trivial:* same family, one SMILES family",
    "family_cka": "*trivial:* same family, ties broken by CKA",
    "product": "product of marginals Scov(M_a)·Scov(Γ_e), sketch",
    "exact_product": "exact product of marginals",
}


def _mci(block: dict | None, fmt: str = "{:.2f}") -> str:
    if not block or block.get("mean") is None:
        return "n/a"
    return f"{fmt.format(block['mean'])} {_ci(block, fmt)}".strip()


#: display names of the property families of a one-collection SMILES record
PROPERTY = {"tpsa": "TPSA", "logp": "logP", "fsp3": "Fsp3", "mw": "MW"}


def labels(metrics: dict) -> dict[str, str]:
    """:data:`LABEL` for this record: within one SMILES collection ("property_families" in
    the record) the "family" baseline is the same-property label and "collection" the
    constant same-collection indicator."""
    props = metrics.get("property_families")
    if not props:
        return LABEL
    names = " / ".join(PROPERTY.get(p, p) for p in dict.fromkeys(props.values()))
    cols = " / ".join(c.upper() for c in metrics.get("collection_indicator", {}).get("collections", []))
    return {
        **LABEL,
        "family": f"*trivial:* same property ({names})",
        "collection": f"*trivial:* same collection ({cols})",
    }


def _ordered(methods: dict) -> list[str]:
    """Method names in :data:`ORDER`, then the record's others."""
    return [n for n in ORDER if n in methods] + [n for n in methods if n not in ORDER]


def _ceiling_label(noise: dict) -> str:
    if noise.get("ceiling_noise") == "seeds and eval sequences":
        return (
            f"**noise ceiling** (1 of {noise['n_seeds']} seeds on half the eval sequences predicts the others' "
            "mean on the other half)"
        )
    return f"**noise ceiling** (1 of {noise['n_seeds']} seeds predicts the others' mean)"


def prereg_verdicts(metrics: dict) -> list[str]:
    """The pre-registered verdicts of a source-selection record (its ``verdicts`` block, computed
    by the runner under PREREGISTRATION.md): one row per comparison, then the statement."""
    v = metrics.get("verdicts")
    if not v:
        return ["This record predates the pre-registered comparisons."]
    rows = [
        "| comparison (per-target Spearman) | targets | mean difference | p (test) | Holm p (family of 4) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for r in v["primary"]:
        rows.append(
            f"| {r['comparison']} | {r['n_targets']} | {_num(r['mean_spearman_difference'], '{:+.3f}')} "
            f"| {r['p']:.3g} ({r['test']}) | {r['p_holm']:.3g} | {r['word']} |"
        )
    full = v.get("full_eval_targets") or []
    side = (
        "; at the full eval size ("
        + str(v.get("n_full_eval_targets", 0))
        + " targets): "
        + ", ".join(f"{r['comparison']} {r['word']}" for r in full)
        if v.get("n_full_eval_targets")
        else "; no target reached the full eval size, so the secondary family is empty"
    )
    weight = "" if v["powered"] else f" This run is not powered ({v['powered_rule']}): the words carry no weight."
    return rows + ["", f"Statement (by rule): {v['statement']}{side}.{weight}"]


def _note_rows(notes: dict, prefix: str, n_cells: int, label: dict[str, str] = LABEL) -> list[str]:
    """One row per method that has no numbers: its label, ``prefix`` + the reason, empty cells."""
    return [f"| {label.get(name, name)} | {prefix}{why} |" + " |" * (n_cells - 1) for name, why in notes.items()]


#: the per-target metrics a paired comparison is judged on (regret's difference is shown, not judged)
VERDICT_METRICS = ("spearman", "top1", "oracle_normalised_transfer")


def _values(method: dict | None, metric: str) -> dict[str, float] | None:
    """A method's per-target values of ``metric`` (``within_*``: among same-family candidates);
    targets where the metric is undefined (e.g. constant scores have no Spearman) are absent."""
    if not method or "error" in method:
        return None
    block = method.get("within_family", {}).get(metric[7:]) if metric.startswith("within_") else method.get(metric)
    if not isinstance(block, dict) or "per_target" not in block:
        return None
    return {t: float(v) for t, v in block["per_target"].items() if v is not None and math.isfinite(v)}


def paired_diffs(metrics: dict, pair: str, metric: str) -> dict[str, float] | None:
    """Per target, first − second of ``pair`` ("a - b") on ``metric``, over the targets where
    both methods have a value: the same targets as each method's own (marginal) value, so a
    method never shows two different means of one metric."""
    a, b = pair.split(" - ")
    va, vb = (_values(metrics["methods"].get(n), metric) for n in (a, b))
    if va is None or vb is None:
        return None
    return {t: va[t] - vb[t] for t in va if t in vb}


@functools.cache
def _family_verdicts(key: str) -> dict[str, Any]:
    from updatescope.select.metrics import paired_verdicts

    fam = json.loads(key)
    return {v.comparison: v for v in paired_verdicts(fam["diffs"], family=fam["name"])}


#: FisherSketch is compared with these on every metric of :data:`VERDICT_METRICS`: the family of
#: comparisons of a record, over which Holm's correction runs (the union of the baselines the
#: verdict blocks name: :data:`SELECTION_VERDICT` and :data:`WITHIN_VERDICT`)
FAMILY_BASELINES = ("family", "cka", "activation", "easiness", "exact_fisher")


def family_diffs(metrics: dict) -> dict[str, dict[str, float]]:
    """The record's family of comparisons: FisherSketch − each of :data:`FAMILY_BASELINES` the
    record pairs it with, on each metric of :data:`VERDICT_METRICS` with at least 2 targets,
    keyed "fisher - b: metric"."""
    out = {}
    for pair in (f"fisher - {b}" for b in FAMILY_BASELINES if f"fisher - {b}" in metrics.get("paired", {})):
        for metric in VERDICT_METRICS:
            d = paired_diffs(metrics, pair, metric)
            if d is not None and len(d) >= 2:
                out[f"{pair}: {metric}"] = d
    return out


def record_verdicts(metrics: dict, family: str = "the record's paired comparisons") -> dict[str, Any]:
    """:func:`updatescope.select.metrics.paired_verdicts` over :func:`family_diffs`: an exact
    (Monte Carlo beyond 20 targets) sign-flip test per comparison, Holm over the family."""
    diffs = family_diffs(metrics)
    if not diffs:
        return {}
    return _family_verdicts(json.dumps({"name": family, "diffs": diffs}, sort_keys=True))


def _verdict(metrics: dict, pair: str, metric: str) -> str:
    """A paired difference with its 95% bootstrap CI over targets and the word the sign-flip
    test allows after Holm over the record's family, with the p-values beside it:
    "+0.13 [+0.06, +0.20], better (p 0.002, Holm 0.020 over 18)"."""
    from updatescope.select.metrics import paired_difference

    v = record_verdicts(metrics).get(f"{pair}: {metric}")
    if v is None:
        return "n/a"
    d = paired_diffs(metrics, pair, metric)
    ci = paired_difference(d, dict.fromkeys(d, 0.0))["ci"]
    return f"{v.mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}], {v.word} ({v.note()})"


def verdict_rule(metrics: dict) -> str:
    """The rule of :func:`_verdict` for this record, with its family size."""
    n = len(family_diffs(metrics))
    return (
        f'"better" / "worse" where a two-sided paired sign-flip test over targets (exact up to 20 '
        f"targets, else 100,000 seeded draws) stays below α = 0.05 after Holm's correction over the "
        f"record's {n} comparisons of FisherSketch with the family label, CKA, activation-only, easiness "
        f"and exact A_F (those it has) on per-target Spearman, top-1 and oracle-normalised transfer, else "
        f'"no difference"; raw p and Holm-adjusted p beside each'
    )


def _pooled(metrics: dict, name: str) -> str | None:
    """Pooled Spearman over the (target, source) pairs with its permutation (Mantel) p."""
    po = metrics["correlation"].get(name, {}).get("pooled")
    if po is None:
        return None
    ok = po.get("rho") is not None and math.isfinite(po["rho"])
    return f"{po['rho']:.2f} ({po['p_perm']:.3f})" if ok else "n/a"


def evidence_table(metrics: dict) -> list[str]:
    """Noise ceiling first, then every method: overall and within-family metrics."""
    rows = [
        "| method | top-1 (95% CI) | oracle-norm. (CI) | mean regret | per-target Spearman (CI) "
        "| within-family top-1 (chance) | within-family Spearman (CI) |",
        "|---|---|---|---|---|---|---|",
    ]
    noise = metrics.get("truth_noise", {})
    ceil = noise.get("ceiling")
    if ceil:
        rows.append(
            f"| {_ceiling_label(noise)} | {_mci(ceil['top1'], '{:.3f}')} "
            f"| {_mci(ceil.get('oracle_normalised_transfer'))} "
            f"| {_num(ceil['regret']['mean'], '{:.4f}')} | {_mci(ceil['spearman'])} "
            f"| {_mci(ceil.get('within_top1'), '{:.3f}')} | {_mci(ceil.get('within_spearman'))} |"
        )
    methods = metrics["methods"]
    names = _ordered(methods)
    for name in names:
        m = methods[name]
        if "error" in m:
            rows.append(f"| {LABEL.get(name, name)} | error: {m['error']} | | | | | |")
            continue
        w = m.get("within_family", {})
        wt = w.get("top1")
        wt_s = "n/a" if not wt or wt.get("mean") is None else f"{wt['mean']:.3f} ({w['chance_top1']['mean']:.3f})"
        rows.append(
            f"| {LABEL.get(name, name)} | {_mci(m['top1'], '{:.3f}')} | {_mci(m['oracle_normalised_transfer'])} "
            f"| {_num(m['regret']['mean'], '{:.4f}')} | {_mci(m['spearman'])} | {wt_s} "
            f"| {_mci(w.get('spearman'))} |"
        )
    return rows + _note_rows(metrics.get("cannot_run", {}), "cannot run: ", 6)


#: columns of the paired table: metric -> header
PAIRED_COLS = {
    "spearman": "Δ Spearman (CI)",
    "top1": "Δ top-1 (CI)",
    "oracle_normalised_transfer": "Δ oracle-norm. (CI)",
    "regret": "Δ regret (CI; < 0 favours the first)",
    "within_spearman": "Δ within-family Spearman (CI)",
}


def paired_table(metrics: dict, cols: dict[str, str] = PAIRED_COLS, label: dict[str, str] = LABEL) -> list[str]:
    """Paired bootstrap over targets of the per-target difference (first − second), computed
    from the methods' per-target values over the targets where both have one."""
    rows = ["| difference (per target, paired) | " + " | ".join(cols.values()) + " |", "|---" * (len(cols) + 1) + "|"]
    from updatescope.select.metrics import paired_difference

    for pair in metrics.get("paired", {}):
        a, b = pair.split(" - ")
        cells = []
        for c in cols:
            diffs = paired_diffs(metrics, pair, c)
            d = None if not diffs else paired_difference(diffs, dict.fromkeys(diffs, 0.0))
            fmt = "{:+.4f}" if c == "regret" else "{:+.2f}"
            cells.append("n/a" if not d else f"{fmt.format(d['mean'])} {_bracket(d['ci'], fmt)} (n {d['n']})")
        rows.append(f"| {label.get(a, a)} − {label.get(b, b)} | " + " | ".join(cells) + " |")
    return rows + [
        "",
        "Each difference is over the targets where both methods have a value (n per cell): the targets "
        "of each method's own row above, so no method shows two means of one metric (constant scores "
        "have no Spearman on a target).",
    ]


def noise_lines(rec: dict) -> list[str]:
    m = rec["metrics"]
    n = m.get("truth_noise", {})
    if not n.get("ceiling"):
        return ["Ground truth from one fine-tuning seed: its noise is not measured."]
    gt = m["ground_truth"]
    tr = [v for t, row in gt["transfer"].items() for s, v in row.items() if s != t]
    return [
        f"Record `{rec['name']}`: {rec.get('seconds', 0):.0f} s, git {rec.get('env', {}).get('git_commit', '?')[:10]}"
        f"{' (dirty tree)' if rec.get('env', {}).get('git_dirty') else ''}. "
        f"Ground truth: mean of {n['n_seeds']} fine-tuning seeds; cross transfers {min(tr):+.4f} to {max(tr):+.4f}; "
        f"median gap best − second-best source {n['median_best_gap']:.4f} against a median SE per value of "
        f"{n['median_se']:.4f}; the best source is the same in every seed for {n['best_same_in_every_seed']} "
        f"of {n['n_targets']} targets." + _candidate_line(m) + _finetune_line(gt) + _eval_noise_line(n.get("eval"))
    ]


def _n_finetunings(gt: dict) -> int:
    """A multi-seed ground truth's fine-tunings: one per (seed, trained source)."""
    return len(gt.get("seeds", [])) * len(gt.get("train_loss_by_seed", [{}])[0])


def _finetune_line(gt: dict) -> str:
    secs = gt.get("finetune_seconds")
    if secs is None:
        return ""
    n = _n_finetunings(gt)
    return (
        f" The {n} LoRA fine-tunings (with their evaluations) took {secs:,.0f} s of wall time in all (a run "
        "paused during a fine-tuning counts the pause)."
    )


def _candidate_line(m: dict) -> str:
    cands = m.get("candidates")
    if not cands:
        return ""
    sizes = sorted({len(c) for c in cands.values()})
    fams = m.get("ground_truth", {}).get("transfer", {})
    return (
        f" Candidates: {'/'.join(map(str, sizes))} per target, a seeded random subset of the other "
        f"{len(fams) - 1} domains; only those pairs were fine-tuned and evaluated."
    )


def _eval_noise_line(ev: dict | None) -> str:
    """The evaluation-sample noise (bootstrap over eval sequences) beside the seed noise."""
    if not ev or ev.get("median_se") is None:
        return ""
    gap = (
        "" if ev.get("median_gap_se") is None else (f", of the best − second-best difference {ev['median_gap_se']:.4f}")
    )
    return (
        f" Evaluation noise (bootstrap over the median {ev['n_sequences']:.0f} eval sequences per target, "
        f"{ev['n_boot']:,} draws, the same draw for every source of a target): median SE per value "
        f"{ev['median_se']:.4f}{gap}; the recorded best source stays best in {100 * ev['mean_best_stable']:.0f}% "
        f"of the draws (mean over targets)."
    )


def truth_table(metrics: dict) -> list[str]:
    """The ground truth: mean transfer over the fine-tuning seeds ± its SE (nats), target
    rows × source columns, self-transfer included for reference."""
    gt = metrics["ground_truth"]
    tr, se = gt["transfer"], gt.get("transfer_se", {})
    names = list(tr)
    rows = ["| target \\ source | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for t in names:
        cells = []
        for s in names:
            e = se.get(t, {}).get(s)
            cells.append(f"{tr[t][s]:+.3f}" + ("" if e is None else f" ± {e:.3f}"))
        rows.append(f"| {t} | " + " | ".join(cells) + " |")
    return rows


def pairs_table(metrics: dict) -> list[str]:
    """Sketch vs exact per unordered pair (A_F, Scov(Γ_e)) with the pair's mean transfer both ways."""
    sk, tr = metrics["sketch_alignment"], metrics["ground_truth"]["transfer"]
    ex = {k: metrics["scores"][f"exact_{k}"] for k in ("fisher", "error")}
    rows = [
        "| pair | exact A_F | sketch A_F | exact Scov(Γ_e) | sketch Scov(Γ_e) | transfer a→b / b→a |",
        "|---|---|---|---|---|---|",
    ]
    names = list(tr)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rows.append(
                f"| {a} · {b} | {ex['fisher'][a][b]:.4f} | {sk['fisher'][a][b]:.4f} | {ex['error'][a][b]:.4f} "
                f"| {sk['error'][a][b]:.4f} | {tr[b][a]:+.3f} / {tr[a][b]:+.3f} |"
            )
    sve = metrics.get("sketch_vs_exact", {})
    for kind in ("fisher", "error"):
        if kind in sve:
            v = sve[kind]
            rows.append(
                f"| *all pairs, {kind}*: Spearman sketch vs exact {_num(v['spearman'], '{:.2f}')}, "
                f"mean \\|err\\| {v['mean_abs_err']:.4f} | | | | | |"
            )
    return rows


def sketch_exact_lines(metrics: dict) -> list[str]:
    """One line: sketch vs exact agreement over the unordered pairs."""
    sve = metrics.get("sketch_vs_exact", {})
    parts = [
        f"{k} Spearman {_num(v['spearman'], '{:.2f}')} / mean |err| {v['mean_abs_err']:.4f}"
        for k, v in sve.items()
        if k != "coupling"
    ]
    n = next(iter(sve.values()))["pairs"] if sve else 0
    return [f"Sketch vs exact on the {n} unordered pairs: " + "; ".join(parts) + "."]


# ------------------------------------------------- SMILES within one collection (property bins)
#: the verdict line of :func:`within_lines`: FisherSketch against these, in this order
WITHIN_VERDICT = ("cka", "activation", "easiness", "family", "exact_fisher")
#: the paired columns of :func:`within_lines` (no within-property Spearman: 2 candidates per target)
WITHIN_PAIRED_COLS = {k: PAIRED_COLS[k] for k in ("spearman", "top1", "oracle_normalised_transfer", "regret")}


def budget_table(metrics: dict) -> list[str]:
    """The fine-tuning budget probe on the validation split: per LoRA step count, the median
    over targets of the transfer spread / its seed SE, and of the best − second-best gap / SE."""
    b = metrics.get("budget")
    if not b:
        return ["(the budget of this record was not chosen on a validation split)"]
    rows = [
        "| LoRA steps | median SNR (sd of transfers / median SE) | median gap best − second / SE | |",
        "|---|---|---|---|",
    ]
    for r in b["grid"]:
        rows.append(
            f"| {r['steps']} | {_num(r['median_snr'], '{:.2f}')} | {_num(r['median_gap_over_se'], '{:.2f}')} "
            f"| {'**chosen**' if r['steps'] == b['chosen'] else ''} |"
        )
    unit = "answer-word sets" if "design" in metrics else "domains"
    rows.append(
        f"| *probe* | {len(b['domains'])} {unit} ({', '.join(b['domains'])}), {b['seeds']} seeds, "
        f"evaluated on the {b['validation_split']} split | | |"
    )
    return rows


def resolution_table(metrics: dict) -> list[str]:
    """The sketch-resolution curve: per sketch size, sketch vs exact over independent bases
    (mean ± sd of the Spearman and of the mean |error|), beside the exact values' range."""
    cur = metrics.get("sketch_resolution")
    if not cur:
        return ["(no resolution curve in this record)"]
    rng = cur["exact_range"]
    rows = [
        "| sketch size m (bytes) | A_F Spearman vs exact | A_F mean abs. error | Scov(Γ_e) Spearman vs exact "
        "| Scov(Γ_e) mean abs. error |",
        "|---|---|---|---|---|",
    ]

    def cell(block: dict) -> str:
        if block.get("mean") is None:
            return "n/a"
        sd = "" if block.get("sd") is None else f" ± {block['sd']:.3f}"
        n = (
            ""
            if block.get("n", len(block["values"])) == len(block["values"])
            else f" ({block['n']} of {len(block['values'])} bases)"
        )
        return f"{block['mean']:.3f}{sd}{n}"

    for m in cur["dims"]:
        d = cur["by_dim"][str(m)]
        rows.append(
            f"| {m:,} ({4 * m // 1024:,} KB) | {cell(d['fisher']['spearman'])} | {cell(d['fisher']['mean_abs_err'])} "
            f"| {cell(d['error']['spearman'])} | {cell(d['error']['mean_abs_err'])} |"
        )
    rows.append(
        f"| *exact values' range (max − min over pairs)* | | {_num(rng.get('fisher'), '{:.3f}')} | "
        f"| {_num(rng.get('error'), '{:.3f}')} |"
    )
    return rows


#: the baselines a selection verdict compares FisherSketch with, in order
SELECTION_VERDICT = ("family", "cka", "activation", "easiness")


def selection_verdict(metrics: dict) -> list[str]:
    """The plain verdict of a source-selection record, generated: FisherSketch and the
    ceiling on each metric, then every paired difference to :data:`SELECTION_VERDICT` on
    per-target Spearman, top-1 and oracle-normalised transfer (rule of :func:`_verdict`,
    stated in the block), and the within-family Spearman beside its ceiling."""
    m, label = metrics["methods"], labels(metrics)
    f, paired = m["fisher"], metrics.get("paired", {})
    ceil = metrics.get("truth_noise", {}).get("ceiling") or {}

    def both(key: str, fmt: str = "{:.2f}") -> str:
        c = ceil.get(key)
        return _mci(f[key], fmt) + ("" if not c else f" (ceiling {_mci(c, fmt)})")

    out = [
        f"FisherSketch over {f['top1']['n']} targets: top-1 {both('top1', '{:.3f}')}, oracle-normalised "
        f"{both('oracle_normalised_transfer')}, per-target Spearman {both('spearman')}. Paired differences "
        f"over the targets where both methods have a value, 95% bootstrap CI; {verdict_rule(metrics)}."
    ]
    for b in SELECTION_VERDICT:
        block = paired.get(f"fisher - {b}")
        if not block:
            continue
        cells = [f"{METRIC_LONG[k]} {_verdict(metrics, f'fisher - {b}', k)}" for k in METRIC_LONG if block.get(k)]
        out.append(f"- FisherSketch − {_plain(label.get(b, b))}: " + "; ".join(cells) + ".")
    w = f.get("within_family", {}).get("spearman")
    if w and w.get("mean") is not None:
        cw = ceil.get("within_spearman")
        out.append(
            f"- Within the target's family (same-family candidates only): FisherSketch Spearman "
            f"{_mci(w)} over {w['n']} targets" + ("" if not cw else f", ceiling {_mci(cw)}") + "."
        )
    return out


METRIC_LONG = {
    "spearman": "Δ per-target Spearman",
    "top1": "Δ top-1",
    "oracle_normalised_transfer": "Δ oracle-normalised",
}


def within_table(metrics: dict, label: dict[str, str]) -> list[str]:
    """Noise ceiling, then per method: per-target Spearman and top-1 with their bootstrap CIs
    over targets, pooled Spearman with its Mantel p; constant scores cannot rank."""
    chance = next(iter(metrics["methods"].values()))["chance_top1"]
    n_perm = metrics["correlation"]["fisher"]["pooled"]["n_perm"]
    rows = [
        f"| method | per-target Spearman (95% CI) | top-1 (95% CI; chance {chance:.3f}) "
        f"| pooled ρ_s (Mantel p, {n_perm:,} permutations) |",
        "|---|---|---|---|",
    ]
    noise = metrics.get("truth_noise", {})
    if noise.get("ceiling"):
        ceil = noise["ceiling"]
        rows.append(f"| {_ceiling_label(noise)} | {_mci(ceil['spearman'])} | {_mci(ceil['top1'], '{:.3f}')} | – |")
    constant, methods = metrics.get("constant_methods", []), metrics["methods"]
    for name in (n for n in _ordered(methods) if n not in constant):
        m = methods[name]
        rows.append(
            f"| {label.get(name, name)} | {_mci(m['spearman'])} | {_mci(m['top1'], '{:.3f}')} "
            f"| {_pooled(metrics, name) or 'n/a'} |"
        )
    return (
        rows
        + _note_rows({n: "cannot rank" for n in constant if n in methods}, "constant: ", 3, label)
        + _note_rows(metrics.get("cannot_run", {}), "cannot run: ", 3, label)
    )


def within_verdict(metrics: dict, label: dict[str, str]) -> list[str]:
    """What the numbers allow: FisherSketch's paired per-target Spearman difference to each
    of :data:`WITHIN_VERDICT` (rule of :func:`_verdict`), its distance to the noise ceiling
    and whether its pooled Mantel p is below 0.05."""
    paired, f = metrics.get("paired", {}), metrics["methods"]["fisher"]
    parts = [
        f"− {_plain(label.get(b, b))} {_verdict(metrics, f'fisher - {b}', 'spearman')}"
        for b in WITHIN_VERDICT
        if f"fisher - {b}" in paired
    ]
    ceil = metrics.get("truth_noise", {}).get("ceiling")
    po = metrics["correlation"]["fisher"]["pooled"]
    return [
        f"Verdict (per-target Spearman over the targets where both methods rank, at most "
        f"{f['spearman']['n']}; {verdict_rule(metrics)}): FisherSketch " + "; ".join(parts) + ". "
        f"FisherSketch's per-target Spearman is {_mci(f['spearman'])}"
        + ("" if not ceil else f" against a noise ceiling of {_mci(ceil['spearman'])}")
        + f"; pooled ρ_s {po['rho']:.2f}, Mantel p {po['p_perm']:.3f} "
        f"({'below' if po['p_perm'] < 0.05 else 'not below'} 0.05)."
    ]


def within_lines(rec: dict) -> list[str]:
    """The within-collection SMILES record: run and ground-truth noise, the method table,
    FisherSketch's paired differences (a constant method has no Spearman) and the verdict."""
    m = rec["metrics"]
    label = labels(m)
    paired_label = {
        **label,
        **{n: f"{label.get(n, n)} (constant: no Spearman)" for n in m.get("constant_methods", [])},
    }
    centred = centred_pooled_line(m, label)
    return (
        noise_lines(rec)
        + [""]
        + within_table(m, label)
        + [""]
        + paired_table(m, WITHIN_PAIRED_COLS, paired_label)
        + [""]
        + within_verdict(m, label)
        + ([""] + centred if centred else [])
    )


def centred_pooled(scores: dict, truth: dict) -> float:
    """Pooled Spearman over every (target, source ≠ target) pair between a method's scores and
    the truth with each target's mean over its sources removed: the pooled statistic without
    the differences between targets' overall gains (NaN when either side is constant)."""
    from updatescope.select.metrics import pooled_spearman

    centred = {}
    for t, row in truth.items():
        vals = {s: v for s, v in row.items() if s != t}
        if vals:
            mu = sum(vals.values()) / len(vals)
            centred[t] = {s: v - mu for s, v in vals.items()}
    return pooled_spearman(scores, centred)["rho"]


def centred_pooled_line(m: dict, label: dict[str, str]) -> list[str]:
    """One line: FisherSketch's and CKA's pooled ρ_s beside the same with each target's mean
    perplexity reduction removed (computed here from the record's score and truth tables)."""
    truth = m.get("ground_truth", {}).get("ppl_reduction")
    if not truth or not m.get("scores"):
        return []  # a record without its tables: nothing to compute
    parts = []
    for name in ("fisher", "cka"):
        if name in m["scores"]:
            rho = m["correlation"][name]["pooled"]["rho"]
            parts.append(
                f"{label.get(name, name)} {_num(rho, '{:.2f}')} → "
                f"{_num(centred_pooled(m['scores'][name], truth), '{:.2f}')}"
            )
    return [
        "Pooled ρ_s → the same with each target's mean perplexity reduction removed (only the "
        "ranking within targets is left, pooled; computed by this script from the record's tables): "
        + "; ".join(parts)
        + "."
    ]


# ------------------------------------------------------------- select (document selection)
KINDS = {
    "evidence": evidence_table,
    "paired": paired_table,
    "truth": truth_table,
    "pairs": pairs_table,
    "sketchexact": sketch_exact_lines,
    "correlation": correlation_table,
}


def vision_groups_table(metrics: dict) -> list[str]:
    """EfficientNet-lite0 estimator accuracy per task group (all pairs, the label-map tasks,
    the spanning family), fisher and error, with the truth's spread beside the error."""
    v = metrics["vision"]
    acc = v["accuracy"]
    groups = [("all tasks", len(v["tasks"]), acc)] + [
        (name.replace("_", "-"), len(block["tasks"]), block) for name, block in acc.get("groups", {}).items()
    ]
    rows = [
        "| tasks | pairs | quantity | exact range (median) | truth sd | Spearman, mean [min, max] over bases "
        "| mean \\|err\\| | RMSE / truth sd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, n, block in groups:
        for kind in ("fisher", "error"):
            a = block[kind]
            rows.append(
                f"| {label} ({n}) | {a['pairs']} | {kind} | {a['exact_min']:.3f} – {a['exact_max']:.3f} "
                f"({a['exact_median']:.3f}) | {a['truth_sd']:.3f} | {a['spearman_mean']:.3f} "
                f"[{a['spearman_min']:.3f}, {a['spearman_max']:.3f}] | {a['mean_abs_err']:.4f} | "
                f"{a['rel_err']:.3f} |"
            )
    return rows


def vision_lines(rec: dict) -> list[str]:
    """How the EfficientNet record was made, and the verdict its spanning group allows
    (rule: reproduced when the fisher Spearman over the spanning pairs, worst base, reaches
    the paper's 0.97 minus 0.02)."""
    v = rec["metrics"]["vision"]
    env = rec.get("env", {})
    span = v["accuracy"].get("groups", {}).get("spanning", {}).get("fisher")
    lines = [
        f"Record `docs/results/{rec['_file']}`: {v['n_tasks']} tasks × {v['n_per_task']} views "
        f"(d = {v['d']}, K = {v['K']}), m = {rec['config']['vision']['sketch_dim']}, "
        f"{len(rec['config']['vision']['seeds'])} random bases; {rec['seconds']:.0f} s wall, "
        f"commit {str(env.get('git_commit'))[:8]}, clean tree: {env.get('git_dirty') is False}."
    ]
    if span is not None:
        ok = span["spearman_min"] >= PAPER_ESTIMATOR_SPEARMAN - 0.02
        lines += [
            "",
            f"Verdict (spanning family, paper {PAPER_ESTIMATOR_SPEARMAN}): "
            f"**{'reproduced' if ok else 'not reproduced'}** — fisher Spearman "
            f"{span['spearman_mean']:.3f} (worst base {span['spearman_min']:.3f}) where the exact A_F spans "
            f"{span['exact_min']:.2f} – {span['exact_max']:.2f}.",
        ]
    return lines


# ------------------------------------------------- summary blocks (several records each)
def _kind(m: dict) -> str:
    """Which experiment a selection record is from: "smiles", "verbalizer" or "selection"."""
    if "correlation" in m:
        return "smiles"
    if "design" in m or "verbalizer_token_ids" in m:
        return "verbalizer"
    return "selection"


#: per record kind, the headline metric of the evidence page's method table: (label, getter)
def _headline(rec: dict) -> tuple[str, Any]:
    m = rec["metrics"]
    kind = _kind(m)
    if kind == "smiles":  # pooled Spearman with the perplexity reduction
        return "pooled ρ_s (p_perm)", lambda name: _pooled(m, name)
    if kind == "verbalizer":  # top-1 over the answer-word sets
        return "top-1", lambda name: None if name not in m["methods"] else f"{m['methods'][name]['top1']['mean']:.2f}"
    return "top-1 / per-target Spearman", lambda name: (  # source selection
        None
        if name not in m["methods"]
        else f"{m['methods'][name]['top1']['mean']:.2f} / {_num(m['methods'][name]['spearman'].get('mean'), '{:.2f}')}"
    )


def readme_methods(recs: list[dict]) -> list[str]:
    """Every method (and the trivial baselines, and the noise ceiling) on each record's
    headline metric; one column per record."""
    heads = [_headline(r) for r in recs]
    cols = [f"{r['_file'].removesuffix('.json')}: {h[0]}" for r, h in zip(recs, heads)]
    rows = ["| method | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    names: list[str] = []
    for r in recs:
        names += [n for n in r["metrics"]["methods"] if n not in names]
    for name in names:
        cells = [h[1](name) for h in heads]
        rows.append(f"| {LABEL.get(name, name)} | " + " | ".join(c or "–" for c in cells) + " |")
    ceil = []
    for r, h in zip(recs, heads):
        c = r["metrics"].get("truth_noise", {}).get("ceiling")
        if not c or "correlation" in r["metrics"]:
            ceil.append("–")
        elif h[0] == "top-1":
            ceil.append(f"{c['top1']['mean']:.2f}")
        else:
            ceil.append(f"{c['top1']['mean']:.2f} / {_num(c['spearman'].get('mean'), '{:.2f}')}")
    rows.append(
        "| *noise ceiling* (one seed's truth predicting the others'; with eval-sequence noise where the record "
        "has it) | " + " | ".join(ceil) + " |"
    )
    return rows


def readme_trust(recs: list[dict]) -> list[str]:
    """One line per record: FisherSketch against the family / collection label (within one
    SMILES collection: the same-property label, :func:`labels`) and CKA, as
    paired per-target differences with 95% bootstrap CIs, and what the numbers allow (rule of
    :func:`_verdict`: sign-flip test, Holm over the record's family of comparisons)."""
    lines = []
    for r in recs:
        m, name = r["metrics"], r["_file"].removesuffix(".json")
        kind = _kind(m)
        wanted = ("top1",) if kind == "verbalizer" else ("spearman",) if kind == "smiles" else ("spearman", "top1")
        parts = [
            f"FisherSketch − {_plain(labels(m)[b])}: "
            + ", ".join(f"Δ {METRIC[metric]} {_verdict(m, f'fisher - {b}', metric)}" for metric in wanted)
            for b in ("family", "cka")
            if f"fisher - {b}" in m.get("paired", {})
        ]
        lines.append(f"- `{name}`: " + "; ".join(parts) + ".")
    return lines


#: paper A's numbers for each selection claim (Llama-3.1-8B), by record kind
PAPER_CLAIMS = {
    "selection": ("FisherSketch picks the best source", {"top1": 0.457, "oracle_normalised_transfer": 0.984}),
    "verbalizer": ("FisherSketch picks the best answer-word set", {"top1": 2 / 3}),
    "smiles": ("A_F correlates with the perplexity reduction", {"pooled": 0.53}),
}


def _against(block: dict, paper: float) -> str:
    """Where the paper's value lies against our 95% CI."""
    ci = block.get("ci")
    if block.get("mean") is None or not ci:
        return "n/a"
    return (
        "inside our CI"
        if ci[0] - 1e-9 <= paper <= ci[1] + 1e-9
        else "above our CI"
        if paper > ci[1]
        else "below our CI"
    )


def claims_table(recs: list[dict]) -> list[str]:
    """One row per selection record: the claim, FisherSketch against the paper's number
    (where the paper's value lies against our 95% CI) and the noise ceiling, and the paired
    per-target difference to the family / collection label and to CKA (rule of
    :func:`_verdict`) — generated, so no verdict number is typed."""
    rows = [
        "| record | claim (paper) | FisherSketch (95% CI) | noise ceiling | paper's value | "
        "FisherSketch − family / collection label | FisherSketch − CKA |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in recs:
        m, name = r["metrics"], r["_file"].removesuffix(".json")
        kind = _kind(m)
        claim, paper = PAPER_CLAIMS[kind]
        f = m["methods"]["fisher"]
        ceil = (m.get("truth_noise") or {}).get("ceiling") or {}
        if kind == "smiles":
            po = m["correlation"]["fisher"]["pooled"]
            ours = f"pooled ρ_s {po['rho']:.2f}, p_perm {po['p_perm']:.3f}"
            here = "significant here too" if po["p_perm"] < 0.05 else "not significant here"
            where = f"ρ_s {paper['pooled']:.2f}: {here}"
            cell_ceiling = "–"
        else:
            keys = [k for k in paper if k in f]
            ours = "; ".join(f"{METRIC_SHORT[k]} {_mci(f[k])}" for k in keys)
            where = "; ".join(f"{METRIC_SHORT[k]} {paper[k]:.3f}: {_against(f[k], paper[k])}" for k in keys)
            cell_ceiling = "; ".join(f"{METRIC_SHORT[k]} {_mci(ceil.get(k))}" for k in keys) if ceil else "–"
        metric = "top1" if kind == "verbalizer" else "spearman"
        lab = labels(m)
        cmp = [
            ("" if b != "family" or lab is LABEL else f"against the {_plain(lab[b])} label: ")
            + f"Δ {METRIC[metric]} {_verdict(m, f'fisher - {b}', metric)}"
            for b in ("family", "cka")
        ]
        n_t = f["top1"]["n"]
        rows.append(f"| `{name}` ({n_t} targets) | {claim} | {ours} | {cell_ceiling} | {where} | {cmp[0]} | {cmp[1]} |")
    return rows


METRIC_SHORT = {"top1": "top-1", "oracle_normalised_transfer": "oracle-norm."}


def _plain(label: str) -> str:
    return label.replace("*trivial:* ", "")


METRIC = {"spearman": "per-target Spearman", "top1": "top-1"}
#: paper A's estimator figures on ViT-B/16 (the column the estimator table compares with)
PAPER_ESTIMATOR = {"fisher": "0.97", "coupling": "0.95", "speedup": "89×"}


def estimator_table(recs: list[dict]) -> list[str]:
    """Sketch vs exact on SmolLM2 and EfficientNet-lite0, one column per (record, part):
    Spearman over pairs (mean [min, max] over bases) / mean |err| per kind, the exact fisher
    range (median), the speed-ups and the maps each record used."""
    import statistics

    cols = []
    for r in recs:
        m, name = r["metrics"], r["_file"].removesuffix(".json")
        cols.append((f"SmolLM2 {name.split('_')[-1]} ({m['accuracy']['fisher']['pairs']} pairs)", m, None))
        if "vision" not in m:  # a SmolLM2-only record (parts=["smollm2"])
            continue
        v = m["vision"]
        cols.append((f"EfficientNet {name.split('_')[-1]} ({v['accuracy']['fisher']['pairs']} pairs)", v, v))
    rows = [
        "| quantity (Spearman vs exact / mean \\|err\\|) | " + " | ".join(c[0] for c in cols) + " | paper (ViT-B/16) |",
        "|---" * (len(cols) + 2) + "|",
    ]
    names = {
        "fisher": "fisher A_F",
        "activation": "activation Scov(M_a)",
        "error": "error Scov(Γ_e)",
        "coupling": "coupling ρ",
    }
    for kind, label in names.items():
        cells = []
        for _, m, _v in cols:
            a = m["accuracy"][kind]
            cells.append(
                f"{a['spearman_mean']:.3f} [{a['spearman_min']:.3f}, {a['spearman_max']:.3f}] / {a['mean_abs_err']:.3f}"
            )
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {PAPER_ESTIMATOR.get(kind, '–')} |")
    cells = []
    for _, m, _v in cols:
        a = m["accuracy"]["fisher"]
        cells.append(f"{a['exact_min']:.4f} – {a['exact_max']:.3f} ({statistics.median(a['exact']):.3f})")
    rows.append("| exact fisher range (median) | " + " | ".join(cells) + " | |")
    cells = []
    for _, m, _v in cols:
        sp = m["speed"]
        cells.append(f"{sp['speedup']:.1f}× ({sp['sketch_median_s']:.2f} s vs {sp['exact_median_s']:.1f} s)")
    n = cols[0][1]["speed"]["n_per_task"][0]
    rows.append(
        f"| speed-up over exact, n = {n:,}, 2 tasks | " + " | ".join(cells) + f" | {PAPER_ESTIMATOR['speedup']} |"
    )
    cells = []
    for _, _m, v in cols:
        if v is None or "matrix_seconds" not in v:
            cells.append("–")
            continue
        ms = v["matrix_seconds"]
        sk = statistics.median(ms["sketch_s"])
        cells.append(f"{ms['exact_s'] / sk:.1f}× ({sk:.2f} s vs {ms['exact_s']:.1f} s, {v['n_tasks']} tasks)")
    rows.append("| speed-up, whole task matrix | " + " | ".join(cells) + " | |")
    rows.append(
        "| maps (act / error) | "
        + " | ".join(f"{m['maps']['act_map']} / {m['maps']['error_map']}" for _, m, _v in cols)
        + " | |"
    )
    return rows


#: the columns of :func:`seeds_table`: metric -> header
SEED_COLS = {"top1": "top-1", "oracle_normalised_transfer": "oracle-norm.", "spearman": "per-target Spearman"}


def _seed_names(recs: list[dict]) -> list[str]:
    """The methods every record scored (with numbers), in :data:`ORDER`."""
    return [
        n
        for n in _ordered(recs[0]["metrics"]["methods"])
        if all(n in r["metrics"]["methods"] and "error" not in r["metrics"]["methods"][n] for r in recs)
    ]


def seeds_table(recs: list[dict]) -> list[str]:
    """The same run at several seeds: per method, each metric's mean over targets, seed by
    seed (``seed a → seed b``)."""
    seeds = " → ".join(f"seed {r['config'].get('seed', '?')}" for r in recs)
    rows = [f"| method ({seeds}) | " + " | ".join(SEED_COLS.values()) + " |", "|---" * (len(SEED_COLS) + 1) + "|"]
    for name in _seed_names(recs):
        cells = [
            " → ".join(_num(r["metrics"]["methods"][name][k].get("mean"), "{:.2f}") for r in recs) for k in SEED_COLS
        ]
        rows.append(f"| {labels(recs[0]['metrics']).get(name, name)} | " + " | ".join(cells) + " |")
    return rows


def seed_truth_lines(recs: list[dict]) -> list[str]:
    """How stable the ground truth and the methods' metrics are between two seeds of one run:
    Pearson of the cross transfers, per-target Spearman of the sources' order, best source,
    and the largest change of each method's per-target Spearman and top-1."""
    import numpy as np
    from scipy.stats import spearmanr

    a, b = (r["metrics"]["ground_truth"]["transfer"] for r in recs[:2])
    names = list(a)
    cross = [(a[t][s], b[t][s]) for t in names for s in names if s != t]
    pearson = float(np.corrcoef(np.array(cross).T)[0, 1])
    rhos = [spearmanr([a[t][s] for s in names if s != t], [b[t][s] for s in names if s != t])[0] for t in names]
    best = sum(
        max((s for s in names if s != t), key=a[t].get) == max((s for s in names if s != t), key=b[t].get)
        for t in names
    )
    ms = [r["metrics"]["methods"] for r in recs[:2]]
    d_sp = max(abs(ms[0][n]["spearman"]["mean"] - ms[1][n]["spearman"]["mean"]) for n in _seed_names(recs))
    d_t1 = [abs(ms[0][n]["top1"]["mean"] - ms[1][n]["top1"]["mean"]) for n in _seed_names(recs)]
    return [
        f"The ground truth is stable: the two {len(names)} × {len(names) - 1} transfer tables correlate at "
        f"Pearson {pearson:.3f}, each target's ranking of sources agrees at Spearman {np.mean(rhos):.2f} on "
        f"average (min {min(rhos):.2f}), and the best source is the same for {best} of {len(names)} targets. "
        f"Between the seeds a method's per-target Spearman moves by at most {d_sp:.2f}, its top-1 by up to "
        f"{max(d_t1):.2f}."
    ]


def _secs(rec: dict) -> str:
    return f"{rec.get('seconds', 0):.0f} s"


def _paper_word(block: dict, paper: float) -> str:
    """ "not excluded" where the paper's value lies inside our 95% CI, else "**not** reproduced"."""
    return "not excluded" if _against(block, paper) == "inside our CI" else "**not** reproduced"


def _estimator_word(ours: float, paper: float, tol: float = 0.02) -> str:
    """ "**reproduced**" where our sketch-vs-exact Spearman reaches the paper's value less ``tol``."""
    return "**reproduced**" if ours >= paper - tol else "**not** reproduced"


def _powered_row(rec: dict) -> str:
    """The summary row of a powered multi-seed source-selection record: FisherSketch's
    per-target Spearman, oracle-normalised transfer and top-1 beside the noise ceiling, the
    paper's words by :func:`_paper_word`, and the record's pre-registered verdicts (Holm over
    the family) as the record states them."""
    m = rec["metrics"]
    f, ceil, noise = m["methods"]["fisher"], m["truth_noise"]["ceiling"], m["truth_noise"]
    pc = PAPER_CLAIMS["selection"][1]
    n_ft = _n_finetunings(m["ground_truth"])
    primary = m.get("verdicts", {}).get("primary") or []
    prereg = "; ".join(f"{v['comparison']}: {v['word']} (Holm p {v['p_holm']:.3f})" for v in primary)
    predictive = "predictive" if f["spearman"]["ci"][0] > 0 else "not shown predictive"
    return (
        f"| source-selection, {m['n_domains']} domains / {m['n_families']} families, "
        f"{len(next(iter(m['candidates'].values())))} candidates per target | powered, {_secs(rec)} of scoring; "
        f"{noise['n_seeds']} seeds, {n_ft} fine-tunings ({m['ground_truth']['finetune_seconds']:,.0f} s) "
        f"| LoRA, last 2 blocks; noise ceiling (seeds and eval samples) "
        f"Spearman {ceil['spearman']['mean']:.2f}, top-1 {ceil['top1']['mean']:.2f} "
        f"| per-target Spearman {_mci(f['spearman'])}, oracle-norm. {_mci(f['oracle_normalised_transfer'])}, "
        f"top-1 {_mci(f['top1'])} (chance {f['chance_top1']:.2f}) | top-1 45.7%, oracle-norm. 98.4% "
        f"| {predictive}; top-1 {_paper_word(f['top1'], pc['top1'])}, oracle-norm. "
        f"{_paper_word(f['oracle_normalised_transfer'], pc['oracle_normalised_transfer'])}; pre-registered "
        f"({len(primary)} comparisons): {prereg or 'none in the record'} |"
    )


def summary_table(recs: list[dict]) -> list[str]:
    """The summary, one row per experiment, from the records source_selection_powered (the
    powered multi-seed run: :func:`_powered_row`), then the first runs: source_selection_full +
    its seed-1 rerun, verbalizer_quick, verbalizer_full, smiles_full and estimator_full (in
    that order; its EfficientNet part holds the label-map and the spanning groups). The
    paper's values are fixed text; every number of ours and every word comes from a record
    by the rule stated under the table: a paper's top-1 or
    oracle-normalised value is "not excluded" inside our 95% CI, else not reproduced; a
    correlation is reproduced with a positive pooled ρ_s and a permutation p below 0.05;
    activation-only methods are blind when their top-1 is at or below chance
    (:func:`chance_word`); an estimator Spearman is reproduced when it reaches the paper's value
    less 0.02; "predictive" where FisherSketch's per-target Spearman CI lies above 0."""
    pw, ss, ss1, vq, vf, sm, est = recs
    rows = [
        "| experiment | run | ground truth | headline (FisherSketch) | paper | reproduced? |",
        "|---|---|---|---|---|---|",
        _powered_row(pw),
    ]
    m, m1 = ss["metrics"], ss1["metrics"]
    f, f1 = m["methods"]["fisher"], m1["methods"]["fisher"]
    act = [m["methods"][n]["spearman"]["mean"] for n in ("activation", "exact_activation")]
    best_t1 = max(m["methods"], key=lambda n: m["methods"][n]["top1"]["mean"] if "top1" in m["methods"][n] else -1)
    sp_ci = f["spearman"]["ci"]
    predictive = "predictive" if sp_ci[0] > 0 else "not shown predictive"
    act_cis = [m["methods"][n]["spearman"]["ci"] for n in ("activation", "exact_activation")]
    blind_ss = "not blind" if any(c[0] > 0 for c in act_cis) else "not shown informative"
    pc = PAPER_CLAIMS["selection"][1]
    rows.append(
        f"| source-selection, {m['n_domains']} domains / {m['n_families']} families | full, {_secs(ss)}; 2 seeds "
        f"| LoRA, last 2 blocks | per-target Spearman {_mci(f['spearman'])} (seed 1: {f1['spearman']['mean']:.2f}), "
        f"oracle-norm. {f['oracle_normalised_transfer']['mean']:.2f} ({f1['oracle_normalised_transfer']['mean']:.2f}), "
        f"top-1 {f['top1']['mean']:.2f} ({f1['top1']['mean']:.2f}; chance {f['chance_top1']:.2f}) "
        f"| top-1 45.7%, oracle-norm. 98.4% | {predictive}; top-1 {_paper_word(f['top1'], pc['top1'])}, "
        f"oracle-norm. {_paper_word(f['oracle_normalised_transfer'], pc['oracle_normalised_transfer'])}; "
        f"activation-only methods are {blind_ss} here (Spearman CI above 0; best top-1: "
        f"{labels(m).get(best_t1, best_t1)}; lower Spearman {min(act):.2f}–{max(act):.2f}) |"
    )
    paper_v = PAPER_CLAIMS["verbalizer"][1]["top1"]

    def blind(meths: dict) -> str:
        words = {chance_word(meths[n]["top1"]["mean"], meths[n]["chance_top1"]) for n in ACTIVATION_ONLY if n in meths}
        return "**reproduced**" if words <= {"at chance", "below chance"} else "**not** reproduced"

    v = vq["metrics"]["methods"]
    n_seeds = vq["metrics"].get("truth_noise", {}).get("n_seeds", 1)
    rows.append(
        f"| verbalizer, {len(vq['metrics']['ground_truth']['transfer'])} sets | quick, {_secs(vq)}; {n_seeds} "
        "seeds "
        f"| LoRA | top-1 {v['fisher']['top1']['mean']:.2f} (exact A_F {v['exact_fisher']['top1']['mean']:.2f}), "
        f"activation-only {v['activation']['top1']['mean']:.2f} (chance {v['activation']['chance_top1']:.2f}) "
        f"| 66.7%, Scov(M_a) 20.0% | activation blindness {blind(v)}; 66.7%: exact A_F "
        f"{_paper_word(v['exact_fisher']['top1'], paper_v)}, the sketch {_paper_word(v['fisher']['top1'], paper_v)} |"
    )
    v = vf["metrics"]["methods"]
    ratio = v["exact_fisher"]["regret"]["mean"] / v["random"]["regret"]["mean"]
    rows.append(
        f"| verbalizer, {len(vf['metrics']['ground_truth']['transfer'])} sets | full, {_secs(vf)} | LoRA "
        f"| top-1 {v['fisher']['top1']['mean']:.2f} (exact A_F {v['exact_fisher']['top1']['mean']:.2f}, chance "
        f"{v['fisher']['chance_top1']:.2f}), activation-only {_activation_chance(v)} | 66.7% "
        f"| blindness {blind(v)}; 66.7%: exact A_F {_paper_word(v['exact_fisher']['top1'], paper_v)} (its top-1 "
        f"{v['exact_fisher']['top1']['mean']:.2f} against random's {v['random']['top1']['mean']:.2f}, at {ratio:.1f}× "
        "random's regret) |"
    )
    c = sm["metrics"]["correlation"]

    def sig(po: dict) -> bool:
        return po["rho"] is not None and po["rho"] > 0 and po["p_perm"] < 0.05

    rows.append(
        f"| smiles, {len(sm['metrics']['ground_truth']['transfer'])} domains | full, {_secs(sm)} | LoRA "
        f"| pooled ρ_s {c['fisher']['pooled']['rho']:.2f}, permutation p = {c['fisher']['pooled']['p_perm']:.3f} "
        f"| ρ_s 0.53, p = 0.006 | {'**reproduced**' if sig(c['fisher']['pooled']) else '**not** reproduced'}; "
        f"the contrast with activation-only {'is not' if sig(c['activation']['pooled']) else 'is'} (activation-only "
        f"pooled ρ_s {c['activation']['pooled']['rho']:.2f}, p {c['activation']['pooled']['p_perm']:.3f}) |"
    )
    a = est["metrics"]["accuracy"]
    marg = [a[k]["spearman_mean"] for k in ("activation", "error")]
    rows.append(
        f"| estimator, SmolLM2 K = 49,152 | full, {_secs(est)} (both models) | exact float64 | A_F Spearman "
        f"{a['fisher']['spearman_mean']:.3f}, marginals {min(marg):.3f}–{max(marg):.3f} | 0.97 (ViT) "
        f"| {_estimator_word(a['fisher']['spearman_mean'], PAPER_ESTIMATOR_SPEARMAN)} |"
    )
    g = est["metrics"]["vision"]["accuracy"]["groups"]
    lm, spn = g["label_maps"]["fisher"]["spearman_mean"], g["spanning"]["fisher"]["spearman_mean"]
    rows.append(
        f"| estimator, EfficientNet-lite0 K = 1,000 | full, {len(g['label_maps']['tasks'])} × 1,000 views + "
        f"{len(g['spanning']['tasks'])} spanning tasks | exact float64 | A_F Spearman "
        f"{lm:.3f} on the label-map tasks (truth concentrated near 0), "
        f"{spn:.3f} on the spanning family | 0.97 | spanning family "
        f"{_estimator_word(spn, PAPER_ESTIMATOR_SPEARMAN)}; label-map tasks "
        f'{_estimator_word(lm, PAPER_ESTIMATOR_SPEARMAN)} (see "spanning truth") |'
    )
    va = est["metrics"]["vision"]["accuracy"]
    cs, cv = a["coupling"]["spearman_mean"], va["coupling"]["spearman_mean"]
    rows.append(
        f"| estimator, coupling ρ | both | exact | Spearman {cs:.2f} (SmolLM2), "
        f"{cv:.2f} (EfficientNet) | 0.95 | {_estimator_word(cs, 0.95)} (SmolLM2), {_estimator_word(cv, 0.95)} "
        "(EfficientNet) |"
    )
    sp = est["metrics"]["speed"]
    su = [sp["speedup"], est["metrics"]["vision"]["speed"]["speedup"]]
    rows.append(
        f"| estimator, speed-up at n = {sp['n_per_task'][0]:,} | both | – | {su[0]:.1f}× (SmolLM2), "
        f"{su[1]:.1f}× (K = 1,000) | 89× | {'smaller' if max(su) < 89 else 'not smaller'} than the paper's (our "
        "exact reference is BLAS-blocked) |"
    )
    return rows + [
        "",
        "Words in the last column by rule: a paper's top-1 or oracle-normalised value is *not excluded* where it "
        "lies inside our 95% CI, else not reproduced; a correlation is reproduced with a positive pooled ρ_s and a "
        "permutation p below 0.05; activation-only methods are blind where every one picks at or below chance; an "
        "estimator Spearman is reproduced where it reaches the paper's value less 0.02; *predictive* where "
        "FisherSketch's per-target Spearman CI lies above 0; the first row's pre-registered words are its "
        "record's own (paired sign-flip over targets, Holm over the family, 5% level).",
    ]


#: the activation-only methods of a verbalizer record (they see the inputs only)
ACTIVATION_ONLY = ("activation", "exact_activation", "cka", "rsa", "svcca")


def chance_word(top1: float, chance: float, tol: float = 5e-4) -> str:
    """ "below chance", "at chance" or "above chance": a top-1 against its chance level
    (equal within ``tol``, below the three decimals the tables print)."""
    return "below chance" if top1 < chance - tol else "above chance" if top1 > chance + tol else "at chance"


def _activation_chance(methods: dict, nums: bool = True) -> str:
    """Where the activation-only methods' top-1 lies against chance, one word for all when
    they agree: "at chance" / "below chance (0.158 against 0.200)"."""
    present = [n for n in ACTIVATION_ONLY if n in methods and "top1" in methods[n]]
    words = {n: chance_word(methods[n]["top1"]["mean"], methods[n]["chance_top1"]) for n in present}
    if len(set(words.values())) == 1:
        n = present[0]
        word = words[n]
        nums = nums and f"{methods[n]['top1']['mean']:.3f} against {methods[n]['chance_top1']:.3f}"
        return word if word == "at chance" or not nums else f"{word} ({nums})"
    return ", ".join(f"{LABEL.get(n, n)} {w}" for n, w in words.items())


def activation_chance_lines(recs: list[dict]) -> list[str]:
    """Per verbalizer record: every activation-only method's top-1 against chance, with the word."""
    out = []
    for r in recs:
        m = r["metrics"]["methods"]
        present = [n for n in ACTIVATION_ONLY if n in m and "top1" in m[n]]
        top = sorted({round(m[n]["top1"]["mean"], 3) for n in present})
        chance = m[present[0]]["chance_top1"]
        out.append(
            f"- `{r['_file'].removesuffix('.json')}`: activation-only methods ("
            + ", ".join(_plain(LABEL.get(n, n)) for n in present)
            + f") top-1 {' – '.join(f'{t:.3f}' for t in top)} against chance {chance:.3f}: "
            f"{_activation_chance(m, nums=False)}."
        )
    return out


def estimator_setup(rec: dict) -> list[str]:
    """The estimator set-up paragraph, its counts from the record (SmolLM2 domains, the
    EfficientNet task groups and pairs, views per task, bases)."""
    c, m = rec["config"], rec["metrics"]
    v = m["vision"]
    groups = v["accuracy"].get("groups", {})
    n_maps = len(groups["label_maps"]["tasks"]) if "label_maps" in groups else v["n_tasks"]
    n_span = len(groups["spanning"]["tasks"]) if "spanning" in groups else 0
    span = (
        ""
        if not n_span
        else f' and {n_span} *spanning* tasks (see "spanning truth" below), {v["n_tasks"]} tasks in all, '
        f"{v['accuracy']['fisher']['pairs']} pairs"
    )
    return [
        f"Set-up. Sketch (m = {c['sketch_dim']:,}) vs the exact float64 Gram identity on the *same* samples, "
        f"every task pair, {len(c['seeds'])} random bases (mean [min, max] of the Spearman over bases). "
        f"*SmolLM2-135M* (d = {m['d']:,}, K = {m['K']:,}): tasks are the {m['n_domains']} source-selection "
        f"domains, each its sketch split ({m['accuracy']['fisher']['pairs']} pairs). *EfficientNet-lite0* "
        f"(d = {v['d']:,}, K = {v['K']:,}; the packaged analogue of the paper's ViT-B/16): one forward pass "
        f"over a pool of {v['pool_views']:,} augmented views of the real photographs shipped inside installed "
        f"packages, then {n_maps} label-map tasks, each a subset of photographs with its own label map (the "
        f"model's top-1 class, its k-th class, one class per photograph, a permuted or coarsened top-1){span}; "
        f"{v['n_per_task']:,} views per task."
    ]


def reanalysis_cka(recs: list[dict]) -> list[str]:
    """FisherSketch against CKA on the 20-domain full run, from the per-target values the
    two single-seed records keep (each against its own seed's truth; the reanalysed record
    has no CKA table): the per-target difference averaged over the seeds, tested with
    :func:`updatescope.select.metrics.paired_verdicts` (Holm over the metrics compared)."""
    from updatescope.select.metrics import paired_difference, paired_verdicts

    diffs = {}
    for metric in VERDICT_METRICS:
        per_seed = [paired_diffs(r["metrics"], "fisher - cka", metric) for r in recs]
        if any(d is None for d in per_seed):
            continue
        common = [t for t in per_seed[0] if all(t in d for d in per_seed)]
        if len(common) >= 2:
            diffs[metric] = {t: sum(d[t] for d in per_seed) / len(per_seed) for t in common}
    seeds = " and ".join(str(r["config"].get("seed", "?")) for r in recs)
    verdicts = paired_verdicts(diffs, family=f"FisherSketch − CKA on {len(diffs)} metrics")
    parts = []
    for v in verdicts:
        ci = paired_difference(diffs[v.comparison], dict.fromkeys(diffs[v.comparison], 0.0))["ci"]
        parts.append(
            f"Δ {METRIC_LONG[v.comparison].removeprefix('Δ ')} {v.mean:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}] "
            f"(n {v.n}), {v.word} ({v.note()})"
        )
    return [
        f"FisherSketch − CKA, per target against each seed's own truth (seeds {seeds}; the records keep "
        f"both methods' per-target values), averaged over the seeds; sign-flip test over targets, Holm over "
        f"the {len(verdicts)} metrics: " + "; ".join(parts) + "."
    ]


MULTI_KINDS = {
    "activation_chance": activation_chance_lines,
    "reanalysis_cka": reanalysis_cka,
    "readme_methods": readme_methods,
    "readme_trust": readme_trust,
    "estimator": estimator_table,
    "claims": claims_table,
    "seeds": seeds_table,
    "seedtruth": seed_truth_lines,
    "summary": summary_table,
}


def example_bank(rec: dict) -> list[str]:
    """The bank guide's example (docs/guide-banks.md): what ``index query`` and ``index dedup`` printed."""
    q, d = rec["metrics"]["query"], rec["metrics"]["dedup"]
    rows = q["rows"]

    def cell(r: dict) -> str:
        return (
            f"{r['source']} (fisher {_num(r['fisher'], '{:.2f}')} ± {_num(r['fisher_se'], '{:.2f}')}, "
            f"activation {_num(r['activation'], '{:.2f}')})"
        )

    skipped = "skips the target itself, " if q.get("skipped") else ""
    order = " above ".join(cell(r) for r in rows)
    dup = "finds no near-duplicates" if not d["duplicates"] else f"lists {len(d['duplicates'])} near-duplicate pair(s)"
    return [
        f"The query {skipped}ranks {order} — the same values `rank` prints — and dedup {dup} "
        f"(`docs/results/readme_examples.json`, written by `python docs/readme_examples.py`)."
    ]


def example_select(rec: dict) -> list[str]:
    """The select guide's example (docs/guide-select.md): the top k with their scores, and
    where the rest of the target's own documents ranked."""
    s = rec["metrics"]["select"]
    dom, scores, k = s["domains"], s["scores"], len(s["top"])
    target = rec["config"]["target"]

    def fmt(r: dict) -> str:
        return f"{_num(r['score'], '{:.2f}')} ± {_num(r['score_se'], '{:.2f}')}"

    top = s["top"]
    own = sum(dom[r["index"]] == target for r in top)
    head = f"The top {k} are all {target} documents" if own == k else f"{own} of the top {k} are {target} documents"
    line = f"{head} (scores {', '.join(fmt(r) for r in top)})"
    # the place of every scored document, from the scores (the score file ranks the kept top k only)
    ranked = sorted((r for r in scores if r["score"] is not None), key=lambda r: (-r["score"], r["index"]))
    rest = ranked[k:]
    later = [r for r in rest if dom[r["index"]] == target]
    if later:
        first = later[0]
        place = ranked.index(first) + 1
        ahead = rest[: place - 1 - k]
        ahead = [r for r in ahead if dom[r["index"]] != target]
        line += f"; the next {target} document ranks {place} ({fmt(first)})" + (
            f", behind {len(ahead)} other document(s) ({', '.join(fmt(r) for r in ahead)})" if ahead else ""
        )
    return [line + " (`docs/results/readme_examples.json`)."]


PAPER_ESTIMATOR_SPEARMAN = 0.97  # paper A: sketch vs exact A_F Spearman on ViT-B/16
KINDS["vision"] = vision_groups_table
KINDS["verdict"] = selection_verdict
KINDS["resolution"] = resolution_table
KINDS["budget"] = budget_table
KINDS["methods"] = methods_table
KINDS["prereg"] = prereg_verdicts
KINDS["correlation"] = lambda metrics: correlation_table(metrics, labels(metrics))
#: kinds rendered from the whole record (config, env, seconds), not only its metrics
RECORD_KINDS = {
    "estimatorsetup": estimator_setup,
    "noise": noise_lines,
    "visionnotes": vision_lines,
    "smileswithin": within_lines,
    "example_bank": example_bank,
    "example_select": example_select,
}


import coupling_table  # noqa: E402  (docs/coupling_table.py: the coupling-dark blocks)
import selection_reading  # noqa: E402  (docs/selection_reading.py: the source-selection readings)
import verbalizer_table  # noqa: E402  (docs/verbalizer_table.py: the verbalizer readings)

RECORD_KINDS["verbactivations"] = verbalizer_table.activation_lines
RECORD_KINDS["verbtruth"] = verbalizer_table.truth_lines
RECORD_KINDS["couplingsetup"] = coupling_table.setup_lines
KINDS["couplingmethods"] = coupling_table.methods_table
KINDS["couplingverdicts"] = coupling_table.verdicts_table
MULTI_KINDS["trustcoupling"] = coupling_table.trust_lines
RECORD_KINDS["selwall"] = selection_reading.wall_line
RECORD_KINDS["seltruth"] = selection_reading.truth_lines
RECORD_KINDS["selsingle"] = selection_reading.single_lines
RECORD_KINDS["selreading"] = selection_reading.reading_lines
MULTI_KINDS["selseeds"] = selection_reading.seeds_lines
MULTI_KINDS["selbudget"] = selection_reading.budget_lines
MULTI_KINDS["smilestruth"] = selection_reading.smiles_truth_lines
RECORD_KINDS["smilescorr"] = selection_reading.smiles_corr_lines
RECORD_KINDS["smilespooled"] = selection_reading.smiles_pooled_lines
MULTI_KINDS["budgetcheck"] = selection_reading.budget_check_lines
MULTI_KINDS["smileswithinreading"] = selection_reading.within_reading_lines
RECORD_KINDS["verbreading"] = selection_reading.verb_lines
RECORD_KINDS["verbresolution"] = selection_reading.resolution_lines
RECORD_KINDS["verbflip"] = selection_reading.flip_lines
RECORD_KINDS["verbdark"] = selection_reading.dark_lines
MULTI_KINDS["spanreading"] = selection_reading.span_lines
MULTI_KINDS["foldreading"] = selection_reading.fold_lines
MULTI_KINDS["claimsreading"] = selection_reading.claims_lines
MULTI_KINDS["evalnoise"] = selection_reading.eval_noise_lines
RECORD_KINDS["visionvstext"] = selection_reading.vision_vs_text_lines

import mixtures_table  # noqa: E402  (docs/mixtures_table.py: the mixtures evidence)
import routing_table  # noqa: E402  (docs/routing_table.py: the routing evidence)
import select_table  # noqa: E402  (docs/select_table.py: the document-selection evidence)

RECORD_KINDS["routingsetup"] = routing_table.setup_lines
KINDS["routingtable"] = routing_table.routers_table
KINDS["routingverdicts"] = routing_table.verdicts_table
RECORD_KINDS["routingguide"] = routing_table.guidance
RECORD_KINDS["routingcdsetup"] = routing_table.cd_setup_lines
KINDS["routingcdtable"] = routing_table.cd_table
KINDS["routingcdverdicts"] = routing_table.cd_verdicts
RECORD_KINDS["routingcdguide"] = routing_table.cd_guidance
RECORD_KINDS["mixturessetup"] = mixtures_table.setup_lines
KINDS["mixturestable"] = mixtures_table.arms_table
KINDS["mixturesverdicts"] = mixtures_table.verdicts_table
RECORD_KINDS["mixturesguide"] = mixtures_table.guidance
RECORD_KINDS["selectnotes"] = select_table.setup_lines
KINDS["select"] = select_table.selectors_table
KINDS["selectverdicts"] = select_table.verdicts_table
RECORD_KINDS["selectguide"] = select_table.guidance


def render(kind: str, record: str, results_dir: Path) -> list[str]:
    if kind in MULTI_KINDS:
        return MULTI_KINDS[kind]([_blocks.load(r, results_dir) for r in record.split("+")])
    rec = _blocks.load(record, results_dir)
    if kind in RECORD_KINDS:
        return RECORD_KINDS[kind](rec)
    return KINDS[kind](rec["metrics"])


def regenerate(text: str, results_dir: Path) -> str:
    """``text`` with every generated block re-rendered from its record."""
    return _blocks.regenerate(text, lambda kind, record: render(kind, record, results_dir))


def reanalyse(out: str, paths: list[str]) -> int:
    """Re-score recorded source-selection runs (same data, different fine-tuning seeds) with
    the evidence tables: ground truth = mean over the runs' transfer tables with its SE and
    noise ceiling, the sketch scores of the first run (the only score tables these older
    records kept), the family indicator, easiness (−base loss on the source's *eval* split,
    the only base loss recorded), random, within-family metrics and paired differences.
    Writes a record like ``updatescope reproduce`` does."""
    import time

    from updatescope.experiments import scoring
    from updatescope.records import make_record, write_json_atomic
    from updatescope.select.baselines import random_scores
    from updatescope.select.metrics import mean_and_se

    t0 = time.perf_counter()
    recs = [json.loads(Path(p).read_text()) for p in paths]
    fams = recs[0]["config"]["families"]
    names = list(fams)
    if any(list(r["config"]["families"]) != names for r in recs):
        raise SystemExit("reanalyse: the records cover different domains")
    tables = [r["metrics"]["ground_truth"]["transfer"] for r in recs]
    mean, se = mean_and_se(tables)
    gt = {
        "transfer": mean,
        "transfer_se": se,
        "transfer_by_seed": tables,
        "seeds": [r["config"]["seed"] for r in recs],
        "base_loss": recs[0]["metrics"]["ground_truth"]["base_loss"],
    }
    scores = {k: recs[0]["metrics"]["sketch_alignment"][k] for k in ("fisher", "activation", "error")}
    scores.update(
        scoring.trivial_scores(names, groups=fams, per_source={"easiness": {n: -v for n, v in gt["base_loss"].items()}})
    )
    scores["random"] = {t: random_scores([s for s in names if s != t], 0, salt=t) for t in names}
    by = scoring.evaluate_methods(scores, mean, seed=0, groups=fams)
    metrics = {
        "ground_truth": gt,
        "methods": by,
        "summary": scoring.headline(by),
        "cannot_run": {},
        "paired": scoring.paired_comparisons(by),
        "truth_noise": scoring.truth_noise(gt, groups=fams),
        "scores": scores,
    }
    config = {"records": [Path(p).name for p in paths], "families": fams}
    write_json_atomic(make_record("source-selection-reanalysis", config, metrics, time.perf_counter() - t0), out)
    return 0


#: the pages whose generated blocks this script writes: the results, the evidence summary,
#: the guides' worked examples and the README's evidence summary
DOCS = (
    "results.md",
    "evidence.md",
    "guide-banks.md",
    "guide-select.md",
    "guide-route.md",
    "guide-mix.md",
    "../README.md",
)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--reanalyse":
        return reanalyse(argv[1], argv[2:])
    if argv and argv[0] in ("--write", "--check"):
        docs = [Path(argv[1])] if len(argv) > 1 else [HERE / name for name in DOCS]
        return _blocks.run(
            argv[:1], docs, lambda kind, record: render(kind, record, HERE / "results"), "docs/results_table.py"
        )
    if len(argv) != 1:
        print("usage: python docs/results_table.py RESULT.json", file=sys.stderr)
        return 2
    rec = json.loads(Path(argv[0]).read_text())
    m = rec["metrics"]
    print(f"<!-- {rec['name']}: {rec.get('seconds')} s, git {rec.get('env', {}).get('git_commit', '?')} -->")
    print("\n".join(correlation_table(m) if "correlation" in m else method_table(m)))
    if "truth_noise" in m:
        print()
        print("\n".join(noise_lines(rec) + [""] + evidence_table(m) + [""] + paired_table(m)))
    if "ground_truth" in m and "transfer" in m["ground_truth"]:
        print()
        print("\n".join(transfer_table(m)))
    if "sketch_vs_exact" in m:
        print()
        print(json.dumps(m["sketch_vs_exact"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
