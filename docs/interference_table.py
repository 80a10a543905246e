"""Generated blocks of docs/guide-plan.md from the interference record
(``updatescope reproduce interference``).

    python docs/interference_table.py --write   # regenerate every generated block
    python docs/interference_table.py --check   # exit 1 if a block differs from its record

Kinds (:func:`render`): ``interferencewarning`` (whether the planner's proxy is validated,
chosen by the record's pre-registered conclusion; ``LAB+SMOLLM2`` adds what the SmolLM2 record
showed), ``interferencesetup``, ``interferencepairs`` (predictor vs measured forgetting),
``interferenceverdicts`` and ``interferenceplans`` (for either record), and for the SmolLM2
record (``reproduce interference-smollm2``) ``interferencelmsetup`` and ``interferencelmcost``
(the full run's command and its estimated time, from the quick record's measured cost).  Every
word that states a result is chosen by a rule over the recorded numbers
(tests/test_interference_docs.py flips each).
"""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # docs/_blocks.py, also when loaded by path from the tests
import _blocks  # noqa: E402

DOC = HERE / "guide-plan.md"
PREREG = HERE.parent / "src" / "updatescope" / "experiments" / "interference" / "PREREGISTRATION.md"
#: where the amendments of the pre-registration begin (a lab record hashes the text above)
AMENDMENTS = b"\n## Amendment 1"
#: the record's conclusion when the proxy is supported (analysis.SUPPORTED)
SUPPORTED = "A_F predicts forgetting beyond the family label and random"

LABEL = {
    "fisher": "A_F (sketch)",
    "exact_fisher": "A_F (exact)",
    "inner": "⟨F_A, F_B⟩ (sketch)",
    "exact_inner": "⟨F_A, F_B⟩ (exact)",
    "error": "Scov(Γ_e) (sketch)",
    "exact_error": "Scov(Γ_e) (exact)",
    "activation": "Scov(M_a) (sketch)",
    "exact_activation": "Scov(M_a) (exact)",
    "grad_conflict": "mean-gradient conflict (−cosine)",
    "cka": "linear CKA",
    "family": "family label",
    "random": "random",
}
ARM_LABEL = {
    "plan": "planner's order, no replay",
    "random": "random orders (mean), no replay",
    "worst": "predicted-worst order, no replay",
    "plan_replay": "planner's order, planner's replay",
    "uniform_replay": "planner's order, uniform replay",
}


def _f(x: Any, fmt: str = "{:+.3f}") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def _ci(ci: list[float] | None) -> str:
    return "n/a" if not ci else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"


def _p(p: float) -> str:
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _source(rec: dict) -> str:
    env = rec.get("env", {})
    dirty = " (uncommitted changes)" if env.get("git_dirty") else ""
    return (
        f"(`docs/results/{rec['_file']}`, commit {str(env.get('git_commit'))[:8]}{dirty}, "
        f"{rec['seconds'] / 60:.0f} min)"
    )


def lm_clause(lm: dict | None) -> str:
    """What the SmolLM2 record (``reproduce interference-smollm2``) adds to the warning."""
    if lm is None:
        return "nothing has been measured on a real language model"
    m = lm["metrics"]
    if not m["powered"]:
        return (
            "on SmolLM2 with LoRA only the quick run exists (not powered, its words carry no weight; "
            f"its pre-registered conclusion reads: {m['conclusion']})"
        )
    if m["conclusion"] == SUPPORTED:
        return "on SmolLM2 with LoRA the pre-registered tests show A_F beating the family label and random"
    return "on SmolLM2 with LoRA the pre-registered tests did not show A_F beating both the family label and random"


