"""interference-smollm2: the config, the merged LoRA stages and a tiny end-to-end run on a
random tiny Llama (answer-format warm-up, domains and mapping tasks, truth store resume of
pairs and plans), and the regime rule of amendment 2 (min_gain and 2 x eval SE)."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math

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
    "warm_rows": 3,
    "lora": {"steps": 3, "batch": 2, "n_last": 1, "seq_len": 16, "lr": 0.01},
    "sketch_dim": 64,
    "exact_n": 16,
    "n_boot": 50,
}


def test_config_validates():
    cfg = configure("interference-smollm2")
    assert cfg.seeds >= 3 and cfg.n_sequences >= 2 and cfg.seq_len_tasks == 4
    # amendment 3's recipe: full 48 steps at 1e-3 on 128 domain rows, warm-up 60; quick 24 steps, 64 rows, warm-up 30
    recipe = lambda c: (c.lora.steps, c.lora.lr, c.warmup_steps, c.min_gain, c.train_rows)  # noqa: E731
    quick = configure("interference-smollm2", quick=True)
    assert recipe(cfg) == (48, 1e-3, 60, 0.02, 128) and recipe(quick) == (24, 1e-3, 30, 0.02, 64)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InputError, match="warmup_steps"):
            configure("interference-smollm2", quick=True, settings={"warmup_steps": bad})
    # no mapping tasks: nothing to warm up, 0 steps allowed
    assert configure("interference-smollm2", quick=True, settings={"warmup_steps": 0, "mapping_tasks": 0})
    # amendment 3: the warm-up has examples of its own, at least one per answer word
    assert (cfg.warm_rows, quick.warm_rows) == (48, 24)
    for bad in (2, -1, 2.5, True):
        with pytest.raises(InputError, match="warm_rows"):
            configure("interference-smollm2", quick=True, settings={"warm_rows": bad})
    assert configure("interference-smollm2", quick=True, settings={"class_rows": [4, 2, 4]})
    with pytest.raises(InputError, match="min_gain"):
        configure("interference-smollm2", quick=True, settings={"min_gain": -0.1})
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
    # the warm-up: the merged tail reproduced the LoRA tail's loss, the facts are recorded; on this
    # random model the mappings stay far from ln 3, so the check fails and the mapping pairs are refused
    warm = m["warm_up"]
    assert warm["rows"] == 9 and warm["steps"] == 30
    assert abs(warm["merged_loss"] - warm["train_loss_after"]) <= 1e-3 * max(1.0, warm["train_loss_after"])
    assert warm["uniform_loss"] == pytest.approx(math.log(3)) and set(warm["eval_loss_after"]) == set(maps)
    assert warm["passed"] is False and all(v != warm["eval_loss_before"][t] for t, v in warm["eval_loss_after"].items())
    reasons = m["regime"]["refusal_reasons"]
    assert set(reasons) >= {f"{maps[0]}>{maps[1]}", f"{maps[1]}>{maps[0]}"}
    assert "warm-up check failed" in reasons[f"{maps[0]}>{maps[1]}"]
    assert set(reasons) == set(m["regime"]["refused"])
    files = sorted(p.name for p in (store / "seed0").iterdir())
    plan_files = [f for f in files if f.startswith("plan_")]
    assert len(files) == 6 + 14 + len(plan_files) and "code_a__code_b.json.gz" in files
    arms = m["plans"]["per_seed"][0]["plans"][0]["arms"]
    prefixes = {json.dumps([[t, sorted(r.items())] for t, r in zip(a["order"], a["rows"])]) for a in arms.values()}
    assert len(plan_files) == len(prefixes) >= 2  # one entry per distinct stage prefix
    # a rerun reads every (seed, A), (seed, pair) and plan prefix from the store: same numbers, no stage trained
    again = reproduce("interference-smollm2", tmp_path / "b", {**SETTINGS, "truth_store": str(store)})
    assert again["metrics"]["stages_trained"] == 0
    assert again["metrics"]["pairs"] == m["pairs"]
    assert again["metrics"]["states"]["start"]["values"] == start
    assert again["metrics"]["plans"]["per_seed"] == m["plans"]["per_seed"]
    assert again["metrics"]["warm_up"]["merged_loss"] == pytest.approx(warm["merged_loss"], abs=1e-6)
    # a store of another configuration is refused, naming the file
    path = store / "seed0" / "code_a.json.gz"
    rec_file = json.loads(gzip.decompress(path.read_bytes()))
    rec_file["key"] = "0" * 64
    path.write_bytes(gzip.compress(json.dumps(rec_file).encode()))
    with pytest.raises(InputError, match="code_a.json.gz"):
        reproduce("interference-smollm2", tmp_path / "c", {**SETTINGS, "truth_store": str(store)})


def test_mapping_stages_see_every_class_and_domains_start_from_the_packaged_model(tiny, tmp_path, monkeypatch):
    """Amendment 3: a mapping stage trains on all of its train examples, every input class (so
    every answer word of the mapping) equally often, like the warm-up; the warm-up is the base
    of the mappings only, so the domains' base losses are those of a run without mappings."""
    from updatescope.experiments.groundtruth import lora as lora_gt

    seen = []
    real = lora_gt.finetune_from_config

    def spy(model, data, lc, *, seed, steps=None):
        keep = data["labels"] != -100
        if int(keep.sum()) == data["labels"].shape[0]:  # one answer per row: a mapping stage or the warm-up
            seen.append(torch.bincount(data["labels"][keep]).tolist())
        return real(model, data, lc, seed=seed, steps=steps)

    monkeypatch.setattr(lora_gt, "finetune_from_config", spy)
    settings = {**SETTINGS, "n_random_orders": 1}
    rec = reproduce("interference-smollm2", tmp_path / "a", settings)
    assert len(seen) == 1 + 2 + 2  # the warm-up, each mapping as A, each ordered mapping pair's B
    for counts in seen:
        used = [c for c in counts if c]
        assert len(used) == 3 and len(set(used)) == 1, counts  # 3 answer words, equally often
    assert sum(seen[1]) == 3 * SETTINGS["class_rows"][0]  # every train example of the mapping
    plain = reproduce("interference-smollm2", tmp_path / "b", {**settings, "mapping_tasks": 0})
    base, base_plain = rec["metrics"]["regime"]["base_loss"], plain["metrics"]["regime"]["base_loss"]
    assert {t: base[t] for t in base_plain} == base_plain
    assert rec["metrics"]["warm_up"] is not None and plain["metrics"]["warm_up"] is None


