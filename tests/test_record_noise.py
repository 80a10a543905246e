"""Every committed record's evaluation noise is what its own per-sequence losses give."""

import copy
import json
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return docs_script("record_noise")


def test_committed_eval_noise_is_recomputed_exactly():
    tool = _tool()
    paths = tool.records()
    assert paths, "no committed record keeps per-sequence eval losses"
    for p in paths:
        rec = json.loads(p.read_text())
        old = rec["metrics"]["truth_noise"]["eval"]
        new = tool.recompute(rec)
        assert tool._same(old, new) and tool._same(new, old), f"{p.name}: run python docs/record_noise.py --write"


def test_a_changed_value_is_caught_and_a_missing_one_is_added(tmp_path, monkeypatch):
    tool = _tool()
    rec = json.loads(tool.records()[0].read_text())
    good = tool.recompute(rec)
    bad = copy.deepcopy(good)
    bad["median_se"] *= 1.01
    assert not tool._same(bad, good)
    short = {k: v for k, v in good.items() if k != "median_gap_se"}
    assert tool._same(short, good) and tool._merged(short, good) == good
    rec["metrics"]["truth_noise"]["eval"] = bad
    (tmp_path / "x.json").write_text(json.dumps(rec))
    monkeypatch.setattr(tool, "RESULTS", tmp_path)
    monkeypatch.setattr(tool, "records", lambda results=tmp_path: [tmp_path / "x.json"])
    assert tool.main(["--check"]) == 1 and tool.main(["--write"]) == 1
    assert json.loads((tmp_path / "x.json").read_text())["metrics"]["truth_noise"]["eval"] == bad  # not overwritten
    assert tool.main(["--bogus"]) == 2
