"""The reading of the source-selection records for docs/results.md: what the ground truth
looks like, what the methods do and what the verdicts say, every figure read from the
record and every claim decided by the rule written next to it.  Registered in
docs/results_table.py as the record kinds ``selwall``, ``seltruth``, ``selsingle`` and
``selreading`` and the multi-record kinds ``selseeds`` and ``selbudget``."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the metrics a reading compares, with their names in a sentence
METRICS = {"spearman": "per-target Spearman", "top1": "top-1", "oracle_normalised_transfer": "oracle-normalised"}
#: FisherSketch is read against these, in this order (the record's family of comparisons)
BASELINES = ("family", "cka", "activation", "easiness", "exact_fisher")


def _rt() -> ModuleType:
    import results_table

    return results_table


#: ``method_seconds`` keys that are not method names
TIMED = {"sketch": "the sketches", "exact": "the exact Gram references"}


def _label(key: str) -> str:
    rt = _rt()
    return TIMED.get(key) or rt._plain(rt.LABEL.get(key, key))


def _mlabel(metrics: dict, key: str) -> str:
    """The record's own name for a method (e.g. the SMILES records' "same property" label)."""
    rt = _rt()
    return rt._plain(rt.labels(metrics).get(key) or rt.LABEL.get(key, key))


def _side(ci: list | None) -> str:
    """Where a 95% CI lies against 0."""
    if not ci:
        return "undefined"
    return "above 0" if ci[0] > 0 else "below 0" if ci[1] < 0 else "includes 0"


def _ci(ci: list, fmt: str = "{:.2f}") -> str:
    return f"[{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ----------------------------------------------------------------------------- run time
def wall_line(rec: dict) -> list[str]:
    """The record's wall time and the three slowest scoring methods (``method_seconds``)."""
    env, m = rec.get("env", {}), rec["metrics"]
    ms = m.get("method_seconds", {})
    top = sorted(ms, key=ms.get, reverse=True)[:3]
    slow = (
        ""
        if not top
        else "; the slowest scorings: " + ", ".join(f"{_label(k)} {ms[k]:.0f} s" for k in top) + " (`method_seconds`)"
    )
    return [
        f"The record's wall time: {rec['seconds']:.0f} s on {env.get('cpu_count', '?')} CPU cores, git "
        f"{env.get('git_commit', '?')[:10]}{' (dirty tree)' if env.get('git_dirty') else ''}{slow}."
    ]


# ----------------------------------------------------------------------- the ground truth
def truth_lines(rec: dict) -> list[str]:
    """The shape of the ground truth: own-domain transfers by family, the sign of the cross
    transfers, the family blocks, how often the best source shares the target's family and
    how close the same-family sources lie against the gap between families."""
    m = rec["metrics"]
    tr, fam = m["ground_truth"]["transfer"], rec["config"]["families"]
    targets = list(tr)
    own = {t: tr[t][t] for t in targets if t in tr[t]}
    out = []
    if own:
        gain = sum(v > 0 for v in own.values())
        by_fam = {f: statistics.mean(own[t] for t in own if fam[t] == f) for f in dict.fromkeys(fam[t] for t in own)}
        hi, lo = max(by_fam, key=by_fam.get), min(by_fam, key=by_fam.get)
        head = (
            "Every source improves its own domain"
            if gain == len(own)
            else f"{gain} of {len(own)} sources improve their own domain"
        )
        out.append(
            f"{head} (own-domain transfer {min(own.values()):+.4f} to {max(own.values()):+.4f} nats; family means "
            + ", ".join(f"{f} {v:+.4f}" for f, v in sorted(by_fam.items(), key=lambda kv: -kv[1]))
            + f": {hi} the most, {lo} the least)."
        )
    cross = [(t, s, v) for t in targets for s, v in tr[t].items() if s != t]
    pos = sum(v > 0 for _, _, v in cross)
    same = [v for t, s, v in cross if fam[s] == fam[t]]
    other = [v for t, s, v in cross if fam[s] != fam[t]]
    block = (
        f"mean same-family cross transfer {statistics.mean(same):+.4f} against {statistics.mean(other):+.4f} "
        f"between families: "
        + (
            "family blocks (rule: the same-family mean is the larger)"
            if statistics.mean(same) > statistics.mean(other)
            else "no family blocks (rule: the same-family mean is not the larger)"
        )
        if same and other
        else "no same-family pairs"
    )
    out.append(
        f"{pos} of {len(cross)} cross-domain transfers are positive ({min(v for *_, v in cross):+.4f} to "
        f"{max(v for *_, v in cross):+.4f} nats); {block}."
    )
    bsf = m.get("best_source_same_family", {})
    has = [t for t in targets if any(fam[s] == fam[t] for s in tr[t] if s != t)]
    ratios = []
    for t in has:
        sv = [v for s, v in tr[t].items() if s != t and fam[s] == fam[t]]
        ov = [v for s, v in tr[t].items() if fam[s] != fam[t]]
        gap = statistics.mean(sv) - statistics.mean(ov) if ov else 0.0
        if len(sv) >= 2 and gap > 0:
            ratios.append((max(sv) - min(sv)) / gap)
    close = ""
    if ratios:
        r = statistics.median(ratios)
        close = (
            f" Within a family the sources lie {'closer together than' if r < 1 else 'at least as far apart as'} the "
            f"gap between families (rule: median over the {len(ratios)} targets with ≥ 2 same-family sources of "
            f"their range / (same-family mean − other mean) {'<' if r < 1 else '≥'} 1; it is {r:.2f})"
            + (", which is what makes top-1 hard." if r < 1 else ".")
        )
    out.append(
        f"The best source shares the target's family for {sum(bool(bsf.get(t)) for t in has)} of the {len(has)} "
        f"targets that have a same-family candidate ({len(targets)} targets in all).{close}"
    )
    on = {k: v["oracle_normalised_transfer"] for k, v in m["methods"].items() if "oracle_normalised_transfer" in v}
    n_on = {v.get("n") for v in on.values()}
    if n_on and max(n_on) < len(targets):
        cis = [v["ci"] for v in on.values() if v.get("ci")]
        sep = any(a[1] < b[0] for a in cis for b in cis)
        out.append(
            f"Oracle-normalised transfer is defined for {max(n_on)} of {len(targets)} targets (the rest have no "
            f"positive transfer to normalise by); its CIs over the methods span [{min(c[0] for c in cis):.2f}, "
            f"{max(c[1] for c in cis):.2f}], and {'some are' if sep else 'none is'} separated from another's "
            f"(rule: one CI's upper end below another's lower end)."
        )
    return [" ".join(out)]


