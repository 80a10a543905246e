"""The source-selection readings in docs/results.md (docs/selection_reading.py) follow their
rules: a copy of a real record with the relevant numbers changed flips each claim."""

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _rec(name: str) -> dict:
    return json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())


def _mod():
    return docs_script("selection_reading")


def test_wall_line_reads_the_time_and_the_slowest_scorings():
    sr = _mod()
    rec = _rec("source_selection_quick_head")
    line = sr.wall_line(rec)[0]
    assert f"{rec['seconds']:.0f} s on 2 CPU cores" in line
    assert "the slowest scorings: SVCCA 416 s" in line
    r2 = copy.deepcopy(rec)
    r2["seconds"] = 99.0
    r2["metrics"]["method_seconds"]["rsa"] = 999.0
    line = sr.wall_line(r2)[0]
    assert "wall time: 99 s" in line and "the slowest scorings: RSA 999 s, SVCCA 416 s" in line


def test_truth_shape_follows_the_transfer_table():
    sr = _mod()
    rec = _rec("source_selection_full")
    text = sr.truth_lines(rec)[0]
    assert text.startswith("Every source improves its own domain")
    assert "300 of 380 cross-domain transfers are positive" in text
    assert "family blocks (rule: the same-family mean is the larger)" in text
    assert "for 17 of the 19 targets that have a same-family candidate" in text
    assert "lie closer together than the gap" in text
    r2 = copy.deepcopy(rec)
    tr, fam = r2["metrics"]["ground_truth"]["transfer"], r2["config"]["families"]
    tr["code_email"]["code_email"] = -0.5  # one source no longer improves its own domain
    for t, row in tr.items():  # between-family transfers now beat same-family ones
        for s in row:
            if s != t and fam[s] != fam[t]:
                row[s] = 1.0
    r2["metrics"]["best_source_same_family"]["code_xml"] = False
    text = sr.truth_lines(r2)[0]
    assert text.startswith("19 of 20 sources improve their own domain")
    assert "no family blocks" in text
    assert "for 16 of the 19 targets" in text
    assert "Within a family" not in text  # no positive gap between families: the spread is not read


def test_truth_shape_reads_where_oracle_normalised_transfer_is_defined():
    sr = _mod()
    rec = _rec("source_selection_quick_head")
    text = sr.truth_lines(rec)[0]
    assert "defined for 8 of 10 targets" in text and "none is separated from another's" in text
    r2 = copy.deepcopy(rec)
    ms = r2["metrics"]["methods"]
    ms["fisher"]["oracle_normalised_transfer"]["ci"] = [5.0, 6.0]
    assert "some are separated" in sr.truth_lines(r2)[0]


def test_one_seed_reading_flips_with_the_record():
    sr = _mod()
    rec = _rec("source_selection_full")
    text = "\n".join(sr.single_lines(rec))
    assert "0.55 [0.46, 0.64], above 0**" in text
    assert "The sketch matches the exact A_F" in text
    assert "top-1 0.457 (above our CI): **not reproduced**" in text
    assert "top-1 exact Scov(M_a) (0.40)" in text
    assert "4 of 5 activation-only methods rank sources above chance" in text
    assert "the same top-1 as FisherSketch's" in text
    assert "the coupling agrees less" in text
    r2 = copy.deepcopy(rec)
    ms = r2["metrics"]["methods"]
    ms["fisher"]["spearman"]["ci"] = [-0.1, 0.64]
    ms["exact_fisher"]["spearman"]["mean"] = 0.9
    ms["exact_fisher"]["spearman"]["ci"] = [0.85, 0.95]
    ms["fisher"]["top1"]["ci"] = [0.05, 0.5]
    ms["random"]["top1"]["mean"] = 0.05
    ms["exact_activation"]["spearman"]["ci"] = [-0.1, 0.5]
    r2["metrics"]["sketch_vs_exact"]["coupling"]["spearman"] = 0.99
    text = "\n".join(sr.single_lines(r2))
    assert "0.55 [-0.10, 0.64], includes 0**" in text
    assert "does not match" in text
    assert "top-1 0.457 (inside our CI): **not excluded**" in text
    assert "Highest mean: per-target Spearman exact A_F (0.90)" in text
    assert "3 of 5 activation-only methods" in text
    assert "a different top-1 from FisherSketch's" in text
    assert "the coupling agrees at least as well" in text