def warning_lines(rec: dict, lm: dict | None = None) -> list[str]:
    """The planner's warning: kept ("unvalidated proxy") unless the pre-registered conclusion
    of a powered record supports A_F; ``lm``, the SmolLM2 record, says what a real LM showed."""
    m = rec["metrics"]
    supported = m["conclusion"] == SUPPORTED and m["powered"]
    if supported:
        start = m["states"]["start"]["correlation"]["fisher"]
        return [
            '!!! note "What the proxy is shown to do (synthetic lab)"',
            f"    On the synthetic lab (`reproduce interference`), A_F at the start of B's training ranks "
            f"measured forgetting with Spearman {_f(start['spearman'])} over {start['n']} ordered pairs and beats "
            "the family label and random under the pre-registered, Holm-corrected tests (below). That is a small "
            f"transformer trained from scratch; {lm_clause(lm)}"
            + (
                "."
                if lm is not None and lm["metrics"]["powered"] and lm["metrics"]["conclusion"] == SUPPORTED
                else ": on a real language model the proxy is still unvalidated."
            ),
        ]
    why = (
        "the pre-registered test did not show A_F beating both the family label and random"
        if m["powered"]
        else "only the quick variant has been run, which is not powered"
    )
    ci = m["states"]["start"]["correlation"]["fisher"]["spearman_ci"]
    if m["powered"] and ci and ci[1] < 0:
        why += (
            "; A_F at the start of B's training even ranks forgetting backwards (Spearman "
            f"{_f(m['states']['start']['correlation']['fisher']['spearman'])}, interval {_ci(ci)})"
        )
    return [
        '!!! warning "The plans rest on an unvalidated proxy"',
        "    Every number `plan` prints is a *prediction* from the head-gradient Fisher geometry. "
        f"On the synthetic lab (`reproduce interference`, below) {why}: no predictor is shown to beat the "
        f"family label or random at predicting measured forgetting, and {lm_clause(lm)}. Treat a plan as a "
        "hypothesis to test on your own runs, not as a result.",
    ]


def setup_lines(rec: dict) -> list[str]:
    c, m = rec["config"], rec["metrics"]
    reg, noise = m["regime"], m["noise"]
    fams = ", ".join(
        " / ".join(f"`{t}`" for t, f in m["tasks"].items() if f == fam) for fam in dict.fromkeys(m["tasks"].values())
    )
    lines = [
        f"- Record {_source(rec)}: {len(m['tasks'])} tasks in {len(c['families'])} families ({fams}); the two "
        "tasks of a family share their inputs and differ in their outputs. "
        f"{c['n_layer']}-block transformer of width {c['d_model']} from its random initialisation, every stage "
        f"{c['steps']} Adam steps (lr {c['lr']}, {c['batch']} sequences), {c['seeds']} seeds, {c['n_eval']} eval "
        "sequences per task; "
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        ),
        f"- Regime: A counts as learned when its eval loss after its stage is ≤ {reg['learned_ratio']} × its loss at "
        f"the base; {reg['n_scored']} of {reg['n_pairs']} ordered pairs scored"
        + (f", refused: {len(reg['refused'])} (A not learned in every seed)." if reg["refused"] else "."),
        f"- Measured forgetting (seed mean): {_f(noise['mean_forgetting_same_family'])} nats for same-family pairs, "
        f"{_f(noise['mean_forgetting_other_family'])} for the others; spread over pairs (sd) "
        f"{_f(noise['sd_forgetting_over_pairs'], '{:.3f}')}, median evaluation-noise half-width (95% bootstrap over "
        f"eval examples) {_f(noise['median_eval_ci_half_width'], '{:.3f}')}.",
        prereg_line(rec),
    ]
    return lines


def prereg_line(rec: dict) -> str:
    """Whether the record was analysed under the committed pre-registration: its whole text,
    (for a lab record) its text above the amendments, which add only the SmolLM2 arm, or its
    text above a later amendment (the record predates that amendment)."""
    text = PREREG.read_bytes()
    whole = hashlib.sha256(text).hexdigest()
    lab = hashlib.sha256(text.split(AMENDMENTS, 1)[0]).hexdigest()
    got = rec["config"].get("preregistration_sha256")
    if got == whole:
        return "- Pre-registration: the record's sha256 matches the committed `PREREGISTRATION.md`."
    if got == lab:
        return (
            "- Pre-registration: the record's sha256 matches the committed `PREREGISTRATION.md` above its "
            "amendments (they add the SmolLM2 arm only)."
        )
    for k in range(2, text.count(b"\n## Amendment ") + 1):
        if got == hashlib.sha256(text.split(b"\n## Amendment %d" % k, 1)[0]).hexdigest():
            return (
                "- Pre-registration: the record's sha256 matches the committed `PREREGISTRATION.md` up to its "
                f"amendment {k - 1}: the record predates amendment {k} and was run under the earlier recipe."
            )
    return (
        "- Pre-registration: the record's sha256 does not match the committed `PREREGISTRATION.md`: it was "
        "analysed under an earlier text."
    )


