"""Generated blocks of the routing evidence (``updatescope reproduce routing``).

Registered as kinds of ``docs/results_table.py``: ``routingsetup``, ``routingtable`` and
``routingverdicts`` read one record of the domain library; ``routingcdsetup``,
``routingcdtable``, ``routingcdverdicts`` and ``routingcdguide`` one of the coupling-dark
library (``--set design=coupling_dark``).  Every word is chosen by a rule over the recorded numbers.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PREREG = (
    Path(__file__).resolve().parent.parent / "src" / "updatescope" / "experiments" / "routing" / "PREREGISTRATION.md"
)

LABEL = {
    "fisher": "FisherSketch (joint)",
    "error": "error-only",
    "activation": "activation-only",
    "embedding": "embedding centroid",
    "arrow": "PEFT Arrow",
    "uniform_merge": "uniform merge",
    "base": "base model",
    "random": "random adapter (expected)",
    "own": "own domain's adapter (label)",
    "oracle": "oracle",
}


def _pm(row: dict | None, key: str, fmt: str = "{:.3f}") -> str:
    if not row or row.get(key) is None:
        return "–"
    se = row.get(f"{key}_se")
    return fmt.format(row[key]) + ("" if se is None else f" ± {fmt.format(se)}")


def _acc(row: dict | None, key: str) -> str:
    return "–" if not row or row.get(key) is None else f"{row[key]:.2f}"


def setup_lines(rec: dict) -> list[str]:
    c, m = rec["config"], rec["metrics"]
    s = m["summary"]
    reg = m["regime"]
    learned = "every adapter" if reg["adapters_learned_their_domain"] else "not every adapter"
    return [
        f"- Design: {len(c['library'])} adapters ({', '.join(c['library'])}), {c['gt_seeds']} training seed(s); "
        f"{s['all']['n_requests']} requests of {c['request_tokens']} tokens, "
        f"{s['in_library']['n_requests']} from the library's domains and "
        f"{s.get('outside', {}).get('n_requests', 0)} from {len(c['outside'])} outside "
        f"({', '.join(c['outside']) or 'none'}); "
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        ),
        f"- Regime: {learned} lowered its own domain's request loss below the base model's on every seed; a PEFT "
        f"folder reloaded with `PeftModel.from_pretrained` reproduced its adapter to "
        f"{reg['adapter_folder_max_loss_difference']:.1e} nats.",
        "- Pre-registration: the record's sha256 " + _prereg_words(c.get("preregistration_sha256")),
    ]


def _prereg_words(recorded: str | None) -> str:
    """Whether a record was analysed under the committed text, or under the text before its
    amendments (which add the coupling-dark library and leave the domain design unchanged)."""
    text = PREREG.read_bytes()
    if recorded == hashlib.sha256(text).hexdigest():
        return "matches the committed `PREREGISTRATION.md`."
    cut = text.find(b"\n## Amendment 1")
    if cut >= 0 and recorded == hashlib.sha256(text[:cut]).hexdigest():
        return (
            "matches the committed `PREREGISTRATION.md` without its amendments, which came later and add "
            "the coupling-dark library only."
        )
    for k in range(2, text.count(b"\n## Amendment ") + 1):
        cut = text.find(b"\n## Amendment %d" % k)
        if cut >= 0 and recorded == hashlib.sha256(text[:cut]).hexdigest():
            title = text[cut:].split(b"\n", 2)[1].decode().split(":", 1)[-1].strip()
            return (
                f"matches the committed `PREREGISTRATION.md` up to its amendment {k - 1}: the record predates "
                f'amendment {k} ("{title}") and was run under the text before it.'
            )
    return "does not match the committed `PREREGISTRATION.md`: it was analysed under an earlier text."


def routers_table(m: dict) -> list[str]:
    s = m["summary"]
    lines = [
        "| router | routed loss, all (nats/token) | − oracle, all | − oracle, in library | − oracle, outside | "
        "picks the oracle's adapter (in / out) | picks its own domain's |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, label in LABEL.items():
        if r not in s["all"] and r not in s.get("in_library", {}):
            continue
        a, i, o = s["all"].get(r), s.get("in_library", {}).get(r), s.get("outside", {}).get(r)
        picks = (
            "–"
            if a is None or "oracle_accuracy" not in a
            else f"{_acc(i, 'oracle_accuracy')} / {_acc(o, 'oracle_accuracy')}"
        )
        lines.append(
            f"| {label} | {_pm(a, 'routed_loss')} | {_pm(a, 'oracle_gap')} | {_pm(i, 'oracle_gap')} | "
            f"{_pm(o, 'oracle_gap')} | {picks} | {_acc(i, 'own_accuracy')} |"
        )
    return lines


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def verdicts_table(m: dict) -> list[str]:
    v = m["verdicts"]
    lines = [
        "| comparison | requests | other − FisherSketch (nats/token) | p | Holm p | clustered bootstrap 95% CI "
        "| verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in v["comparisons"]:
        cb = row["clustered_bootstrap"]
        ci = "n/a" if cb["ci95"] is None else f"[{cb['ci95'][0]:+.4f}, {cb['ci95'][1]:+.4f}]"
        lines.append(
            f"| {row['comparison']} | {row['n_requests']} | {row['mean_loss_difference']:+.4f} | {_p(row['p'])} | "
            f"{_p(row['p_holm'])} | {ci} | {row['word']} |"
        )
    return lines + ["", f"Rule: {v['rule']}; Holm over the {len(v['comparisons'])} comparisons."]


def guidance(rec: dict) -> list[str]:
    """What the verdicts let a user conclude, clause by clause from the words."""
    m = rec["metrics"]
    name = rec["_file"].removesuffix(".json")
    words = {row["comparison"].removeprefix("FisherSketch vs "): row["word"] for row in m["verdicts"]["comparisons"]}
    weight = "" if m["powered"] else " (quick variant: not powered, no weight)"
    if not m["regime"]["adapters_learned_their_domain"]:
        return [f"- `{name}`: not every adapter learned its domain, so the comparisons are not decided here."]
    out = []
    for other, said in (("embedding centroid", "the embedding-centroid router"), ("PEFT Arrow", "PEFT's Arrow router")):
        w = words.get(other)
        if w == "better":
            out.append(f"FisherSketch routes to lower loss than {said}")
        elif w == "worse":
            out.append(f"{said} routes to lower loss than FisherSketch")
        elif w is not None:
            out.append(f"FisherSketch and {said} show no difference")
    marg = [o for o in ("error-only", "activation-only") if words.get(o) == "better"]
    tail = f"the joint score beats {' and '.join(marg)}" if marg else "the joint score does not beat its marginals"
    return [f"- `{name}`{weight}: " + "; ".join(out) + f"; {tail}." + _cluster_caveat(m)]


def _cluster_caveat(m: dict) -> str:
    """The decided comparisons whose pre-registered secondary test, the bootstrap clustered
    over domains, puts zero inside its 95% interval (none: no sentence)."""
    covered = [
        row["comparison"].removeprefix("FisherSketch vs ")
        for row in m["verdicts"]["comparisons"]
        if row["word"] in ("better", "worse")
        and row["clustered_bootstrap"]["ci95"] is not None
        and row["clustered_bootstrap"]["ci95"][0] <= 0 <= row["clustered_bootstrap"]["ci95"][1]
    ]
    if not covered:
        return ""
    return (
        f" The secondary bootstrap clustered over domains covers zero for {', '.join(covered)}: those"
        " differences hold over these requests, not shown to hold across domains."
    )


#: the domain library's labels, with the every-token joint score after the joint one and the
#: label row naming the request's mapping (same row order as the tables print)
CD_LABEL = {
    "fisher": LABEL["fisher"],
    "fisher_all_tokens": "FisherSketch, every token counted",
    **{k: v for k, v in LABEL.items() if k != "fisher"},
    "own": "own mapping's adapter (label)",
}


def cd_setup_lines(rec: dict) -> list[str]:
    """The coupling-dark library's design, regime and pre-registration, from its record."""
    c, m = rec["config"], rec["metrics"]
    fams = m["families"]
    n_req = m["summary"]["few_shot"]["n_requests"]
    learned = m["regime"]["adapters_learned_their_mapping"]
    cd = c["coupling_dark"]
    return [
        f"- Design: {len(fams)} famil{'y' if len(fams) == 1 else 'ies'} "
        f"({', '.join(f['cue'] + ' ' + '/'.join(f['words']) for f in fams)}), each a library of "
        f"{len(fams[0]['names'])} adapters, one per mapping of the classes {', '.join(fams[0]['classes'])} to its "
        f"answer words, all trained on the same {cd['n_fit']} inputs per class"
        + (
            " posed as requests are (amendment 2)"
            if "own_mapping_gain_input_only" in m["regime"]
            else " posed alone (amendment 1)"
        )
        + f"; {c['gt_seeds']} training seed(s); "
        f"{n_req} requests, each posed few-shot ({cd['shots']} solved example(s) per class, then the query) and "
        "input-only; "
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        ),
        "- Regime: "
        + ("every adapter" if learned else "not every adapter")
        + " gave its own mapping's few-shot requests a lower loss than the other adapters' mean, on every seed"
        + ("." if learned else _cd_regime_misses(m["regime"]["own_mapping_gain_few_shot"])),
        "- Pre-registration: the record's sha256 " + _prereg_words(c.get("preregistration_sha256")),
    ]


