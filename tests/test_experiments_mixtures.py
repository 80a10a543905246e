"""mixtures: an end-to-end tiny run (every arm fine-tuned at one budget, the pre-specified
verdicts, the prediction test) and the pieces it is built from."""

from __future__ import annotations

import pytest

from _tiny_lm import loader, reproduce

VOCAB = {
    "code_asyncio": "def await async loop task return",
    "wiki_people": "born died married king queen poet",
    "news_lee": "minister police report said today government",
    "code_http": "request response header status get post",
    "wiki_space": "planet orbit star moon rocket comet",
}


@pytest.fixture
def tiny(monkeypatch):
    from updatescope.data import domains
    from updatescope.experiments import heads

    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128, hidden=16))

    def load(name, split="sketch", max_chars=None):
        words = VOCAB[name].split()
        return [" ".join(words[(i * 3 + j) % len(words)] for j in range(20)) + f" {name}{i}" for i in range(30)]

    class Info:
        def __init__(self, name):
            self.name = name

    monkeypatch.setattr(domains, "load_domain", load)
    monkeypatch.setattr(domains, "list_domains", lambda family=None: [Info(n) for n in VOCAB])


SETTINGS = {
    "pool": ["code_asyncio", "wiki_people", "news_lee"],
    "targets": ["code_http", "wiki_space"],
    "budget_rows": 6,
    "target_sketch_tokens": 60,
    "eval_rows": 3,
    "sketch_dim": 64,
    "lora": {"steps": 2, "batch": 3, "n_last": 1, "seq_len": 16},
    "top": 2,
    "n_boot": 50,
}


def test_tiny_run_fine_tunes_every_arm_and_states_the_verdicts(tiny, tmp_path):
    rec = reproduce("mixtures", tmp_path, SETTINGS)
    m = rec["metrics"]
    assert len(rec["config"]["preregistration_sha256"]) == 64 and m["powered"] is False
    for t in SETTINGS["targets"]:
        w = m["proposals"][t]["weights"]
        assert set(w) == {
            "fisher_mix",
            "error_mix",
            "activation_mix",
            "fisher_top1",
            "fisher_top3",
            "uniform",
            "random_mix",
        }
        for weights in w.values():
            assert sum(weights) == pytest.approx(1.0) and min(weights) >= 0
        assert sum(x > 0 for x in w["fisher_top3"]) == 2
        row = m["transfer"][t]
        # the oracle single source is the best single source measured
        singles = m["by_seed"][0]["single"]
        assert row["oracle_single"] == pytest.approx(max(singles[s][t] for s in SETTINGS["pool"]))
        assert row["fisher_top1"] <= row["oracle_single"] + 1e-12
    comps = m["verdicts"]["comparisons"]
    assert len(comps) == 5 and all(c["family_size"] == 5 for c in comps)
    assert all(c["word"] in ("better", "worse", "no difference") for c in comps)
    assert m["prediction"]["word"] in ("orders the arms", "orders them backwards", "not resolved")
    # runs with the same rows are shared: at most singles + uniform + per-target arms
    assert m["by_seed"][0]["runs"] <= 3 + 1 + 2 * 5


def test_row_counts_keep_the_budget():
    from updatescope.experiments.mixtures.runner import row_counts

    assert row_counts([0.5, 0.25, 0.25], 8) == [4, 2, 2]
    assert sum(row_counts([0.34, 0.33, 0.33], 10)) == 10
    assert row_counts([1.0, 0.0, 0.0], 5) == [5, 0, 0]


def test_config_refuses_overlap():
    from updatescope.errors import InputError
    from updatescope.experiments.mixtures.config import MixturesConfig

    with pytest.raises(InputError, match="both in the pool"):
        MixturesConfig(pool=("a", "b"), targets=("b",))
    with pytest.raises(InputError, match="top"):
        MixturesConfig(pool=("a", "b"), targets=("c",), top=3)


def test_run_store_resumes_every_fine_tuning_and_records_the_same(tiny, tmp_path, monkeypatch):
    """With ``run_store``, each fine-tuning's losses are kept as a file that a run on another
    machine (an empty cache) reads back instead of training: the same metrics, no training."""
    from updatescope.experiments.groundtruth import lora as lora_gt

    store = tmp_path / "store"
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache1"))
    first = reproduce("mixtures", tmp_path / "a", {**SETTINGS, "run_store": str(store)})
    files = sorted(store.iterdir())
    assert len(files) == first["metrics"]["by_seed"][0]["runs"] and all(f.name.startswith("fit-") for f in files)

    def no_training(*a, **k):
        raise AssertionError("a stored fine-tuning was trained again")

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache2"))  # another machine: nothing cached
    monkeypatch.setattr(lora_gt, "finetune_from_config", no_training)
    again = reproduce("mixtures", tmp_path / "b", {**SETTINGS, "run_store": str(store)})
    assert again["metrics"] == first["metrics"]
    assert sorted(store.iterdir()) == files
    # another recipe (here the LoRA steps) is another fine-tuning, not a stale read
    with pytest.raises(AssertionError, match="trained again"):
        reproduce(
            "mixtures", tmp_path / "c", {**SETTINGS, "lora": {**SETTINGS["lora"], "steps": 3}, "run_store": str(store)}
        )


def test_a_fine_tuning_claimed_by_another_process_is_waited_for_not_trained(tiny, tmp_path, monkeypatch):
    """Several processes may share one run store: a fit another live process has claimed is
    passed over, then read from the store once that process saves it; the same metrics."""
    from _claims import held_by_another_process
    from updatescope.experiments.groundtruth import lora as lora_gt
    from updatescope.experiments.groundtruth import store as st

    store = tmp_path / "store"
    first = reproduce("mixtures", tmp_path / "a", {**SETTINGS, "run_store": str(store)})
    fit = sorted(store.glob("fit-*.json.gz"))[0]
    claim = fit.parent / f".{fit.name.removesuffix('.json.gz')}.claim"
    monkeypatch.setattr(lora_gt, "CLAIM_POLL", 0.05)
    asked = []
    real_claim = st.claim_file
    monkeypatch.setattr(st, "claim_file", lambda path: asked.append(path) or real_claim(path))

    def no_training(*a, **k):
        raise AssertionError("a fine-tuning was trained although it was stored or claimed")

    monkeypatch.setattr(lora_gt, "finetune_from_config", no_training)
    with held_by_another_process(claim, fit, tmp_path / "kept.json.gz", asked):
        shared = reproduce("mixtures", tmp_path / "b", {**SETTINGS, "run_store": str(store)})
    assert claim in asked and shared["metrics"] == first["metrics"]
    assert not list(store.glob(".*.claim"))


def test_config_refuses_a_run_store_that_is_not_a_folder():
    from updatescope.errors import InputError
    from updatescope.experiments.mixtures.config import MixturesConfig

    for bad in (__file__, " "):
        with pytest.raises(InputError, match="run_store"):
            MixturesConfig(pool=("a", "b"), targets=("c",), run_store=bad)


def test_full_pool_sources_can_each_offer_the_budget():
    """The full run's pool (after amendment 1) names no source whose train split is too small
    for the budget: `reviews` (28 rows) is out; the pre-registration says why."""
    from updatescope.experiments.mixtures.config import MixturesConfig
    from updatescope.experiments.mixtures.runner import PREREG

    cfg = MixturesConfig.defaults(quick=False)
    assert "reviews" not in cfg.pool and len(cfg.pool) == 9
    assert "Amendment 1" in PREREG.read_text(encoding="utf-8")
