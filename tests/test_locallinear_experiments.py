"""End-to-end runs of both lab experiments on a tiny lab, through the registry (seconds)."""
import json

import pytest


from _tiny_lm import reproduce

TINY = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 3}, "mt_steps": 40, "forget_cap": 30,
        "recover_steps": 30, "dense_steps": 10, "snapshot_every": 10, "eval_n": 32}


def test_recovery_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    res = reproduce("recovery", tmp_path, {"lab": TINY, "batches_per_task": 3, "krylov_k": 5, "ks": [1, 2, 5]})
    assert set(res) == {"name", "config", "metrics", "env", "seconds"}
    m = res["metrics"]
    assert m["drift_overlap"]["0"] == pytest.approx(1.0, abs=1e-9)  # same batches, same point
    curve = m["capture_curves"]["trajectory_prefix"]
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # nested bases: monotone
    assert json.loads((tmp_path / "recovery.json").read_text())["name"] == "recovery"
    assert res["config"]["lab"]["model"]["d_model"] == 32
    for fig in ("recovery_capture.png", "recovery_drift.png", "recovery_rank.png", "recovery_training.png"):
        assert (tmp_path / fig).stat().st_size > 1000


def test_random_search_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    res = reproduce("random-search", tmp_path, {"lab": TINY, "n_eval": 8, "n_sweep": 4, "n_curve": 8, "reps": 1,
                                                "r_sub": 4})
    m = res["metrics"]
    assert {"sigma_window", "gain_vs_n", "subspaces", "ambient_dimension", "density_vs_mass"} <= set(m)
    for fig in ("search_sigma_window.png", "search_gain_vs_n.png"):
        assert (tmp_path / fig).stat().st_size > 1000
