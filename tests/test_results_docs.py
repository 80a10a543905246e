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


def test_truth_and_pairs_blocks_render_from_the_record(tmp_path):
    tool = _tool()
    names = ("A/B", "C/D", "E/F")
    tab = lambda f: {t: {s: f(i, j) for j, s in enumerate(names)} for i, t in enumerate(names)}  # noqa: E731
    rec = _record(0.5)
    rec["metrics"].update(
        ground_truth={"transfer": tab(lambda i, j: 0.1 * (i - j)), "transfer_se": tab(lambda i, j: 0.01 * (i + j))},
        sketch_alignment={k: tab(lambda i, j: 0.5 + 0.01 * (i + j)) for k in ("fisher", "error")},
        scores={f"exact_{k}": tab(lambda i, j: 0.5) for k in ("fisher", "error")},
        sketch_vs_exact={"fisher": {"spearman": 0.9, "mean_abs_err": 0.02, "max_abs_err": 0.03, "pairs": 3}})
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    doc = "<!-- generated: truth rec -->\n<!-- end generated -->\n<!-- generated: pairs rec -->\n<!-- end generated -->"
    out = tool.regenerate(doc, tmp_path)
    # target C/D, source A/B: transfer 0.1 * (1 - 0) ± 0.01 * (1 + 0)
    assert "| C/D | +0.100 ± 0.010 | +0.000 ± 0.020 | -0.100 ± 0.030 |" in out
    # pair A/B · C/D: exact 0.5, sketch 0.51; A/B→C/D (train on A/B, evaluate C/D) is truth[C/D][A/B] = +0.1
    assert "| A/B · C/D | 0.5000 | 0.5100 | 0.5000 | 0.5100 | +0.100 / -0.100 |" in out
    assert "Spearman sketch vs exact 0.90" in out and tool.regenerate(out, tmp_path) == out
