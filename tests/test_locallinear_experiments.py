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
    "mt_steps": 200,  # enough for the others' exact match to halve under forgetting (the criterion)
    "forget_cap": 200,
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
    assert m["eta_rule"]["iters"] == 150 and m["eta_rule"]["draws"] == 3
    # every draw of the spectral radius is recorded with its convergence checks
    for x in m["replicates"]:
        assert len(x["radius_draws"]) == 3 and all(
            {"converged", "residual", "iters"} <= set(d) for d in x["radius_draws"]
        )
        assert x["stability"]["lambda_max_forg"] == max(d["radius"] for d in x["radius_draws"])
        # forgetting ran to its criterion (reported replicates only), its steps and value recorded
        f = x["forget"]
        assert f["reached"] and f["value"] < f["target"] and f["steps"] <= f["cap"] and f["steps"] % 10 == 0
    # replicates train their own theta_mt (lab seed + r)
    assert [x["lab_seed"] for x in m["replicates"]] == [0, 1] and m["reported_replicates"] == [0, 1]
    assert m["refused"] == []
    # the resample floor is measured at every drift step; drift is divided by both ends' floors
    d0 = rep0["drift"]
    assert len(d0["floor"]) == len(d0["steps"]) and all(0 < f <= 1 + 1e-9 for f in d0["floor"])
    floor0 = rep0["task_plane"]["resample_floor"]
    assert d0["normalised"] == pytest.approx([o / (floor0 * f) ** 0.5 for o, f in zip(d0["overlap"], d0["floor"])])
    # the plane and Krylov nulls with the initial gradient direction capture at least its share
    g0 = rep0["task_plane"]["capture_g0"]
    assert rep0["task_plane"]["capture_forg_g0"] >= max(g0, rep0["task_plane"]["capture_forg"]) - 1e-9
    assert rep0["curves"]["local_plane_g0"][0] == pytest.approx(g0, abs=1e-6)
    assert rep0["krylov"]["sgd_g0_capture"][0] == pytest.approx(1.0, abs=1e-5)  # u_1 lies in K_1(H, u_1)
    assert len(rep0["step_norms"]) == 30 and min(rep0["step_norms"]) > 0
    curve = s["curve.prefix"]["mean"]
    assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # nested bases: monotone
    # full-batch GD's first step is -eta g_0, inside K_1 = span{g_0}
    assert rep0["krylov"]["gd_capture"][0] == pytest.approx(1.0, abs=1e-5)
    assert rep0["krylov"]["gd_overlap"][0] == pytest.approx(1.0, abs=1e-5)
    assert rep0["krylov"]["sgd_capture"][0] < 0.999  # a minibatch step is not along the full-batch g_0
    assert 0 < rep0["task_plane"]["resample_floor"] <= 1 + 1e-9
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
        "random-search",
        tmp_path,
        {"lab": TINY, "n_eval": 8, "n_sweep": 4, "n_curve": 8, "reps": 1, "compare_reps": 4, "r_sub": 4},
    )
    m = res["metrics"]
    assert {"sigma_window", "gain_vs_n", "subspaces", "ambient_dimension", "density_vs_mass"} <= set(m)
    # sigma is chosen on the tuning split; the sweep never reports the test split
    for name, rows in m["sigma_window"].items():
        assert all("gain_tune" in r and "gain_heldout" not in r for r in rows)
        assert m["best_rho_per_space"][name] == max(rows, key=lambda r: r["gain_tune"])["rho"]
    assert m["base_loss_tune"] != m["base_loss_heldout"]  # different sequences
    assert m["regime"]["forget"]["reached"] and not m["regime"]["refused"]
    # the comparisons run at a step norm no larger than recovery's, paired by candidate seed
    assert m["compare_rho"] == min(m["best_rho"], m["rho_recovery"])
    from updatescope.experiments.random_search.runner import PRESPECIFIED

    tests = m["prespecified"]
    assert [t["comparison"] for t in tests] == [f"{a} - {b}" for a, b in PRESPECIFIED]
    comp = {**m["subspaces"], **m["density_vs_mass"]}
    for (a, b), t in zip(PRESPECIFIED, tests):
        assert t["diffs"] == pytest.approx([x - y for x, y in zip(comp[a]["gain_heldout"], comp[b]["gain_heldout"])])
        assert t["p_holm"] >= t["p"] and t["word"] in ("better", "worse", "no difference")
    assert len(res["config"]["preregistration_sha256"]) == 64
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