# ------------------------------------------------------------- one-seed records: methods
def single_lines(rec: dict) -> list[str]:
    """What a one-seed record says about the methods: FisherSketch's ranking, the sketch
    against exact A_F, the paper's values against our CIs, the best method per metric, which
    methods rank above chance and what random reaches."""
    rt = _rt()
    m = rec["metrics"]
    meths = {k: v for k, v in m["methods"].items() if "spearman" in v}
    f = meths["fisher"]
    sp = f["spearman"]
    out = [
        f"- **FisherSketch's per-target Spearman with the truth: {sp['mean']:.2f} {_ci(sp['ci'])}, "
        f"{_side(sp['ci'])}**; "
        f"oracle-normalised transfer {f['oracle_normalised_transfer']['mean']:.2f}, mean regret "
        f"{f['regret']['mean']:.4f} nats, top-1 {f['top1']['mean']:.2f} = {f['top1_over_chance']:.1f}× chance "
        f"({f['chance_top1']:.3f})."
    ]
    ex = meths.get("exact_fisher")
    if ex:
        inside = []
        for k in ("spearman", "oracle_normalised_transfer"):
            a, b = f[k], ex[k]
            inside.append(b["ci"][0] <= a["mean"] <= b["ci"][1] and a["ci"][0] <= b["mean"] <= a["ci"][1])
        out.append(
            "- The sketch "
            + ("matches" if all(inside) else "does not match")
            + " the exact A_F it estimates (rule: on per-target Spearman and oracle-normalised transfer each mean "
            f"lies inside the other's CI; exact A_F {ex['spearman']['mean']:.2f} {_ci(ex['spearman']['ci'])} and "
            f"{ex['oracle_normalised_transfer']['mean']:.2f} {_ci(ex['oracle_normalised_transfer']['ci'])})."
        )
    paper = rt.PAPER_CLAIMS["selection"][1]
    cells = []
    for k, v in paper.items():
        where = rt._against(f[k], v)
        word = "not excluded" if where == "inside our CI" else "not reproduced"
        cells.append(f"{METRICS[k]} {v:.3f} ({where}): **{word}**")
    out.append(
        "- Paper A's FisherSketch values against our CIs (rule: not excluded where the paper's value lies inside "
        "our 95% CI, else not reproduced): " + "; ".join(cells) + "."
    )
    best = {
        k: max(meths, key=lambda n: meths[n][k]["mean"] if meths[n][k].get("mean") is not None else -9) for k in METRICS
    }
    pooled = max(meths, key=lambda n: meths[n]["pooled_spearman"].get("rho") or -9)
    act = [k for k in rt.ACTIVATION_ONLY if k in meths]
    above = [k for k in meths if _side(meths[k]["spearman"].get("ci")) == "above 0"]
    below = [k for k in meths if _side(meths[k]["spearman"].get("ci")) == "below 0"]
    act_above = [k for k in act if k in above]
    out.append(
        "- Highest mean: "
        + "; ".join(f"{METRICS[k]} {_label(best[k])} ({meths[best[k]][k]['mean']:.2f})" for k in METRICS)
        + f"; pooled Spearman {_label(pooled)} ({meths[pooled]['pooled_spearman']['rho']:.2f}). "
        + (
            f"{len(act_above)} of {len(act)} activation-only methods rank sources above chance (per-target "
            "Spearman CI above 0)."
        )
    )
    out.append(
        "- Per-target Spearman CI above 0: "
        + (_join([_label(k) for k in above]) if above else "none")
        + "; below 0: "
        + (_join([_label(k) for k in below]) if below else "none")
        + "; the others include 0."
    )
    sve = m.get("sketch_vs_exact", {})
    if "coupling" in sve and "fisher" in sve:
        c, fi = sve["coupling"], sve["fisher"]
        out.append(
            f"- Sketch against exact on the {c['pairs']} pairs: the coupling estimate's Spearman {c['spearman']:.2f} "
            f"(mean |err| {c['mean_abs_err']:.3f}) against A_F's {fi['spearman']:.2f} ({fi['mean_abs_err']:.3f}); "
            + (
                "the coupling agrees less."
                if c["spearman"] < fi["spearman"]
                else "the coupling agrees at least as well."
            )
        )
    r = meths.get("random")
    if r:
        others = [k for k in meths if k != "random"]
        overlap = all(
            meths[a]["top1"]["ci"][0] <= meths[b]["top1"]["mean"] <= meths[a]["top1"]["ci"][1]
            for a in others
            for b in others
        )
        same = "the same top-1 as" if r["top1"]["mean"] == f["top1"]["mean"] else "a different top-1 from"
        low = sorted((k for k in others), key=lambda k: meths[k]["spearman"]["mean"])[:2]
        out.append(
            f"- Random: per-target Spearman {r['spearman']['mean']:.2f} {_ci(r['spearman']['ci'])} "
            f"({_side(r['spearman']['ci'])}), top-1 {r['top1']['mean']:.2f}, {same} FisherSketch's "
            f"{f['top1']['mean']:.2f}. Lowest per-target Spearman apart from random: "
            f"{_join([_label(k) for k in low])}. "
            + (
                "Every method's top-1 lies inside every other's CI (random aside)."
                if overlap
                else "Some methods' top-1 lies outside another's CI (random aside)."
            )
        )
    return out


def seeds_lines(recs: list[dict]) -> list[str]:
    """The methods' order by per-target Spearman in two seeds' records: the same or not."""
    rt = _rt()
    a, b = (r["metrics"]["methods"] for r in recs[:2])
    names = [k for k in a if k in b and a[k].get("spearman", {}).get("mean") is not None]
    va = {k: a[k]["spearman"]["mean"] for k in names}
    vb = {k: b[k]["spearman"]["mean"] for k in names}
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    swapped = sum((va[x] - va[y]) * (vb[x] - vb[y]) < 0 for x, y in pairs)
    mean = {k: (va[k] + vb[k]) / 2 for k in names}
    order = sorted(names, key=lambda k: -mean[k])
    same = (
        "is the same in both seeds"
        if not swapped
        else f"differs between the seeds for {swapped} of the {len(pairs)} pairs of methods"
    )
    return [
        f"The methods' order by per-target Spearman {same}. By its mean over the two seeds: "
        + " > ".join(f"{rt._plain(rt.LABEL.get(k, k))} {mean[k]:.2f}" for k in order)
        + "."
    ]


