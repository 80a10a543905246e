"""The mix guide's sentences are chosen by rules over the record: flipping a recorded word
flips the sentence."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]
SINGLE = "FisherSketch mixture vs best single source by FisherSketch"
UNIFORM = "FisherSketch mixture vs uniform over the pool"


def _rec():
    rec = json.loads((ROOT / "docs" / "results" / "mixtures_quick.json").read_text())
    rec["_file"] = "mixtures_quick.json"
    return docs_script("mixtures_table"), rec


def _set(rec, comparison, word):
    for row in rec["metrics"]["verdicts"]["comparisons"]:
        if row["comparison"] == comparison:
            row["word"] = word


def test_the_plain_statement_about_the_best_single_source_follows_the_word():
    tool, rec = _rec()
    for word, said in (
        ("better", "transfers more than the best single source"),
        ("worse", "use the single source"),
        ("no difference", "did not beat the best single source"),
    ):
        r = copy.deepcopy(rec)
        _set(r, SINGLE, word)
        assert said in tool.guidance(r)[0]
    for word, said in (
        ("better", "it beats the uniform mixture"),
        ("worse", "the uniform mixture of the pool beats it"),
        ("no difference", "no difference is resolved"),
    ):
        r = copy.deepcopy(rec)
        _set(r, UNIFORM, word)
        assert said in tool.guidance(r)[0]


def test_prereg_mismatch_is_stated():
    tool, rec = _rec()
    assert "matches the committed" in tool.setup_lines(rec)[-1]
    r = copy.deepcopy(rec)
    r["config"]["preregistration_sha256"] = "0" * 64
    assert "does not match" in tool.setup_lines(r)[-1]
