"""The generated tables of docs/results.md match the committed JSON records."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "docs" / "results_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_docs_match_committed_records():
    tool = _tool()
    text = (ROOT / "docs" / "results.md").read_text()
    assert tool.regenerate(text, ROOT / "docs" / "results") == text, \
        "docs/results.md is stale: run `python docs/results_table.py --write`"


def _record(top1: float) -> dict:
    block = lambda v: {"mean": v, "sd": 0.0, "max": v, "ci": [v, v], "n": 2, "per_target": {"a": v, "b": v}}  # noqa: E731
    method = {"top1": block(top1), "oracle_normalised_transfer": block(0.5), "regret": block(0.01),
              "spearman": block(0.3), "chance_top1": 0.5, "pooled_spearman": {"rho": 0.1, "p": 0.5, "n": 4},
              "within_family": {"top1": block(1.0), "chance_top1": block(0.5), "spearman": block(0.0)}}
    return {"name": "x", "seconds": 1.0, "env": {"git_commit": "abc", "git_dirty": False},
            "metrics": {"methods": {"fisher": method, "family": method}, "cannot_run": {},
                        "paired": {"fisher - family": {"spearman": {"mean": 0.0, "ci": [0.0, 0.0], "n": 2}}},
                        "truth_noise": {"n_seeds": 1, "ceiling": None}}}


def test_check_fails_on_a_changed_record(tmp_path):
    tool = _tool()
    (tmp_path / "rec.json").write_text(json.dumps(_record(0.25)))
    doc = "intro\n<!-- generated: evidence rec -->\n<!-- end generated -->\nafter\n<!-- generated: paired rec -->\nold\n<!-- end generated -->"
    fresh = tool.regenerate(doc, tmp_path)
    assert "| FisherSketch A_F | 0.250 [0.250, 0.250]" in fresh and fresh.endswith("<!-- end generated -->")
    assert "old" not in fresh and tool.regenerate(fresh, tmp_path) == fresh   # idempotent
    (tmp_path / "rec.json").write_text(json.dumps(_record(0.75)))
    assert tool.regenerate(fresh, tmp_path) != fresh                           # a stale block is caught
    with pytest.raises(SystemExit):
        tool.regenerate("<!-- generated: evidence rec -->\nno end", tmp_path)