def test_seed_order_reading_counts_swapped_methods():
    sr = _mod()
    a, b = _rec("source_selection_full"), _rec("source_selection_full_seed1")
    assert "differs between the seeds for 2 of the 55 pairs" in sr.seeds_lines([a, b])[0]
    assert "is the same in both seeds" in sr.seeds_lines([a, copy.deepcopy(a)])[0]


def test_verdict_reading_follows_the_sign_flip_rule():
    sr = _mod()
    rec = _rec("source_selection_full_reanalysis")
    text = "\n".join(sr.reading_lines(rec))
    assert "- Against same family / collection: no difference on per-target Spearman, top-1 and oracle" in text
    assert "leads on top-1 by a bootstrap CI" in text  # against easiness
    assert "below the noise ceiling on per-target Spearman, top-1 and oracle-normalised**" in text
    assert "changes between seeds for 5 of 20 targets" in text
    assert "CI includes 0: it does not order sources within a family" in text
    assert "(the 0/1 family / collection label): not reproduced**" in text
    r2 = copy.deepcopy(rec)
    m = r2["metrics"]
    fam = m["methods"]["family"]["spearman"]["per_target"]
    fs = m["methods"]["fisher"]["spearman"]["per_target"]
    for t in fs:  # FisherSketch now ranks better than the family label on every target
        if fam.get(t) is not None:
            fs[t] = fam[t] + 0.3
    m["truth_noise"]["ceiling"]["spearman"]["ci"] = [0.1, 0.9]
    m["methods"]["fisher"]["within_family"]["spearman"]["ci"] = [0.1, 0.3]
    text = "\n".join(sr.reading_lines(r2))
    assert "- Against same family / collection: better on per-target Spearman" in text
    assert "its CI reaches the ceiling's" in text
    assert "CI above 0;" in text
    assert "(the 0/1 family / collection label): reproduced**" in text
    for t in fs:  # ... and worse
        if fam.get(t) is not None:
            fs[t] = fam[t] - 0.3
    assert "(the 0/1 family / collection label): contradicted**" in "\n".join(sr.reading_lines(r2))


def test_verdict_reading_of_the_quick_record():
    sr = _mod()
    rec = _rec("source_selection_quick")
    text = "\n".join(sr.reading_lines(rec))
    assert "trails on top-1 and oracle-normalised by a bootstrap CI" in text
    assert "pick the same best source for 8 of 10 targets" in text
    assert "the eval sample adds more noise" in text
    assert "3 targets have ≥ 2 same-family candidates" in text
    r2 = copy.deepcopy(rec)
    m = r2["metrics"]
    m["paired"]["fisher - family"]["top1"]["ci"] = [-0.5, 0.1]
    m["truth_noise"]["ceiling"]["spearman"]["ci"] = [0.8, 0.9]
    sc = m["scores"]
    sc["exact_fisher"] = {t: {s: -v for s, v in row.items()} for t, row in sc["fisher"].items()}
    text = "\n".join(sr.reading_lines(r2))
    assert "trails on oracle-normalised by a bootstrap CI" in text
    assert "pick the same best source for 0 of 10 targets" in text
    assert "adds no resolvable noise" in text


def test_budget_reading_follows_the_probe_and_the_ceilings():
    sr = _mod()
    qb, q = _rec("source_selection_quick_budget"), _rec("source_selection_quick")
    text = "\n".join(sr.budget_lines([qb, qb, q]))
    assert "rises at every step of its grid" in text and "the grid's largest" in text
    assert "higher on 3 of 3 metrics" in text and "for 6 → 7 of 10 targets" in text
    assert "top-1 -0.26 no difference (trails by its bootstrap CI)" in text
    p2 = copy.deepcopy(qb)
    b = p2["metrics"]["budget"]
    b["grid"][1]["median_snr"] = 20.0
    b["chosen"] = 8
    c2 = copy.deepcopy(qb)
    c2["metrics"]["truth_noise"]["ceiling"]["top1"]["mean"] = 0.1
    text = "\n".join(sr.budget_lines([p2, c2, q]))
    assert "is not monotone over its grid" in text and "inside its grid" in text
    assert "higher on 2 of 3 metrics" in text


