"""interference-smollm2: the config, the merged LoRA stages and a tiny end-to-end run on a
random tiny Llama (domains and mapping tasks, truth store resume)."""

from __future__ import annotations

import copy
import gzip
import json

import pytest
import torch

from _tiny_lm import loader, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import configure

VOCAB = {
    "code_a": "def await async loop task return",
    "code_b": "request response header status get post",
    "wiki_a": "born died married king queen poet",
    "wiki_b": "planet orbit star moon rocket comet",
}
CLASS_WORDS = {"python": "import def class", "licence": "warranty licence permission", "digits": "0001 2345 9876"}


@pytest.fixture
def tiny(monkeypatch):
    from updatescope.data import domains
    from updatescope.experiments import heads, mapping_tasks

    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128, hidden=16))

    def load(name, split="sketch", max_chars=None):
        words = VOCAB[name].split()
        off = {"train": 0, "sketch": 1, "eval": 2}[split]
        return [" ".join(words[(i * 3 + j + off) % len(words)] for j in range(20)) + f" {name}{i}" for i in range(30)]

    class Info:
        def __init__(self, name):
            self.name, self.family = name, name.split("_")[0]

    def texts(name, n, seed):
        return [f"{CLASS_WORDS[name]} {name}{seed}x{i}" for i in range(n)]

    monkeypatch.setattr(domains, "load_domain", load)
    monkeypatch.setattr(domains, "list_domains", lambda family=None: [Info(n) for n in VOCAB])
    monkeypatch.setattr(mapping_tasks, "class_texts", texts)


SETTINGS = {
    "domains": list(VOCAB),
    "train_rows": 4,
    "eval_rows": 3,
    "sketch_tokens": 40,
    "class_rows": [4, 3, 4],
    "lora": {"steps": 3, "batch": 2, "n_last": 1, "seq_len": 16, "lr": 0.01},
    "sketch_dim": 64,
    "exact_n": 16,
    "n_boot": 50,
}


def test_config_validates():
    cfg = configure("interference-smollm2")
    assert cfg.seeds >= 3 and cfg.n_sequences >= 2 and cfg.seq_len_tasks == 4
    with pytest.raises(InputError, match="seeds must be >= 3"):
        configure("interference-smollm2", settings={"seeds": 2})
    with pytest.raises(InputError, match="mapping_tasks"):
        configure("interference-smollm2", quick=True, settings={"mapping_tasks": 1})
    with pytest.raises(InputError, match="unknown input classes"):
        configure("interference-smollm2", quick=True, settings={"classes": ["python", "nope", "digits"]})
    with pytest.raises(InputError, match="cannot share"):
        configure("interference-smollm2", quick=True, settings={"classes": ["python", "licence"]})
    with pytest.raises(InputError, match="seq_len_tasks"):
        configure("interference-smollm2", quick=True, settings={"seq_len_tasks": 5})
    with pytest.raises(InputError, match="replay_budget"):
        configure("interference-smollm2", quick=True, settings={"replay_budget": 1.0})