# ------------------------------------------------------------ multi-seed records: verdicts
def _leans(metrics: dict, pair: str, key: str) -> str | None:
    """'leads' / 'trails' where the bootstrap CI of the paired difference excludes 0."""
    ci = metrics.get("paired", {}).get(pair, {}).get(key, {}).get("ci")
    side = _side(ci)
    return "leads" if side == "above 0" else "trails" if side == "below 0" else None


def _against_lines(metrics: dict, verdicts: dict, b: str) -> str | None:
    pair = f"fisher - {b}"
    vs = {k: verdicts.get(f"{pair}: {k}") for k in METRICS}
    vs = {k: v for k, v in vs.items() if v is not None}
    if not vs:
        return None
    better = [METRICS[k] for k, v in vs.items() if v.word == "better"]
    worse = [METRICS[k] for k, v in vs.items() if v.word == "worse"]
    lean = {k: _leans(metrics, pair, k) for k, v in vs.items() if v.word == "no difference"}
    leads = [METRICS[k] for k, w in lean.items() if w == "leads"]
    trails = [METRICS[k] for k, w in lean.items() if w == "trails"]
    none = [METRICS[k] for k, w in lean.items() if w is None]
    parts = []
    if better:
        parts.append(f"better on {_join(better)}")
    if worse:
        parts.append(f"worse on {_join(worse)}")
    if leads or trails:
        lt = ([f"leads on {_join(leads)}"] if leads else []) + ([f"trails on {_join(trails)}"] if trails else [])
        parts.append(" and ".join(lt) + " by a bootstrap CI that excludes 0, not resolved by the sign-flip test")
    if none:
        parts.append(f"no difference on {_join(none)}")
    return f"- Against {_mlabel(metrics, b)}: " + "; ".join(parts) + "."


def reading_lines(rec: dict) -> list[str]:
    """The verdicts of a multi-seed record in words, each by the rule of the verdict block
    (sign-flip test, Holm over the record's comparisons), with where the bootstrap CI alone
    would lean; the ceiling, the within-family ranking and the claim's word."""
    rt = _rt()
    m = rec["metrics"]
    verdicts = rt.record_verdicts(m)
    f = m["methods"]["fisher"]
    lines = [
        'Reading the verdicts above (rule: "better" / "worse" as in the verdict block; "leads" / '
        '"trails" where only the bootstrap CI of the paired difference excludes 0):',
        "",
    ]
    for b in BASELINES:
        s = _against_lines(m, verdicts, b)
        if s:
            lines.append(s)
    ex = m.get("paired", {}).get("fisher - exact_fisher")
    cfg = rec.get("config", {})
    n_sk, n_ex = cfg.get("tokens", {}).get("sketch"), cfg.get("exact_n")
    if ex and n_sk and n_ex and n_sk > n_ex:
        lines.append(
            f"- The sketch reads all {n_sk} sketch tokens, the exact Gram identity the first {n_ex} (`exact_n`): "
            "a difference between them is partly sample size, not estimator quality."
        )
    sc = m.get("scores", {})
    if "fisher" in sc and "exact_fisher" in sc:
        ts = list(sc["fisher"])
        same = sum(
            max(sc["fisher"][t], key=sc["fisher"][t].get) == max(sc["exact_fisher"][t], key=sc["exact_fisher"][t].get)
            for t in ts
        )
        lines.append(f"- FisherSketch and exact A_F pick the same best source for {same} of {len(ts)} targets.")
    tn = m.get("truth_noise", {})
    ceil = tn.get("ceiling") or {}
    if ceil:
        below = [
            METRICS[k]
            for k in METRICS
            if k in ceil and f[k].get("ci") and ceil[k].get("ci") and f[k]["ci"][1] < ceil[k]["ci"][0]
        ]
        inside = [
            METRICS[k]
            for k in METRICS
            if k in ceil and f[k].get("ci") and ceil[k].get("ci") and f[k]["ci"][1] >= ceil[k]["ci"][0]
        ]
        s = "- **FisherSketch is below the noise ceiling on " + (_join(below) if below else "no metric") + "**"
        if inside:
            s += f"; on {_join(inside)} its CI reaches the ceiling's"
        s += " (rule: the upper end of its 95% CI under the lower end of the ceiling's)."
        n_t, same = tn.get("n_targets"), tn.get("best_same_in_every_seed")
        if n_t is not None and same is not None and n_t > same:
            s += (
                f" The best source changes between seeds for {n_t - same} of {n_t} targets, which caps the top-1 "
                "ceiling."
            )
        elif n_t is not None and same is not None:
            s += f" The best source is the same in every seed for all {n_t} targets."
        so = tn.get("ceiling_seeds_only", {}).get("spearman")
        if so and ceil.get("spearman"):
            c = ceil["spearman"]
            s += (
                f" Counting the evaluation sample too, the Spearman ceiling is {c['mean']:.2f} {_ci(c['ci'])}, against "
                f"{so['mean']:.2f} {_ci(so['ci'])} from the seeds alone: the eval sample adds "
                + ("more" if c["ci"][1] < so["ci"][0] else "no resolvable")
                + " noise (rule: the two CIs do not overlap)."
            )
        lines.append(s)
    wf = f.get("within_family", {})
    wt, ws, wc = wf.get("top1", {}), wf.get("spearman", {}), wf.get("chance_top1", {})
    if ws.get("n"):
        sides = {
            k: _side(m["methods"][k].get("within_family", {}).get("spearman", {}).get("ci"))
            for k in ("fisher", "error", "activation")
            if k in m["methods"]
        }
        lines.append(
            f"- Within the target's family (the only place the family label cannot help): FisherSketch's Spearman "
            f"{ws['mean']:.2f} {_ci(ws['ci'])} over {ws['n']} targets, CI {sides['fisher']}"
            + ("" if sides["fisher"] == "above 0" else ": it does not order sources within a family")
            + "; "
            + "; ".join(f"{_label(k)} {v}" for k, v in sides.items() if k != "fisher")
            + "."
        )
    elif wt.get("n"):
        lines.append(
            f"- Within-family ranking cannot be decided here: {wt['n']} targets have ≥ 2 same-family candidates "
            f"(FisherSketch's within-family top-1 {wt['mean']:.2f}, chance {wc.get('mean', float('nan')):.2f}) "
            f"and {ws.get('n', 0)} have ≥ 3 for a within-family Spearman."
        )
    fam = [verdicts.get(f"fisher - family: {k}") for k in METRICS]
    fam = [v for v in fam if v is not None]
    if fam:
        better = any(v.word == "better" for v in fam)
        worse = any(v.word == "worse" for v in fam)
        word = (
            "reproduced"
            if better and not worse
            else "contradicted"
            if worse and not better
            else "mixed"
            if better
            else "not reproduced"
        )
        lines += [
            "",
            '**Paper A\'s "FisherSketch picks data better than what a user already knows" (the 0/1 family / '
            f"collection label): {word}** in this record (rule: reproduced if FisherSketch is better than the "
            "label on at least one metric and worse on none; not reproduced if better on none).",
        ]
    return lines