def test_smiles_truth_counts_follow_the_table():
    sr = _mod()
    rec = _rec("smiles_full")
    rec["_file"] = "smiles_full.json"
    line = sr.smiles_truth_lines([rec])[0]
    assert "for 4 of 9 sources, own domain is the best source for 7 of 9 targets; 72 of 72" in line
    r2 = copy.deepcopy(rec)
    pr = r2["metrics"]["ground_truth"]["ppl_reduction"]
    for t in pr:
        pr[t][t] = 1.0
    first, second = list(pr)[:2]
    pr[first][second] = -0.1
    line = sr.smiles_truth_lines([r2])[0]
    assert "for 9 of 9 sources, own domain is the best source for 9 of 9 targets; 71 of 72" in line


def test_smiles_correlation_claims_flip():
    sr = _mod()
    rec = _rec("smiles_full")
    text = "\n".join(sr.smiles_corr_lines(rec))
    assert "correlation claim: reproduced**" in text and "lies below ours" in text
    assert "(activation-only not significant): **not reproduced**" in text
    assert "9 of the 9 other similarities are significant" in text
    assert "at least as high as every similarity's" in text
    r2 = copy.deepcopy(rec)
    c = r2["metrics"]["correlation"]
    c["fisher"]["pooled"]["p_perm"] = 0.2
    c["activation"]["pooled"]["p_perm"] = 0.2
    c["family"]["pooled"]["rho"] = 0.0
    text = "\n".join(sr.smiles_corr_lines(r2))
    assert "correlation claim: not reproduced**" in text
    assert "(activation-only not significant): **reproduced**" in text
    assert "8 of the 9 other similarities are significant by the same rule (not: activation-only" in text
    assert "below 10 of the 10 similarities'" in text


def test_smiles_pooled_significance_flips():
    sr = _mod()
    rec = _rec("smiles_quick_head")
    line = sr.smiles_pooled_lines(rec)[0]
    assert "below 0.05 only: none; not significant: random" in line
    r2 = copy.deepcopy(rec)
    c = r2["metrics"]["correlation"]
    c["random"]["pooled"].update(rho=0.4, p_perm=0.03)
    c["svcca"]["pooled"]["p_perm"] = 0.5
    line = sr.smiles_pooled_lines(r2)[0]
    assert "below 0.05 only: random; not significant: SVCCA" in line


def test_budget_check_answers_by_the_probe():
    sr = _mod()
    probe, run = _rec("smiles_budget"), _rec("smiles_full")
    assert "chooses? Yes**" in sr.budget_check_lines([probe, run])[0]
    probe["metrics"]["budget"]["chosen"] = 40
    assert "chooses? No**: the probe chose 40 steps" in sr.budget_check_lines([probe, run])[0]


def test_within_collection_reading_flips():
    sr = _mod()
    recs = [_rec(n) for n in ("smiles_nci_full", "smiles_nci_full_20steps", "smiles_nci_quick")]
    text = "\n".join(sr.within_reading_lines(recs))
    assert "40 steps: pooled ρ_s 0.32, Mantel p 0.147 (not significant)" in text
    assert "about the same at both budgets" in text
    assert "ranks sources beyond the labels a user has (same property, easiness), not beyond CKA" in text
    assert "correlation is not reproduced** (reproduced at the fixed 20 steps)" in text
    chosen, fixed, quick = copy.deepcopy(recs)
    chosen["metrics"]["correlation"]["fisher"]["pooled"]["p_perm"] = 0.01
    fixed["metrics"]["methods"]["fisher"]["spearman"].update(mean=0.1, ci=[0.0, 0.2])
    text = "\n".join(sr.within_reading_lines([chosen, fixed, quick]))
    assert "different between the budgets" in text
    assert "correlation is reproduced**" in text


