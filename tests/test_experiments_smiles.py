"""The SMILES runner on a tiny random Llama and synthetic 'molecule' domains, and its statistics."""

import math

import numpy as np
import pytest

from _tiny_lm import TINY_LORA, check_budget_run, loader, reproduce
from updatescope.experiments import heads
from updatescope.experiments.smiles import runner as smiles

# within-collection names (collection "nci", property families tpsa / logp) -> an alphabet above
WITHIN = [("tpsa", 1), ("tpsa", 2), ("logp", 1), ("logp", 2), ("logp", 3)]
WITHIN_ALPHABET = {f"smiles_nci_{p}_q{k}": a for (p, k), a in zip(WITHIN, "abcde")}
ALPHABETS = {"a": "C O N c1 ccc", "b": "C O N Cl Br", "c": "S P F ( )", "d": "c1 ccc = # ( )", "e": "C C O O N"}


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=96))
    monkeypatch.setattr(
        smiles,
        "smiles_domains",
        lambda collection=None: (
            [f"smi_{k}" for k in ALPHABETS] if collection is None else [f"smiles_nci_{p}_q{k}" for p, k in WITHIN]
        ),
    )

    def texts(name, split, max_chars):
        words = ALPHABETS[WITHIN_ALPHABET.get(name, name[-1])].split()
        salt = {"sketch": 0, "train": 1, "eval": 2}[split]
        return [" ".join(words[(i * 5 + j * (j + salt)) % len(words)] for j in range(20)) for i in range(4)]

    monkeypatch.setattr(smiles, "load_texts", texts)
    return tmp_path


@pytest.mark.parametrize("gt", ["head", "lora"])
def test_smiles_tiny_run(tiny, gt):
    cfg = {
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "n_perm": 200,
        "ground_truth": gt,
        "lora": TINY_LORA,
        "finetune": {"lr": 1e-2, "steps": 5, "batch": 16, "extra_rows": 8},
    }
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


def test_smiles_budget_chosen_on_the_validation_split(tiny, monkeypatch):
    """budget_grid: the LoRA steps are chosen on the sketch split before the truth, recorded,
    and used; budget_only stops after the probe; too few or too many probe domains are refused before
    any model loads."""
    from updatescope.errors import InputError

    cfg = {
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "n_perm": 50,
        "gt_seeds": 2,
        "budget_grid": [1, 5],
        "budget_domains": 3,
        "lora": TINY_LORA,
    }
    check_budget_run("smiles", tiny, cfg, ["smi_a", "smi_c", "smi_e"])

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(heads, "load_model", no_model)
    for k in (2, 6):  # 5 domains here: a probe needs 3 to 5 of them
        with pytest.raises(InputError, match="budget_domains"):
            reproduce("smiles", tiny / "bad", {**cfg, "budget_domains": k})
        assert not (tiny / "bad").exists()


def test_smiles_within_one_collection(tiny):
    """collection="nci": every domain from NCI, the collection indicator constant and flagged,
    "family" = same property, FisherSketch bootstrapped against every baseline."""
    cfg = {
        "tokens": {"sketch": 40, "train": 40, "eval": 40},
        "sketch_dim": 64,
        "exact_n": 30,
        "baseline_n": 30,
        "n_perm": 50,
        "ground_truth": "head",
        "collection": "nci",
        "finetune": {"lr": 1e-2, "steps": 5, "batch": 16, "extra_rows": 8},
    }
    res = reproduce("smiles", tiny / "out", cfg)
    m, names = res["metrics"], [f"smiles_nci_{p}_q{k}" for p, k in WITHIN]
    assert res["config"]["domains"] == names and res["config"]["collection"] == "nci"
    assert set(m["collections"].values()) == {"nci"}
    assert m["collection_indicator"]["constant"] and "cannot rank" in m["collection_indicator"]["note"]
    assert "collection" in m["constant_methods"] and "fisher" not in m["constant_methods"]
    assert {v for row in m["scores"]["collection"].values() for v in row.values()} == {1.0}
    assert math.isnan(m["correlation"]["collection"]["pooled"]["rho"])
    assert m["property_families"]["smiles_nci_logp_q3"] == "logp"
    fam = m["scores"]["family"]["smiles_nci_tpsa_q1"]  # same property = 1, another property = 0
    assert fam["smiles_nci_tpsa_q2"] == 1.0 and fam["smiles_nci_logp_q1"] == 0.0
    for b in ("cka", "family", "easiness", "size", "collection", "exact_fisher", "activation", "error"):
        assert "spearman" in m["paired"][f"fisher - {b}"]
    assert m["truth_noise"]["n_seeds"] == 3 and (tiny / "out" / "smiles_nci.png").is_file()


def test_within_collection_domains_are_disjoint_nci_bins():
    pytest.importorskip("rdkit")
    from updatescope.data import domains

    names = smiles.smiles_domains("nci")
    assert len(names) == 12 and {smiles.collection_of(n) for n in names} == {"nci"}
    assert {smiles.property_of(n) for n in names} == {"tpsa", "logp", "mw", "fsp3"}
    assert not set(names) & set(smiles.smiles_domains())  # the recorded two-collection run is unchanged
    cells = domains._nci_partition()
    mols = [m for cell in cells.values() for m in cell]
    assert len(mols) == len(set(mols)) > 4800  # every distinct parseable NCI molecule in exactly one bin
    assert max(map(len, cells.values())) - min(map(len, cells.values())) < 60