def _per_seed(signal: float, own_drop: float, seed: int = 0):
    """One seed of 8 domain tasks (the fewest for which an exact sign-flip over tasks A can
    pass Holm over four comparisons): forgetting per pair (8 eval rows) = signal * A_F + noise;
    every task's own gain is ``own_drop`` on each of its 8 eval rows, up to noise of sd 0.001."""
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
        "own_gain": {t: own_drop + 0.001 * rng.normal(size=8) for t in names},
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
    assert m["regime"]["n_scored"] == 56 and m["regime"]["min_gain"] == 0.02 and not m["regime"]["refused"]
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


def test_lm_regime_refuses_a_below_min_gain_or_two_eval_se_with_its_reason():
    """Amendment 2: A counts as learned only if its gain exceeds min_gain and 2 x the bootstrap
    SE of its per-row gains in every seed; refused pairs carry the reason."""
    import numpy as np

    from updatescope.experiments.interference import runner

    cfg = configure("interference-smollm2", quick=True, settings={"n_boot": 200})
    names, seed = _per_seed(signal=1.0, own_drop=0.1)
    fam = {t: "code" if t in ("d0", "d1") else "wiki" for t in names}
    # d1: a clean gain of 0.01 nats, below min_gain = 0.02
    seed["own_loss"]["d1"] = 3.0 - 0.01
    seed["own_gain"]["d1"] = np.full(8, 0.01)
    # d2: a mean gain of 0.1 nats above min_gain, but rows of ±1: SE ≈ 1/√8 ≈ 0.35, 2 SE > 0.1
    seed["own_gain"]["d2"] = 0.1 + np.array([1.0, -1.0] * 4)
    m = runner.analyse(cfg, [seed], names, fam, refused_tasks={"d3": "warm-up check failed (test)"})
    reg = m["regime"]
    assert reg["learned"]["d0"] == [True] and reg["learned"]["d1"] == [False] and reg["learned"]["d2"] == [False]
    assert reg["own_gain_se"]["d2"][0] > 0.3 and reg["own_gain_se"]["d0"][0] < 0.002
    why = reg["refusal_reasons"]
    assert "<= min_gain 0.02" in why["d1>d0"] and "2 x eval SE" in why["d2>d0"]
    assert "warm-up check failed (test)" in why["d3>d0"]
    assert set(reg["refused_tasks"]) == {"d1", "d2", "d3"} and reg["n_scored"] == 56 - 3 * 7
    assert all(k.split(">")[0] in {"d1", "d2", "d3"} for k in reg["refused"])
    # the same rows with a gain of 0.1 on every row: d2 is learned again (the rule follows the SE)
    seed["own_gain"]["d2"] = np.full(8, 0.1)
    assert runner.analyse(cfg, [seed], names, fam)["regime"]["learned"]["d2"] == [True]