def test_verbalizer_reading_flips():
    sr = _mod()
    rec = _rec("verbalizer_quick")
    text = "\n".join(sr.verb_lines(rec))
    assert "exact A_F 0.67 [0.33, 1.00]: inside our CI, **not excluded**" in text
    assert "≤ 0 (the least harmful source) for 6 of 6 targets" in text
    assert "mean-gradient cosine 0.00 below chance" in text
    assert "**Exact A_F cannot be told apart from a trivial baseline here**" in text
    assert "**The sketch does not resolve the pairs**" in text
    r2 = copy.deepcopy(rec)
    m = r2["metrics"]
    m["methods"]["exact_fisher"]["top1"]["ci"] = [0.0, 0.5]
    m["ground_truth"]["transfer"]["Yes/No"]["True/False"] = 1.0
    m["methods"]["grad_cos"]["top1"]["mean"] = 0.2
    for k in ("word_prob", "easiness"):
        m["scores"][k] = {t: {s: -v for s, v in row.items()} for t, row in m["scores"]["exact_fisher"].items()}
    m["sketch_vs_exact"]["fisher"]["spearman"] = 0.95
    text = "\n".join(sr.verb_lines(r2))
    assert "exact A_F 0.67 [0.00, 0.50]: above our CI, **not reproduced**" in text
    assert "for 5 of 6 targets" in text
    assert "mean-gradient cosine 0.20 at chance" in text
    assert "No trivial baseline makes all its picks" in text
    assert "**The sketch resolves the pairs**" in text


def test_resolution_reading_flips():
    sr = _mod()
    rec = _rec("verbalizer_full_resolution")
    line = sr.resolution_lines(rec)[0]
    assert "**No size up to 65,536 (256 KB) resolves the pairs**" in line
    r2 = copy.deepcopy(rec)
    r2["metrics"]["sketch_resolution"]["by_dim"]["16384"]["fisher"]["spearman"]["mean"] = 0.95
    assert "**The smallest size that resolves the pairs: 16,384**" in sr.resolution_lines(r2)[0]


def test_flip_and_dark_readings_flip():
    sr = _mod()
    rec = _rec("verbalizer_contrast_quick")
    assert "**as much as**" in sr.flip_lines(rec)[0]
    assert "claim on this record: not resolved**" in sr.dark_lines(rec)[0]
    r2 = copy.deepcopy(rec)
    r2["metrics"]["ground_truth"]["transfer"]["Yes/No"]["No/Yes, flipped"] = 0.1
    assert "**less than**" in sr.flip_lines(r2)[0]
    r2["metrics"]["methods"]["cka"]["top1"]["mean"] = 0.9
    line = sr.dark_lines(r2)[0]
    assert "claim on this record: not reproduced**" in line and "pick above chance" in line


def test_summary_words_follow_their_rules():
    rt = docs_script("results_table")
    names = (
        "source_selection_powered",
        "source_selection_full",
        "source_selection_full_seed1",
        "verbalizer_quick",
        "verbalizer_full",
        "smiles_full",
        "estimator_full",
    )
    recs = [_rec(n) for n in names]
    text = "\n".join(rt.summary_table(recs))
    assert "| predictive; top-1 **not** reproduced" in text
    assert "activation blindness **reproduced**; 66.7%: exact A_F not excluded" in text
    assert "| **reproduced**; the contrast with activation-only is not" in text
    assert "| 0.97 (ViT) | **reproduced** |" in text
    powered = text.splitlines()[2]
    assert powered.startswith("| source-selection, 51 domains") and "153 fine-tunings" in powered
    assert "A_F - Scov(Gamma_e): worse (Holm p 0.016)" in powered
    pw, ss, ss1, vq, vf, sm, est = copy.deepcopy(recs)
    pw["metrics"]["methods"]["fisher"]["top1"]["ci"] = [0.3, 0.5]
    pw["metrics"]["methods"]["fisher"]["spearman"]["ci"] = [-0.1, 0.6]
    pw["metrics"]["verdicts"]["primary"][0].update(word="better", p_holm=0.01)
    ss["metrics"]["methods"]["fisher"]["spearman"]["ci"] = [-0.1, 0.6]
    ss["metrics"]["methods"]["fisher"]["top1"]["ci"] = [0.1, 0.5]
    vq["metrics"]["methods"]["cka"]["top1"]["mean"] = 0.9
    sm["metrics"]["correlation"]["fisher"]["pooled"]["p_perm"] = 0.2
    est["metrics"]["accuracy"]["fisher"]["spearman_mean"] = 0.9
    text = "\n".join(rt.summary_table([pw, ss, ss1, vq, vf, sm, est]))
    powered = text.splitlines()[2]
    assert "| not shown predictive; top-1 not excluded" in powered
    assert "A_F - Scov(Gamma_e): better (Holm p 0.010)" in powered
    assert "| not shown predictive; top-1 not excluded" in text.splitlines()[3]
    assert "activation blindness **not** reproduced" in text
    assert "| **not** reproduced; the contrast with activation-only is not" in text
    assert "| 0.97 (ViT) | **not** reproduced |" in text