def _warm_words(warm: dict | None) -> str:
    """The answer-format warm-up's check, from the record (records before amendment 2 have none)."""
    if not warm:
        return ""
    got = ", ".join(f"{v:.3f}" for v in warm["eval_loss_after"].values())
    lo, hi = warm["uniform_loss"] - warm["tolerance"], warm["uniform_loss"] + warm["tolerance"]
    return (
        f" Answer-format warm-up ({warm['steps']} steps on {warm['rows']} rows): mapping eval losses "
        f"{got} against [{lo:.3f}, {hi:.3f}], check {'passed' if warm['passed'] else 'failed'}."
    )


def pairs_table(rec: dict) -> list[str]:
    m = rec["metrics"]
    lines = [
        "| predictor | Spearman at θ_A (95% CI, tasks resampled) | Pearson at θ_A | Spearman at the base |",
        "|---|---|---|---|",
    ]
    for p, label in LABEL.items():
        s = m["states"]["start"]["correlation"].get(p)
        b = m["states"]["base"]["correlation"].get(p)
        if s is None:
            continue
        lines.append(
            f"| {label} | {_f(s['spearman'])} {_ci(s.get('spearman_ci'))} | {_f(s['pearson'])} | {_f(b['spearman'])} |"
        )
    return lines


def verdicts_lines(rec: dict) -> list[str]:
    m = rec["metrics"]
    if not m["verdicts"]:
        return ["Fewer than 3 tasks were learned in every seed: nothing was scored, no verdict is drawn."]
    lines = [
        "| comparison (per-task Spearman, first − second) | mean difference | sign-flip p | Holm p | verdict "
        "| pooled Spearman difference, 95% CI (tasks resampled; secondary) |",
        "|---|---|---|---|---|---|",
    ]
    diff_ci = m["states"]["start"]["diff_ci"]
    for v in m["verdicts"]:
        ci = diff_ci.get(f"{v.get('first')} - {v.get('second')}")
        lines.append(
            f"| {v['comparison']} | {_f(v['mean'])} | {_p(v['p'])} | {_p(v['p_holm'])} | {v['word']} | {_ci(ci)} |"
        )
    lines += ["", f"Pre-registered conclusion: **{m['conclusion']}**."]
    corr = m["states"]["start"]["correlation"]
    ranked = sorted(
        (p for p in LABEL if p in corr and corr[p]["spearman"] is not None), key=lambda p: -corr[p]["spearman"]
    )
    if ranked:
        top, fam = corr[ranked[0]], corr["family"]
        beyond = (
            "its interval lies above the family label's estimate"
            if top["spearman_ci"] and fam["spearman"] is not None and top["spearman_ci"][0] > fam["spearman"]
            else "its interval reaches the family label's estimate"
        )
        lines += [
            "",
            f"Exploratory, outside the pre-registered family (no test, no verdict): the predictor with the highest "
            f"Spearman at θ_A is {LABEL[ranked[0]]}, {_f(top['spearman'])} {_ci(top['spearman_ci'])}, against "
            f"{_f(fam['spearman'])} for the family label; {beyond}.",
        ]
    return lines


def plans_lines(rec: dict) -> list[str]:
    p = rec["metrics"]["plans"]
    lines = [
        f"{_n(len(rec['metrics']['sequences']), 'sequence')} of {rec['config']['seq_len_tasks']} tasks × "
        f"{_n(rec['config']['seeds'], 'seed')} = {_n(p['runs'], 'run')}; in {p['runs_without_predicted_damage']} of "
        "them no "
        "pair of the sequence had a significant predicted interference at the base (every order costs 0 there).",
        "",
        "| arm | mean final loss over the sequence's tasks (nats) |",
        "|---|---|",
    ]
    for arm, label in ARM_LABEL.items():
        lines.append(f"| {label} | {_f(p['mean_final_loss'][arm], '{:.3f}')} |")
    later = [rows for s in p["per_seed"] for plan in s["plans"] for rows in plan["arms"]["plan_replay"]["rows"][1:]]
    used = sum(bool(r) for r in later)
    lines += [
        "",
        f"The planner's replay used its budget at {used} of {len(later)} later stages; at the others no earlier "
        "task was predicted to be damaged, so it replayed nothing (uniform replay always spends the budget).",
    ]
    lines += [
        "",
        "| comparison (other − planner, > 0 favours the planner) | mean | sign-flip p over runs | Holm p | verdict "
        "| secondary: Holm p, verdict over sequences |",
        "|---|---|---|---|---|---|",
    ]
    by_seq = {v["comparison"]: v for v in p.get("verdicts_by_sequence", [])}
    for v in p["verdicts"]:
        s = by_seq.get(v["comparison"])
        sec = f"{_p(s['p_holm'])}, {s['word']}" if s else "n/a"
        lines.append(
            f"| {v['comparison']} | {_f(v['mean'])} | {_p(v['p'])} | {_p(v['p_holm'])} | {v['word']} | {sec} |"
        )
    where = "On SmolLM2" if rec["name"] == LM_NAME else "On this lab"
    lines += ["", replay_advice(p, where)]
    return lines


