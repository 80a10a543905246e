"""The steering runner on a tiny random Llama, and the offline statement data it uses."""

import math

import pytest

from _tiny_lm import loader, reproduce
from updatescope.errors import InputError
from updatescope.experiments import configure, heads


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    pytest.importorskip("gensim")
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader())
    return tmp_path


def test_steering_tiny_run(tiny):
    cfg = {"n_train": 4, "n_select": 3, "n_test": 4, "steer_layers": [0, 7], "scales": [-0.5, 0.5], "seeds": 2}
    res = reproduce("steering", tiny / "out", cfg)
    m = res["metrics"]
    assert res["config"]["steer_layers_used"] == [0]  # layer 7 does not exist in a 1-layer model
    assert m["n"] == {"train": 8, "select": 6, "test": 8}
    c = m["cosine"]
    # CAA of half the subjects against the other half, and the step's shift, are real cosines
    for key in ("pushforward_mean", "pushforward_contrast"):
        assert all(-1 - 1e-9 <= v <= 1 + 1e-9 for v in c[key])
    assert len(c["half_caa"]["mean"]) == 1 and len(c["shuffled_caa"]["se"]) == 1
    # the random-step control is a different direction from the gradient step
    assert c["random_step_mean"]["mean"][0] != pytest.approx(c["pushforward_mean"][0])
    st = m["steering_test"]
    assert {"caa", "pushforward", "random_0", "random_1", "random_mean"} <= set(st)
    for k in ("caa", "pushforward", "random_0"):
        assert st[k]["layer"] == 0 and st[k]["scale"] in (-0.5, 0.5)
        assert 0.0 <= st[k]["test"]["accuracy"] <= 1.0 and math.isfinite(st[k]["gain"])
    # the gain is the test accuracy minus the base model's
    assert st["caa"]["gain"] == pytest.approx(st["caa"]["test"]["accuracy"] - m["base"]["test"]["accuracy"])


def test_steering_random_search_vectors(tiny):
    cfg = {
        "n_train": 4,
        "n_select": 3,
        "n_test": 4,
        "steer_layers": [0],
        "scales": [-0.5, 0.5],
        "seeds": 2,
        "search_n": 3,
        "search_seeds": 3,
        "search_norms": [0.1, 0.5],
    }
    m = reproduce("steering", tiny / "out", cfg)["metrics"]
    search, st = m["search"], m["steering_test"]
    assert len(search) == 3 and {"search_0", "search_1", "search_2", "search_mean"} <= set(st)
    base_select = -m["base"]["select"]["signed_margin"]  # the search loss is minus the mean signed margin
    for rec in search:
        assert rec["n"] == 3 and rec["norm"] in (0.1, 0.5)
        assert rec["base_select"] == pytest.approx(base_select, abs=1e-6)
        # Best-of-N keeps the candidate with the lowest select loss, and the norm with the best gain
        assert rec["best"] == min(range(3), key=lambda i: rec["select"][i])
        assert rec["gain_select"] == pytest.approx(max(rec["gain_select_per_norm"]))
        assert rec["gain_select"] >= base_select - rec["select"][0] - 1e-12
        # the kept perturbation has the chosen fraction of the step's norm (√D-scaled Gaussian)
        assert rec["direction_norm"] == pytest.approx(rec["norm"] * m["step_norm"], rel=0.2)
    # the seeds draw different candidates, so their shadows differ from each other and from the step
    assert m["cosine"]["search_mean"]["se"][0] > 0
    assert m["cosine"]["search_mean"]["mean"][0] != pytest.approx(m["cosine"]["pushforward_mean"][0])
    for k in range(3):
        assert st[f"search_{k}"]["layer"] == 0 and st[f"search_{k}"]["scale"] in (-0.5, 0.5)
    gains = [st[f"search_{k}"]["gain"] for k in range(3)]
    assert st["search_mean"]["gain"] == pytest.approx(sum(gains) / 3)
    assert (tiny / "out" / "steering_cosine.png").is_file() and (tiny / "out" / "steering_scale.png").is_file()


def test_steering_config_refuses_bad_values():
    with pytest.raises(InputError):
        configure("steering", settings={"task": "boolq"})
    with pytest.raises(InputError):
        configure("steering", settings={"scales": [0.0, 1.0]})
    with pytest.raises(InputError):
        configure("steering", quick=False, settings={"seeds": 2})
    with pytest.raises(InputError):
        configure("steering", quick=False, settings={"search_seeds": 2})
    with pytest.raises(InputError):
        configure("steering", settings={"search_norms": [0.1, -0.1]})
    with pytest.raises(InputError):
        configure("steering", settings={"search_n": 0})
    assert configure("steering", quick=True).steer_layers == (24,)
