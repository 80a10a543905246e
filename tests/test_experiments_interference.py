"""The interference experiment: task families, replay rows, the verdict rules (flip tests)
and the runner's plumbing on a tiny lab."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch

from updatescope.errors import InputError
from updatescope.experiments import configure, run_experiment
from updatescope.experiments.interference import analysis
from updatescope.experiments.interference.runner import PREREG, replay_rows
from updatescope.experiments.interference.tasks import FamilyTasks, answers


def test_family_tasks_share_inputs_and_differ_in_outputs():
    ft = FamilyTasks(("copy", "sort"), seq_len=4, seed=3)
    a, b = ft.batch("copy", 5, "train", 16), ft.batch("copy-perm", 5, "train", 16)
    assert torch.equal(a[:, :6], b[:, :6])  # family token, digits, SEP
    assert not torch.equal(a[:, 6:], b[:, 6:])
    c = ft.batch("sort-asc", 5, "train", 16)
    assert c[0, 0] != a[0, 0]  # another family: another first token
    # eval examples do not depend on the replicate seed; train examples do
    other = FamilyTasks(("copy", "sort"), seq_len=4, seed=4)
    assert torch.equal(ft.batch("copy", 0, "eval", 8), other.batch("copy", 0, "eval", 8))
    assert not torch.equal(ft.batch("copy", 0, "train", 8), other.batch("copy", 0, "train", 8))
    x = torch.tensor([[3, 1, 2, 0]])
    assert answers("sort-desc", x).tolist() == [[3, 2, 1, 0]]
    assert answers("roll-right", x).tolist() == [[0, 3, 1, 2]]
    with pytest.raises(InputError, match="unknown task"):
        ft.family("reverse")


def test_replay_rows_keep_the_budget_in_whole_rows():
    rows = dict(replay_rows({"a": 0.25 / 3, "b": 0.25 / 3, "c": 0.25 / 3}, 32))
    assert sum(rows.values()) == 8 and max(rows.values()) - min(rows.values()) <= 1
    assert replay_rows({}, 32) == ()
    assert dict(replay_rows({"a": 0.2, "b": 0.0}, 10)) == {"a": 2}


def test_config_refuses_bad_settings():
    with pytest.raises(InputError, match="unknown task families"):
        configure("interference", quick=True, settings={"families": ["copy", "nope"]})
    with pytest.raises(InputError, match="seeds must be >= 3"):
        configure("interference", settings={"seeds": 2})
    with pytest.raises(InputError, match="replay_budget"):
        configure("interference", quick=True, settings={"replay_budget": 1.0})


def _truth_and_preds(signal: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    tasks = [f"t{i}" for i in range(10)]
    keys = [analysis.pair_key(a, b) for a in tasks for b in tasks if a != b]
    truth = {k: float(rng.normal()) for k in keys}
    preds = {
        "fisher": {k: signal * truth[k] + float(rng.normal()) for k in keys},
        "family": {k: float(rng.normal()) for k in keys},
        "random": {k: float(rng.normal()) for k in keys},
        "inner": {k: signal * truth[k] + float(rng.normal()) for k in keys},
        "grad_conflict": {k: float(rng.normal()) for k in keys},
        "error": {k: float(rng.normal()) for k in keys},
    }
    return preds, truth


def test_pair_verdicts_and_conclusion_flip_with_the_signal():
    preds, truth = _truth_and_preds(signal=5.0)
    verdicts = analysis.pair_verdicts(preds, truth)
    assert [v["comparison"] for v in verdicts] == [c[0] for c in analysis.PAIR_COMPARISONS]
    assert all(v["word"] == "better" for v in verdicts)
    assert analysis.proxy_conclusion(verdicts) == analysis.SUPPORTED
    noise, truth0 = _truth_and_preds(signal=0.0)
    flat = analysis.pair_verdicts(noise, truth0)
    assert {v["word"] for v in flat} == {"no difference"}
    assert analysis.proxy_conclusion(flat) == analysis.NOT_SHOWN
    # swapping the roles makes A_F the loser: "worse", and the conclusion stays negative
    swapped = dict(preds, fisher=preds["family"], family=preds["fisher"])
    words = {v["comparison"]: v["word"] for v in analysis.pair_verdicts(swapped, truth)}
    assert words["A_F - family label"] == "worse"
    assert analysis.proxy_conclusion(analysis.pair_verdicts(swapped, truth)) == analysis.NOT_SHOWN
    assert analysis.proxy_conclusion([]) == analysis.NOT_SHOWN


def test_per_task_spearman_counts_a_constant_predictor_as_zero():
    truth = {analysis.pair_key("a", b): float(i) for i, b in enumerate("bcd")}
    assert analysis.per_task_spearman({k: 1.0 for k in truth}, truth) == {"a": 0.0}
    assert analysis.per_task_spearman({k: -v for k, v in truth.items()}, truth)["a"] == pytest.approx(-1.0)
    corr = analysis.correlations({k: 2 * v for k, v in truth.items()}, truth)
    assert corr["spearman"] == pytest.approx(1.0) and corr["pearson"] == pytest.approx(1.0) and corr["n"] == 3


def test_plan_verdicts_flip_with_the_sign_of_the_difference():
    runs = [f"{k}/{s}" for k in range(6) for s in range(3)]
    base = {r: 1.0 + 0.01 * i for i, r in enumerate(runs)}
    good = {"plan": base, "random": {r: v + 0.5 for r, v in base.items()}}
    good |= {"worst": {r: v + 0.3 for r, v in base.items()}, "plan_replay": base, "uniform_replay": base}
    words = {v["comparison"]: v["word"] for v in analysis.plan_verdicts(good)}
    assert words["planner order vs random orders"] == "better"
    assert words["planner replay vs uniform replay"] == "no difference"
    bad = dict(good, random={r: v - 0.5 for r, v in base.items()})
    assert analysis.plan_verdicts(bad)[0]["word"] == "worse"
    clustered = analysis.plan_verdicts(good, {r: r.split("/")[0] for r in runs})
    assert "6 clusters" in clustered[0]["test"]


def test_eval_bootstrap_resamples_examples_jointly_over_seeds():
    d = np.array([[1.0, 1.0, 1.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    out = analysis.eval_bootstrap(d, n_boot=100, seed=0)
    assert out["mean"] == pytest.approx(2.0) and out["eval_ci"] == pytest.approx([2.0, 2.0])
    assert out["se_seeds"] == pytest.approx(1.0)


def test_runner_plumbing_on_a_tiny_lab(tmp_path):
    settings = {
        "families": ["copy", "sort"],
        "steps": 3,
        "n_eval": 8,
        "n_sketch": 8,
        "sketch_dim": 256,
        "n_sequences": 2,
        "seq_len_tasks": 3,
        "n_boot": 20,
        "d_model": 16,
        "n_layer": 1,
    }
    cfg = configure("interference", quick=True, settings=settings)
    rec = run_experiment(cfg, tmp_path / "r.json", figures=False)
    m, c = rec["metrics"], rec["config"]
    assert c["preregistration_sha256"] == hashlib.sha256(PREREG.read_bytes()).hexdigest()
    assert m["regime"]["n_pairs"] == 12 and len(m["pairs"]) == 12
    assert set(m["states"]) == {"start", "base"}
    # 3 steps learn nothing: every pair is refused and nothing is scored or concluded
    assert m["regime"]["n_scored"] == 0 and m["verdicts"] == []
    assert m["conclusion"] == analysis.NOT_SHOWN
    plans = m["plans"]
    assert plans["runs"] == 4 and set(plans["mean_final_loss"]) == {
        "plan",
        "worst",
        "random",
        "plan_replay",
        "uniform_replay",
    }
    first = plans["per_seed"][0]["plans"][0]["arms"]
    assert sorted(first["plan"]["order"]) == sorted(plans["per_seed"][0]["plans"][0]["sequence"])
    uniform = first["uniform_replay"]["rows"]
    assert uniform[0] == {} and all(sum(r.values()) == 8 for r in uniform[1:])  # 0.25 of 32 rows
    assert all(math.isfinite(v) for v in plans["mean_final_loss"].values())
    # pairs share their two stages with every order that starts with them: fewer stages than arms x stages
    assert m["stages_trained"] < 2 * (4 * 3 + 2 * 6 * 3)
