"""End-to-end runs of both experiments on a tiny lab (slow: 1-6 min each on 2 cores, load-dependent)."""
import json

import pytest

from updatescope.locallinear import ModelConfig
from updatescope.locallinear.lab import LabConfig

TINY = LabConfig(
    model=ModelConfig(n_layer=1, d_model=32, n_head=2, seq_len=3), mt_steps=40, forget_cap=30,
    recover_steps=30, dense_steps=10, snapshot_every=10, eval_n=32,
)


@pytest.mark.slow
def test_recovery_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    from updatescope.experiments import recovery

    res = recovery.run(True, tmp_path, lab=TINY)
    assert set(res) == {"name", "config", "metrics", "env", "seconds"}
    m = res["metrics"]
    assert m["drift_overlap"]["0"] == pytest.approx(1.0, abs=1e-9)  # same batches, same point
    curve = m["capture_curves"]["trajectory_prefix"]
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # nested bases: monotone
    assert json.loads(json.dumps(res, default=float))["name"] == "recovery"  # JSON-serialisable
    for fig in ("recovery_capture.png", "recovery_drift.png", "recovery_rank.png"):
        assert (tmp_path / fig).stat().st_size > 1000


@pytest.mark.slow
def test_random_search_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    from updatescope.experiments import random_search

    res = random_search.run(True, tmp_path, lab=TINY)
    m = res["metrics"]
    assert {"sigma_window", "gain_vs_n", "subspaces", "ambient_dimension", "density_vs_mass"} <= set(m)
    for fig in ("search_sigma_window.png", "search_gain_vs_n.png"):
        assert (tmp_path / fig).stat().st_size > 1000
