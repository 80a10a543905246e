"""Markdown blocks for docs/steering.md from the steering records.

    python docs/steering_table.py --write   # regenerate every generated block
    python docs/steering_table.py --check   # exit 1 if a block differs from its record

Blocks look like

    <!-- generated: cosine steering_quick -->
    ...
    <!-- end generated -->

the first word names the block kind (:data:`KINDS`), the second the record
``docs/results/NAME.json``.  Every number in docs/steering.md's tables and verdicts comes
from here; the verdicts are computed from the recorded numbers by the rules written next to
them (and printed in the doc), so they change when the numbers do
(tests/test_steering_docs.py runs the check).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # docs/_blocks.py, also when loaded by path from the tests
import _blocks  # noqa: E402

DOC = HERE / "steering.md"

PAPER_COSINE = 0.58  # paper B: cosine of the step's shift with CAA at layers 19-20 of 24
PAPER_DEPTH = (19 / 24, 20 / 24)  # relative depth of those layers
PAPER_GAIN = "up to +10 points on BoolQ, comparable to CAA"
CEILING = 0.5  # below this, CAA from one half of the subjects does not reproduce the other half's


def _pm(mean: float, se: float | None, fmt: str = "{:.3f}") -> str:
    return fmt.format(mean) + ("" if se is None else " ± " + fmt.format(se))


def _gain(mean: float, se: float) -> str:
    return f"{mean:+.3f} ± {se:.3f}"


def _band(c: dict, key: str, i: int) -> tuple[float, float]:
    return c[key]["mean"][i], c[key]["se"][i]


def auc_se(auc: float, n: int) -> float:
    """Hanley–McNeil standard error of an AUC from n prompts, half true and half false."""
    n1 = n2 = max(n // 2, 1)
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    var = (auc * (1 - auc) + (n1 - 1) * (q1 - auc**2) + (n2 - 1) * (q2 - auc**2)) / (n1 * n2)
    return max(var, 0.0) ** 0.5


def separates(b: dict) -> bool:
    """Rule: the base margin separates true from false statements when its test AUC − 2 SE > 0.5
    (Hanley–McNeil SE)."""
    return b["auc"] - 2 * auc_se(b["auc"], b["n"]) > 0.5


def paper_layers(n_layers: int) -> list[int]:
    """The layers at the paper's relative depth in a model of ``n_layers`` decoder layers."""
    return sorted({min(n_layers - 1, round(f * n_layers)) for f in PAPER_DEPTH})


def shown_layers(m: dict, cfg: dict) -> list[int]:
    """Rule: the paper-depth layers, the steering layers, and the layers where either
    summary of the step's shift has its largest |cosine| with CAA."""
    c = m["cosine"]
    peak = [
        max(range(len(c["layers"])), key=lambda i: abs(c[k][i])) for k in ("pushforward_mean", "pushforward_contrast")
    ]
    want = set(paper_layers(m["n_layers"])) | set(cfg.get("steer_layers_used", cfg["steer_layers"]))
    want |= {c["layers"][i] for i in peak}
    return sorted(x for x in want if x in c["layers"])


def run_block(rec: dict, name: str) -> list[str]:
    cfg, env = rec["config"], rec["env"]
    dirty = " (uncommitted changes)" if env.get("git_dirty") else ""
    seed = "" if cfg["seed"] == 0 else f" --seed {cfg['seed']}"
    return [
        f"Record `docs/results/{name}.json`: `updatescope reproduce "
        f"steering{' --quick' if cfg['quick'] else ''}{seed}`, "
        f"{rec['seconds']:.0f} s on {env.get('cpu_count')} CPU cores (torch {env.get('torch')}, "
        f"{env.get('torch_threads')} threads), commit `{str(env.get('git_commit'))[:10]}`{dirty}; model "
        f"`{cfg['model']}`, task `{cfg['task']}`, answers `{cfg['answers']}`.",
    ]


