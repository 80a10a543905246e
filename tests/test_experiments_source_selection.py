"""The source-selection runner on a tiny random Llama and synthetic word domains."""

import math

import pytest

from _tiny_lm import TINY_LORA, check_budget_run, loader, reproduce
from updatescope.experiments import heads
from updatescope.experiments import selection as source_selection


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128))
    vocab = {
        "a": "alpha beta gamma delta",
        "b": "one two three four",
        "c": "red green blue cyan",
        "d": "alpha two red four",
        "e": "beta three green four",
    }

    def texts(name, split, max_chars):
        words = vocab[name[-1]].split()
        salt = {"sketch": 0, "train": 1, "eval": 2}[split]
        return [" ".join(words[(i * 7 + j + salt) % 4] for j in range(20)) for i in range(4)]

    monkeypatch.setattr(source_selection, "load_texts", texts)
    monkeypatch.setattr(source_selection, "family_of", lambda n: "fam_" + ("x" if n[-1] in "abc" else "y"))
    return tmp_path


@pytest.mark.parametrize("gt", ["head", "lora"])
def test_source_selection_tiny_run(tiny, gt):
    cfg = {
        "domains": ["dom_a", "dom_b", "dom_c", "dom_d"],
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "ground_truth": gt,
        "lora": TINY_LORA,
        "finetune": {"lr": 1e-2, "steps": 5, "batch": 16, "extra_rows": 8},
    }
    res = reproduce("source-selection", tiny / "out", cfg)
    m = res["metrics"]
    assert m["n_domains"] == 4 and m["n_families"] == 2
    assert set(m["tokens_captured"]) == ({"sketch", "train", "eval"} if gt == "head" else {"sketch"})
    assert all(v == 40 for split in m["tokens_captured"].values() for v in split.values())
    if gt == "lora":
        assert all(v == 40 for split in m["ground_truth"]["tokens"].values() for v in split.values())
    tr = m["ground_truth"]["transfer"]
    assert all(math.isfinite(v) for row in tr.values() for v in row.values())
    # every method either has a summary or a stated reason it cannot run
    for method in ("fisher", "activation", "error", "exact_fisher", "grad_cos", "cka", "random"):
        h = m["summary"][method]
        assert 0.0 <= h["top1"] <= 1.0 and h["regret_mean"] >= 0.0
    for method in ("logme", "hscore", "leep"):
        assert method in m["summary"] or method in m["cannot_run"]
    # sketch vs exact is reported for the joint alignment
    assert m["sketch_vs_exact"]["fisher"]["pairs"] == 6
    assert (tiny / "out" / "source_selection.png").is_file()

    # ground truth: the mean of 3 fine-tuning seeds, with its SE and the per-seed tables
    gt = m["ground_truth"]
    assert len(gt["transfer_by_seed"]) == 3 and len(set(gt["seeds"])) == 3
    for t, row in tr.items():
        for s_, v in row.items():
            vals = [tab[t][s_] for tab in gt["transfer_by_seed"]]
            assert v == pytest.approx(sum(vals) / 3)
            assert gt["transfer_se"][t][s_] >= 0.0
    noise = m["truth_noise"]
    assert noise["n_seeds"] == 3 and 0.0 <= noise["ceiling"]["top1"]["mean"] <= 1.0
    # trivial baselines are scored like every method, and their tables are recorded
    fam = m["scores"]["family"]
    assert fam["dom_a"]["dom_b"] == 1.0 and fam["dom_a"]["dom_d"] == 0.0 and fam["dom_d"]["dom_c"] == 0.0
    for method in ("family", "easiness", "size", "exact_fisher", "cka"):
        assert method in m["scores"] and "top1" in m["summary"][method]
    # within-family: a, b, c have 2 same-family candidates each (chance 1/2); d has none
    wf = m["methods"]["fisher"]["within_family"]
    assert wf["top1"]["n"] == 3 and wf["chance_top1"]["mean"] == pytest.approx(0.5)
    assert m["paired"]["fisher - family"]["spearman"]["n"] == 4


def test_source_selection_candidate_subsets(tiny):
    cfg = {
        "domains": ["dom_a", "dom_b", "dom_c", "dom_d", "dom_e"],
        "candidates": 2,
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "gt_seeds": 2,
        "lora": {**TINY_LORA, "steps": 2},
    }
    res = reproduce("source-selection", tiny / "out", cfg)
    m = res["metrics"]
    cands = m["candidates"]
    assert cands == source_selection.candidate_sets(cfg["domains"], 2, 0)
    for t, row in m["ground_truth"]["transfer"].items():
        assert len(cands[t]) == 2 and t not in cands[t]
        assert set(row) == set(cands[t]) | {t}
        assert set(m["ground_truth"]["eval_sequences"]["loss"][t]) == set(row)
    assert m["summary"]["fisher"]["chance_top1"] == pytest.approx(0.5)
    ev = m["truth_noise"]["eval"]
    assert set(ev["per_target"]) == set(cfg["domains"]) and ev["median_se"] > 0
    assert 0.0 <= ev["mean_best_stable"] <= 1.0
    assert m["ground_truth"]["finetune_seconds"] > 0


def test_budget_chosen_on_the_validation_split(tiny):
    cfg = {
        "domains": ["dom_a", "dom_b", "dom_c", "dom_d", "dom_e"],
        "budget_grid": [1, 6],
        "budget_domains": 3,
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "gt_seeds": 2,
        "lora": {**TINY_LORA, "steps": 2},
    }
    check_budget_run("source-selection", tiny, cfg, ["dom_a", "dom_c", "dom_e"])


def test_budget_signal_by_hand():
    gt = {
        "transfer": {"t": {"t": 9.0, "a": 0.3, "b": 0.1, "c": 0.2}},
        "transfer_se": {"t": {"t": 0.0, "a": 0.01, "b": 0.03, "c": 0.02}},
    }
    sig = source_selection.budget_signal(gt)
    assert sig["median_snr"] == pytest.approx(0.1 / 0.02)  # sd of (0.3, 0.1, 0.2) = 0.1
    assert sig["median_gap_over_se"] == pytest.approx(0.1 / 0.02)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"budget_grid": [5]}, "budget_grid"),
        ({"budget_grid": [5, 5]}, "budget_grid"),
        ({"budget_grid": [5, 10], "ground_truth": "head"}, "ground_truth=lora"),
        ({"budget_grid": [5, 10], "budget_domains": 2}, "budget_domains"),
        ({"budget_domains": 4}, "needs budget_grid"),
        ({"budget_only": True}, "needs budget_grid"),
        ({"budget_only": "yes", "budget_grid": [4, 8]}, "budget_only"),
        ({"candidates": 1}, "candidates"),
        ({"candidates": 20}, "candidates"),
    ],
)
def test_bad_budget_and_candidate_settings(bad, match):
    from updatescope.errors import InputError
    from updatescope.experiments import configure

    with pytest.raises(InputError, match=match):
        configure("source-selection", settings=bad)


def test_smiles_refuses_a_candidate_subset():
    from updatescope.errors import InputError
    from updatescope.experiments import configure

    with pytest.raises(InputError, match="not a smiles setting"):
        configure("smiles", settings={"candidates": 4})