def _cd_regime_misses(gains: list[float]) -> str:
    """The (adapter, seed) cases that missed the regime check, from their recorded gains."""
    bad = sorted(g for g in gains if not g > 0)
    return (
        f": {len(bad)} of {len(gains)} (adapter, seed) cases did not (own-mapping gain "
        + ", ".join(f"{g:+.3f}" for g in bad)
        + " nats; the others "
        + f"{min(g for g in gains if g > 0):+.3f} to {max(gains):+.3f}). By the pre-registration the words below "
        "decide nothing."
    )


def cd_table(m: dict) -> list[str]:
    s = m["summary"]
    fs, io = s["few_shot"], s["input_only"]
    lines = [
        "| router | routed loss, few-shot (nats) | − oracle, few-shot | picks the oracle's / own mapping's adapter, "
        "few-shot | − oracle, input-only | picks its own mapping's, input-only | sees |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, label in CD_LABEL.items():
        if r not in fs:
            continue
        f, i = fs[r], io[r]
        picks = "–" if "oracle_accuracy" not in f else f"{_acc(f, 'oracle_accuracy')} / {_acc(f, 'own_accuracy')}"
        lines.append(
            f"| {label} | {_pm(f, 'routed_loss')} | {_pm(f, 'oracle_gap')} | {picks} | {_pm(i, 'oracle_gap')} | "
            f"{_acc(i, 'own_accuracy') if 'own_accuracy' in i else '–'} | {m['routers_see'][r]} |"
        )
    return lines


def cd_verdicts(m: dict) -> list[str]:
    v = m["verdicts"]
    lines = (
        []
        if m["regime"]["adapters_learned_their_mapping"]
        else ["The regime check failed (see above): these words are reported, and decide nothing.", ""]
    )
    for key, title in (("comparisons", "few-shot requests"), ("control", "control: FisherSketch against random")):
        lines += verdicts_table({"verdicts": {"rule": v["rule"], "comparisons": v[key]}})[:-2]
        lines += ["", f"Holm over the {len(v[key])} comparisons of this family ({title}).", ""]
    return lines + [f"Rule: {v['rule']}."]


def cd_guidance(rec: dict) -> list[str]:
    """What the coupling-dark verdicts let a user conclude, clause by clause from the words."""
    m = rec["metrics"]
    name = rec["_file"].removesuffix(".json")
    weight = "" if m["powered"] else " (quick variant: not powered, no weight)"
    if not m["regime"]["adapters_learned_their_mapping"]:
        return [f"- `{name}`: not every adapter learned its mapping, so nothing is decided here."]
    ctrl = {row["comparison"]: row["word"] for row in m["verdicts"]["control"]}
    few = ctrl["FisherSketch vs random, few-shot"]
    alone = ctrl["FisherSketch vs random, input-only"]
    out = [
        {
            "better": "from few-shot requests FisherSketch routes to lower loss than a random adapter",
            "worse": "from few-shot requests FisherSketch routes to higher loss than a random adapter",
        }.get(few, "from few-shot requests FisherSketch does no better than a random adapter"),
        {
            "better": "from the input alone it also beats a random adapter, so it picks adapters that are better "
            "whatever the mapping",
            "worse": "from the input alone it does worse than a random adapter",
        }.get(alone, "from the input alone it does not (nothing in the input reveals the mapping)"),
    ]
    words = {row["comparison"].removeprefix("FisherSketch vs "): row["word"] for row in m["verdicts"]["comparisons"]}
    beats = [o for o, w in words.items() if w == "better"]
    loses = [o for o, w in words.items() if w == "worse"]
    ties = [o for o, w in words.items() if w not in ("better", "worse")]
    if beats:
        out.append(f"on few-shot requests the joint score routes to lower loss than {', '.join(beats)}")
    if loses:
        out.append(f"{', '.join(loses)} route{'s' if len(loses) == 1 else ''} to lower loss than the joint score")
    if ties:
        out.append(f"it shows no difference from {', '.join(ties)}")
    return [f"- `{name}`{weight}: " + "; ".join(out) + "."]