def test_warm_up_checks_the_merge_and_records_its_facts(monkeypatch):
    """The warm-up merges its LoRA into the tail in place, records the mappings' losses before
    and after against ln(W), and raises when the merged tail does not reproduce the LoRA tail."""
    from updatescope.experiments.groundtruth import lora as lora_gt
    from updatescope.experiments.interference import lm

    lm.check_merged(2.0, 2.0005)  # within 1e-3: passes
    with pytest.raises(RuntimeError, match="merged model loss"):
        lm.check_merged(2.0, 2.01)
    g = torch.Generator().manual_seed(0)

    def rows(n):
        lab = torch.full((n, 6), -100)
        lab[:, -1] = torch.randint(0, 3, (n,), generator=g) + 10
        return {"hidden": torch.randn(n, 6, 16, generator=g), "mask": torch.ones(n, 6, dtype=torch.long), "labels": lab}

    tasks = {"warm": rows(9), "names": ["m0", "m1"], "group": {"m0": "mappings", "m1": "mappings"}}
    tasks["eval"] = {"m0": rows(6), "m1": rows(6)}
    cfg = configure("interference-smollm2", quick=True, settings={**SETTINGS, "warmup_steps": 20})
    cfg = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, lr=0.05))
    model = tiny_llama(vocab_size=64, hidden=16)
    before = lora_gt.sequence_losses(lora_gt.tail_model(model, 1), tasks["warm"])[0]
    facts = lm.warm_up(cfg, model, tasks, lambda *_: None)
    merged = lora_gt.sequence_losses(lora_gt.tail_model(model, 1), tasks["warm"])[0]
    assert not torch.allclose(merged, before)  # the model now carries the warm-up
    assert facts["merged_loss"] == pytest.approx(float(merged.sum()) / 9, rel=1e-6)
    assert facts["merged_loss"] == pytest.approx(facts["train_loss_after"], abs=1e-3)
    assert set(facts["eval_loss_before"]) == {"m0", "m1"} and facts["uniform_loss"] == pytest.approx(math.log(3))
    ok = all(abs(v - math.log(3)) <= 0.25 for v in facts["eval_loss_after"].values())
    assert facts["passed"] is ok and (lm.warm_refusals(facts) == {}) is ok
    failed = {**facts, "passed": False}
    assert set(lm.warm_refusals(failed)) == {"m0", "m1"}
    assert "warm-up check failed" in lm.warm_refusals(failed)["m0"]

    def broken(model, tail, n_last):  # a merge that loses the deltas: the blocks as they were
        return {k: v.clone() for k, v in lora_gt._decoder(model).layers[-n_last:].state_dict().items()}

    monkeypatch.setattr(lora_gt, "merged_tail_state", broken)
    with pytest.raises(RuntimeError, match="warm-up: merged model loss"):
        lm.warm_up(cfg, tiny_llama(vocab_size=64, hidden=16), tasks, lambda *_: None)
