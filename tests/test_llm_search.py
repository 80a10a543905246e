"""The llm-search runner on a tiny random Llama, its loss and weight handling, and its config."""

import math

import pytest
import torch

from _tiny_lm import WordTokenizer, loader, reproduce
from updatescope.errors import InputError
from updatescope.experiments import configure, heads

SETTINGS = {
    "n_last": 1,
    "n_train": 4,
    "n_select": 3,
    "n_test": 4,
    "sigmas": [1e-3, 1e-2, 1e-1],
    "n_sweep": 2,
    "ns": [1, 2, 4],
    "n_compare": 2,
    "prefix_steps": 2,
    "prefix_batch": 2,
    "seeds": 2,
}


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    pytest.importorskip("gensim")
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader())
    return tmp_path


def test_llm_search_tiny_run(tiny):
    from updatescope.locallinear.search import expected_max_normal

    res = reproduce("llm-search", tiny / "out", SETTINGS)
    m = res["metrics"]
    assert m["n"] == {"train": 8, "select": 6, "tune": 4, "heldout": 4}
    assert m["searched"] == "last 1 decoder blocks"
    assert res["config"]["searched_names"] and all(
        k.startswith("model.layers.0.") for k in res["config"]["searched_names"]
    )
    # the tuned σ is the sweep's best tune-split gain, and gain vs N runs there
    sw = m["sigma_window"]
    assert [r["sigma"] for r in sw] == [1e-3, 1e-2, 1e-1]
    assert m["best_sigma"] == max(sw, key=lambda r: r["gain_tune"]["mean"])["sigma"]
    c = m["gain_vs_n"]
    assert c["sigma"] == m["best_sigma"] and c["n"] == [1, 2, 4]
    # best of N on the selection split cannot get worse with N (nested candidate sets)
    sel = [x["mean"] for x in c["gain_select"]]
    assert sel[0] <= sel[1] + 1e-12 <= sel[2] + 2e-12
    # the prediction is σ‖g_sel‖E[max_N]: zero at N = 1, proportional to E[max_N]
    assert c["pred_select"][0] == 0.0
    assert c["pred_select"][2] == pytest.approx(m["best_sigma"] * m["grad_norm"]["select"] * expected_max_normal(4))
    s = m["subspaces"]
    assert set(s) == {"isotropic", "trajectory_prefix", "random"}
    assert s["trajectory_prefix"]["dim"] == 2 and s["random"]["dim"] == 2
    # matched σ‖P g_sel‖ across the three spaces
    for k in s:
        assert s[k]["sigma"] * s[k]["proj_grad_norm"] == pytest.approx(m["best_sigma"] * m["grad_norm"]["select"])
    assert len(m["prefix"]["step_norms"]) == 2
    assert m["prefix"]["step_norms"][0] == pytest.approx(res["config"]["prefix_step"] * m["theta_norm"], rel=1e-4)
    assert set(m["verdicts"]) == {"sigma_window", "gain_vs_n", "prefix_vs_isotropic"}
    assert all(math.isfinite(r["gain_tune"]["mean"]) for r in sw)
    assert (tiny / "out" / "llm_search.png").is_file()
    _check_table(res)


def _check_table(res):
    """The docs table renders from the record and its verdicts follow the numbers."""
    import copy
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "locallinear_table.py"
    spec = importlib.util.spec_from_file_location("locallinear_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "llm-search" in mod.KINDS
    m = {**res["metrics"], "config": res["config"]}
    text = "\n".join(mod.llm_search_table(m))
    assert text.count("\n| ") == 4 and text.count("\n|---") == 1  # header and three claims
    m2 = copy.deepcopy(m)
    m2["subspaces"]["trajectory_prefix"]["gain_heldout"] = {"mean": 10.0, "se": 0.0, "values": [10.0, 10.0]}
    for k in ("isotropic", "random"):
        m2["subspaces"][k]["gain_heldout"] = {"mean": 0.0, "se": 0.0, "values": [0.0, 0.0]}
    assert "prefix beats isotropic and the random subspace" in "\n".join(mod.llm_search_table(m2))
    for r in m2["sigma_window"]:
        r["gain_tune"] = {"mean": -1.0, "se": 0.1, "values": [-1.0, -1.0]}
    assert "no σ gains" in "\n".join(mod.llm_search_table(m2))


def test_margin_loss_matches_answer_margins_tail_and_finite_differences():
    from transformers import LlamaConfig, LlamaForCausalLM

    from updatescope.data.statements import answer_margins
    from updatescope.experiments.groundtruth.lora import tail_model
    from updatescope.experiments.llm_search.runner import _Weights, block_inputs, encode, margin_loss, searched_names

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    model, tok = LlamaForCausalLM(cfg).eval(), WordTokenizer(64)
    prompts = ["a b c", "d e", "f g h i j", "k", "l m"]
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)
    ids = (5, 6)
    batches = encode(tok, prompts, sign, 2)
    with torch.no_grad():
        ref = -float((answer_margins(model, tok, prompts, ids, batch_size=3) * sign).mean())
        assert float(margin_loss(model, batches, ids)) == pytest.approx(ref, abs=1e-6)
        # the tail on cached block inputs gives the whole model's loss
        tail = tail_model(model, 2)
        assert float(margin_loss(tail, block_inputs(model, batches, 2), ids)) == pytest.approx(ref, abs=1e-5)
    names = searched_names(model, 2)
    assert names and all(k.startswith(("model.layers.1.", "model.layers.2.")) for k in names)
    assert len(searched_names(model, None)) == len(list(model.parameters()))  # the tied head once
    with pytest.raises(InputError):
        searched_names(model, 4)
    w = _Weights(model, names)
    g = w.grad(lambda: margin_loss(model, batches, ids))
    # the gradient against a central finite difference along a random direction (float32 model)
    u = torch.randn(w.theta.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eps = 1e-3
    with torch.no_grad():
        w.write(w.theta + eps * u.float())
        up = float(margin_loss(model, batches, ids))
        w.write(w.theta - eps * u.float())
        down = float(margin_loss(model, batches, ids))
    w.restore()
    assert (up - down) / (2 * eps) == pytest.approx(float(g @ u), rel=2e-2, abs=1e-4)
    # restored exactly, bit for bit
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in w.params]), w.theta)


def test_llm_search_config_refuses_bad_values():
    cfg = configure("llm-search", quick=True)
    assert cfg.quick and cfg.seeds >= 3
    assert configure("llm-search").n_last is not None
    with pytest.raises(InputError):
        configure("llm-search", settings={"task": "boolq"})
    with pytest.raises(InputError):
        configure("llm-search", settings={"sigmas": [1e-3, 1e-4, 1e-2]})  # not increasing
    with pytest.raises(InputError):
        configure("llm-search", settings={"sigmas": [1e-3, 1e-2]})  # too few for a window
    with pytest.raises(InputError):
        configure("llm-search", settings={"ns": [2, 4]})  # must start at N = 1
    with pytest.raises(InputError):
        configure("llm-search", quick=False, settings={"seeds": 2})
    with pytest.raises(InputError):
        configure("llm-search", settings={"n_last": 0})
    with pytest.raises(InputError):
        configure("llm-search", settings={"n_test": 1})
