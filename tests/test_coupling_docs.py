"""The coupling-dark blocks and the trust conclusion are chosen by rules over the record:
feeding a record that should flip each word flips it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _recs():
    tool = docs_script("coupling_table")
    cd = json.loads((ROOT / "docs" / "results" / "coupling_dark_quick.json").read_text())
    cd["_file"] = "coupling_dark_quick.json"
    nat = json.loads((ROOT / "docs" / "results" / "source_selection_wide.json").read_text())
    nat["_file"] = "source_selection_wide.json"
    return tool, cd, nat


def _set_word(rec, comparison, word, mean):
    for row in rec["metrics"]["verdicts"]["primary"]:
        if row["comparison"] == comparison:
            row["word"], row["mean_spearman_difference"] = word, mean


def test_trust_sentence_follows_the_coupling_verdict():
    tool, cd, nat = _recs()
    assert "cannot decide the claim" in tool.trust_lines([cd, nat])[0]  # the quick record is not powered
    cd["metrics"]["powered"] = True
    refuted = copy.deepcopy(cd)
    _set_word(refuted, "A_F - Scov(Gamma_e)", "no difference", 0.1)
    assert "refuted at this scale" in tool.trust_lines([refuted, nat])[0]
    supported = copy.deepcopy(cd)
    _set_word(supported, "A_F - Scov(Gamma_e)", "better", 0.4)
    first = tool.trust_lines([supported, nat])[0]
    assert "the coupling adds signal" in first and "refuted" not in first


def test_gradient_and_cka_clauses_flip():
    tool, cd, nat = _recs()
    cd["metrics"]["powered"] = True
    words = {}
    for w in ("better", "worse", "no difference"):
        rec = copy.deepcopy(cd)
        _set_word(rec, "A_F - mean-gradient cosine", w, {"better": 0.2, "worse": -0.2}.get(w, 0.0))
        _set_word(rec, "A_F - CKA", w, {"better": 0.2, "worse": -0.2}.get(w, 0.0))
        words[w] = tool.trust_lines([rec, nat])[1:3]
    assert "prefer it" in words["worse"][0] and "better than the mean-gradient" in words["better"][0]
    assert "no difference is resolved" in words["no difference"][0]
    assert "ranks them better than CKA" in words["better"][1] and "worse than CKA" in words["worse"][1]
    assert "no difference" in words["no difference"][1]


def test_natural_shift_clause_follows_the_paired_test():
    tool, cd, nat = _recs()
    per = nat["metrics"]["methods"]["error"]["spearman"]["per_target"]
    fisher = nat["metrics"]["methods"]["fisher"]["spearman"]["per_target"]
    low = copy.deepcopy(nat)
    low["metrics"]["methods"]["error"]["spearman"]["per_target"] = {t: fisher[t] - 0.3 for t in per}
    assert "A_F ranks better than error-only there too" in tool.trust_lines([cd, low])[-1]
    high = copy.deepcopy(nat)
    high["metrics"]["methods"]["error"]["spearman"]["per_target"] = {t: fisher[t] + 0.3 for t in per}
    assert "prefer it there" in tool.trust_lines([cd, high])[-1]
    same = copy.deepcopy(nat)
    same["metrics"]["methods"]["error"]["spearman"]["per_target"] = dict(fisher)
    assert "error-only is as good as A_F" in tool.trust_lines([cd, same])[-1]


def test_unscored_record_says_not_decided_and_prereg_mismatch_is_stated():
    tool, cd, nat = _recs()
    empty = copy.deepcopy(cd)
    empty["metrics"]["verdicts"] = {"n_targets": 0, "primary": [], "exact": [], "statement": "not scored"}
    assert "not decided" in tool.trust_lines([empty, nat])[0]
    assert "No target passed" in tool.verdicts_table(empty["metrics"])[0]
    other = copy.deepcopy(cd)
    other["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(other)[-1]
    assert "matches the committed" in tool.setup_lines(cd)[-1]


def test_quick_verdict_line_says_it_carries_no_weight():
    tool, cd, _nat = _recs()
    assert "carry no weight" in tool.verdicts_table(cd["metrics"])[-1]
    cd["metrics"]["powered"] = True
    assert "carry no weight" not in tool.verdicts_table(cd["metrics"])[-1]


def test_natural_shift_clause_uses_the_preregistered_verdict_where_the_record_has_one():
    tool, cd, _nat = _recs()
    pre = json.loads((ROOT / "docs" / "results" / "source_selection_quick.json").read_text())
    pre["_file"] = "source_selection_quick.json"
    last = tool.trust_lines([cd, pre])[-1]
    assert "pre-registered" in last and "not pre-registered" not in last
    assert "carry no weight" in last  # the quick pilot is not powered
    pre["metrics"]["verdicts"]["powered"] = True
    for word, mean, said in (
        ("better", 0.2, "A_F ranks better than error-only there too"),
        ("worse", -0.2, "prefer it there"),
        ("no difference", 0.0, "error-only is as good as A_F"),
    ):
        rec = copy.deepcopy(pre)
        _set_word(rec, "A_F - Scov(Gamma_e)", word, mean)
        last = tool.trust_lines([cd, rec])[-1]
        assert said in last and "carry no weight" not in last
