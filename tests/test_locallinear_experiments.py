"""End-to-end runs of both lab experiments on a tiny lab, through the registry (seconds)."""

import json

import pytest

from _tiny_lm import reproduce


def _table_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "locallinear_table.py"
    spec = importlib.util.spec_from_file_location("locallinear_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TINY = {
    "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "seq_len": 3},
    "mt_steps": 40,
    "forget_cap": 30,
    "recover_steps": 30,
    "dense_steps": 10,
    "snapshot_every": 10,
    "eval_n": 32,
}


def test_recovery_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    lab = {**TINY, "hessian_n": 8, "power_iters": 5}
    res = reproduce(
        "recovery",
        tmp_path,
        {
            "lab": lab,
            "seeds": 2,
            "batches_per_task": 2,
            "plane_n": 8,
            "rank_n": 6,
            "krylov_k": 5,
            "drift_steps": [1, 5, 10, 20, 30],
        },
    )
    assert set(res) == {"name", "config", "metrics", "env", "seconds"}
    m, s = res["metrics"], res["metrics"]["summary"]
    assert len(m["replicates"]) == 2 and s["curve.prefix"]["n"] == 2 and s["curve.prefix"]["se"] is not None
    rep0, rep1 = m["replicates"]
    assert rep0["delta_norm"] != rep1["delta_norm"]  # replicates see different batches
    st = rep0["stability"]
    # the automatic step is eta = eta_lambda / lambda_max(theta_forg), lambda_max the largest of the
    # draws; eta * lambda_max at theta_forg is then re-measured on another batch (never below the set value)
    assert st["eta_lambda_set"] == pytest.approx(1.0) and st["recover_lr"] * st["lambda_max_forg"] == pytest.approx(1.0)
    assert len(st["lambda_max_forg_draws"]) == 3 and st["lambda_max_forg"] == max(st["lambda_max_forg_draws"])
    assert st["eta_lambda_forg"] >= 1.0 - 1e-12
    assert st["eta_lambda_forg"] == pytest.approx(
        st["recover_lr"] * max(st["lambda_max_forg"], st["lambda_max_forg_check"])
    )
    assert m["eta_rule"] == {"eta_lambda": 1.0, "draws": 3, "iters": 40}
    assert len(rep0["step_norms"]) == 30 and min(rep0["step_norms"]) > 0
    curve = s["curve.prefix"]["mean"]
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # nested bases: monotone
    # full-batch GD's first step is -eta g_0, inside K_1 = span{g_0}
    assert rep0["krylov"]["gd_capture"][0] == pytest.approx(1.0, abs=1e-5)
    assert rep0["krylov"]["gd_overlap"][0] == pytest.approx(1.0, abs=1e-5)
    assert rep0["krylov"]["sgd_capture"][0] < 0.999  # a minibatch step is not along the full-batch g_0
    assert 0 < rep0["task_plane"]["resample_floor"] <= 1 + 1e-9
    assert s["drift.normalised"]["mean"][0] == pytest.approx(
        s["drift.overlap"]["mean"][0] / s["task_plane.resample_floor"]["mean"], rel=0.5
    )
    rank = rep0["rank"]["copy"]
    assert rank["task"]["n"] == 6 and rank["gaussian"]["n"] == 6
    assert json.loads((tmp_path / "recovery.json").read_text())["name"] == "recovery"
    assert res["config"]["lab"]["model"]["d_model"] == 32
    table = "\n".join(_table_script().recovery_table(m))  # the docs script reads this record shape
    assert "trajectory prefix captures" in table and "Krylov" in table
    for fig in (
        "recovery_capture.png",
        "recovery_drift.png",
        "recovery_rank.png",
        "recovery_training.png",
        "recovery_krylov.png",
    ):
        assert (tmp_path / fig).stat().st_size > 1000


def test_random_search_experiment_writes_json_and_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    res = reproduce(
        "random-search", tmp_path, {"lab": TINY, "n_eval": 8, "n_sweep": 4, "n_curve": 8, "reps": 1, "r_sub": 4}
    )
    m = res["metrics"]
    assert {"sigma_window", "gain_vs_n", "subspaces", "ambient_dimension", "density_vs_mass"} <= set(m)
    # sigma is chosen on the tuning split; the sweep never reports the test split
    for name, rows in m["sigma_window"].items():
        assert all("gain_tune" in r and "gain_heldout" not in r for r in rows)
        assert m["best_rho_per_space"][name] == max(rows, key=lambda r: r["gain_tune"])["rho"]
    assert m["base_loss_tune"] != m["base_loss_heldout"]  # different sequences
    assert m["subspaces"]["isotropic"]["gain_heldout_se"] is None  # one repetition: no SE
    assert "σ window" in "\n".join(_table_script().search_table({**m, "config_n_sweep": 4}))
    for fig in ("search_sigma_window.png", "search_gain_vs_n.png"):
        assert (tmp_path / fig).stat().st_size > 1000


def test_summary_of_planes_of_different_widths():
    """A plane built from per-task gradients drops directions with vanishing singular values,
    so replicates' curves can differ in length: the shorter is held at its last value (no
    further direction, no further capture) and the lengths are recorded."""
    from updatescope.experiments.recovery.runner import _curve_mean_se

    out = _curve_mean_se([[0.1, 0.5, 0.7], [0.2, 0.4]])
    assert out["lengths"] == [3, 2] and out["n"] == 2
    assert out["mean"] == pytest.approx([0.15, 0.45, 0.55])
    same = _curve_mean_se([[0.1, 0.2], [0.3, 0.4]])
    assert "lengths" not in same and same["mean"] == pytest.approx([0.2, 0.3])
