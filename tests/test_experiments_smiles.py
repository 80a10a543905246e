"""The SMILES runner on a tiny random Llama and synthetic 'molecule' domains, and its statistics."""
import math

import numpy as np
import pytest

from updatescope.experiments import heads, smiles

from _tiny_lm import loader, reproduce

ALPHABETS = {"a": "C O N c1 ccc", "b": "C O N Cl Br", "c": "S P F ( )", "d": "c1 ccc = # ( )", "e": "C C O O N"}


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=96))
    monkeypatch.setattr(smiles, "smiles_domains", lambda: [f"smi_{k}" for k in ALPHABETS])

    def texts(name, split, max_chars):
        words = ALPHABETS[name[-1]].split()
        salt = {"sketch": 0, "train": 1, "eval": 2}[split]
        return [" ".join(words[(i * 5 + j * (j + salt)) % len(words)] for j in range(20)) for i in range(4)]

    monkeypatch.setattr(smiles, "load_texts", texts)
    return tmp_path


@pytest.mark.parametrize("gt", ["head", "lora"])
def test_smiles_tiny_run(tiny, gt):
    cfg = {"tokens": {"sketch": 40, "train": 40, "eval": 40}, "sketch_dim": 64, "exact_n": 30, "baseline_n": 30,
           "n_perm": 200, "ground_truth": gt,
           "lora": {"n_last": 1, "r": 2, "alpha": 4, "targets": ["q_proj", "v_proj"], "lr": 1e-2, "steps": 3,
                    "batch": 2, "seq_len": 16},
           "finetune": {"lr": 1e-2, "steps": 5, "batch": 16, "extra_rows": 8}}
    res = reproduce("smiles", tiny / "out", cfg)
    m = res["metrics"]
    assert m["n_domains"] == 5 and res["config"]["domains"] == [f"smi_{k}" for k in ALPHABETS]
    pr = m["ground_truth"]["ppl_reduction"]
    lo = m["ground_truth"]["transfer"]
    for t, row in pr.items():
        for s, v in row.items():
            assert v == pytest.approx(1 - math.exp(-lo[t][s]), abs=1e-12) and v < 1
    for method in ("fisher", "activation", "error", "exact_fisher", "grad_cos", "random"):
        c = m["correlation"][method]
        assert c["pooled"]["n"] == 20  # 5 targets x 4 sources
        assert -1 <= c["pooled"]["rho"] <= 1 and 0 < c["pooled"]["p"] <= 1
        assert 1 / 201 <= c["pooled"]["p_perm"] <= 1
    assert (tiny / "out" / "smiles.png").is_file()
    # the ceiling is measured on per-seed perplexity-reduction tables
    assert m["truth_noise"]["n_seeds"] == 3 and "family" in m["scores"] and "easiness" in m["summary"]
    assert smiles.collection_of("smiles_nci_tpsa_low") == "nci" and smiles.collection_of("smiles_wehi_x_y") == "wehi"


def _tables(mat, names):
    return {t: {s: float(mat[i, j]) for j, s in enumerate(names) if j != i} for i, t in enumerate(names)}


def test_correlation_tests_detect_signal_and_not_noise():
    rng = np.random.default_rng(0)
    names = [f"d{i}" for i in range(9)]
    truth = rng.normal(size=(9, 9))
    truth = truth + truth.T
    same = smiles.correlation_tests(names, _tables(truth, names), _tables(truth, names), n_perm=500)
    assert same["pooled"]["rho"] == pytest.approx(1.0)
    assert same["pooled"]["p_perm"] < 0.01 and same["per_target"]["mean"] == pytest.approx(1.0)
    # negative control: an unrelated similarity is not significant under the permutation test
    other = rng.normal(size=(9, 9))
    noise = smiles.correlation_tests(names, _tables(other + other.T, names), _tables(truth, names), n_perm=500)
    assert abs(noise["pooled"]["rho"]) < 0.4 and noise["pooled"]["p_perm"] > 0.05
    # a constant similarity has no correlation (NaN, not an error)
    const = smiles.correlation_tests(names, _tables(np.ones((9, 9)), names), _tables(truth, names), n_perm=10)
    assert math.isnan(const["pooled"]["rho"]) and const["per_target"]["n"] == 0
