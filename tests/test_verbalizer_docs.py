"""The verbalizer readings in docs/results.md (docs/verbalizer_table.py) follow their rules:
a copy of the real record with the relevant numbers changed flips each claim."""

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _rec(name: str) -> dict:
    return json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())


def test_activation_identity_flips_when_the_sets_differ():
    vt = docs_script("verbalizer_table")
    rec = _rec("verbalizer_quick")
    assert "activations: verified**" in vt.activation_lines(rec)[0]
    r2 = copy.deepcopy(rec)
    r2["metrics"]["activation_identity"]["max_abs_diff"] = 0.01
    line = vt.activation_lines(r2)[0]
    assert "NOT verified" in line and "can see the set" in line


def test_truth_reading_counts_follow_the_table():
    vt = docs_script("verbalizer_table")
    rec = _rec("verbalizer_full")
    line = vt.truth_lines(rec)[0]
    assert line.startswith("Every set learns its own words")
    assert "89 of 90 cross-set transfers are negative" in line
    assert "for 8 of the 8 targets" in line
    r2 = copy.deepcopy(rec)
    gt = r2["metrics"]["ground_truth"]
    gt["loss"]["Yes/No"]["Yes/No"] = gt["base_loss"]["Yes/No"] + 1.0  # Yes/No no longer learns its words
    gt["transfer"]["Yes/No"]["True/False"] = 5.0  # a positive cross transfer that beats yes/no
    line = vt.truth_lines(r2)[0]
    assert line.startswith("9 of 10 sets learn their own words")
    assert "88 of 90 cross-set transfers are negative" in line
    assert "for 7 of the 8 targets" in line
