"""The routing guide's sentences are chosen by rules over the record: flipping a recorded
word flips the sentence."""

from __future__ import annotations

import copy
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


def test_unlearned_library_is_not_decided_and_prereg_mismatch_is_stated():
    tool, rec = _rec()
    r = copy.deepcopy(rec)
    r["metrics"]["regime"]["adapters_learned_their_domain"] = False
    assert "not decided" in tool.guidance(r)[0]
    assert "not every adapter" in tool.setup_lines(r)[1]
    r["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(r)[-1]
