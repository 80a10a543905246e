"""docs/steering.md's sentiment-steering and negative-control blocks equal what
docs/steering_table.py makes of the records, and their words follow the recorded numbers."""

import copy
import json
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _record(kind):
    text = (ROOT / "docs" / "steering.md").read_text()
    name = re.search(rf"<!-- generated: {kind} (\w+) -->", text).group(1)
    return name, json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())


def test_sentiment_and_control_blocks_are_generated():
    mod = docs_script("steering_table")
    text = (ROOT / "docs" / "steering.md").read_text()
    kinds = {kind for kind, _ in mod._blocks.blocks(text)}
    assert {"sentiment", "control"} <= kinds
    assert mod.render(text) == text, "docs/steering.md is stale: run `python docs/steering_table.py --write`"


def test_sentiment_words_flip_with_the_numbers():
    mod = docs_script("steering_table")
    name, rec = _record("sentiment")
    r = copy.deepcopy(rec)
    m = r["metrics"]
    vader = m["comparisons"]["vader"]
    layer = m["chosen"]["positive"]["caa"]["layer"]
    i = m["cosine"]["layers"].index(layer)
    # an open gate: CAA reproduces across halves and beats random in the positive direction
    m["cosine"]["split_half_caa"]["mean"][i] = 0.9
    vader["positive: caa - random"].update(mean=0.3, p_holm=0.001)
    vader["positive: pushforward - caa"].update(mean=-0.2, p_holm=0.01)
    assert mod.sentiment_gates(r)["positive"]["open"]
    words = mod.sentiment_words(r)["vader"]
    assert words["positive: caa - random"] == "better" and words["positive: pushforward - caa"] == "worse"
    text = "\n".join(mod.sentiment_block(r, name))
    assert "**CAA gate, positive:** open." in text
    assert "Verdict: steering beyond a same-norm random vector." in text
    # shut by reproducibility: the same numbers, but comparisons against CAA are refused
    m["cosine"]["split_half_caa"]["mean"][i] = 0.2
    assert not mod.sentiment_gates(r)["positive"]["open"]
    words = mod.sentiment_words(r)["vader"]
    assert words["positive: pushforward - caa"] == "refused" and words["positive: caa - random"] == "better"
    assert "split-half cosine 0.20 < 0.5" in "\n".join(mod.sentiment_block(r, name))
    # the same win from a CAA that does not reproduce is not read as steering
    assert mod.sentiment_verdict(r)[0] == "not established"
    vader["positive: pushforward - random"].update(mean=0.2, p_holm=0.01)
    assert mod.sentiment_verdict(r)[0] == "steering beyond a same-norm random vector"
    vader["positive: pushforward - random"].update(mean=0.2, p_holm=0.5)
    # shut by the random control: no vector beats random anywhere -> the task verdict flips
    m["cosine"]["split_half_caa"]["mean"][i] = 0.9
    for c in vader.values():
        if "p_holm" in c:
            c.update(mean=0.01, p_holm=0.9)
    assert not mod.sentiment_gates(r)["positive"]["open"]
    assert mod.sentiment_words(r)["vader"]["positive: caa - prompting"] == "refused"
    assert mod.sentiment_verdict(r)[0] == "no vector steers beyond a same-norm random vector at this size"
    # the trained judge is refused below its accuracy floor
    m["judge"]["accuracy"] = 0.6
    assert "refused (< 0.7)" in "\n".join(mod.sentiment_block(r, name))
    m["judge"]["accuracy"] = 0.8
    assert "used." in "\n".join(mod.sentiment_block(r, name))


def test_control_sentence_follows_the_capitals_record():
    mod = docs_script("steering_table")
    name, rec = _record("control")
    r = copy.deepcopy(rec)
    b = r["metrics"]["base"]["test"]
    b["auc"] = 0.45
    assert "does not separate" in mod.control_block(r, name)[0] and "answer bias" in mod.control_block(r, name)[0]
    b["auc"], b["n"] = 0.95, 400
    line = mod.control_block(r, name)[0]
    assert " separates true" in line and "answer bias" not in line


def test_search_found_flips_with_the_held_out_gains():
    mod = docs_script("steering_table")
    name, rec = _record("sentiment")
    if "search" not in rec["metrics"]:  # a record made before the search-derived vector
        rec = json.loads((ROOT / "docs" / "results" / "sentiment_steering_full.json").read_text())
        name = "sentiment_steering_full"
    r = copy.deepcopy(rec)
    recs = [x for v in r["metrics"]["search"].values() for x in v]
    for k, x in enumerate(recs):
        x["gain_heldout"] = 0.01 + 0.001 * k
    assert mod.search_found(r["metrics"])[0]
    assert "The searches found perturbations that lower" in "\n".join(mod.sentiment_block(r, name))
    for k, x in enumerate(recs):
        x["gain_heldout"] = (-1) ** k * 0.01
    assert not mod.search_found(r["metrics"])[0]
    assert "The searches found no perturbation" in "\n".join(mod.sentiment_block(r, name))
