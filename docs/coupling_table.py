"""Generated blocks of the coupling-dark benchmark (``updatescope reproduce coupling-dark``) and
the "when to trust FisherSketch" conclusion that follows from its verdicts.

Registered as kinds of ``docs/results_table.py`` (which owns docs/results.md and
docs/evidence.md): ``couplingsetup`` and ``couplingmethods`` / ``couplingverdicts`` read one
record; ``trustcoupling`` reads the coupling-dark record and a natural-shift source-selection
record, joined by ``+``.  Every word below is chosen by a rule over the recorded numbers.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

PREREG = (
    Path(__file__).resolve().parent.parent
    / "src"
    / "updatescope"
    / "experiments"
    / "coupling_dark"
    / "PREREGISTRATION.md"
)

#: the methods of the record, in table order, with the names the docs use
LABEL = {
    "fisher": "A_F (sketch)",
    "exact_fisher": "A_F (exact)",
    "error": "error-only Scov(Γ_e) (sketch)",
    "exact_error": "error-only Scov(Γ_e) (exact)",
    "activation": "activation-only Scov(M_a) (sketch)",
    "exact_activation": "activation-only Scov(M_a) (exact)",
    "product": "product of the marginals (sketch)",
    "exact_product": "product of the marginals (exact)",
    "grad_cos": "mean-gradient cosine",
    "cka": "linear CKA",
    "overlap": "answer-word overlap",
    "random": "random",
}


def _f(x: Any, fmt: str = "{:.3f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def prereg_matches(config: dict) -> bool:
    """Whether the record was analysed under the committed pre-registration text."""
    return config.get("preregistration_sha256") == hashlib.sha256(PREREG.read_bytes()).hexdigest()


def setup_lines(rec: dict) -> list[str]:
    c, m = rec["config"], rec["metrics"]
    reg, warm = m["regime"], m.get("warm_up")
    fams = ", ".join(f"`{cue}` {'/'.join(words)}" for cue, words in c["families"])
    n = len(reg["per_target"])
    lines = [
        f"- Design: {n} targets in {len(c['families'])} prompt famil{'y' if len(c['families']) == 1 else 'ies'} "
        f"({fams}), {len(c['classes'])} input classes ({', '.join(c['classes'])}), {c['gt_seeds']} LoRA seed(s), "
        f"{m['n_eval_per_target']} evaluation examples per target; "
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        )
    ]
    probe = ", ".join(f"`{cue}` {acc:.3f}" for cue, acc in reg["probe_accuracy"].items())
    lines.append(
        f"- Check (a), nearest-centroid probe on the head input (eval rows): {probe} "
        f"(needs ≥ {reg['probe_min_accuracy']})."
    )
    if warm:
        per = ", ".join(
            f"`{cue}` {f['val_loss_before']:.2f} → {f['val_loss_after']:.3f} "
            f"(ln {len(words)} = {f['uniform_loss']:.3f})"
            for (cue, words), f in ((fw, warm["per_family"][fw[0]]) for fw in c["families"])
        )
        lines.append(
            f"- Warm-up, check (c): {warm['steps']} LoRA steps on {warm['rows']} balanced rows, merged; val loss "
            f"at the answer {per}; tolerance ±{reg.get('warm_tolerance')} nats."
        )
    else:
        lines.append("- No warm-up: the transfer includes learning the answer format (the pilot's regime).")
    rows = reg["per_target"].values()
    same = [r["val_transfer_same"] for r in rows]
    none = [r["val_transfer_no_agreement"] for r in rows if r["val_transfer_no_agreement"] is not None]
    refused = reg["refused_targets"]
    lines.append(
        f"- Check (b) on the val split: same-mapping source transfer {min(same):+.3f} to {max(same):+.3f} nats, "
        f"mean over no-agreement sources {min(none):+.3f} to {max(none):+.3f}; {reg['passed']} of {n} targets passed "
        f"every check" + (f"; refused: {', '.join(f'`{t}`' for t in refused)}." if refused else ".")
    )
    lines.append(
        "- Pre-registration: the record's sha256 "
        + (
            "matches the committed `PREREGISTRATION.md`."
            if prereg_matches(c)
            else "does not match the committed `PREREGISTRATION.md`: it was analysed under an earlier text."
        )
    )
    return lines


def _spearman(m: dict, method: str) -> dict[str, float] | None:
    """Per-target Spearman over the scored targets, constant scores as 0 (the rule of the tests)."""
    from updatescope.experiments.mappings import per_target_spearman

    return per_target_spearman(m["methods"], method)


def methods_table(m: dict) -> list[str]:
    lines = [
        "| method | per-target Spearman (mean ± SE over targets) | top-1 | regret (nats) |",
        "|---|---|---|---|",
    ]
    for name, label in LABEL.items():
        meth = m["methods"].get(name)
        if meth is None or "error" in meth:
            continue
        sp = _spearman(m, name)
        vals = list(sp.values()) if sp else []
        if vals:
            mean = sum(vals) / len(vals)
            se = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) / len(vals)) if len(vals) > 1 else 0.0
            cell = f"{mean:+.3f} ± {se:.3f}"
        else:
            cell = "n/a"
        top1 = (meth.get("top1") or {}).get("mean")
        regret = (meth.get("regret") or {}).get("mean")
        lines.append(f"| {label} | {cell} | {_f(top1)} | {_f(regret)} |")
    return lines


def verdicts_table(m: dict) -> list[str]:
    v = m["verdicts"]
    if not v.get("primary"):
        return [f"**Verdict (pre-registered rule): {v['statement']}.** No target passed every regime check."]
    lines = [
        "| family | comparison | targets | Δ Spearman | exact p | Holm p | clustered bootstrap 95% CI | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for block in ("primary", "exact"):
        for row in v[block]:
            cb = row["clustered_bootstrap"]
            ci = "n/a (one cluster)" if cb["ci95"] is None else f"[{cb['ci95'][0]:+.3f}, {cb['ci95'][1]:+.3f}]"
            lines.append(
                f"| {row['family']} | {row['comparison']} | {row['n_targets']} | "
                f"{_f(row['mean_spearman_difference'], '{:+.3f}')} | {_p(row['p'])} | {_p(row['p_holm'])} | {ci} | "
                f"{row['word']} |"
            )
    lines += [
        "",
        "**Verdict (the pre-registered rule: the coupling adds signal only if A_F − Scov(Γ_e) is "
        f'"better" after Holm): {v["statement"]}.**'
        + ("" if m.get("powered") else " This is the quick variant: not powered, so the words carry no weight."),
    ]
    return lines


def _row(m: dict, comparison: str) -> dict | None:
    return next((r for r in m["verdicts"].get("primary", []) if r["comparison"] == comparison), None)


def _said(row: dict) -> str:
    return (
        f"Δ per-target Spearman {_f(row['mean_spearman_difference'], '{:+.2f}')}, "
        f"{row['word']} (Holm p {_p(row['p_holm'])}, {row['n_targets']} targets)"
    )


def natural_error_verdict(m: dict) -> dict[str, Any] | None:
    """FisherSketch − error-only on per-target Spearman in a natural-shift record: the record's
    pre-registered verdict where it has one (Holm over its pre-specified comparisons; "powered"
    by the pre-registered rule), else the coupling's test computed here as one comparison (its
    own Holm family of one, not pre-registered)."""
    from updatescope.select.metrics import paired_verdicts

    pre = next(
        (r for r in (m.get("verdicts") or {}).get("primary", []) if r["comparison"] == "A_F - Scov(Gamma_e)"), None
    )
    if pre is not None:
        mean = pre["mean_spearman_difference"]
        return {
            "mean": math.nan if mean is None else float(mean),
            "word": pre["word"],
            "n": pre["n_targets"],
            "note": f"Holm p {_p(pre['p_holm'])} over {pre['family_size']}, pre-registered",
            "powered": bool(m["verdicts"].get("powered")),
        }

    def vals(name: str) -> dict[str, float] | None:
        block = (m["methods"].get(name) or {}).get("spearman")
        if not isinstance(block, dict) or "per_target" not in block:
            return None
        return {t: float(x) for t, x in block["per_target"].items() if x is not None and math.isfinite(x)}

    a, b = vals("fisher"), vals("error")
    if not a or not b:
        return None
    d = {t: a[t] - b[t] for t in a if t in b}
    (v,) = paired_verdicts({"A_F - Scov(Gamma_e)": d}, family="natural shift: the coupling's one comparison")
    note = f"{v.note()}; one comparison, not pre-registered"
    return {"mean": v.mean, "p": v.p, "word": v.word, "n": v.n, "note": note, "powered": None}


def trust_lines(recs: list[dict]) -> list[str]:
    """The conclusion of the trust paragraph: what the coupling-dark verdicts and the natural-
    shift record allow a user to do.  Every clause is chosen by the recorded words."""
    cd, nat = recs[0], recs[1]
    m = cd["metrics"]
    name, nat_name = cd["_file"].removesuffix(".json"), nat["_file"].removesuffix(".json")
    if not m["verdicts"].get("primary"):
        return [f"- `{name}`: no target passed its regime checks, so the coupling claim is not decided here."]
    lines = []
    err = _row(m, "A_F - Scov(Gamma_e)")
    if not m["powered"]:
        lines.append(
            f"- The coupling-dark benchmark has run only in its quick variant (`{name}`, not powered), which cannot "
            f"decide the claim: A_F − error-only {_said(err)}. The powered, pre-registered run decides it."
        )
    elif err["word"] == "better":
        lines.append(
            f"- Where candidates share the target's inputs and answer words and differ only in which input "
            f"goes to which answer (`{name}`), A_F ranks them better than error-only: {_said(err)}. "
            "There the coupling adds signal: use the joint signature, not a marginal."
        )
    else:
        lines.append(
            f"- Where candidates differ only in the input → answer mapping (`{name}`), A_F does not rank "
            f"them better than error-only: {_said(err)}. The coupling claim is refuted at this scale."
        )
    grad = _row(m, "A_F - mean-gradient cosine")
    if grad is not None:
        if grad["word"] == "worse":
            tail = (
                "the mean-gradient cosine, which keeps the sign a second moment squares away, ranks them better: "
                "when the sources' mean gradients are at hand, prefer it for mapping conflicts"
            )
        elif grad["word"] == "better":
            tail = "A_F also ranks them better than the mean-gradient cosine"
        else:
            tail = "against the mean-gradient cosine no difference is resolved"
        lines.append(f"- In the same benchmark {tail}: {_said(grad)}.")
    cka = _row(m, "A_F - CKA")
    if cka is not None:
        word = {"better": "ranks them better than", "worse": "ranks them worse than"}.get(cka["word"], "ties")
        lines.append(
            f"- There A_F {word} CKA, which sees only the shared inputs: {_said(cka)}."
            if word != "ties"
            else f"- There A_F and CKA show no difference: {_said(cka)}."
        )
    nv = natural_error_verdict(nat["metrics"])
    if nv is not None:
        if nv["word"] == "better":
            tail = "A_F ranks better than error-only there too"
        elif nv["word"] == "worse":
            tail = (
                "error-only ranks better than A_F: prefer it there (`rank --by error`; every signature already "
                "holds it, so it costs nothing extra)"
            )
        else:
            tail = (
                "error-only is as good as A_F (`rank --by error`; every signature already holds it, so it costs "
                "nothing extra)"
            )
        weight = " This record is not powered: the words carry no weight." if nv["powered"] is False else ""
        lines.append(
            f"- On natural domain shift (`{nat_name}`), {tail}: Δ per-target Spearman {nv['mean']:+.2f}, "
            f"{nv['word']} ({nv['note']}, {nv['n']} targets).{weight}"
        )
    return lines