def replay_advice(p: dict, where: str = "On this lab") -> str:
    """What the replay comparison (over runs) allows a user to do, by its word."""
    word = {v["comparison"]: v["word"] for v in p["verdicts"]}.get("planner replay vs uniform replay")
    if word == "worse":
        return (
            f"{where}, uniform replay at the same budget left a lower final loss than the planner's replay: "
            "until a predictor is validated, spread `--replay-budget` evenly over the earlier tasks rather than "
            "following the printed shares."
        )
    if word == "better":
        return f"{where}, the planner's replay left a lower final loss than uniform replay at the same budget."
    return f"{where}, no difference between the planner's replay and uniform replay is resolved."


def lm_setup_lines(rec: dict) -> list[str]:
    """The SmolLM2 record's design, regime and measured forgetting."""
    c, m = rec["config"], rec["metrics"]
    reg, noise, lc = m["regime"], m["noise"], c["lora"]
    domains = [t for t, g in m["groups"].items() if g == "domains"]
    maps = [t for t, g in m["groups"].items() if g == "mappings"]
    fams = ", ".join(
        f"{f}: " + " / ".join(f"`{t}`" for t in domains if m["tasks"][t] == f)
        for f in dict.fromkeys(m["tasks"][t] for t in domains)
    )
    map_pairs = [p for k, p in m["pairs"].items() if p["scored"] and k.split(">")[0] in maps]
    map_forget = sum(p["forgetting"]["mean"] for p in map_pairs) / len(map_pairs) if map_pairs else None
    return [
        f"- Record {_source(rec)}: SmolLM2 with LoRA (rank {lc['r']}, the last {lc['n_last']} blocks, "
        f"{lc['steps']} Adam steps at lr {lc['lr']} on {lc['batch']} rows of {lc['seq_len']} tokens per stage, "
        f"merged before the next stage), {c['seeds']} seed{'s' if c['seeds'] != 1 else ''}; "
        f"{len(domains)} built-in domains ({fams}; {c['train_rows']} train and {c['eval_rows']} eval rows each) "
        f"and {len(maps)} mappings of the coupling-dark family `{c['cue']}` "
        f"({' / '.join(f'`{t}`' for t in maps)}: the same inputs, different answer words); ordered pairs "
        f"within each group; sketches with m = {c['sketch_dim']}, "
        + (f"exact predictors and CKA on the first {c['exact_n']} rows of each stream; " if c["exact_n"] else "")
        + (
            "powered as pre-registered."
            if m["powered"]
            else "the quick variant: not powered, its words carry no weight."
        ),
        f"- Regime: A counts as learned when its eval loss after its stage is below its loss at the base by more "
        f"than {reg['min_gain']} nats"
        + (" and by more than twice its evaluation SE" if "own_gain_se" in reg else "")
        + f" in every seed; {reg['n_scored']} of {reg['n_pairs']} ordered pairs scored"
        + (f", refused: {', '.join(f'`{k}`' for k in reg['refused'])}." if reg["refused"] else ".")
        + _warm_words(m.get("warm_up")),
        f"- Measured forgetting (seed mean): {_f(noise['mean_forgetting_same_family'])} nats for same-family pairs, "
        f"{_f(noise['mean_forgetting_other_family'])} for the others, {_f(map_forget)} for the same-input mapping "
        f"pairs; spread over pairs (sd) {_f(noise['sd_forgetting_over_pairs'], '{:.3f}')}, median "
        f"evaluation-noise half-width (95% bootstrap over eval rows) "
        f"{_f(noise['median_eval_ci_half_width'], '{:.3f}')}.",
        learning_line(m, domains, maps),
        prereg_line(rec),
    ]


