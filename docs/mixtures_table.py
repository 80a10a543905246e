"""Generated blocks of the mixtures evidence (``updatescope reproduce mixtures``).

Registered as kinds of ``docs/results_table.py``: ``mixturessetup``, ``mixturestable``,
``mixturesverdicts`` and ``mixturesguide``.  Every word is chosen by a rule over the record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PREREG = (
    Path(__file__).resolve().parent.parent / "src" / "updatescope" / "experiments" / "mixtures" / "PREREGISTRATION.md"
)

LABEL = {
    "fisher_mix": "FisherSketch mixture",
    "error_mix": "error-only mixture",
    "activation_mix": "activation-only mixture",
    "fisher_top1": "best single source by FisherSketch",
    "fisher_top3": "uniform over FisherSketch's top 3",
    "uniform": "uniform over the pool",
    "random_mix": "random mixture",
    "oracle_single": "oracle single source",
}


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def setup_lines(rec: dict) -> list[str]:
    c, m = rec["config"], rec["metrics"]
    sha = hashlib.sha256(PREREG.read_bytes()).hexdigest()
    runs = [b["runs"] for b in m["by_seed"]]
    return [
        f"- Design: a pool of {len(c['pool'])} sources ({', '.join(c['pool'])}); {len(c['targets'])} targets "
        f"({', '.join(c['targets'])}); every arm fine-tunes on {c['budget_rows']} rows "
        f"({c['budget_tokens']:,} tokens) with {c['lora']['steps']} LoRA steps; {c['gt_seeds']} seed(s); targets "
        f"judged on {c['eval_rows']} rows; {min(runs) if min(runs) == max(runs) else f'{min(runs)}–{max(runs)}'} "
        f"distinct fine-tunings per seed; "
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        ),
        regime_line(m),
        "- Pre-registration: the record's sha256 "
        + (
            "matches the committed `PREREGISTRATION.md`."
            if c.get("preregistration_sha256") == sha
            else "does not match the committed `PREREGISTRATION.md`: it was analysed under an earlier text."
        ),
    ]


def _helped(m: dict, arm: str) -> int:
    """Targets whose eval loss the arm's fine-tuning lowered (mean transfer over seeds > 0)."""
    return sum(1 for row in m["transfer"].values() if row[arm] > 0)


def _oracle_helped(m: dict) -> tuple[int, int, bool]:
    """(targets the oracle single source helped, targets, whether that is fewer than half)."""
    n, oracle = len(m["transfer"]), _helped(m, "oracle_single")
    return oracle, n, 2 * oracle < n


def regime_line(m: dict) -> str:
    """What the fine-tunings did to the targets at the record's budget, counted from it: when
    even the best measured single source raises most targets' loss, the arms are compared on
    how little they harm, not on how much they help."""
    oracle, n, few = _oracle_helped(m)
    mix = _helped(m, "fisher_mix")
    below = sum(1 for row in m["summary"].values() if row["transfer"] < 0)
    line = (
        f"- Regime: the oracle single source lowered the target's loss on {oracle} of {n} targets, the "
        f"FisherSketch mixture on {mix}; {below} of {len(m['summary'])} arms have a mean transfer below zero"
    )
    if few:
        return line + (
            ": at this budget fine-tuning on the pool raised most targets' loss, so the arms are "
            "compared mostly on how little they harm."
        )
    return line + "."


def arms_table(m: dict) -> list[str]:
    lines = [
        "| arm | transfer, mean over targets (nats/token, ± SE over targets) | targets it helped (transfer > 0) "
        f"| share of the oracle single source (mean over the {_helped(m, 'oracle_single')} targets the oracle "
        "helped) |",
        "|---|---|---|---|",
    ]
    n = len(m["transfer"])
    for a, label in LABEL.items():
        row = m["summary"].get(a)
        if row is None:
            continue
        se = row["transfer_se_over_targets"]
        share = row["share_of_oracle_single"]
        lines.append(
            f"| {label} | {row['transfer']:+.4f}"
            + ("" if se is None else f" ± {se:.4f}")
            + f" | {_helped(m, a)} of {n} | {'–' if share is None else f'{share:.2f}'} |"
        )
    return lines


def verdicts_table(m: dict) -> list[str]:
    v = m["verdicts"]
    lines = [
        "| comparison | targets | Δ transfer (nats/token) | p | Holm p | clustered bootstrap 95% CI | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in v["comparisons"]:
        cb = row["clustered_bootstrap"]
        ci = "n/a (one cluster)" if cb["ci95"] is None else f"[{cb['ci95'][0]:+.4f}, {cb['ci95'][1]:+.4f}]"
        lines.append(
            f"| {row['comparison']} | {row['n_targets']} | {row['mean_transfer_difference']:+.4f} | {_p(row['p'])} | "
            f"{_p(row['p_holm'])} | {ci} | {row['word']} |"
        )
    pr = m["prediction"]
    mean = "n/a" if pr["mean"] is None else f"{pr['mean']:+.2f}"
    lines += [
        "",
        f"Rule: {v['rule']}; Holm over the {len(v['comparisons'])} comparisons.",
        "",
        f"The prediction: mean per-target Spearman between the predicted mixture alignment and the measured "
        f"transfer over the arms {mean} (p {_p(pr['p'])}, {pr['rule']}): the prediction **{pr['word']}**.",
    ]
    return lines


def guidance(rec: dict) -> list[str]:
    """The plain statement the issue asks for: does the mixture beat the best single source?"""
    m = rec["metrics"]
    name = rec["_file"].removesuffix(".json")
    words = {row["comparison"]: row["word"] for row in m["verdicts"]["comparisons"]}
    single = words["FisherSketch mixture vs best single source by FisherSketch"]
    weight = "" if m["powered"] else " (quick variant: not powered, no weight)"
    if single == "better":
        head = "the FisherSketch mixture transfers more than the best single source by FisherSketch"
    elif single == "worse":
        head = (
            "the FisherSketch mixture transfers less than the best single source by FisherSketch: use the single source"
        )
    else:
        head = (
            "the FisherSketch mixture did not beat the best single source by FisherSketch (no difference): "
            "a mixture is not shown to help here"
        )
    uni = words["FisherSketch mixture vs uniform over the pool"]
    tail = {
        "better": "it beats the uniform mixture of the pool",
        "worse": "the uniform mixture of the pool beats it",
    }.get(uni, "against the uniform mixture of the pool no difference is resolved")
    oracle, n, few = _oracle_helped(m)
    harm = (
        f" At this budget the best measured single source lowered the loss of only {oracle} of {n} targets."
        if few
        else ""
    )
    return [f"- `{name}`{weight}: {head}; {tail}.{harm}"]