def test_span_reading_reads_both_groups():
    sr = _mod()
    sp, full = _rec("estimator_vision_spanning"), _rec("estimator_full")
    full["_file"] = "estimator_full.json"
    line = sr.span_lines([sp, full])[0]
    assert "ratio 1.95; spanning Spearman 0.987" in line
    sp["metrics"]["vision"]["accuracy"]["groups"]["spanning"]["fisher"]["truth_sd"] = 0.131
    assert "ratio 1.00; spanning Spearman" in sr.span_lines([sp, full])[0]


def test_fold_reading_flips():
    sr = _mod()
    names = ("estimator_quick_dense_srht", "estimator_quick_fold")
    base, fold = (_rec(n) for n in names)
    base["_file"], fold["_file"] = (f"{n}.json" for n in names)
    text = "\n".join(sr.fold_lines([base, fold]))
    assert "22.6× → 37.8× (faster)" in text and "0.934 → 0.916 (outside each other's range" in text
    fold["metrics"]["speed"]["speedup"] = 10.0
    fold["metrics"]["accuracy"]["fisher"].update(spearman_mean=0.93, spearman_min=0.92, spearman_max=0.94)
    text = "\n".join(sr.fold_lines([base, fold]))
    assert "(not faster)" in text and "0.934 → 0.930 (inside each other's range" in text


def test_claims_reading_groups_records_by_their_words():
    sr = _mod()
    names = ("source_selection_full_reanalysis", "smiles_quick")
    recs = [_rec(n) for n in names]
    for r, n in zip(recs, names):
        r["_file"] = f"{n}.json"
    text = "\n".join(sr.claims_lines(recs))
    assert "label: better or worse in no record; no difference in 2 records" in text
    assert "at least 0.05): `smiles_quick` (9 targets, 15 comparisons)." in text
    m = recs[0]["metrics"]["methods"]
    fam = m["family"]["spearman"]["per_target"]
    for t in m["fisher"]["spearman"]["per_target"]:
        if fam.get(t) is not None:
            m["fisher"]["spearman"]["per_target"][t] = fam[t] + 0.3
    text = "\n".join(sr.claims_lines(recs))
    assert "label: better: `source_selection_full_reanalysis`; no difference in 1 record" in text


def test_vision_against_text_reading_flips():
    sr = _mod()
    rec = _rec("estimator_full")
    assert "(smaller); median exact A_F 0.031 against 0.171" in sr.vision_vs_text_lines(rec)[0]
    rec["metrics"]["vision"]["accuracy"]["groups"]["label_maps"]["fisher"]["mean_abs_err"] = 0.05
    assert "0.0500 against 0.0193 (not smaller)" in sr.vision_vs_text_lines(rec)[0]


def test_eval_noise_clause_follows_the_gap_and_its_se():
    mod = _mod()
    rec = _rec("source_selection_powered")
    rec["_file"] = "source_selection_powered.json"
    n = rec["metrics"]["truth_noise"]
    assert "`source_selection_powered` below" in mod.eval_noise_lines([rec])[-1]
    noisy = copy.deepcopy(rec)
    noisy["metrics"]["truth_noise"]["eval"]["median_gap_se"] = 2 * n["median_best_gap"]
    last = mod.eval_noise_lines([noisy])[-1]
    assert "`source_selection_powered` not below" in last
    assert "(seeds and eval sequences)" in mod.eval_noise_lines([rec])[2]