def learning_line(m: dict, domains: list[str], maps: list[str]) -> str:
    """How much a stage taught its own task, against the evaluation noise (by rule)."""
    reg, noise = m["regime"], m["noise"]

    def drop(tasks: list[str]) -> float | None:
        d = sorted(b - o for t in tasks for b, o in zip(reg["base_loss"][t], reg["own_loss"][t]))
        return d[len(d) // 2] if d else None

    dom, half = drop(domains), noise["median_eval_ci_half_width"]
    if dom is None:
        return "- Learning per stage: no domain task."
    size = (
        "within the median evaluation-noise half-width: at this budget a domain stage barely moves its own loss, "
        "so forgetting between domains is measured at the noise level"
        if dom <= half
        else "above the median evaluation-noise half-width"
    )
    return (
        f"- Learning per stage: a domain stage lowered its own eval loss by {_f(dom)} nats (median over domains "
        f"and seeds), {size}; a mapping stage by {_f(drop(maps))}."
    )


def full_stage_bound(cfg: Any) -> int:
    """Stages a full run trains at most: every A, every pair within a group, and per sequence
    the plan arms' stages not shared with those (orders without replay share their first two
    stages with the pairs, replay arms their first)."""
    n_maps = cfg.mapping_tasks
    n_dom = len(cfg.domains)
    pairs = n_dom * (n_dom - 1) + n_maps * (n_maps - 1)
    per_seq = (2 + cfg.n_random_orders) * (cfg.seq_len_tasks - 2) + 2 * (cfg.seq_len_tasks - 1)
    return cfg.seeds * (n_dom + n_maps + pairs + cfg.n_sequences * per_seq)


def lm_cost_lines(rec: dict) -> list[str]:
    """The full run's command and its time, estimated from the quick record's measured cost."""
    from updatescope.experiments.interference.config import InterferenceLMConfig

    m, c = rec["metrics"], rec["config"]
    full = InterferenceLMConfig.defaults(False)
    per_stage = m["stage_seconds"] / m["stages_trained"]
    states = c["seeds"] * (len(set(m["groups"].values())) + len(m["tasks"]))
    per_state = (rec["seconds"] - m["stage_seconds"]) / states
    full_states = full.seeds * (2 + len(full.domains) + full.mapping_tasks)
    work = (full.lora.steps * full.lora.batch) / (c["lora"]["steps"] * c["lora"]["batch"])
    stages = full_stage_bound(full)
    warm = full.warmup_steps / c["lora"]["steps"] if full.mapping_tasks else 0.0  # one warm-up LoRA, in stages
    hours = ((stages * work + warm) * per_stage + full_states * per_state) / 3600
    return [
        "```bash",
        "updatescope reproduce interference-smollm2 --set truth_store=docs/results/truth/interference_smollm2_full \\",
        "    --out docs/results/interference_smollm2_full.json",
        "```",
        "",
        f"Cost, measured by the quick record: {per_stage:.0f} s per LoRA stage ({c['lora']['steps']} steps of "
        f"{c['lora']['batch']} rows) and {per_state:.0f} s per model state for its evaluations and predictors. The "
        f"full configuration trains at most {stages} stages ({full.lora.steps} steps of {full.lora.batch} rows, "
        f"{work:.0f}× the quick stage's rows)"
        + (f" after one answer-format warm-up of {full.warmup_steps} steps" if full.mapping_tasks else "")
        + f" and computes {full_states} states: roughly {hours:.0f} h on the "
        "machine that ran the quick record (an estimate: the stage count is an upper bound, the per-state time "
        "was measured on the quick run's smaller eval and sketch sets). "
        "Every (seed, A), (seed, pair) and plan-arm result is written to the truth "
        "store as soon as it is measured, so the run can be finished in several sittings (commit the folder "
        "between them); only the warm-up is retrained in each sitting.",
    ]


KINDS = {
    "interferencewarning": warning_lines,
    "interferencesetup": setup_lines,
    "interferencepairs": pairs_table,
    "interferenceverdicts": verdicts_lines,
    "interferenceplans": plans_lines,
    "interferencelmsetup": lm_setup_lines,
    "interferencelmcost": lm_cost_lines,
}
#: the SmolLM2 records' name (``reproduce interference-smollm2``)
LM_NAME = "interference_smollm2"


def render_block(kind: str, record: str) -> list[str]:
    if kind not in KINDS:
        raise SystemExit(f"unknown block kind {kind!r}; known: {', '.join(KINDS)}")
    recs = [_blocks.load(r) for r in record.split("+")]
    return KINDS[kind](*recs)


def render(text: str) -> str:
    return _blocks.regenerate(text, render_block)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return _blocks.run(argv, [DOC], render_block, "docs/interference_table.py")


if __name__ == "__main__":
    sys.exit(main())