def test_merged_state_reproduces_the_lora_tail():
    """Merging the adapters into the blocks gives the adapted tail's losses (the next stage
    starts from exactly what the last one learned)."""
    from updatescope.experiments.groundtruth import lora as lora_gt

    model = tiny_llama(vocab_size=64, hidden=16)
    g = torch.Generator().manual_seed(0)
    data = {
        "hidden": torch.randn(6, 8, 16, generator=g),
        "mask": torch.ones(6, 8, dtype=torch.long),
        "labels": torch.randint(0, 64, (6, 8), generator=g),
    }
    before = copy.deepcopy(model.state_dict())
    tail = lora_gt.finetune_lora(model, data, n_last=1, r=4, alpha=8, lr=0.05, steps=5, batch=3)
    state = lora_gt.merged_tail_state(model, tail, 1)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the model is untouched
    lora_gt.load_tail_state(model, state, 1)
    merged = lora_gt.sequence_losses(lora_gt.tail_model(model, 1), data)[0]
    adapted = lora_gt.sequence_losses(tail, data)[0]
    torch.testing.assert_close(merged, adapted, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(merged, lora_gt.sequence_losses(lora_gt.tail_model(tiny_llama(64, 16), 1), data)[0])


def test_tiny_run_measures_pairs_plans_and_resumes_from_the_truth_store(tiny, tmp_path):
    store = tmp_path / "store"
    rec = reproduce("interference-smollm2", tmp_path / "a", {**SETTINGS, "truth_store": str(store)})
    m = rec["metrics"]
    maps = list(m["mappings"])
    assert len(maps) == 2 and m["groups"][maps[0]] == "mappings"
    # ordered pairs within each group only: 4 * 3 domain pairs + 2 mapping pairs
    assert m["regime"]["n_pairs"] == 14
    assert f"{maps[0]}>{maps[1]}" in m["pairs"] and "code_a>" + maps[0] not in m["pairs"]
    assert m["pairs"]["code_a>code_b"]["same_family"] and not m["pairs"]["code_a>wiki_a"]["same_family"]
    start = m["states"]["start"]["values"]
    assert set(start) >= {"fisher", "exact_fisher", "inner", "exact_inner", "grad_conflict", "cka", "family"}
    plans = m["plans"]
    assert plans["runs"] == 1 and set(plans["mean_final_loss"]) == {
        "plan",
        "worst",
        "random",
        "plan_replay",
        "uniform_replay",
    }
    arm = m["plans"]["per_seed"][0]["plans"][0]["arms"]["uniform_replay"]
    assert arm["rows"][0] == {} and sum(arm["rows"][-1].values()) == 1  # 0.25 of 4 rows
    assert all(v["word"] in ("better", "worse", "no difference") for v in m["verdicts"] + plans["verdicts"])
    files = sorted(p.name for p in (store / "seed0").iterdir())
    assert len(files) == 6 + 14 and "code_a__code_b.json.gz" in files
    # a rerun reads every (seed, pair) from the store: same numbers, nothing fine-tuned for the pairs
    again = reproduce("interference-smollm2", tmp_path / "b", {**SETTINGS, "truth_store": str(store)})
    assert again["metrics"]["pairs"] == m["pairs"]
    assert again["metrics"]["states"]["start"]["values"] == start
    # a store of another configuration is refused, naming the file
    path = store / "seed0" / "code_a.json.gz"
    rec_file = json.loads(gzip.decompress(path.read_bytes()))
    rec_file["key"] = "0" * 64
    path.write_bytes(gzip.compress(json.dumps(rec_file).encode()))
    with pytest.raises(InputError, match="code_a.json.gz"):
        reproduce("interference-smollm2", tmp_path / "c", {**SETTINGS, "truth_store": str(store)})


def _per_seed(signal: float, own_drop: float, seed: int = 0):
    """One seed of 8 domain tasks (the fewest for which an exact sign-flip over tasks A can
    pass Holm over four comparisons): forgetting per pair (8 eval rows) = signal * A_F + noise."""
    import numpy as np

    from updatescope.experiments.interference.runner import PREDICTORS

    rng = np.random.default_rng(seed)
    names = [f"d{i}" for i in range(8)]
    preds = {p: {a: {b: float(rng.normal()) for b in names if b != a} for a in names} for p in PREDICTORS}
    forget = {
        f"{a}>{b}": signal * preds["fisher"][a][b] + 0.01 * rng.normal(size=8) for a in names for b in names if a != b
    }
    return names, {
        "seed": seed,
        "base_loss": {t: 3.0 for t in names},
        "own_loss": {t: 3.0 - own_drop for t in names},
        "forget": forget,
        "gain": {k: np.zeros(8) for k in forget},
        "predictors": {"start": preds, "base": preds},
    }


def test_lm_regime_rule_and_verdict_words_follow_the_numbers():
    from updatescope.experiments.interference import runner

    cfg = configure("interference-smollm2", quick=True, settings={"n_boot": 50})
    names, seed = _per_seed(signal=1.0, own_drop=0.1)
    fam = {t: "code" if t in ("d0", "d1") else "wiki" for t in names}
    m = runner.analyse(cfg, [seed], names, fam)
    assert m["regime"]["n_scored"] == 56 and m["regime"]["min_gain"] == 0.0
    words = {v["comparison"]: v["word"] for v in m["verdicts"]}
    assert words["A_F - random"] == "better" and words["A_F - family label"] == "better"
    assert m["conclusion"] == "A_F predicts forgetting beyond the family label and random"
    # the same numbers with the sign of forgetting flipped: A_F now ranks it backwards
    for k in seed["forget"]:
        seed["forget"][k] = -seed["forget"][k]
    flipped = runner.analyse(cfg, [seed], names, fam)
    assert flipped["states"]["start"]["correlation"]["fisher"]["spearman"] < -0.9
    assert flipped["conclusion"] == "no predictor is shown to beat the family label or random"
    assert {v["comparison"]: v["word"] for v in flipped["verdicts"]}["A_F - random"] == "worse"
    # stages that did not lower their own loss by more than min_gain: every pair refused, nothing scored
    strict = configure("interference-smollm2", quick=True, settings={"n_boot": 50, "min_gain": 0.2})
    none = runner.analyse(strict, [seed], names, fam)
    assert none["regime"]["n_scored"] == 0 and none["verdicts"] == []
