"""Generated blocks of the routing evidence (``updatescope reproduce routing``).

Registered as kinds of ``docs/results_table.py``: ``routingsetup``, ``routingtable`` and
``routingverdicts`` read one record.  Every word is chosen by a rule over the recorded numbers.
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
    sha = hashlib.sha256(PREREG.read_bytes()).hexdigest()
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
        "- Pre-registration: the record's sha256 "
        + (
            "matches the committed `PREREGISTRATION.md`."
            if c.get("preregistration_sha256") == sha
            else "does not match the committed `PREREGISTRATION.md`: it was analysed under an earlier text."
        ),
    ]


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
    return [f"- `{name}`{weight}: " + "; ".join(out) + f"; {tail}."]