def _worded(metrics: dict, base: str, key: str, v: object) -> str:
    """ "+0.15 no difference (leads by its bootstrap CI)": the mean, the word and the lean."""
    lean = _leans(metrics, f"fisher - {base}", key)
    extra = f" ({lean} by its bootstrap CI)" if lean and v.word == "no difference" else ""
    return f"{v.mean:+.2f} {v.word}{extra}"


def _seed_ceiling(metrics: dict) -> dict:
    """The noise ceiling from the fine-tuning seeds alone, so that records whose ceiling also
    counts the evaluation sample compare like with like."""
    tn = metrics["truth_noise"]
    return tn.get("ceiling_seeds_only") or tn["ceiling"]


def budget_lines(recs: list[dict]) -> list[str]:
    """The budget probe and what the chosen budget changed: ``probe+chosen+fixed`` (the
    record holding the probe, the record at the chosen budget, one at a budget fixed
    beforehand)."""
    rt = _rt()
    probe, chosen, fixed = recs
    b = probe["metrics"]["budget"]
    snr = [r["median_snr"] for r in b["grid"]]
    steps = [r["steps"] for r in b["grid"]]
    rises = all(y > x for x, y in zip(snr, snr[1:]))
    falls = all(y < x for x, y in zip(snr, snr[1:]))
    trend = "rises at every step of" if rises else "falls at every step of" if falls else "is not monotone over"
    edge = (
        ", the grid's largest, so a larger budget may sharpen the truth further."
        if b["chosen"] == max(steps)
        else ", the grid's smallest, so a smaller budget may sharpen the truth further."
        if b["chosen"] == min(steps)
        else ", inside its grid."
    )
    out = [
        f"The probe's median SNR {trend} its grid "
        f"({', '.join(f'{s} steps {v:.2f}' for s, v in zip(steps, snr))}); it chose {b['chosen']} steps" + edge
    ]
    cm, fm = chosen["metrics"], fixed["metrics"]
    cs = chosen["config"].get("lora_steps_used") or chosen["config"]["lora"]["steps"]
    fs = fixed["config"]["lora"]["steps"]
    cc, fc = _seed_ceiling(cm), _seed_ceiling(fm)
    up = [METRICS[k] for k in METRICS if cc[k]["mean"] > fc[k]["mean"]]
    out.append(
        f"At the chosen {cs} steps against the fixed {fs}: the noise ceiling of the fine-tuning seeds alone is "
        f"higher on {len(up)} of {len(METRICS)} metrics ("
        + ", ".join(f"{METRICS[k]} {fc[k]['mean']:.2f} → {cc[k]['mean']:.2f}" for k in METRICS)
        + f"), and the best source is the same in every seed for {fm['truth_noise']['best_same_in_every_seed']} → "
        f"{cm['truth_noise']['best_same_in_every_seed']} of {cm['truth_noise']['n_targets']} targets."
    )
    vc, vf = rt.record_verdicts(cm), rt.record_verdicts(fm)
    for base in ("family", "cka"):
        cells = []
        for k in METRICS:
            a, c = vf.get(f"fisher - {base}: {k}"), vc.get(f"fisher - {base}: {k}")
            if a is None or c is None:
                continue
            cells.append(f"{METRICS[k]} {_worded(fm, base, k, a)} → {_worded(cm, base, k, c)}")
        if cells:
            out.append(f"- FisherSketch − {_mlabel(fm, base)}, {fs} → {cs} steps: " + "; ".join(cells) + ".")
    return [" ".join(out[:2]), "", *out[2:]] if len(out) > 2 else [" ".join(out)]


# ---------------------------------------------------------------------------------- SMILES
#: methods that are labels or controls, not similarities between the domains
CONTROLS = ("family", "easiness", "size", "random")
#: the rule for a significant pooled correlation: the permutation (Mantel) p below this
ALPHA = 0.05


def _pooled(m: dict, name: str) -> dict:
    return m["correlation"][name]["pooled"]


def _sig(po: dict) -> bool:
    return po.get("rho") is not None and po["rho"] > 0 and po["p_perm"] < ALPHA


def smiles_truth_lines(recs: list[dict]) -> list[str]:
    """Per record: for how many sources their own domain gains most, for how many targets
    their own domain is the best source, whether every cross-domain reduction is positive and
    their range."""
    parts = []
    for rec in recs:
        pr = rec["metrics"]["ground_truth"]["ppl_reduction"]
        targets = list(pr)
        own_most = sum(all(pr[s][s] >= pr[t][s] for t in targets if s in pr[t]) for s in targets)
        own_best = sum(all(pr[t][t] >= v for v in pr[t].values()) for t in targets)
        cross = [v for t in targets for s, v in pr[t].items() if s != t]
        pos = sum(v > 0 for v in cross)
        parts.append(
            f"`{rec['_file']}`: own domain gains most from its source for {own_most} of {len(targets)} sources, "
            f"own domain is the best source for {own_best} of {len(targets)} targets; {pos} of {len(cross)} "
            f"cross-domain reductions are positive ({min(cross):.3f} to {max(cross):.3f})"
        )
    return [
        "Perplexity reduction 1 − exp(−ΔL), from each record's `ground_truth.ppl_reduction` (target rows, source "
        "columns; ties count for the own domain): " + "; ".join(parts) + "."
    ]