def setup_block(rec: dict, name: str) -> list[str]:
    cfg, m = rec["config"], rec["metrics"]
    n, b = m["n"], m["base"]["test"]
    # every subject gives one true and one false statement: the subjects that exist are half the prompts
    have = {sp: n[sp] // 2 for sp in ("train", "select", "test")}
    short = [f"{sp} {cfg[f'n_{sp}']}" for sp in have if cfg[f"n_{sp}"] != have[sp]]
    subj = " / ".join(str(have[sp]) for sp in ("train", "select", "test"))
    subj += "" if not short else f" (requested: {', '.join(short)}; the data set has no more)"
    layers = cfg.get("steer_layers_used", cfg["steer_layers"])
    scales = ", ".join(f"{s:+g}" for s in cfg["scales"])
    if "search_n" in cfg:
        search = (
            f"random search: best of {cfg['search_n']} weight perturbations per seed at norm "
            f"{', '.join(f'{r:g}' for r in cfg['search_norms'])} × ‖δθ‖, {cfg['search_seeds']} seeds"
        )
    else:
        search = "no random-search vectors (the record predates them)"
    yes = "Yes" if cfg["answers"] == "yes_no" else "True"
    signal = (
        "the margin separates true from false statements (AUC − 2 SE > 0.5)"
        if separates(b)
        else f"the margin does not separate true from false statements (AUC − 2 SE ≤ 0.5): a fixed vector can at "
        f"best move the {yes}/No bias"
    )
    return [
        f"- **Sizes.** {subj} subjects ({n['train']} / {n['select']} / {n['test']} prompts) for train / select / "
        f"test; cosines at all {m['n_layers']} layers; steering at layer{'s' if len(layers) > 1 else ''} "
        f"{', '.join(map(str, layers))} (the paper's depth in this model: "
        f"{', '.join(map(str, paper_layers(m['n_layers'])))}), scales {scales} × the mean residual norm at the layer; "
        f"{cfg['seeds']} seeds for every random control; {search}.",
        f"- **Base model, test split.** Accuracy {_pm(b['accuracy'], b['accuracy_se'])} (n = {b['n']}), AUC of the "
        f'margin {b["auc"]:.3f} ± {auc_se(b["auc"], b["n"]):.3f} (Hanley–McNeil SE), "{yes}" rate '
        f"{b['true_rate']:.3f}: {signal}.",
    ]


def cosine_block(rec: dict, name: str) -> list[str]:
    cfg, m = rec["config"], rec["metrics"]
    c = m["cosine"]
    has_search = "search_mean" in c
    cols = (
        ["layer", "step shift, mean over prompts", "step shift, true − false contrast", "random δθ (same norm), mean"]
        + (["searched δθ (Best-of-N), mean"] if has_search else [])
        + ["shuffled-label CAA", "CAA half vs other half (ceiling)"]
    )
    rows = [
        f"‖δθ‖ = {m['step_norm']:.1f} (one step, learning rate 1). Paper: cosine ≈ {PAPER_COSINE} at layers "
        f"19–20 of 24. Layers shown: {SHOWN_RULE}",
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for layer in shown_layers(m, cfg):
        i = c["layers"].index(layer)
        cells = [
            str(layer),
            f"{c['pushforward_mean'][i]:.3f}",
            f"{c['pushforward_contrast'][i]:.3f}",
            _pm(*_band(c, "random_step_mean", i)),
        ]
        if has_search:
            cells.append(_pm(*_band(c, "search_mean", i)))
        cells += [_pm(*_band(c, "shuffled_caa", i)), _pm(*_band(c, "half_caa", i))]
        rows.append("| " + " | ".join(cells) + " |")
    rows += [
        "",
        f"(mean ± SE over {cfg['seeds']} seeds"
        + (f", searched δθ over {cfg['search_seeds']} seeds" if has_search else "")
        + "; every layer is in the JSON under `metrics.cosine`.)",
        "",
    ]
    verdict, why = cosine_verdict(m)
    rows.append(f"**Verdict: {verdict}.** {why}")
    return rows


SHOWN_RULE = (
    "the paper's relative depth, the steering layers, and where either summary of the step's shift has "
    "its largest |cosine|."
)


def cosine_verdict(m: dict) -> tuple[str, str]:
    """Rule, at the paper-depth layers: (1) if CAA from one half of the subjects has cosine
    < CEILING with the other half's at every such layer, CAA is not reproducible at this size
    and nothing can be decided; else (2) reproduced if the mean shift's cosine is ≥ CEILING
    and above the random-δθ and shuffled-label nulls by 2 SE at some such layer; (3) aligned
    beyond the nulls but weaker than the paper if only the null test passes; (4) not reproduced."""
    c = m["cosine"]
    idx = [c["layers"].index(x) for x in paper_layers(m["n_layers"]) if x in c["layers"]]
    where = ", ".join(str(c["layers"][i]) for i in idx)
    ceil = [c["half_caa"]["mean"][i] for i in idx]
    if all(v < CEILING for v in ceil):
        return (
            "cannot be decided",
            f"The noise ceiling fails: CAA from one half of the subjects has cosine {min(ceil):.2f} to "
            f"{max(ceil):.2f} (< {CEILING}) with CAA from the other half at layer(s) {where}, so the CAA vector "
            f"itself is not reproducible at this size, and the step-shift contrast uses the same train prompts as "
            f"CAA (shared sampling noise can make them agree). More subjects (`--set n_train=...`) are needed.",
        )

    def beyond(i: int) -> bool:
        v = c["pushforward_mean"][i]
        return all(v > mean + 2 * se for mean, se in (_band(c, k, i) for k in ("random_step_mean", "shuffled_caa")))

    best = max(c["pushforward_mean"][i] for i in idx)
    if any(beyond(i) and c["pushforward_mean"][i] >= CEILING for i in idx):
        return "reproduced", f"Mean shift up to {best:.2f} at layer(s) {where}, beyond both nulls by 2 SE."
    if any(beyond(i) for i in idx):
        return (
            "aligned beyond the nulls, weaker than the paper",
            f"Mean shift up to {best:.2f} (< {CEILING}) at layer(s) {where}.",
        )
    return (
        "not reproduced",
        f"The mean shift (up to {best:.2f} at layer(s) {where}) is not above the random-δθ and shuffled-label "
        f"nulls by 2 SE.",
    )


def _vector_rows(m: dict) -> list[tuple[str, str, str, str, float, float]]:
    """(label, chosen, test accuracy, gain text, gain, gain SE) per reported vector."""
    st = m["steering_test"]
    out = []
    for key, label in (("caa", "CAA"), ("pushforward", "one-step shift")):
        v = st[key]
        out.append(
            (
                label,
                f"{v['layer']}, {v['scale']:+g}",
                f"{v['test']['accuracy']:.3f}",
                _gain(v["gain"], v["gain_se"]),
                v["gain"],
                v["gain_se"],
            )
        )
    for kind, label in (("search", "random-search shift, Best-of-N"), ("random", "random vector, same norm")):
        ks = sorted(int(k.split("_")[1]) for k in st if re.fullmatch(kind + r"_\d+", k))
        if not ks:
            continue
        chosen = sorted({f"{st[f'{kind}_{k}']['layer']}, {st[f'{kind}_{k}']['scale']:+g}" for k in ks})
        accs = [st[f"{kind}_{k}"]["test"]["accuracy"] for k in ks]
        acc = f"{accs[0]:.3f} each" if len(set(accs)) == 1 else ", ".join(f"{a:.3f}" for a in accs)
        g = st[f"{kind}_mean"]
        out.append(
            (
                f"{label} ({len(ks)} seeds)",
                "; ".join(chosen),
                acc,
                _gain(g["gain"], g["gain_se"]) + " (SE over seeds)",
                g["gain"],
                g["gain_se"],
            )
        )
    return out


def steering_block(rec: dict, name: str) -> list[str]:
    cfg, m = rec["config"], rec["metrics"]
    b = m["base"]["test"]
    rows = [
        f"Layer and scale chosen on the select split, reported on the test split (`metrics.steering_test`). "
        f"Paper: {PAPER_GAIN}.",
        "",
        "| vector | chosen (layer, scale) | test accuracy | gain vs base (paired SE) |",
        "|---|---|---|---|",
        f"| base model | — | {_pm(b['accuracy'], b['accuracy_se'])} | — |",
    ]
    rows += [f"| {label} | {ch} | {acc} | {gain} |" for label, ch, acc, gain, _, _ in _vector_rows(m)]
    bo = m["bias_only"]
    rows.append(
        f"| bias only (threshold on base margins, fit on select) | — | {bo['test']['accuracy']:.3f} | "
        f"{_gain(bo['gain'], bo['gain_se'])} |"
    )
    moved = max(
        abs(v["test"]["signed_margin"] - b["signed_margin"]) for v in m["steering_test"].values() if "test" in v
    )
    verdict, why = steering_verdict(m, cfg)
    rows += [
        "",
        f"**Verdict: {verdict}.** {why} The largest change of the test mean signed margin by any vector "
        f"is {moved:.3f}.",
        "",
        "Rules: "
        + " ".join(steering_verdict.__doc__.split("Rule: ")[1].split())
        + " Vectors listed above 2 SE: "
        + " ".join(steering_vectors.__doc__.split("Rule: ")[1].split())
        + " Base AUC: "
        + " ".join(separates.__doc__.split("Rule: ")[1].split()),
    ]
    return rows


def steering_verdict(m: dict, cfg: dict) -> tuple[str, str]:
    """Rule: a vector steers when its test gain minus 2 paired SE is > 0.  Reproduced when the
    one-step shift steers and its gain is at least CAA's minus both SEs; "steers, less than CAA"
    when it steers with a smaller gain; not reproduced when it does not steer.  Reasons the
    test is weak are read from the record: fewer than 3 scales, base AUC − 2 SE ≤ 0.5, no vector
    changing the test accuracy at all."""
    vecs = {label: (g, se) for label, _, _, _, g, se in _vector_rows(m)}
    steers = lambda label: vecs[label][0] - 2 * vecs[label][1] > 0
    (pf, pf_se), (caa, caa_se) = vecs["one-step shift"], vecs["CAA"]
    if steers("one-step shift") and pf >= caa - pf_se - caa_se:
        verdict = "reproduced"
    elif steers("one-step shift"):
        verdict = "the one-step shift steers, less than CAA"
    elif steers("CAA"):
        verdict = "not reproduced: CAA steers, the one-step shift does not"
    else:
        verdict = "not reproduced at this size"
    over = steering_vectors(m)
    why = [
        "no vector's test gain exceeds 2 SE"
        if not over
        else "test gain above 2 SE: " + ", ".join(f"{k} ({_gain(g, se)})" for k, g, se in over)
    ]
    weak = []
    if len(cfg["scales"]) < 3:
        weak.append(f"the scale grid has {len(cfg['scales'])} points")
    if not separates(m["base"]["test"]):
        weak.append(f"the base margins do not separate true from false (test AUC {m['base']['test']['auc']:.2f})")
    if all(abs(g) < 1e-12 for g, _ in vecs.values()):
        weak.append("every vector leaves the test accuracy exactly at the base model's")
    text = "; ".join(why)
    text = text[:1].upper() + text[1:] + ("." if why else "")
    if weak:
        text += (" " if text else "") + "Not a fair test: " + "; ".join(weak) + "."
    return verdict, text


def steering_vectors(m: dict) -> list[tuple[str, float, float]]:
    """Rule: every vector in metrics.steering_test (CAA, the one-step shift, each search and
    random seed with its paired SE, and the search / random means with their SE over seeds) whose
    test gain − 2 SE is > 0."""
    out = []
    for k, v in m["steering_test"].items():
        if "gain" in v and v.get("gain_se") is not None and v["gain"] - 2 * v["gain_se"] > 0:
            out.append((k, v["gain"], v["gain_se"]))
    return out


def search_block(rec: dict, name: str) -> list[str]:
    m = rec["metrics"]
    if "search" not in m:
        return [
            "This record predates the random-search vectors (it has no `metrics.search`); the block fills in "
            "when the record is rewritten by `updatescope reproduce steering --quick`."
        ]
    st = m["steering_test"]
    layer = m["grid_select"]["caa"]["layers"][0]
    i = m["cosine"]["layers"].index(layer)
    rows = [
        "Per seed: the kept candidate (best on the select split over the N candidates and the norm grid), the "
        "weight perturbation's own gain in mean signed margin (select, and test for reference), its shadow's "
        f"cosine with CAA at layer {layer}, and the shadow's steering gain on the test split.",
        "",
        "| seed | kept (candidate / N, norm × ‖δθ‖) | weight gain, select | weight gain, test | "
        f"shadow cosine with CAA, layer {layer} | chosen (layer, scale) | steering gain, test (paired SE) |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, s in enumerate(m["search"]):
        v = st[f"search_{k}"]
        rows.append(
            f"| {k} | {s['best']} / {s['n']}, {s['norm']:g} | {s['gain_select']:+.3f} | "
            f"{s['gain_heldout']:+.3f} | {s['cosine'][i]:.3f} | {v['layer']}, {v['scale']:+g} | "
            f"{_gain(v['gain'], v['gain_se'])} |"
        )
    held = [s["gain_heldout"] for s in m["search"]]
    g = st["search_mean"]
    verdict = (
        "the searched perturbations improve the test margin in every seed"
        if all(x > 0 for x in held)
        else "the searched perturbations do not improve the test margin in every seed"
    )
    r = m["steering_test"].get("random_mean")
    above_zero = g["gain"] - 2 * g["gain_se"] > 0
    above_random = r is None or g["gain"] - 2 * g["gain_se"] > r["gain"] + 2 * r["gain_se"]
    verdict += "; their shadows " + (
        "steer beyond same-norm random vectors"
        if above_zero and above_random
        else "move the accuracy, but no more than same-norm random vectors do"
        if above_zero
        else "do not steer"
    )
    ref = "" if r is None else f"; random vectors {_gain(r['gain'], r['gain_se'])}"
    rows += [
        "",
        f"**Verdict: {verdict}.** Rule: a weight gain counts when > 0 on the test split; the shadows steer "
        f"when their mean test gain over seeds minus 2 SE is > 0 and above the same-norm random vectors' "
        f"mean + 2 SE (here {_gain(g['gain'], g['gain_se'])}{ref}).",
    ]
    return rows


# --------------------------------------------------------------------------- sentiment steering
def _sentiment_rules():
    # the rules live with the experiment, so the record and the doc cannot disagree
    from updatescope.experiments.sentiment_steering import verdicts

    return verdicts


def sentiment_gates(rec: dict) -> dict[str, dict]:
    """CAA's gate per direction, recomputed from the record's numbers (see ``caa_gate``)."""
    v = _sentiment_rules()
    cfg, m = rec["config"], rec["metrics"]
    out = {}
    for direction, ch in m["chosen"].items():
        layer = ch["caa"]["layer"] if ch["caa"] is not None else cfg["steer_layers_used"][0]
        split_half = m["cosine"]["split_half_caa"]["mean"][m["cosine"]["layers"].index(layer)]
        found = m["comparisons"]["vader"].get(f"{direction}: caa - random")
        found = found if found and "p_holm" in found else None
        out[direction] = v.caa_gate(split_half, found, cfg["min_split_half"], cfg["alpha"])
    return out


def sentiment_words(rec: dict) -> dict[str, dict[str, str]]:
    """The word of every recorded comparison, recomputed by ``comparison_word``."""
    v = _sentiment_rules()
    cfg, m = rec["config"], rec["metrics"]
    gates = sentiment_gates(rec)
    words: dict[str, dict[str, str]] = {}
    for judge, found in m["comparisons"].items():
        words[judge] = {}
        for key, c in found.items():
            direction, comp = key.split(": ")
            words[judge][key] = v.comparison_word(
                comp, c if "p_holm" in c else None, gates[direction]["open"], cfg["alpha"]
            )
    return words


def sentiment_verdict(rec: dict) -> tuple[str, str]:
    """Rule (primary judge, VADER): the task shows steering when the one-step shift, the
    search-derived vector, or CAA where it reproduces across halves (split-half cosine at its
    layer >= the floor), is "better" than the same-norm random vector at its own setting in
    some direction (Holm-corrected paired test over the test prompts, within its family); a
    CAA win without that reproducibility is reported as not established."""
    words = sentiment_words(rec)["vader"]
    gates = sentiment_gates(rec)
    wins = [k for k, w in words.items() if k.endswith("- random") and w == "better"]
    valid = [k for k in wins if not k.endswith("caa - random") or gates[k.split(": ")[0]]["reproducible"]]
    if valid:
        return "steering beyond a same-norm random vector", "Better than random: " + ", ".join(valid) + "."
    if wins:
        return (
            "not established",
            "Better than random: "
            + ", ".join(wins)
            + ", but CAA does not reproduce across halves of its sentences at its layer, so the win is not read "
            "as a steering direction.",
        )
    return (
        "no vector steers beyond a same-norm random vector at this size",
        "No vector beats the random vector at its own setting in either direction.",
    )


def sentiment_block(rec: dict, name: str) -> list[str]:
    cfg, m, env = rec["config"], rec["metrics"], rec["env"]
    dirty = " (uncommitted changes)" if env.get("git_dirty") else ""
    layers = cfg["steer_layers_used"]
    j = m["judge"]
    usable = _sentiment_rules().judge_usable(j["accuracy"], cfg["min_judge_accuracy"])
    sh = m["cosine"]["split_half_caa"]["mean"]
    li = m["cosine"]["layers"]
    gates = sentiment_gates(rec)
    rows = [
        f"Record `docs/results/{name}.json`: `updatescope reproduce sentiment-steering"
        f"{' --quick' if cfg['quick'] else ''}`, {rec['seconds']:.0f} s on {env.get('cpu_count')} CPU cores, "
        f"commit `{str(env.get('git_commit'))[:10]}`{dirty}; model `{cfg['model']}`. {m['n']['select']} select and "
        f"{m['n']['test']} test prompts (news openings of {cfg['prompt_words'][0]}–{cfg['prompt_words'][1]} words, "
        f"|VADER| ≤ {cfg['neutral_tol']:g}, from {m['n']['openings']}), {cfg['new_tokens']} greedy tokens; steering at "
        f"layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}, scales "
        f"{', '.join(f'{s:g}' for s in cfg['scales'])} × the mean residual norm, positions `{cfg['positions']}`; "
        f"fluency bound: perplexity ≤ {cfg['max_ppl_ratio']:g} × the base model's on the select prompts.",
        "",
        f"- **Trained judge** (logistic regression on the base model's mean residual at layer {j['layer']}, "
        f"{j['classes'][0]} + {j['classes'][1]} polarity sentences): {len(j['per_fold'])}-fold held-out accuracy "
        f"{_pm(j['accuracy'], j['se'])}, "
        + ("used." if usable else f"refused (< {cfg['min_judge_accuracy']:g}).")
        + " It reads the base model's own residual stream, as CAA does; VADER is the primary judge.",
        f"- **CAA split-half cosine** (mean of {len(m['cosine']['split_half_caa']['per_split'])} random splits of "
        "each class into halves): "
        + ", ".join(f"layer {x}: {sh[li.index(x)]:.2f}" for x in layers)
        + f" (floor {cfg['min_split_half']:g}).",
    ]
    for direction, g in gates.items():
        rows.append(
            f"- **CAA gate, {direction}:** "
            + ("open" if g["open"] else f"shut ({g['reason']}): comparisons against CAA are refused")
            + "."
        )
    rows += [
        "",
        "| direction | method | chosen (layer, scale) | VADER toward target (SE) | trained judge toward target | "
        "perplexity |",
        "|---|---|---|---|---|---|",
    ]
    labels = {
        "base": "base model",
        "prompting": "prompting prefix",
        "caa": "CAA",
        "pushforward": "one-step shift",
        "search": "search-derived (Best-of-N, pushed forward)",
        "random@caa": "random vector at CAA's setting",
        "random@pushforward": "random vector at the shift's setting",
        "random@search": "random vector at the search vector's setting",
    }
    for direction, tab in m["test"].items():
        for k, v in tab.items():
            s = v.get("setting")
            where = "—" if s is None or k in ("base", "prompting") else f"{s['layer']}, {s['scale']:g}"
            judge = f"{v['judge']:+.3f}" if "judge" in v else "—"
            rows.append(
                f"| {direction} | {labels.get(k, k)} | {where} | {_gain(v['vader'], v['vader_se'])} | {judge} | "
                f"{v['ppl']:.1f} |"
            )
        ch = m["chosen"][direction]
        missing = [meth for meth in ("caa", "pushforward", "search") if meth in ch and ch[meth] is None]
        for meth in missing:
            rows.append(f"| {direction} | {labels[meth]} | no setting within the fluency bound | — | — | — |")
    rows += _sentiment_search_rows(m, cfg, layers)
    words = sentiment_words(rec)
    rows += [
        "",
        "| judge | comparison (per test prompt) | mean difference | p (Holm) | verdict |",
        "|---|---|---|---|---|",
    ]
    for judge, found in m["comparisons"].items():
        for key, c in found.items():
            if "p_holm" in c:
                nums = f"{c['mean']:+.3f} | {c['p_holm']:.3g} (over {c['family_size']})"
            else:
                nums = "— | —"
            rows.append(f"| {'VADER' if judge == 'vader' else 'trained'} | {key} | {nums} | {words[judge][key]} |")
    verdict, why = sentiment_verdict(rec)
    rule = " ".join(sentiment_verdict.__doc__.split("Rule ")[1].split())
    rows += ["", f"**Verdict: {verdict}.** {why} Rule {rule}"]
    return rows


def _sentiment_search_rows(m: dict, cfg: dict, layers: list[int]) -> list[str]:
    """The search behind the search-derived vector, per direction and seed (records that have one)."""
    if "search" not in m:
        return []
    li = m["cosine"]["layers"]
    rows = [
        "",
        f"Search-derived vector: per direction, {cfg['search_seeds']} Best-of-{cfg['search_n']} searches over "
        f"weight perturbations of norm {', '.join(f'{r:g}' for r in cfg['search_norms'])} × the one step's, scored "
        f"by the loss of {cfg['search_sentences']} held-out sentences of the class (choice) and "
        f"{cfg['search_sentences']} more (report); each chosen perturbation pushed forward, the mean over seeds "
        "is the vector.",
        "",
        "| direction | seed | norm chosen | loss gain, choosing sentences | loss gain, reporting sentences | "
        "cosine with CAA at the steering layers |",
        "|---|---|---|---|---|---|",
    ]
    for direction, recs in m["search"].items():
        for k, r in enumerate(recs):
            cos = ", ".join(f"{x}: {r['cosine_caa'][li.index(x)]:+.2f}" for x in layers)
            rows.append(
                f"| {direction} | {k} | {r['norm']:g} | {r['gain_select']:+.4f} | {r['gain_heldout']:+.4f} | {cos} |"
            )
    found, mean, se = search_found(m)
    rows += [
        "",
        f"Held-out loss gain of the chosen perturbations, mean over the {sum(len(r) for r in m['search'].values())} "
        f"searches: {mean:+.4f} ± {se:.4f} nats. "
        + (
            "The searches found perturbations that lower the loss of sentences they were not chosen on."
            if found
            else "The searches found no perturbation that lowers the loss of sentences it was not chosen on beyond "
            "chance: the search-derived vectors are the shadows of near-random weight perturbations, and any "
            "steering they show is read as such."
        )
        + " Rule: found when the mean held-out gain minus 2 SE (over searches) is > 0.",
    ]
    return rows


def search_found(m: dict) -> tuple[bool, float, float]:
    """Rule: the searches found something when the mean held-out loss gain of the chosen
    perturbations, over every search of both directions, minus 2 SE is > 0.  -> (found, mean, se)."""
    from updatescope.experiments.stats import mean_se

    s = mean_se([r["gain_heldout"] for recs in m["search"].values() for r in recs])
    se = float("nan") if s["se"] is None else s["se"]
    return bool(s["se"] is not None and s["mean"] - 2 * se > 0), s["mean"], se


def control_block(rec: dict, name: str) -> list[str]:
    """The capitals task as the negative control, from its record."""
    m, cfg = rec["metrics"], rec["config"]
    b = m["base"]["test"]
    verdict, _ = steering_verdict(m, cfg)
    sep = "separates" if separates(b) else "does not separate"
    return [
        f"**Negative control.** The capitals task (`docs/results/{name}.json`) stays as a negative control: the "
        f"base margin {sep} true from false statements (test AUC {b['auc']:.3f} ± {auc_se(b['auc'], b['n']):.3f}, "
        f"n = {b['n']}), and its steering verdict is \u201c{verdict}\u201d."
        + (
            " Where the margin does not separate the classes a fixed vector can at best move the answer bias, so "
            "the sentiment task below is the test that can succeed."
            if not separates(b)
            else ""
        )
    ]


# --------------------------------------------------------------------------- the shadow of a fine-tune
def _shadow_rules():
    # the rules live with the experiment, so the record and the doc cannot disagree
    from updatescope.experiments.steering_shadow import verdicts

    return verdicts


SPAN_LABELS = {"caa": "CAA (k = 1)", "caa+shifts": "CAA + both one-step shifts (k = 3)"}
#: the shadows, primary first (amendment 1)
SHADOW_LABELS = {
    "contrast": "**FT_pos − FT_neg** (primary)",
    "positive": "FT_pos − base",
    "negative": "FT_neg − base",
}


#: the record's shadow measures: without the massive coordinate (primary, amendment 3), then
#: the full space (secondary; the only one in older records)
PRIMARY, FULL = "shadow_without_massive", "shadow"


def shadow_words(rec: dict, key: str = PRIMARY) -> dict[str, dict[str, dict[str, str]]]:
    """Per shadow and span, the word for the mean shadow and the per-token shadow of the
    measures under ``metrics[key]`` (default: without the massive coordinate, the primary
    ones), recomputed from the recorded numbers by ``regime_passes`` (the pair's check) and
    ``span_word``."""
    v = _shadow_rules()
    cfg, m = rec["config"], rec["metrics"]
    pair = m["regime"]["pair"]
    passes = v.regime_passes(pair["mean"], pair["se"], cfg["regime_z"])
    out: dict[str, dict[str, dict[str, str]]] = {}
    for name in SHADOW_LABELS:
        sh = m.get(key, {}).get(name)
        measured = passes and sh is not None
        out[name] = {}
        for span in SPAN_LABELS:
            f = sh["spans"][span] if measured else None
            out[name][span] = {
                ms: v.span_word(f[ms], f[f"null_{ms}_q"], m["rule_layers"], True) if f else v.WORDS[2]
                for ms in ("mean", "token")
            }
    return out


def _shadow_regime(rec: dict) -> list[str]:
    v = _shadow_rules()
    cfg, m = rec["config"], rec["metrics"]
    pair = m["regime"]["pair"]
    ok = v.regime_passes(pair["mean"], pair["se"], cfg["regime_z"])
    z = f"{cfg['regime_z']:g}"
    rows = [
        "",
        f"**Regime check** (amendment 1): per held-out sentence x of either class, d(x) = its loss under the other "
        f"class's fine-tune − its loss under its own class's fine-tune (paired on the sentence itself); the pair "
        f"learned sentiment when mean d − {z} SE > 0.",
        "",
        "| held-out sentences | mean d (SE) | mean d, positive sentences | mean d, negative sentences | pair |",
        "|---|---|---|---|---|",
        f"| {pair['n']} | {pair['mean']:+.4f} ± {pair['se']:.4f} | {pair['mean_positive']:+.4f} | "
        f"{pair['mean_negative']:+.4f} | {'passes' if ok else 'refused: not measured'} |",
        "",
        "Secondary (the pre-registered per-fine-tune check, which paired the i-th own-class with the i-th "
        "other-class held-out sentence; it gates nothing now): loss drop from the base model, nats.",
        "",
        "| fine-tune | own-class loss drop | other-class loss drop | own − other (SE, index-paired) | old rule |",
        "|---|---|---|---|---|",
    ]
    for d, r in m["regime"]["per_direction"].items():
        old = v.regime_passes(r["mean"], r["se"], cfg["regime_z"])
        rows.append(
            f"| {d} | {r['own_mean']:+.4f} | {r['other_mean']:+.4f} | {r['mean']:+.4f} ± {r['se']:.4f} | "
            f"{'would pass' if old else 'would refuse'} |"
        )
    return rows


def _first_token(rec: dict) -> list[str]:
    """Amendment 2's diagnostic line, from the record (older records have none)."""
    cfg, m = rec["config"], rec["metrics"]
    ft = m.get("first_token")
    if not ft:
        return []
    x, last = m["headline_layer"], m["rule_layers"][-1]
    at = [
        f"layer {i}: first token {ft['first_norm'][i]:,.0f} against {ft['other_norm'][i]:,.0f} for the others, "
        f"{100 * ft['top_share'][i]:.1f}% of its squared norm in coordinate {ft['top_coordinate'][i]}; that "
        f"coordinate holds {100 * ft['caa_with_first_top_share'][i]:.1f}% of CAA over every token and "
        f"{100 * ft['caa_top_share'][i]:.1f}% of CAA without the first token (cosine of the two "
        f"{ft['cos_caa_with_first'][i]:+.2f})"
        for i in dict.fromkeys((x, last))
    ]
    left_out = (
        "CAA, the one-step shifts' token mean and every shadow below leave each sequence's first token out"
        if cfg.get("skip_first_token")
        else "nothing below leaves the first token out"
    )
    return [
        "",
        f"**First token** (amendment 2; mean residual norms on the {2 * m['n']['fit']} fit polarity sentences): "
        + "; ".join(at)
        + f". {left_out[0].upper()}{left_out[1:]}.",
    ]


def _massive(rec: dict) -> list[str]:
    """Amendment 3's line: the massive coordinate's share of each shadow (older records have none)."""
    m = rec["metrics"]
    mv = m.get("massive")
    if not mv or all(s is None for s in mv["share"].values()):
        return []
    x, last = m["headline_layer"], m["rule_layers"][-1]
    at = []
    for i in dict.fromkeys((x, last)):
        shares = ", ".join(
            f"{SHADOW_LABELS[s].replace('**', '').replace(' (primary)', '')} {100 * sh['token'][i]:.1f}% per token, "
            f"{100 * sh['mean'][i]:.1f}% of the mean shadow"
            for s, sh in mv["share"].items()
            if sh is not None
        )
        at.append(f"layer {i}, coordinate {mv['coordinate'][i]}: {shares}")
    return [
        "",
        "**The massive coordinate's share of each shadow** (amendment 3; per layer, the coordinate with the "
        "largest share of the first tokens' squared norm): " + "; ".join(at) + ".",
    ]


def _fraction_table(rec: dict, key: str, primary: bool) -> list[str]:
    """The fractions of every shadow and span at the headline layer, with nulls, ceilings and words."""
    v = _shadow_rules()
    cfg, m = rec["config"], rec["metrics"]
    x, rl = m["headline_layer"], m["rule_layers"]
    q = f"{100 * cfg['quantile']:g}th percentile"
    rows = [
        "| shadow | span | mean shadow | random mean, " + q + " | per token | random mean, " + q + " | top-k "
        "ceiling | verdict, mean shadow (rule layers above random) | verdict, per token |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    words = shadow_words(rec, key)
    for sname, slabel in SHADOW_LABELS.items():
        sh = m[key].get(sname)
        if not primary:
            slabel = slabel.replace("**", "").replace(" (primary)", "")
        for span, label in SPAN_LABELS.items():
            w = words[sname][span]
            if sh is None or w["mean"] == v.WORDS[2]:
                rows.append(f"| {slabel} | {label} | — | — | — | — | — | {w['mean']} | {w['token']} |")
                continue
            f = sh["spans"][span]
            above_m = len(v.layers_above(f["mean"], f["null_mean_q"], rl))
            above_t = len(v.layers_above(f["token"], f["null_token_q"], rl))
            rows.append(
                f"| {slabel} | {label} | {f['mean'][x]:.3f} | "
                f"{f['null_mean_mean'][x]:.4f}, {f['null_mean_q'][x]:.4f} | "
                f"{f['token'][x]:.4f} | {f['null_token_mean'][x]:.4f}, {f['null_token_q'][x]:.4f} | "
                f"{f['ceiling_token'][x]:.3f} | {w['mean']} ({above_m} of {len(rl)}) | {w['token']} ({above_t} of "
                f"{len(rl)}) |"
            )
    return rows


def _mean_cosines(m: dict, key: str) -> str:
    x = m["headline_layer"]
    return "; ".join(
        f"{SHADOW_LABELS[s].replace('**', '').replace(' (primary)', '')} {sh['cos_mean_caa'][x]:+.2f} "
        f"(shadow norm {sh['relative'][x]:.3f} of the residual's"
        + (f"; cosine with the contrast's mean {sh['cos_mean_contrast'][x]:+.2f}" if "cos_mean_contrast" in sh else "")
        + ")"
        for s, sh in m[key].items()
        if sh is not None
    )


def _selection(rec: dict) -> list[str]:
    """Amendment 4's step choice, from the record (older records have none)."""
    sel = rec["metrics"].get("selection")
    if not sel:
        return []
    steps = "; ".join(
        f"step {r['step']}: {r['mean']:+.4f} ± {r['se']:.4f}" + (" (kept)" if r["step"] == sel["chosen_step"] else "")
        for r in sel["per_step"]
    )
    return [
        "",
        f"**Step selection** (amendment 4): mean validation d (SE) of the pair on {2 * sel['n_val']} validation "
        f"sentences, after every {rec['config']['val_every']} steps; both fine-tunes are restored to the step "
        f"with the highest mean: {steps}.",
    ]


def _regime_followup(rec: dict) -> str:
    """After a failed regime check: for a quick record, that the full run is the test; for a
    full record, whether both fine-tunes' held-out loss rose above the base model's (mean own-
    and other-class loss drop, ``own_mean`` / ``other_mean`` < 0) while their training loss fell."""
    if rec["config"]["quick"]:
        return "Whether the full run's longer fine-tune changes that is untested."
    per = rec["metrics"]["regime"].get("per_direction", {})
    t = rec["metrics"]["training"]
    drops = [per[d][k] for d in per for k in ("own_mean", "other_mean") if per[d].get(k) is not None]
    fell = all(t[d]["last"] < t[d]["first"] for d in t)
    if drops and all(x < 0 for x in drops) and fell:
        return (
            "In this full run the longer fine-tune fits its training sentences (training loss fell) while "
            "the held-out sentences of both classes got worse than under the base model (every loss drop in the "
            "table above is negative): the fine-tunes memorised their sentences rather than learned a sentiment."
        )
    return "The full run's longer fine-tune did not change that."


def shadow_block(rec: dict, name: str) -> list[str]:
    v = _shadow_rules()
    cfg, m, env = rec["config"], rec["metrics"], rec["env"]
    dirty = " (uncommitted changes)" if env.get("git_dirty") else ""
    cmd = "updatescope reproduce steering-shadow" + (" --quick" if cfg["quick"] else "")
    x = m["headline_layer"]
    rl = m["rule_layers"]
    q = f"{100 * cfg['quantile']:g}th percentile"
    skip = cfg.get("skip_first_token", False)  # amendment 2; absent from older records
    restricted = PRIMARY in m  # amendment 3; absent from older records
    selected = m.get("selection")  # amendment 4; absent from older records
    amended = (
        "amendments 1–4"
        if selected
        else "amendments 1–3"
        if restricted
        else "amendments 1 and 2"
        if skip
        else "amendment 1"
    )
    skipped = ", the first token of each left out" if skip else ""
    rows = [
        f"Record `docs/results/{name}.json`: `{cmd}`, {rec['seconds']:.0f} s on 2 CPU cores, commit "
        f"`{env.get('git_commit', '?')[:10]}`{dirty}; model `{cfg['model']}` ({m['n_layers']} layers, width "
        f"{m['d']}); pre-registration (with {amended}) sha256 `{(cfg.get('preregistration_sha256') or '?')[:12]}`. "
        f"{m['n']['fit']} fit + {m['n']['heldout']} held-out polarity sentences per class; LoRA r {cfg['lora_r']}, "
        f"alpha {cfg['lora_alpha']:g} on every projection of every layer, "
        + (
            f"at most {cfg['steps']} Adam steps of {cfg['batch']} sentences at lr {cfg['lr']:g} on "
            f"{m['n']['fit'] - selected['n_val']} of the fit sentences, step {selected['chosen_step']} kept "
            f"(chosen on the other {selected['n_val']} per class)"
            if selected
            else f"{cfg['steps']} Adam steps of {cfg['batch']} sentences at lr {cfg['lr']:g}"
        )
        + f"; shadow on {m['n']['prompts']} neutral news openings "
        f"({m['n']['tokens']} tokens{skipped}); {cfg['random_draws']} random subspaces per layer.",
    ]
    if cfg["quick"]:
        rows[0] += " A quick run checks that the pipeline runs: its words carry no weight."
    rows += _first_token(rec)
    rows += _massive(rec)
    rows += _selection(rec)
    rows += _shadow_regime(rec)
    pair = m["regime"]["pair"]
    passes = v.regime_passes(pair["mean"], pair["se"], cfg["regime_z"])
    sh_cos = m["cosine"]["split_half_caa"]
    t = m["training"]
    rows += [
        "",
        (
            "Training loss (first → kept → last step): "
            + "; ".join(
                f"{d} {t[d]['first']:.2f} → {t[d]['per_step'][selected['chosen_step'] - 1]:.2f} → {t[d]['last']:.2f}"
                for d in t
            )
            if selected
            else "Training loss (first → last step): "
            + "; ".join(f"{d} {t[d]['first']:.2f} → {t[d]['last']:.2f}" for d in t)
        )
        + f". Cosine of the one-step shift with ±CAA at layer {x}: positive "
        f"{m['cosine']['shift_positive_caa'][x]:+.2f}, negative {m['cosine']['shift_negative_caa'][x]:+.2f}.",
    ]
    if not passes or all(s is None for s in m["shadow"].values()):
        rows += [
            "",
            "**The pair of fine-tunes failed its regime check: nothing was measured.** Held-out sentences are "
            "not fitted better by their own class's fine-tune than by the other class's, beyond "
            f"{cfg['regime_z']:g} SE: by this check the two fine-tunes learned the movie-review text they share, "
            "not which sentiment their sentences carry, so their contrast is not a sentiment shadow and "
            "comparing it with CAA would not ask the question. " + _regime_followup(rec),
        ]
    where = (
        f"the rule layer ({rl[0]}–{rl[-1]}) where CAA's split-half cosine is highest ({sh_cos[x]:.2f}). Random: "
        f"mean and {q} over random subspaces of the same dimension (expected k/d); ceiling: the top-k right "
        "singular vectors of the shadow itself (for the mean shadow the ceiling is 1). The contrast shadow answers "
        "the question; the shadows against the base are secondary (they carry the review-text shift both "
        "fine-tunes share)."
    )
    if restricted:
        c = m["massive"]["coordinate"][x]
        rows += [
            "",
            f"**Fractions without the massive coordinate at layer {x}** (primary, amendment 3: the shadows, CAA "
            f"and the shifts restricted to the other {m['d'] - 1} coordinates, coordinate {c} left out at this "
            f"layer; random subspaces drawn in {m['d'] - 1} dimensions), {where}",
            "",
            *_fraction_table(rec, PRIMARY, primary=True),
            "",
            f"**Full-space fractions at layer {x}** (secondary: coordinate {c} included).",
            "",
            *_fraction_table(rec, FULL, primary=False),
        ]
    else:
        rows += ["", f"**Fractions at layer {x}**, {where}", "", *_fraction_table(rec, FULL, primary=True)]
    if passes:
        for key, space in ((PRIMARY, "without the massive coordinate"), (FULL, "in the full space")):
            cos = _mean_cosines(m, key) if key in m else ""
            if cos:
                rows += [
                    "",
                    f"Cosine of each mean shadow with ±CAA {space} (toward the positive class for the contrast and "
                    f"FT_pos, the negative for FT_neg) at layer {x}: {cos}.",
                ]
    rule = " ".join(v.span_word.__doc__.split("Rule: ")[1].split())
    rows += [
        "",
        f"Rule: {rule} Rule layers {rl[0]}–{rl[-1]}; every layer is in the JSON under `metrics.shadow` (full "
        "space)" + (" and `metrics.shadow_without_massive` (primary)" if restricted else "") + ".",
    ]
    return rows


KINDS = {
    "run": run_block,
    "setup": setup_block,
    "cosine": cosine_block,
    "steering": steering_block,
    "search": search_block,
    "sentiment": sentiment_block,
    "control": control_block,
    "shadow": shadow_block,
}


def block(kind: str, name: str) -> list[str]:
    """The lines of one generated block: table ``kind`` of record ``name``."""
    return KINDS[kind](_blocks.load(name), name)


def render(text: str) -> str:
    """``text`` with every generated block re-rendered from its record."""
    return _blocks.regenerate(text, block)


def main(argv: list[str] | None = None) -> int:
    return _blocks.run(sys.argv[1:] if argv is None else argv, [DOC], block, "docs/steering_table.py")


if __name__ == "__main__":
    sys.exit(main())
