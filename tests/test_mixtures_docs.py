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


def test_the_regime_line_counts_the_targets_the_fine_tunings_helped():
    tool, rec = _rec()
    arms = list(rec["metrics"]["summary"])
    for sign, harmed in ((1.0, False), (-1.0, True)):
        r = copy.deepcopy(rec)
        for row in r["metrics"]["transfer"].values():
            for a in arms:
                row[a] = sign * 0.01
        for a in arms:
            r["metrics"]["summary"][a]["transfer"] = sign * 0.01
        n = len(r["metrics"]["transfer"])
        line = tool.regime_line(r["metrics"])
        assert f"lowered the target's loss on {n if sign > 0 else 0} of {n} targets" in line
        assert ("raised most targets' loss" in line) is harmed
        assert ("lowered the loss of only" in tool.guidance(r)[0]) is harmed
        assert f"| {n if sign > 0 else 0} of {n} |" in tool.arms_table(r["metrics"])[2]