def smiles_corr_lines(rec: dict) -> list[str]:
    """The pooled correlation claim: FisherSketch's pooled ρ_s and permutation p against the
    paper's, which similarities are significant too, and the collection label against them."""
    rt = _rt()
    m = rec["metrics"]
    po = _pooled(m, "fisher")
    paper = rt.PAPER_CLAIMS["smiles"][1]["pooled"]
    sims = [k for k in m["correlation"] if k not in CONTROLS and k != "fisher"]
    sig = [k for k in sims if _sig(_pooled(m, k))]
    word = "reproduced" if _sig(po) else "not reproduced"
    out = [
        f"- **The paper's correlation claim: {word}** (rule: FisherSketch's pooled ρ_s is positive with a "
        f"permutation p below {ALPHA}): pooled ρ_s {po['rho']:.2f}, permutation p {po['p_perm']:.3f} over "
        f"{po['n']} ordered pairs; the paper's ρ_s {paper:.2f} lies "
        + ("below" if paper < po["rho"] else "above")
        + " ours.",
        "- The paper's contrast (activation-only not significant): "
        + ("**not reproduced**" if "activation" in sig else "**reproduced**")
        + f" (same rule; activation-only pooled ρ_s {_pooled(m, 'activation')['rho']:.2f}, p "
        f"{_pooled(m, 'activation')['p_perm']:.3f}). {len(sig)} of the {len(sims)} other similarities are "
        f"significant by the same rule"
        + ("" if len(sig) == len(sims) else f" (not: {_join([_label(k) for k in sims if k not in sig])})")
        + ".",
    ]
    fam = m["correlation"].get("family", {}).get("pooled", {})
    if fam.get("rho") is not None:
        above = [k for k in ["fisher", *sims] if (_pooled(m, k).get("rho") or -9) > fam["rho"]]
        out.append(
            f"- The 0/1 same-collection label's pooled ρ_s is {fam['rho']:.2f}: "
            + (
                "at least as high as every similarity's."
                if not above
                else f"below {len(above)} of the {len(sims) + 1} similarities' ({_join([_label(k) for k in above])})."
            )
        )
    return out


def smiles_pooled_lines(rec: dict) -> list[str]:
    """Which methods' pooled ρ_s is significant (permutation p below 0.01 and below 0.05)."""
    m = rec["metrics"]
    names = [k for k in m["correlation"] if _pooled(m, k).get("rho") is not None]
    strong = [k for k in names if _pooled(m, k)["rho"] > 0 and _pooled(m, k)["p_perm"] < 0.01]
    weak = [k for k in names if _sig(_pooled(m, k)) and k not in strong]
    rest = [k for k in names if k not in strong and k not in weak]
    return [
        "Pooled ρ_s with a permutation p below 0.01: "
        + (_join([f"{_label(k)} {_pooled(m, k)['rho']:.2f}" for k in strong]) if strong else "none")
        + "; below 0.05 only: "
        + (_join([_label(k) for k in weak]) if weak else "none")
        + "; not significant: "
        + (
            _join([f"{_label(k)} {_pooled(m, k)['rho']:.2f} (p {_pooled(m, k)['p_perm']:.2f})" for k in rest])
            if rest
            else "none"
        )
        + "."
    ]


def budget_check_lines(recs: list[dict]) -> list[str]:
    """``probe+run``: was the run's budget, fixed beforehand, the one the probe chooses?"""
    probe, run = recs
    chosen = probe["metrics"]["budget"]["chosen"]
    steps = run["config"]["lora"]["steps"]
    return [
        f"**Was the full run's budget ({steps} LoRA steps, fixed beforehand) the one a validation split chooses? "
        f"{'Yes' if chosen == steps else 'No'}**: the probe chose {chosen} steps."
    ]


def within_reading_lines(recs: list[dict]) -> list[str]:
    """``chosen+fixed+quick`` within-collection records: the pooled correlation and the
    per-target ranking at both budgets, the lead over CKA from the quick record to full size,
    top-1 against the ceiling, and the verdicts."""
    rt = _rt()
    chosen, fixed, quick = recs
    steps = {id(r): r["config"].get("lora_steps_used") or r["config"]["lora"]["steps"] for r in (chosen, fixed)}
    out = []
    sp = {}
    for r in (fixed, chosen):
        m = r["metrics"]
        po, s = _pooled(m, "fisher"), m["methods"]["fisher"]["spearman"]
        sp[id(r)] = s
        cen = rt.centred_pooled(m["scores"]["fisher"], m["ground_truth"]["ppl_reduction"])
        out.append(
            f"{steps[id(r)]} steps: pooled ρ_s {po['rho']:.2f}, Mantel p {po['p_perm']:.3f} "
            f"({'significant' if _sig(po) else 'not significant'}); with each target's mean removed {cen:.2f}; "
            f"per-target Spearman {s['mean']:.2f} {_ci(s['ci'])}"
        )
    a, b = sp[id(fixed)], sp[id(chosen)]
    same = a["ci"][0] <= b["mean"] <= a["ci"][1] and b["ci"][0] <= a["mean"] <= b["ci"][1]
    lines = [
        "FisherSketch's pooled correlation and ranking at the two budgets: "
        + "; ".join(out)
        + ". The per-target ranking is "
        + ("about the same at both budgets" if same else "different between the budgets")
        + " (rule: each mean inside the other's CI); the pooled statistic also compares gains across targets, "
        "which the centred value leaves out."
    ]
    vq, vc = rt.record_verdicts(quick["metrics"]), rt.record_verdicts(chosen["metrics"])
    q, c = vq.get("fisher - cka: spearman"), vc.get("fisher - cka: spearman")
    if q and c:
        lines.append(
            f"- FisherSketch − CKA on per-target Spearman: {q.mean:+.2f} in the quick record ({q.word}; {q.note()}), "
            f"{c.mean:+.2f} at full size and the chosen budget ({c.word}; {c.note()})."
        )
    cm = chosen["metrics"]
    t1, ct1 = cm["methods"]["fisher"]["top1"], cm["truth_noise"]["ceiling"]["top1"]
    lines.append(
        f"- Top-1 at the chosen budget: FisherSketch {t1['mean']:.2f} against the noise ceiling's {ct1['mean']:.2f} "
        f"{_ci(ct1['ci'])}; the best source is the same in every seed for "
        f"{cm['truth_noise']['best_same_in_every_seed']} of {cm['truth_noise']['n_targets']} targets."
    )
    labels = [vc.get(f"fisher - {k}: spearman") for k in ("family", "easiness")]
    beyond = all(v is not None and v.word == "better" for v in labels)
    cka = c.word == "better" if c else False
    po_c, po_f = _pooled(cm, "fisher"), _pooled(fixed["metrics"], "fisher")
    lines.append(
        f"- **Verdict at full size and the chosen budget: FisherSketch ranks sources "
        f"{'beyond' if beyond else 'not beyond'} the labels a user has (same property, easiness), "
        f"{'beyond' if cka else 'not beyond'} CKA; the paper's pooled correlation is "
        f"{'reproduced' if _sig(po_c) else 'not reproduced'}** "
        f"({'reproduced' if _sig(po_f) else 'not reproduced'} at the fixed {steps[id(fixed)]} steps). Rules: "
        '"beyond" where the per-target Spearman difference is "better" by the verdict rule above; '
        f"reproduced where the pooled ρ_s is positive with a Mantel p below {ALPHA}."
    )
    return [" ".join(lines[:1]), "", *lines[1:]]


