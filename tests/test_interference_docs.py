"""docs/guide-plan.md's interference blocks equal what docs/interference_table.py makes of
the record, and their words follow the recorded verdicts (each flipped here)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide-plan.md"


def _tool_and_record():
    tool = docs_script("interference_table")
    name = re.search(r"<!-- generated: interferencepairs (\w+) -->", GUIDE.read_text()).group(1)
    return tool, tool._blocks.load(name)


def test_guide_blocks_match_the_record():
    tool = docs_script("interference_table")
    text = GUIDE.read_text()
    kinds = {kind for kind, _ in tool._blocks.blocks(text)}
    assert set(tool.KINDS) <= kinds
    assert tool.main(["--check"]) == 0, "run python docs/interference_table.py --write"


def test_warning_follows_the_conclusion_and_the_power():
    tool, rec = _tool_and_record()
    supported = copy.deepcopy(rec)
    supported["metrics"]["conclusion"], supported["metrics"]["powered"] = tool.SUPPORTED, True
    first = tool.warning_lines(supported)
    assert "What the proxy is shown to do" in first[0] and "unvalidated" in first[1]  # real LMs: still open
    assert "beats the family label and random" in first[1]
    quick = copy.deepcopy(supported)
    quick["metrics"]["powered"] = False
    assert "unvalidated proxy" in tool.warning_lines(quick)[0]
    assert "not powered" in tool.warning_lines(quick)[1]
    refuted = copy.deepcopy(supported)
    refuted["metrics"]["conclusion"] = "no predictor is shown to beat the family label or random"
    lines = tool.warning_lines(refuted)
    assert "unvalidated proxy" in lines[0] and "did not show A_F beating" in lines[1]


def test_verdict_and_plan_words_come_from_the_record():
    tool, rec = _tool_and_record()
    flipped = copy.deepcopy(rec)
    for v in flipped["metrics"]["verdicts"] + flipped["metrics"]["plans"]["verdicts"]:
        v["word"] = "worse" if v["word"] != "worse" else "better"
    new = [v["word"] for v in flipped["metrics"]["verdicts"]]
    body = "\n".join(tool.verdicts_lines(flipped))
    assert all(f"| {w} |" in body for w in new)
    plans = "\n".join(tool.plans_lines(flipped))
    assert all(f"| {v['word']} |" in plans for v in flipped["metrics"]["plans"]["verdicts"])
    empty = copy.deepcopy(rec)
    empty["metrics"]["verdicts"] = []
    assert "nothing was scored" in tool.verdicts_lines(empty)[0]


def test_setup_states_a_preregistration_mismatch():
    tool, rec = _tool_and_record()
    assert "matches the committed" in tool.setup_lines(rec)[-1]
    other = copy.deepcopy(rec)
    other["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(other)[-1]


def test_backwards_clause_and_exploratory_line_follow_the_numbers():
    tool, rec = _tool_and_record()
    rec = copy.deepcopy(rec)
    rec["metrics"]["powered"] = True
    rec["metrics"]["conclusion"] = "no predictor is shown to beat the family label or random"
    corr = rec["metrics"]["states"]["start"]["correlation"]
    corr["fisher"]["spearman"], corr["fisher"]["spearman_ci"] = -0.5, [-0.7, -0.3]
    assert "ranks forgetting backwards" in tool.warning_lines(rec)[1]
    corr["fisher"]["spearman_ci"] = [-0.7, 0.1]
    assert "backwards" not in tool.warning_lines(rec)[1]
    for p in corr:
        corr[p]["spearman"], corr[p]["spearman_ci"] = 0.0, [-0.1, 0.1]
    corr["cka"]["spearman"], corr["cka"]["spearman_ci"] = 0.6, [0.4, 0.8]
    corr["family"]["spearman"] = 0.2
    if rec["metrics"]["verdicts"]:
        last = tool.verdicts_lines(rec)[-1]
        assert "linear CKA" in last and "lies above" in last
        corr["cka"]["spearman_ci"] = [0.1, 0.8]
        assert "reaches the family label" in tool.verdicts_lines(rec)[-1]


def test_replay_use_is_counted_from_the_recorded_rows():
    tool, rec = _tool_and_record()
    rec = copy.deepcopy(rec)
    for s in rec["metrics"]["plans"]["per_seed"]:
        for plan in s["plans"]:
            plan["arms"]["plan_replay"]["rows"] = [{}] + [{"copy": 8}] * (len(plan["sequence"]) - 1)
    n = sum(len(p["sequence"]) - 1 for s in rec["metrics"]["plans"]["per_seed"] for p in s["plans"])
    assert f"used its budget at {n} of {n} later stages" in "\n".join(tool.plans_lines(rec))


def test_replay_advice_follows_the_replay_verdict():
    tool, rec = _tool_and_record()
    plans = copy.deepcopy(rec["metrics"]["plans"])
    row = next(v for v in plans["verdicts"] if v["comparison"] == "planner replay vs uniform replay")
    for word, needle in (("worse", "spread `--replay-budget` evenly"), ("better", "the planner's replay left a lower")):
        row["word"] = word
        assert needle in tool.replay_advice(plans)
    row["word"] = "no difference"
    assert "no difference" in tool.replay_advice(plans)
