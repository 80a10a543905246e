"""The generated tables of docs/results.md match the committed JSON records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    return docs_script("results_table")


@pytest.mark.parametrize(
    "doc",
    [
        "docs/results.md",
        "docs/evidence.md",
        "docs/guide-banks.md",
        "docs/guide-select.md",
        "docs/guide-route.md",
        "docs/guide-mix.md",
        "README.md",
    ],
)
def test_committed_docs_match_committed_records(doc):
    tool = _tool()
    text = (ROOT / doc).read_text()
    assert tool.regenerate(text, ROOT / "docs" / "results") == text, (
        f"{doc} is stale: run `python docs/results_table.py --write`"
    )


def test_within_collection_block_is_in_results_md():
    assert ("smileswithin", "smiles_nci_quick") in _tool()._blocks.blocks((ROOT / "docs" / "results.md").read_text())


def _record(top1: float) -> dict:
    block = lambda v: {"mean": v, "sd": 0.0, "max": v, "ci": [v, v], "n": 2, "per_target": {"a": v, "b": v}}  # noqa: E731
    method = {
        "top1": block(top1),
        "oracle_normalised_transfer": block(0.5),
        "regret": block(0.01),
        "spearman": block(0.3),
        "chance_top1": 0.5,
        "pooled_spearman": {"rho": 0.1, "p": 0.5, "n": 4},
        "within_family": {"top1": block(1.0), "chance_top1": block(0.5), "spearman": block(0.0)},
    }
    return {
        "name": "x",
        "seconds": 1.0,
        "env": {"git_commit": "abc", "git_dirty": False},
        "metrics": {
            "methods": {"fisher": method, "family": method},
            "cannot_run": {},
            "paired": {"fisher - family": {"spearman": {"mean": 0.0, "ci": [0.0, 0.0], "n": 2}}},
            "truth_noise": {"n_seeds": 1, "ceiling": None},
        },
    }


def test_check_fails_on_a_changed_record(tmp_path):
    tool = _tool()
    (tmp_path / "rec.json").write_text(json.dumps(_record(0.25)))
    doc = (
        "intro\n<!-- generated: evidence rec -->\n<!-- end generated -->\nafter\n"
        "<!-- generated: paired rec -->\nold\n<!-- end generated -->"
    )
    fresh = tool.regenerate(doc, tmp_path)
    assert "| FisherSketch A_F | 0.250 [0.250, 0.250]" in fresh and fresh.endswith("<!-- end generated -->")
    assert "old" not in fresh and tool.regenerate(fresh, tmp_path) == fresh  # idempotent
    (tmp_path / "rec.json").write_text(json.dumps(_record(0.75)))
    assert tool.regenerate(fresh, tmp_path) != fresh  # a stale block is caught
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
        sketch_vs_exact={"fisher": {"spearman": 0.9, "mean_abs_err": 0.02, "max_abs_err": 0.03, "pairs": 3}},
    )
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    doc = "<!-- generated: truth rec -->\n<!-- end generated -->\n<!-- generated: pairs rec -->\n<!-- end generated -->"
    out = tool.regenerate(doc, tmp_path)
    # target C/D, source A/B: transfer 0.1 * (1 - 0) ± 0.01 * (1 + 0)
    assert "| C/D | +0.100 ± 0.010 | +0.000 ± 0.020 | -0.100 ± 0.030 |" in out
    # pair A/B · C/D: exact 0.5, sketch 0.51; A/B→C/D (train on A/B, evaluate C/D) is truth[C/D][A/B] = +0.1
    assert "| A/B · C/D | 0.5000 | 0.5100 | 0.5000 | 0.5100 | +0.100 / -0.100 |" in out
    assert "Spearman sketch vs exact 0.90" in out and tool.regenerate(out, tmp_path) == out


def _within_record() -> dict:
    """A one-collection SMILES record: "collection" and "size" constant, "family" = same property."""
    rec = _record(0.5)
    m = rec["metrics"]
    names = ("fisher", "exact_fisher", "cka", "activation", "easiness", "family", "collection")
    m["methods"] = {n: json.loads(json.dumps(m["methods"]["fisher"])) for n in names}
    m["methods"]["collection"]["spearman"] = {
        "mean": None,
        "ci": None,
        "n": 0,
        "per_target": {},
        "excluded": {"a": "constant scores", "b": "constant scores"},
    }
    pooled = lambda rho: {"pooled": {"rho": rho, "p": 0.01, "p_perm": 0.04, "n_perm": 5000, "n": 2}}  # noqa: E731
    m["correlation"] = {n: pooled(0.4) for n in names}
    m["correlation"]["collection"] = pooled(float("nan"))
    # per-target Spearman over 12 targets (the verdicts are computed from these): FisherSketch
    # leads CKA and easiness on every target, trails activation-only on every target, is
    # alternately above and below the property label and equal to exact A_F
    fisher = {f"t{i}": 0.3 + 0.01 * i for i in range(12)}
    shift = {"cka": -0.2, "activation": 0.2, "easiness": -0.5, "exact_fisher": 0.0}
    for name in names[:-1]:
        sp = m["methods"][name]["spearman"]
        if name == "family":
            sp["per_target"] = {t: v + (0.1 if i % 2 else -0.1) for i, (t, v) in enumerate(fisher.items())}
        else:
            sp["per_target"] = {t: v + shift.get(name, 0.0) for t, v in fisher.items()}
    m["paired"] = {
        f"fisher - {n}": {} for n in ("cka", "activation", "family", "easiness", "exact_fisher", "collection")
    }
    m.update(
        property_families={"smiles_nci_tpsa_q1": "tpsa", "smiles_nci_logp_q1": "logp"},
        collection_indicator={"collections": ["nci"], "constant": True},
        constant_methods=["collection", "size"],
        ground_truth={"transfer": {"a": {"a": 0.2, "b": 0.05}, "b": {"a": 0.04, "b": 0.2}}},
        truth_noise={
            "n_seeds": 3,
            "median_best_gap": 0.001,
            "median_se": 0.001,
            "best_same_in_every_seed": 1,
            "n_targets": 2,
            "ceiling": {"top1": m["methods"]["fisher"]["top1"], "spearman": {"mean": 0.8, "ci": [0.7, 0.9]}},
        },
    )
    return rec


def test_within_collection_block_renders_from_the_record(tmp_path):
    tool = _tool()
    rec = _within_record()
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    doc = "<!-- generated: smileswithin rec -->\n<!-- end generated -->"
    out = tool.regenerate(doc, tmp_path)
    assert (
        "| **noise ceiling** (1 of 3 seeds predicts the others' mean) | 0.80 [0.70, 0.90] | 0.500 [0.500, 0.500] | – |"
        in out
    )
    assert "| FisherSketch A_F | 0.30 [0.30, 0.30] | 0.500 [0.500, 0.500] | 0.40 (0.040) |" in out
    assert "| *trivial:* same property (TPSA / logP) | 0.30" in out  # "family" is the property label here
    assert "| *trivial:* same collection (NCI) | constant: cannot rank | | |" in out
    assert "same collection (NCI) (constant: no Spearman) | n/a | +0.00 [+0.00, +0.00] (n 2)" in out
    assert "| same property (TPSA / logP) − linear CKA |" not in out  # only the record's pairs
    verdict = next(line for line in out.split("\n") if line.startswith("Verdict"))
    # 12 differences of one sign: exact p = 2 / 4096; Holm over 15 comparisons (5 baselines × 3
    # metrics; the top-1 and oracle-normalised differences are all 0, p = 1)
    p = 2 / 4096
    assert f"p {p:.1e}, Holm {15 * p:.3f} over 15" in verdict
    assert (
        "− linear CKA +0.20 [+0.20, +0.20], better (p 4.9e-04, Holm 0.007 over 15); "
        "− activation-only Scov(M_a), sketch -0.20 [-0.20, -0.20], worse (p 4.9e-04, Holm 0.007 over 15); "
        "− easiness (−base loss on source) +0.50 [+0.50, +0.50], better (p 4.9e-04, Holm 0.007 over 15); "
        "− same property (TPSA / logP) "
    ) in verdict
    assert "no difference (p 1.000, Holm 1.000 over 15)" in verdict  # the property label: ±0.1, alternating
    assert "noise ceiling of 0.80 [0.70, 0.90]; pooled ρ_s 0.40, Mantel p 0.040 (below 0.05)." in verdict
    assert tool.regenerate(out, tmp_path) == out  # idempotent
    # the record changes: CKA now wins on 4 of the 12 targets, so the lead is no longer resolved
    cka = rec["metrics"]["methods"]["cka"]["spearman"]["per_target"]
    for t in ("t0", "t3", "t6", "t9"):
        cka[t] += 0.5
    (tmp_path / "rec.json").write_text(json.dumps(rec))
    fresh = tool.regenerate(out, tmp_path)
    assert fresh != out  # the block is stale ...
    flipped = next(line for line in fresh.split("\n") if line.startswith("Verdict"))
    assert "− linear CKA +0.03 [-0.09, +0.16], no difference (p 0.729, Holm 1.000 over 15)" in flipped  # ... flips


#: a decimal with two or more digits after the point (0.55, 0.0041, 12.35)
TYPED_DECIMAL = __import__("re").compile(r"(?<![\w.])\d*\.\d{2,}")


def _typed_decimals(text: str) -> list[str]:
    """The sentences (table rows: the row) outside generated blocks and fenced code that
    hold a decimal with ≥ 2 digits after the point and do not mention the paper."""
    import re

    lines, fence, units, para = _tool()._blocks.strip(text).split("\n"), False, [], []
    for line in lines + [""]:
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if line.lstrip().startswith("|") or not line.strip():
            units += re.split(r"(?<=[.!?])\s+", " ".join(para)) if para else []
            para = []
            if line.strip():
                units.append(line)
        else:
            para.append(line.strip())
    return [u for u in units if TYPED_DECIMAL.search(u) and "paper" not in u.lower()]


def test_typed_decimal_check_can_fail():
    typed = "Intro.\nFisherSketch reaches 0.55 here.\n<!-- generated: x y -->\n0.55\n<!-- end generated -->\n"
    assert _typed_decimals(typed) == ["FisherSketch reaches 0.55 here."]
    assert _typed_decimals("| a | 0.0041 |\nThe paper's 0.97 stays.\n```\n12.35\n```\nv0.12 and 0.5 pass.") == [
        "| a | 0.0041 |"
    ]


def test_results_md_has_no_typed_decimals():
    """Every number of ours comes from a record through a generated block; numbers quoted
    from the paper may stay typed."""
    assert _typed_decimals((ROOT / "docs" / "results.md").read_text()) == []


def test_centred_pooled_keeps_only_the_within_target_ranking():
    tool = _tool()
    # within each target the scores order the sources as the truth does; the targets' levels differ
    truth = {
        "a": {"b": 1.0, "c": 2.0, "d": 3.0},
        "b": {"a": 11.0, "c": 12.0, "d": 13.0},
        "c": {"a": 21.0, "b": 22.0, "d": 23.0},
    }
    scores = {
        "a": {"b": 0.3, "c": 0.4, "d": 0.5},
        "b": {"a": 0.3, "c": 0.4, "d": 0.5},
        "c": {"a": 0.3, "b": 0.4, "d": 0.5},
    }
    assert tool.centred_pooled(scores, truth) == pytest.approx(1.0)
    reversed_ = {t: {s: -v for s, v in row.items()} for t, row in scores.items()}
    assert tool.centred_pooled(reversed_, truth) == pytest.approx(-1.0)
    flat = {t: {s: 1.0 for s in row} for t, row in scores.items()}
    assert math.isnan(tool.centred_pooled(flat, truth))


def test_wording_comes_from_the_records():
    """The EfficientNet numbers, the task count, the chance word and the reanalysis' CKA
    comparison are generated from the current records."""
    tool = _tool()
    assert tool.chance_word(0.158, 0.2) == "below chance" and tool.chance_word(0.2, 0.2) == "at chance"
    assert tool.chance_word(0.3, 0.2) == "above chance"
    text = (ROOT / "docs" / "results.md").read_text()
    v = json.loads((ROOT / "docs" / "results" / "estimator_full.json").read_text())["metrics"]["vision"]
    g = v["accuracy"]["groups"]
    assert f"A_F Spearman {g['label_maps']['fisher']['spearman_mean']:.3f} on the label-map tasks" in text
    assert f"{g['spanning']['fisher']['spearman_mean']:.3f} on the spanning family" in text
    n, pairs = v["n_tasks"], v["accuracy"]["fisher"]["pairs"]
    assert pairs == n * (n - 1) // 2 and f"{n} tasks in all, {pairs} pairs" in text
    assert "could not be compared" not in text and "FisherSketch − CKA, per target against each seed's" in text
    contrast = json.loads((ROOT / "docs" / "results" / "verbalizer_contrast_quick.json").read_text())["metrics"]
    act = contrast["methods"]["activation"]
    word = tool.chance_word(act["top1"]["mean"], act["chance_top1"])
    assert (
        word == "below chance"
        and f"against chance {act['chance_top1']:.3f}: {word}" in (ROOT / "docs" / "evidence.md").read_text()
    )