# ------------------------------------------------------------------------------ verbalizer
#: the sketch resolves a design's pairs when its Spearman with the exact values over the
#: pairs is at least this
RESOLVE_RHO = 0.9
#: the trivial baselines a verbalizer user already has
TRIVIAL = ("word_prob", "easiness")


def _picks(scores: dict) -> dict[str, str]:
    return {t: max(row, key=row.get) for t, row in scores.items()}


def verb_lines(rec: dict) -> list[str]:
    """A verbalizer record read by stated rules: the paper's top-1 against our CIs, the shape
    of the best sources, where each scorer's top-1 lies against chance, which methods make the
    exact A_F's picks, and whether the sketch resolves the pairs."""
    rt = _rt()
    m = rec["metrics"]
    meths = {k: v for k, v in m["methods"].items() if "top1" in v}
    tr = m["ground_truth"]["transfer"]
    targets = list(tr)
    paper = rt.PAPER_CLAIMS["verbalizer"][1]["top1"]
    cells = []
    for k in ("fisher", "exact_fisher"):
        if k in meths:
            t1 = meths[k]["top1"]
            where = rt._against(t1, paper)
            cells.append(
                f"{_label(k)} {t1['mean']:.2f} {_ci(t1['ci'])}: {where}, "
                f"**{'not excluded' if where == 'inside our CI' else 'not reproduced'}**"
            )
    out = [
        f"- The paper's FisherSketch top-1 {paper:.3f} against ours (rule: not excluded where it lies inside our "
        "95% CI, else not reproduced): " + "; ".join(cells) + "."
    ]
    best = {t: max((s for s in tr[t] if s != t), key=lambda s: tr[t][s]) for t in targets}
    harm = sum(tr[t][best[t]] <= 0 for t in targets)
    on = meths["fisher"]["oracle_normalised_transfer"].get("n", 0)
    out.append(
        f"- The best source's transfer is ≤ 0 (the least harmful source) for {harm} of {len(targets)} targets; "
        f"{len(set(best.values()))} different sources are best; oracle-normalised transfer is defined for {on} of "
        f"{len(targets)} targets."
    )
    words = []
    for k in ("fisher", "exact_fisher", "error", "exact_error", "grad_cos", "random"):
        if k in meths:
            t1 = meths[k]["top1"]["mean"]
            words.append(f"{_label(k)} {t1:.2f} {rt.chance_word(t1, meths[k]['chance_top1'])}")
    sp = {k: v["spearman"]["mean"] for k, v in meths.items() if v.get("spearman", {}).get("mean") is not None}
    lo, hi = min(sp, key=sp.get), max(sp, key=sp.get)
    out.append(
        f"- Top-1 against chance {meths['fisher']['chance_top1']:.3f}: "
        + "; ".join(words)
        + f". Per-target Spearman: highest {_label(hi)} ({sp[hi]:.2f}), lowest {_label(lo)} ({sp[lo]:.2f})."
    )
    sc = m.get("scores", {})
    if "exact_fisher" in sc:
        ex = _picks(sc["exact_fisher"])
        same = {k: sum(_picks(sc[k])[t] == ex[t] for t in ex) for k in sc if k != "exact_fisher"}
        full = [k for k, v in same.items() if v == len(ex)]
        triv = [k for k in TRIVIAL if k in full]
        out.append(
            f"- Methods that make exact A_F's pick for every one of the {len(ex)} targets: "
            + (_join([_label(k) for k in full]) if full else "none")
            + ". "
            + (
                f"**Exact A_F cannot be told apart from a trivial baseline here** ({_join([_label(k) for k in triv])}; "
                "rule: a trivial baseline a user already has makes the same pick for every target)."
                if triv
                else "No trivial baseline makes all its picks (rule: same pick for every target)."
            )
        )
    sve = m.get("sketch_vs_exact", {})
    if "fisher" in sve:
        f, e = sve["fisher"], sve.get("error", {})
        res = "resolves" if (f.get("spearman") or -1) >= RESOLVE_RHO else "does not resolve"
        extra = ""
        if "exact_fisher" in sc:
            vals = {tuple(sorted((t, s))): v for t, row in sc["exact_fisher"].items() for s, v in row.items()}
            rng = max(vals.values()) - min(vals.values())
            extra = (
                f"; the exact A_F values span {rng:.4f} over the {len(vals)} pairs, {rng / f['mean_abs_err']:.1f}× "
                "the sketch's mean |error|"
            )
        out.append(
            f"- **The sketch {res} the pairs** (rule: sketch-vs-exact A_F Spearman over the {f['pairs']} pairs at "
            f"least {RESOLVE_RHO}; it is {f['spearman']:.2f}, Scov(Γ_e)'s {e.get('spearman', float('nan')):.2f}, "
            f"A_F's mean |error| {f['mean_abs_err']:.4f}{extra})."
        )
    return out


