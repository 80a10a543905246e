"""Generated blocks of the document-selection evidence (``updatescope reproduce select``).

Registered as kinds of ``docs/results_table.py``: ``selectnotes`` (setup, pre-registration,
noise), ``select`` (selectors per budget with their costs), ``selectverdicts`` (the
pre-registered comparisons) and ``selectguide`` (what a user may conclude).  Every word is chosen
by a rule over the recorded numbers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREREG = ROOT / "src" / "updatescope" / "experiments" / "select_evidence" / "PREREGISTRATION.md"

LABEL = {
    "fisher": "FisherSketch joint score",
    "activation": "activation-only",
    "error": "error-only",
    "mean_gradient": "mean head-gradient cosine",
    "embedding": "embedding cosine (mean final hidden state)",
    "dsir": "DSIR (`data-selection`, hashed n-grams)",
    "per_example_gradient": "per-example LoRA gradient, projected (LESS-style)",
    "random": "random",
    "oracle": "oracle: the target's own unused documents",
}


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def _ft_time(ft: dict, batch: int) -> str:
    """How many fine-tunings this run computed and their time per LoRA step; where it read
    some from the truth store, also the time per step over all of them as each stored it."""
    said = f"{ft['computed']} computed in this run"
    if ft["computed"]:
        said += f", {ft['seconds_per_step']:.2f} s per LoRA step of {batch} documents"
    stored = ft["count"] - ft["computed"]
    if stored and "all_seconds_per_step" in ft:
        said += (
            f"; {stored} read back from the truth store, fine-tuned by earlier runs of the command; over all "
            f"{ft['count']}, {ft['all_seconds_per_step']:.2f} s per LoRA step of {batch} documents "
            f"({ft['all_seconds'] / 3600:.1f} h in all), as each stored its own wall time"
        )
    return said


def setup_lines(rec: dict) -> list[str]:
    c, m, env = rec["config"], rec["metrics"], rec.get("env", {})
    sha = hashlib.sha256(PREREG.read_bytes()).hexdigest()
    targets = m["targets"]
    ev = [t["eval_tokens"] for t in targets.values()]
    budgets = ", ".join(f"{float(b):.0%} (k = {k})" for b, k in m["budgets"].items())
    ft = m["finetuning"]
    dropped = m["methods"]["dsir"]["cost"].get("documents_below_min_length", {})
    return [
        f"- Record `{rec['_file'].removesuffix('.json')}`: {rec.get('seconds', 0):,.0f} s, git "
        f"{str(env.get('git_commit', '?'))[:10]}{' (dirty tree)' if env.get('git_dirty') else ''}"
        + (
            "; the quick variant: not powered, its words carry no weight."
            if c.get("quick")
            else "; the full design as pre-registered."
        ),
        f"- Pool: {m['n_pool']:,} documents ({m['pool_tokens']:,} tokens) of {c['doc_chars']} characters from "
        f"{len(c['pool'])} domains, origin hidden; {len(targets)} targets ({', '.join(targets)}), "
        f"target eval {min(ev):,}–{max(ev):,} tokens each; budgets {budgets}; {len(m['seeds'])} fine-tuning seeds; "
        f"{ft['count']} fine-tunings ({_ft_time(ft, c['lora']['batch'])}).",
        f"- DSIR's minimum length ({c['dsir_min_length']} word(s)) left out "
        + ", ".join(f"{n} document(s) for {t}" for t, n in dropped.items())
        + ".",
        "- Pre-registration: the record's sha256 "
        + (
            "matches the committed `PREREGISTRATION.md`."
            if c.get("preregistration_sha256") == sha
            else "does not match the committed `PREREGISTRATION.md`: it was analysed under another text."
        ),
    ]


def selectors_table(m: dict) -> list[str]:
    """Per selector and budget: mean loss reduction over targets and seeds, the mean paired
    difference to FisherSketch, own-domain share, tokens selected; cost once per selector."""
    lines = [
        "| selector | budget | loss reduction, nats | − FisherSketch | own-domain share | tokens selected "
        "| scoring s (per target) | peak MiB | bytes / doc kept |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, meth in m["methods"].items():
        c = meth["cost"]
        for j, (b, r) in enumerate(meth["by_budget"].items()):
            cost = (
                f"{c['seconds']:.1f} ({c['seconds_per_target']:.1f}) | {_mib(c['peak_bytes'])} | {c['bytes_per_doc']:,}"
                if j == 0
                else " | | "
            )
            if name == "oracle" and j == 0:
                cost = "– | – | –"
            lines.append(
                f"| {LABEL.get(name, name) if j == 0 else ''} | {float(b):.0%} | {r['mean']:+.4f} | "
                f"{'—' if name == 'fisher' else format(r['minus_fisher'], '+.4f')} | "
                f"{r['own_domain_fraction']:.2f} | {r['selection_tokens']:,.0f} | {cost} |"
            )
    return lines


def verdicts_table(m: dict) -> list[str]:
    v = m["verdicts"]
    lines = [
        "| comparison | units (targets) | mean difference, nats | p | Holm p | sign-flip word "
        "| bootstrap 95% CI, clustered by target | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in v["comparisons"]:
        cb = row["clustered_bootstrap"]
        ci = "n/a" if cb["ci95"] is None else f"[{cb['ci95'][0]:+.4f}, {cb['ci95'][1]:+.4f}]"
        mean = row["mean_loss_reduction_difference"]
        lines.append(
            f"| {row['comparison']} | {row['n_units']} ({row['n_targets']}) | "
            f"{'n/a' if mean is None else format(mean, '+.4f')} | {_p(row['p'])} | {_p(row['p_holm'])} | "
            f"{row['word']} | {ci} | **{row['verdict']}** |"
        )
    return lines + ["", f"Rule: {v['rule']}; unit {v['unit']}; Holm over the {len(v['comparisons'])} comparisons."]


def guidance(rec: dict) -> list[str]:
    """What the verdicts let a user conclude, clause by clause from the words."""
    m, c = rec["metrics"], rec["config"]
    name = rec["_file"].removesuffix(".json")
    words = {row["comparison"].removeprefix("FisherSketch - "): row["verdict"] for row in m["verdicts"]["comparisons"]}
    weight = " (quick variant: not powered, no weight)" if c.get("quick") else ""
    said = {
        "random": "a random subset of the same size",
        "DSIR": "DSIR's hashed n-gram selection",
        "embedding": "an embedding-cosine filter",
        "per-example gradient": "the LESS-style per-example-gradient selection",
    }
    out = []
    for key, other in said.items():
        w = words.get(key)
        if w == "better":
            out.append(f"`select` picks documents that help the target more than {other}")
        elif w == "worse":
            out.append(f"{other} picks documents that help the target more than `select`")
        elif w is not None:
            out.append(f"`select` and {other} show no difference")
    line = f"- `{name}`{weight}: " + "; ".join(out) + "."
    cheap = [k for k in ("DSIR", "embedding") if words.get(k) == "better"]
    if c.get("quick"):
        advice = (
            "This record is not powered, so it decides nothing: start with DSIR or an embedding filter when the "
            "target is described by its vocabulary (a topic, a language, a code base), use `select` to re-rank the "
            "shortlist they give when what matters is how the model's predictions on the target should change, and "
            "check the pick with a short fine-tune."
        )
    elif words.get("random") != "better":
        advice = "`select` did not beat a random subset here: do not rely on it for this kind of pool."
        beat = [said[k] for k in ("DSIR", "embedding", "per-example gradient") if words.get(k) == "worse"]
        if beat:
            each = "it" if len(beat) == 1 else "each"
            advice += f" Use {' or '.join(beat)} instead: {each} did better than `select`."
    elif len(cheap) == 2:
        advice = "`select` beat both cheap filters here: it is worth its forward pass over the pool."
    elif cheap:
        advice = (
            f"`select` beat random and {' and '.join(cheap)}, not the other cheap filter: "
            "use the cheap filter it did not beat first."
        )
    else:
        advice = "`select` beat random, but a cheaper filter did as well: use DSIR or an embedding filter first."
    return [line, "", advice, *_marginal_lines(m)]


def _marginal_lines(m: dict) -> list[str]:
    """The joint score beside its two marginals (the score file's other columns), by their means.

    Not among the pre-registered comparisons, so the sentence says so and gives no verdict.
    """
    said = {"error": "error-only (`select --by error`)", "activation": "activation-only (`select --by activation`)"}
    joint = m["methods"]["fisher"]["by_budget"]
    parts = []
    for key, name in said.items():
        if key not in m["methods"]:
            continue
        diff = [m["methods"][key]["by_budget"][b]["mean"] - joint[b]["mean"] for b in joint]
        if all(d > 0 for d in diff):
            parts.append(f"{name} had a higher mean loss reduction than the joint score at every budget")
        elif all(d < 0 for d in diff):
            parts.append(f"{name} had a lower mean loss reduction than the joint score at every budget")
        else:
            parts.append(f"{name} was above the joint score at some budgets and below at others")
    if not parts:
        return []
    return ["", "Not pre-registered, so without a verdict: " + "; ".join(parts) + "."]
