"""The document-selection evidence in the docs is chosen by rules over the record: flipping a
recorded verdict flips the sentence, and the set-up says how the fine-tunings were made."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _rec():
    rec = json.loads((ROOT / "docs" / "results" / "select_quick.json").read_text())
    rec["_file"] = "select_quick.json"
    return docs_script("select_table"), rec


def _set(rec, comparison, verdict):
    for row in rec["metrics"]["verdicts"]["comparisons"]:
        if row["comparison"] == comparison:
            row["verdict"] = verdict


def _powered(rec):
    r = copy.deepcopy(rec)
    r["config"]["quick"] = False
    return r


def test_each_sentence_follows_its_verdict():
    tool, rec = _rec()
    r = _powered(rec)
    for verdict, said in (
        ("better", "`select` picks documents that help the target more than DSIR's hashed n-gram selection"),
        ("worse", "DSIR's hashed n-gram selection picks documents that help the target more than `select`"),
        ("no difference", "`select` and DSIR's hashed n-gram selection show no difference"),
    ):
        _set(r, "FisherSketch - DSIR", verdict)
        assert said in tool.guidance(r)[0]


def test_the_advice_follows_the_words_and_the_power():
    tool, rec = _rec()
    assert "not powered, so it decides nothing" in tool.guidance(rec)[2]
    r = _powered(rec)
    for c in ("random", "DSIR", "embedding", "per-example gradient"):
        _set(r, f"FisherSketch - {c}", "no difference")
    assert "did not beat a random subset" in tool.guidance(r)[2]
    assert " instead" not in tool.guidance(r)[2]
    _set(r, "FisherSketch - embedding", "worse")
    assert "Use an embedding-cosine filter instead: it did better" in tool.guidance(r)[2]
    _set(r, "FisherSketch - DSIR", "worse")
    assert "DSIR's hashed n-gram selection or an embedding-cosine filter instead: each" in tool.guidance(r)[2]
    _set(r, "FisherSketch - DSIR", "no difference")
    _set(r, "FisherSketch - embedding", "no difference")
    _set(r, "FisherSketch - random", "better")
    assert "a cheaper filter did as well" in tool.guidance(r)[2]
    _set(r, "FisherSketch - DSIR", "better")
    assert "use the cheap filter it did not beat first" in tool.guidance(r)[2]
    _set(r, "FisherSketch - embedding", "better")
    assert "worth its forward pass" in tool.guidance(r)[2]


def test_the_marginals_are_compared_by_their_means_without_a_verdict():
    tool, rec = _rec()
    r = _powered(rec)
    joint = r["metrics"]["methods"]["fisher"]["by_budget"]
    for key, shift in (("error", 1.0), ("activation", -1.0)):
        for b, row in r["metrics"]["methods"][key]["by_budget"].items():
            row["mean"] = joint[b]["mean"] + shift
    said = tool.guidance(r)[-1]
    assert said.startswith("Not pre-registered, so without a verdict")
    assert "error-only (`select --by error`) had a higher mean" in said
    assert "activation-only (`select --by activation`) had a lower mean" in said
    first = next(iter(joint))
    for key in ("fisher", "error", "activation"):  # a second budget, where error-only is below
        rows = r["metrics"]["methods"][key]["by_budget"]
        rows["other"] = {**rows[first], "mean": joint[first]["mean"] - 2.0 * (key != "fisher")}
    assert "--by error`) was above the joint score at some budgets" in tool.guidance(r)[-1]


def test_setup_states_a_preregistration_mismatch():
    tool, rec = _rec()
    assert "matches the committed" in tool.setup_lines(rec)[-1]
    r = copy.deepcopy(rec)
    r["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(r)[-1]


def test_a_record_read_back_from_the_store_says_so_and_times_every_fine_tuning():
    tool, rec = _rec()
    ft = rec["metrics"]["finetuning"]
    assert f"{ft['count']} computed in this run, " in tool.setup_lines(rec)[1]
    r = copy.deepcopy(rec)
    f = r["metrics"]["finetuning"]
    f.update(computed=0, seconds=0.0, seconds_per_step=0.0, all_seconds=7200.0, all_seconds_per_step=2.5)
    line = tool.setup_lines(r)[1]
    assert "0 computed in this run;" in line and "s per LoRA step" in line
    assert f"{f['count']} read back from the truth store" in line and "2.50 s per LoRA step" in line
    assert "2.0 h in all" in line