def resolution_lines(rec: dict) -> list[str]:
    """The sketch-resolution curve read by rules: how the error falls with the sketch size
    against the 1/√m law, the largest size's error against the exact values' range, and the
    smallest size that resolves the pairs."""
    cur = rec["metrics"]["sketch_resolution"]
    dims, rng = cur["dims"], cur["exact_range"]["fisher"]
    err = [cur["by_dim"][str(d)]["fisher"]["mean_abs_err"]["mean"] for d in dims]
    rho = [cur["by_dim"][str(d)]["fisher"]["spearman"]["mean"] for d in dims]
    per4 = [a / b for a, b, d0, d1 in zip(err, err[1:], dims, dims[1:]) if d1 == 4 * d0]
    ok = [d for d, r in zip(dims, rho) if r is not None and r >= RESOLVE_RHO]
    top = dims[-1]
    return [
        "The sketch's A_F error shrinks by "
        + ", ".join(f"{x:.1f}×" for x in per4)
        + " per 4× in sketch size (the 1/√m law gives 2×). At "
        f"{top:,} ({4 * top // 1024:,} KB) its mean |error| {err[-1]:.4f} is {err[-1] / rng:.2f} of the range the "
        f"exact values span ({rng:.4f}), and its Spearman with the exact values is {rho[-1]:.2f}. "
        + (
            f"**The smallest size that resolves the pairs: {ok[0]:,}**"
            if ok
            else f"**No size up to {top:,} ({4 * top // 1024:,} KB) resolves the pairs**"
        )
        + f" (rule: mean Spearman over the bases at least {RESOLVE_RHO})."
    ]


def flip_lines(rec: dict) -> list[str]:
    """Contrast design: does the flipped mapping help Yes/No as much as the same-words control?
    The two transfers with their SE; "as much as" where they differ by less than 2 combined SE."""
    tr, se = rec["metrics"]["ground_truth"]["transfer"], rec["metrics"]["ground_truth"].get("transfer_se", {})
    t, flip, ctrl = "Yes/No", "No/Yes, flipped", "Yes/No, other half"
    a, b = tr[t][flip], tr[t][ctrl]
    sa, sb = se.get(t, {}).get(flip, 0.0), se.get(t, {}).get(ctrl, 0.0)
    tol = 2 * (sa**2 + sb**2) ** 0.5
    word = "as much as" if abs(a - b) <= tol else "more than" if a > b else "less than"
    return [
        f"The flipped mapping helps Yes/No **{word}** the same-words control ({a:+.3f} ± {sa:.3f} against "
        f'{b:+.3f} ± {sb:.3f} nats; rule: "as much as" where they differ by at most 2 combined SE).'
    ]


def dark_lines(rec: dict) -> list[str]:
    """The activation-dark claim on a verbalizer record: activation-only methods blind (top-1
    at or below chance) and FisherSketch's lead over them and CKA resolved by the verdict rule."""
    rt = _rt()
    m = rec["metrics"]
    meths = m["methods"]
    act = [k for k in rt.ACTIVATION_ONLY if k in meths and "top1" in meths[k]]
    blind = all(rt.chance_word(meths[k]["top1"]["mean"], meths[k]["chance_top1"]) != "above chance" for k in act)
    vs = rt.record_verdicts(m)
    leads = {
        b: [METRICS[k] for k in METRICS if (v := vs.get(f"fisher - {b}: {k}")) is not None and v.word == "better"]
        for b in ("activation", "cka")
    }
    resolved = all(leads.values())
    n = meths["fisher"]["top1"]["n"]
    word = "reproduced" if blind and resolved else "not resolved" if blind else "not reproduced"
    detail = "; ".join(
        f"over {_label(b)}: " + (f"better on {_join(v)}" if v else "no metric resolved") for b, v in leads.items()
    )
    return [
        f"**Activation-dark claim on this record: {word}** (rule: reproduced where every activation-only method "
        "picks at or below chance and FisherSketch is better than activation-only Scov(M_a) and CKA on at least one "
        "metric by the verdict rule; not resolved where only the first holds). Activation-only methods "
        + ("pick at or below chance" if blind else "pick above chance")
        + f"; FisherSketch {detail}. With {n} targets an exact sign-flip test cannot go below p = {2 / 2**n:.3f} "
        "before Holm's correction."
    ]


# ------------------------------------------------------------------------------- estimator
def span_lines(recs: list[dict]) -> list[str]:
    """``spanning+full`` estimator records: the label-map group against the full record's, and
    the spanning group's error and truth spread against the label-map group's."""
    sp, full = recs
    g = sp["metrics"]["vision"]["accuracy"]["groups"]
    gf = full["metrics"]["vision"]["accuracy"]["groups"]
    lm, sg = g["label_maps"]["fisher"], g["spanning"]["fisher"]
    head = (
        f"Label-map group: A_F Spearman {lm['spearman_mean']:.3f} here against "
        f"{gf['label_maps']['fisher']['spearman_mean']:.3f} in `{full['_file']}`; "
    )
    median = f"exact A_F median {lm['exact_median']:.3f} against the spanning group's {sg['exact_median']:.3f}. "
    err = (
        f"Mean |error| {lm['mean_abs_err']:.4f} (label maps) and {sg['mean_abs_err']:.4f} (spanning), ratio "
        f"{sg['mean_abs_err'] / lm['mean_abs_err']:.2f}; "
    )
    spread = (
        f"the truth's sd {lm['truth_sd']:.3f} and {sg['truth_sd']:.3f}, ratio {sg['truth_sd'] / lm['truth_sd']:.2f}; "
        f"spanning Spearman {sg['spearman_mean']:.3f}."
    )
    return [head + median + err + spread]


def _inside(a: dict, b: dict) -> bool:
    """Each record's mean Spearman lies inside the other's min–max over the random bases."""
    return (
        b["spearman_min"] <= a["spearman_mean"] <= b["spearman_max"]
        and a["spearman_min"] <= b["spearman_mean"] <= a["spearman_max"]
    )


