"""docs/guide-plan.md's SmolLM2 interference blocks: their words follow the SmolLM2 record
(each flipped here), and the planner's warning says what the real LM showed."""

from __future__ import annotations

import copy
import hashlib

from _docs_script import docs_script

RECORD = "interference_smollm2_full"  # the powered record of the recipe in force
PILOT = "interference_smollm2_quick_amendment3"  # its quick pilot, whose cost estimate the guide keeps


def _tool(record: str = RECORD):
    tool = docs_script("interference_table")
    return tool, tool._blocks.load(record), tool._blocks.load("interference_full")


def test_guide_renders_the_smollm2_record():
    tool, lm, _lab = _tool()
    text = (tool.DOC).read_text()
    for kind in ("interferencelmsetup", "interferencepairs", "interferenceverdicts", "interferenceplans"):
        assert f"<!-- generated: {kind} {RECORD} -->" in text
    assert f"interferencewarning interference_full+{RECORD}" in text
    assert f"<!-- generated: interferencelmcost {PILOT} -->" in text
    assert lm["env"]["git_dirty"] is False


def test_warning_says_what_smollm2_showed():
    tool, lm, lab = _tool()
    quick = copy.deepcopy(lm)
    quick["metrics"]["powered"] = False
    assert "only the quick run exists" in tool.warning_lines(lab, quick)[1]
    assert "nothing has been measured on a real language model" in tool.warning_lines(lab)[1]
    powered = copy.deepcopy(lm)
    powered["metrics"]["powered"] = True
    powered["metrics"]["conclusion"] = "no predictor is shown to beat the family label or random"
    assert "did not show A_F beating" in tool.warning_lines(lab, powered)[1]
    powered["metrics"]["conclusion"] = tool.SUPPORTED
    assert "show A_F beating the family label and random" in tool.warning_lines(lab, powered)[1]
    # the lab supported and the LM too: the warning gives way to the note, without "unvalidated"
    both = copy.deepcopy(lab)
    both["metrics"]["conclusion"], both["metrics"]["powered"] = tool.SUPPORTED, True
    lines = tool.warning_lines(both, powered)
    assert "What the proxy is shown to do" in lines[0] and "unvalidated" not in lines[1]
    assert "unvalidated" in tool.warning_lines(both, quick)[1]


def test_setup_and_replay_words_follow_the_record():
    tool, lm, _lab = _tool()
    assert "powered as pre-registered" in tool.lm_setup_lines(lm)[0]
    quick = copy.deepcopy(lm)
    quick["metrics"]["powered"] = False
    assert "not powered" in tool.lm_setup_lines(quick)[0]
    refused = copy.deepcopy(lm)
    key = next(iter(refused["metrics"]["pairs"]))
    refused["metrics"]["regime"]["refused"] = [key]
    assert f"refused: `{key}`" in tool.lm_setup_lines(refused)[1]
    assert "matches the committed" in tool.lm_setup_lines(lm)[-1]
    # the warm-up's check is read from the record (amendment 2 on), and flips with it
    assert "check passed" in tool.lm_setup_lines(lm)[1]
    failed = copy.deepcopy(lm)
    failed["metrics"]["warm_up"]["passed"] = False
    assert "check failed" in tool.lm_setup_lines(failed)[1]
    noisy = copy.deepcopy(lm)
    noisy["metrics"]["noise"]["median_eval_ci_half_width"] = 10.0
    assert "barely moves its own loss" in tool.lm_setup_lines(noisy)[-2]
    noisy["metrics"]["noise"]["median_eval_ci_half_width"] = 0.0
    assert "above the median evaluation-noise" in tool.lm_setup_lines(noisy)[-2]
    other = copy.deepcopy(lm)
    other["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.lm_setup_lines(other)[-1]
    # a record run under the text up to amendment 1 says it predates amendment 2; the whole text matches
    text = tool.PREREG.read_bytes()
    other["config"]["preregistration_sha256"] = hashlib.sha256(text.split(b"\n## Amendment 2", 1)[0]).hexdigest()
    assert "predates amendment 2" in tool.lm_setup_lines(other)[-1]
    other["config"]["preregistration_sha256"] = hashlib.sha256(text).hexdigest()
    assert tool.lm_setup_lines(other)[-1].endswith("matches the committed `PREREGISTRATION.md`.")
    for word, phrase in (
        ("worse", "uniform replay at the same budget left a lower"),
        ("better", "planner's replay left"),
    ):
        flipped = copy.deepcopy(lm)
        for v in flipped["metrics"]["plans"]["verdicts"]:
            v["word"] = word
        last = tool.plans_lines(flipped)[-1]
        assert last.startswith("On SmolLM2") and phrase in last


def test_cost_estimate_follows_the_measured_cost():
    tool, lm, _lab = _tool(PILOT)
    base = " ".join(tool.lm_cost_lines(lm))
    slower = copy.deepcopy(lm)
    slower["metrics"]["stage_seconds"] *= 3
    slower["seconds"] += 2 * lm["metrics"]["stage_seconds"]
    assert base != " ".join(tool.lm_cost_lines(slower))
    assert "updatescope reproduce interference-smollm2 --set truth_store=" in base
