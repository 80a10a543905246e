"""The routing guide's sentences are chosen by rules over the record: flipping a recorded
word flips the sentence."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _rec():
    rec = json.loads((ROOT / "docs" / "results" / "routing_quick.json").read_text())
    rec["_file"] = "routing_quick.json"
    return docs_script("routing_table"), rec


def _set(rec, comparison, word):
    for row in rec["metrics"]["verdicts"]["comparisons"]:
        if row["comparison"] == comparison:
            row["word"] = word


def test_guidance_follows_each_word():
    tool, rec = _rec()
    for word, said in (
        ("better", "FisherSketch routes to lower loss than the embedding-centroid router"),
        ("worse", "the embedding-centroid router routes to lower loss than FisherSketch"),
        ("no difference", "FisherSketch and the embedding-centroid router show no difference"),
    ):
        r = copy.deepcopy(rec)
        _set(r, "FisherSketch vs embedding centroid", word)
        assert said in tool.guidance(r)[0]
    r = copy.deepcopy(rec)
    _set(r, "FisherSketch vs error-only", "better")
    _set(r, "FisherSketch vs activation-only", "better")
    assert "beats error-only and activation-only" in tool.guidance(r)[0]
    _set(r, "FisherSketch vs error-only", "no difference")
    _set(r, "FisherSketch vs activation-only", "no difference")
    assert "does not beat its marginals" in tool.guidance(r)[0]


def test_cluster_caveat_names_decided_comparisons_whose_clustered_interval_covers_zero():
    tool, rec = _rec()
    r = copy.deepcopy(rec)
    rows = r["metrics"]["verdicts"]["comparisons"]
    for row in rows:
        row["word"], row["clustered_bootstrap"]["ci95"] = "better", [0.01, 0.2]
    assert "clustered over domains" not in tool.guidance(r)[0]
    rows[0]["clustered_bootstrap"]["ci95"] = [-0.05, 0.2]
    said = tool.guidance(r)[0]
    assert "covers zero for embedding centroid:" in said
    rows[0]["word"] = "no difference"  # an undecided comparison needs no caveat
    assert "clustered over domains" not in tool.guidance(r)[0]


def test_unlearned_library_is_not_decided_and_prereg_mismatch_is_stated():
    tool, rec = _rec()
    r = copy.deepcopy(rec)
    r["metrics"]["regime"]["adapters_learned_their_domain"] = False
    assert "not decided" in tool.guidance(r)[0]
    assert "not every adapter" in tool.setup_lines(r)[1]
    r["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(r)[-1]


def _cd_rec():
    rec = json.loads((ROOT / "docs" / "results" / "routing_coupling_dark_quick.json").read_text())
    rec["_file"] = "routing_coupling_dark_quick.json"
    return docs_script("routing_table"), rec


def _set_cd(rec, key, comparison, word):
    for row in rec["metrics"]["verdicts"][key]:
        if row["comparison"] == comparison:
            row["word"] = word


def test_coupling_dark_guidance_follows_each_word():
    tool, rec = _cd_rec()
    for word, said in (
        ("better", "from few-shot requests FisherSketch routes to lower loss than a random adapter"),
        ("worse", "from few-shot requests FisherSketch routes to higher loss than a random adapter"),
        ("no difference", "from few-shot requests FisherSketch does no better than a random adapter"),
    ):
        r = copy.deepcopy(rec)
        _set_cd(r, "control", "FisherSketch vs random, few-shot", word)
        assert said in tool.cd_guidance(r)[0]
    r = copy.deepcopy(rec)
    _set_cd(r, "control", "FisherSketch vs random, input-only", "better")
    assert "from the input alone it also beats a random adapter" in tool.cd_guidance(r)[0]
    _set_cd(r, "control", "FisherSketch vs random, input-only", "no difference")
    assert "nothing in the input reveals the mapping" in tool.cd_guidance(r)[0]
    for row in r["metrics"]["verdicts"]["comparisons"]:
        row["word"] = "better"
    assert "routes to lower loss than embedding centroid, PEFT Arrow, error-only" in tool.cd_guidance(r)[0]
    assert "no difference" not in tool.cd_guidance(r)[0]
    _set_cd(r, "comparisons", "FisherSketch vs error-only", "worse")
    assert "error-only routes to lower loss than the joint score" in tool.cd_guidance(r)[0]
    _set_cd(r, "comparisons", "FisherSketch vs PEFT Arrow", "no difference")
    assert "no difference from PEFT Arrow" in tool.cd_guidance(r)[0]


def test_coupling_dark_unlearned_library_and_prereg_mismatch_are_stated():
    tool, rec = _cd_rec()
    assert "matches the committed" in tool.cd_setup_lines(rec)[-1]
    assert "up to its amendment 1" in tool.cd_setup_lines(rec)[-1]  # the records predate amendment 2
    assert "posed alone (amendment 1)" in tool.cd_setup_lines(rec)[0]
    a2 = copy.deepcopy(rec)  # a record of amendment 2 carries the input-only gains too
    a2["metrics"]["regime"]["own_mapping_gain_input_only"] = a2["metrics"]["regime"]["own_mapping_gain_few_shot"]
    assert "posed as requests are (amendment 2)" in tool.cd_setup_lines(a2)[0]
    assert "decide nothing" not in "".join(tool.cd_verdicts(rec["metrics"]))
    r = copy.deepcopy(rec)
    r["metrics"]["regime"]["adapters_learned_their_mapping"] = False
    r["metrics"]["regime"]["own_mapping_gain_few_shot"][0] = -0.25
    assert "nothing is decided" in tool.cd_guidance(r)[0]
    assert "not every adapter" in tool.cd_setup_lines(r)[1]
    assert "1 of" in tool.cd_setup_lines(r)[1] and "-0.250" in tool.cd_setup_lines(r)[1]
    assert "decide nothing" in tool.cd_verdicts(r["metrics"])[0]
    r["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.cd_setup_lines(r)[-1]
    # every router's row says what it sees
    rows = tool.cd_table(rec["metrics"])[2:]
    assert len(rows) == len(rec["metrics"]["routers_see"])
    assert all(rec["metrics"]["routers_see"][k] in row for k, row in zip(tool.CD_LABEL, rows))


def test_domain_record_before_the_amendment_is_recognised():
    tool, rec = _rec()
    text = tool.PREREG.read_bytes()
    cut = text.find(b"\n## Amendment 1")
    r = copy.deepcopy(rec)
    r["config"]["preregistration_sha256"] = hashlib.sha256(text[:cut]).hexdigest()
    assert "without its amendments" in tool.setup_lines(r)[-1]