def fold_lines(recs: list[dict]) -> list[str]:
    """``base+variant...`` quick estimator records with other projection maps: per variant,
    the SmolLM2 speed-up, the marginals' and the joint A_F's Spearman and error against the
    base record, and the EfficientNet-lite0 A_F where both have it."""
    base, *variants = recs
    ba, bs = base["metrics"]["accuracy"], base["metrics"]["speed"]["speedup"]
    bv = base["metrics"].get("vision", {}).get("accuracy", {}).get("fisher")
    out = []
    for r in variants:
        m, cfg = r["metrics"], r["config"]
        a, s = m["accuracy"], m["speed"]["speedup"]
        marg = max(abs(a[k]["spearman_mean"] - ba[k]["spearman_mean"]) for k in ("activation", "error"))
        v = m.get("vision", {}).get("accuracy", {}).get("fisher")
        vis = (
            ""
            if not (v and bv)
            else f"; EfficientNet-lite0 A_F {bv['spearman_mean']:.3f} → {v['spearman_mean']:.3f}"
            + (" (inside each other's range)" if _inside(v, bv) else " (outside each other's range)")
        )
        out.append(
            f"- `{r['_file']}` (maps {cfg.get('act_map') or 'default'} / {cfg.get('error_map') or 'default'}): "
            f"SmolLM2 speed-up {bs:.1f}× → {s:.1f}× ({'faster' if s > bs else 'not faster'}); marginals' Spearman "
            f"move by at most {marg:.3f}; A_F {ba['fisher']['spearman_mean']:.3f} → {a['fisher']['spearman_mean']:.3f} "
            + (
                "(inside each other's range over the bases)"
                if _inside(a["fisher"], ba["fisher"])
                else "(outside each other's range over the bases)"
            )
            + f", mean |error| {ba['fisher']['mean_abs_err']:.4f} → {a['fisher']['mean_abs_err']:.4f}{vis}."
        )
    return [
        f"Against `{base['_file']}` (rule: a Spearman change is inside the noise where each record's mean lies "
        "inside the other's min–max over the random bases):",
        "",
        *out,
    ]


# ------------------------------------------------------------------------------ summary
def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def claims_lines(recs: list[dict]) -> list[str]:
    """The claims table read across records: which records show FisherSketch better (or
    worse) than the family / collection label and than CKA on the table's metric (per-target
    Spearman; top-1 for the verbalizer), by the table's rule, and which records are too small
    for the exact test to resolve anything after Holm's correction."""
    rt = _rt()
    words: dict[str, dict[str, list[str]]] = {b: {} for b in ("family", "cka")}
    small = []
    for r in recs:
        m, name = r["metrics"], f"`{r['_file'].removesuffix('.json')}`"
        metric = "top1" if rt._kind(m) == "verbalizer" else "spearman"
        vs = rt.record_verdicts(m)
        for b in words:
            v = vs.get(f"fisher - {b}: {metric}")
            if v is not None:
                words[b].setdefault(v.word, []).append(name)
        any_v = next(iter(vs.values()), None)
        n = m["methods"]["fisher"]["top1"]["n"]
        if any_v is not None and n <= 20 and 2 / 2**n * any_v.family_size >= 0.05:
            small.append(f"{name} ({n} targets, {any_v.family_size} comparisons)")
    out = []
    for b, label in (("family", "the family / collection label"), ("cka", "CKA")):
        w = words[b]
        parts = [f"{word}: {', '.join(w[word])}" for word in ("better", "worse") if w.get(word)]
        out.append(
            f"- FisherSketch against {label}: "
            + ("; ".join(parts) if parts else "better or worse in no record")
            + f"; no difference in {_count(len(w.get('no difference', [])), 'record')}."
        )
    out.append(
        "- Records too small to resolve any comparison (rule: the smallest exact sign-flip p, 2/2ⁿ, times the "
        "number of comparisons is at least 0.05): " + (", ".join(small) if small else "none") + "."
    )
    return ["Read across the records above, by the table's rule:", "", *out]


def vision_vs_text_lines(rec: dict) -> list[str]:
    """estimator_full: the EfficientNet-lite0 label-map tasks' A_F error and exact median
    against SmolLM2's."""
    a = rec["metrics"]["accuracy"]["fisher"]
    v = rec["metrics"]["vision"]["accuracy"]["groups"]["label_maps"]["fisher"]
    word = "smaller" if v["mean_abs_err"] < a["mean_abs_err"] else "not smaller"
    return [
        f"EfficientNet-lite0 label-map tasks against SmolLM2: A_F mean |error| {v['mean_abs_err']:.4f} against "
        f"{a['mean_abs_err']:.4f} ({word}); median exact A_F {v['exact_median']:.3f} against "
        f"{a['exact_median']:.3f} ({v['exact_median'] / a['exact_median']:.2f} of it); Spearman "
        f"{v['spearman_mean']:.3f} against {a['spearman_mean']:.3f}."
    ]


def eval_noise_lines(recs: list[dict]) -> list[str]:
    """How precise each record's truth is: the seed noise and the evaluation-sample noise per
    value, against the median gap between a target's best and second-best source, with the
    noise ceiling and what it counts.  The clause under the table says, per record, whether the
    evaluation noise of that gap is below the gap (rule: its median SE under the median gap)."""
    rows = [
        "| record | eval tokens per target (requested) | median eval sequences per target | SE per value: seeds | "
        "SE per value: eval sample | median gap best − second | eval SE of that gap | best source kept under "
        "eval resampling | per-target Spearman ceiling (what it counts) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for r in recs:
        name = f"`{r['_file'].removesuffix('.json')}`"
        n = r["metrics"]["truth_noise"]
        ev = n.get("eval") or {}
        c = n["ceiling"]["spearman"]
        counts = n.get("ceiling_noise", "seeds")
        rows.append(
            f"| {name} | {r['config']['tokens']['eval']:,} | {ev.get('n_sequences', float('nan')):.0f} | "
            f"{n['median_se']:.4f} | {ev.get('median_se', float('nan')):.4f} | {n['median_best_gap']:.4f} | "
            f"{ev.get('median_gap_se', float('nan')):.4f} | {100 * ev.get('mean_best_stable', float('nan')):.0f}% | "
            f"{c['mean']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] ({counts}) |"
        )
        gap_se = ev.get("median_gap_se")
        if gap_se is not None:
            side = "below" if gap_se < n["median_best_gap"] else "not below"
            verdicts.append(f"{name} {side}")
    return [
        *rows,
        "",
        "The evaluation sample's SE of the best − second-best difference against the median gap itself "
        "(rule: below when the SE is smaller): " + "; ".join(verdicts) + ".",
    ]
