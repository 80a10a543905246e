"""The sentiment-steering runner on a tiny random Llama, its two judges and its verdict rules."""

import math

import numpy as np
import pytest

from _tiny_lm import WordTokenizer, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import configure, heads
from updatescope.experiments.sentiment_steering import verdicts


class _DecodingTokenizer(WordTokenizer):
    """The tiny word tokenizer, with ids mapped back to words and an end-of-text id."""

    eos_token_id = 255

    def decode(self, ids, skip_special_tokens=True):
        words = {i: w for w, i in self.ids.items()}
        return " ".join(words.get(i, f"w{i}") for i in ids)


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    pytest.importorskip("gensim")
    pytest.importorskip("vaderSentiment")
    model, tok = tiny_llama(), _DecodingTokenizer()
    monkeypatch.setattr(heads, "load_model", lambda spec="smollm2": (model, tok))
    return tmp_path


TINY = {
    "n_select": 4,
    "n_test": 6,
    "new_tokens": 3,
    "steer_layers": [0, 9],
    "scales": [0.5, 2.0],
    "step_sentences": 4,
    "pushforward_sentences": 3,
    "search_n": 2,
    "search_norms": [0.1, 0.3],
    "search_seeds": 2,
    "search_sentences": 3,
    "judge_folds": 3,
    "batch_size": 4,
    "max_ppl_ratio": 1e6,
}


def test_sentiment_steering_tiny_run(tiny):
    res = reproduce("sentiment-steering", tiny / "out", TINY)
    m, c = res["metrics"], res["config"]
    assert c["steer_layers_used"] == [0] and c["judge_layer_used"] == 0  # a 1-layer model
    assert m["n"]["select"] == 4 and m["n"]["test"] == 6 and m["n"]["polarity"] == [100, 100]
    # select and test prompts are disjoint neutral openings
    sel, test = m["prompts"]["select"], m["prompts"]["test"]
    assert not set(sel) & set(test)
    assert all(5 <= len(p.split()) <= 10 for p in sel + test)
    # CAA's split halves are cosines, one per layer and split
    sh = m["cosine"]["split_half_caa"]
    assert len(sh["mean"]) == 1 and len(sh["per_split"]) == 3 and -1 <= sh["mean"][0] <= 1
    # the judge's held-out accuracy is a share of the 200 sentences, and decides its use
    j = m["judge"]
    assert j["n"] == 200 and 0 <= j["accuracy"] <= 1 and j["usable"] == (j["accuracy"] >= 0.7)
    for direction in ("positive", "negative"):
        g = m["grid_select"][direction]
        assert {"base", "prompting", "caa", "pushforward", "search", "random"} <= set(g)
        assert len(g["caa"]["cells"]) == 1 and len(g["caa"]["cells"][0]) == 2
        # with an unbounded fluency limit every method has a setting, run on test with its random twin
        t = m["test"][direction]
        assert {"base", "prompting", "caa", "pushforward", "search", "random@caa", "random@pushforward"} <= set(t)
        # the search: one Best-of-N per seed, its norm chosen on the choosing sentences, losses per candidate
        recs = m["search"][direction]
        assert len(recs) == 2
        for r in recs:
            assert r["n"] == 2 and len(r["select"]) == len(r["heldout"]) == 2
            assert r["norm"] in (0.1, 0.3) and len(r["gain_select_per_norm"]) == 2
            assert r["gain_select"] == pytest.approx(max(r["gain_select_per_norm"]))
            assert r["gain_select"] == pytest.approx(r["base_select"] - min(r["select"]))
            assert len(r["cosine_caa"]) == 1 and -1 <= r["cosine_caa"][0] <= 1
        for k, v in t.items():
            assert math.isfinite(v["vader"]) and v["ppl"] > 0
            assert len(m["per_prompt_test"][direction][k]["vader"]) == 6
        # the base model's continuations are the same in both directions; the score flips sign
        assert t["base"]["vader"] == pytest.approx(
            -m["test"]["negative" if direction == "positive" else "positive"]["base"]["vader"]
        )
    # the chosen setting is the best VADER cell (every cell is admissible here)
    for direction in ("positive", "negative"):
        cells = m["grid_select"][direction]["caa"]["cells"][0]
        best = max(range(2), key=lambda i: (cells[i]["vader"], -i))
        assert m["chosen"][direction]["caa"]["scale"] == [0.5, 2.0][best]
    # the pre-specified comparisons: 4 + 2 (the search family) per direction, words computed by the rules
    vader = m["comparisons"]["vader"]
    assert len(vader) == 12
    assert {v["family_size"] for k, v in vader.items() if "search" in k} == {4}
    assert {v["family_size"] for k, v in vader.items() if "search" not in k} == {8}
    for key, v in vader.items():
        direction, name = key.split(": ")
        gate = m["gates"][direction]["open"]
        assert v["shown"] == verdicts.comparison_word(name, v, gate, 0.05)
        # the paired difference is the mean per-prompt difference of the two runs
    pp = m["per_prompt_test"]["positive"]
    diff = np.mean(np.asarray(pp["caa"]["vader"]) - np.asarray(pp["random@caa"]["vader"]))
    assert vader["positive: caa - random"]["mean"] == pytest.approx(diff)
    assert (tiny / "out" / "sentiment_steering_tradeoff.png").is_file()


def test_run_store_resumes_every_pass_and_records_the_same(tiny, monkeypatch):
    from updatescope.experiments.sentiment_steering.runner import Generator

    store = tiny / "store"
    first = reproduce("sentiment-steering", tiny / "a", {**TINY, "run_store": str(store)})
    files = sorted(store.iterdir())
    # base and prompting on both splits, 3 methods x 2 directions x 2 cells, the test runs
    assert len(files) >= 1 + 2 + 12 + 1 and all(f.name.startswith("pass-") for f in files)

    def no_generation(*a, **k):
        raise AssertionError("a stored pass was generated again")

    monkeypatch.setattr(Generator, "_run", no_generation)
    again = reproduce("sentiment-steering", tiny / "b", {**TINY, "run_store": str(store)})
    assert again["metrics"] == first["metrics"]
    assert sorted(store.iterdir()) == files
    # another input (here the continuation length) is another pass, not a stale read
    with pytest.raises(AssertionError, match="generated again"):
        reproduce("sentiment-steering", tiny / "c", {**TINY, "new_tokens": 2, "run_store": str(store)})


def test_config_refuses_bad_values():
    with pytest.raises(InputError):
        configure("sentiment-steering", settings={"scales": [-0.5]})
    with pytest.raises(InputError):
        configure("sentiment-steering", settings={"prompt_prefix": "Write a continuation: "})
    with pytest.raises(InputError):
        configure("sentiment-steering", settings={"n_test": 50})  # a full run needs >= 200 test prompts
    with pytest.raises(InputError):
        configure("sentiment-steering", settings={"max_ppl_ratio": 0.5})
    with pytest.raises(InputError, match="run_store"):
        configure("sentiment-steering", settings={"run_store": __file__})  # a file, not a folder
    assert configure("sentiment-steering", quick=True).n_test == 40  # the quick run keeps a test split


def test_vader_wrapper():
    pytest.importorskip("vaderSentiment")
    from updatescope.experiments.sentiment_texts import Vader

    v = Vader()
    assert v.compound("The committee met on Tuesday in the city") == 0.0
    assert v.compound("a wonderful, happy and beautiful day") > 0.5
    assert v.compound("a terrible, awful and hateful mess") < -0.5
    assert v.scores(["good", "bad"])[0] > 0 > v.scores(["good", "bad"])[1]
    with pytest.raises(InputError):
        v.compound(3)


def test_trained_judge_learns_a_linear_rule_and_cross_validates():
    from updatescope.experiments.sentiment_steering.judges import cross_validate, fit_logistic

    rng = np.random.default_rng(0)
    w = rng.normal(size=8)
    x = rng.normal(size=(300, 8)) * 3 + 1
    y = (x @ w + rng.normal(size=300) * 0.5 > w.sum()).astype(int)
    judge = fit_logistic(x, y, l2=1e-3)
    acc = ((judge.logits(x) > 0) == (y == 1)).mean()
    assert acc > 0.9
    # the learned weights point along the true rule (features are standardised with std ~3)
    cos = judge.w @ (w * 3) / np.linalg.norm(judge.w) / np.linalg.norm(w * 3)
    assert cos > 0.95
    # the optimum: the gradient of the penalised log-loss vanishes
    z = (x - judge.mean) / judge.std
    p = judge.prob(x)
    assert np.abs(z.T @ (p - y) / len(y) + 1e-3 * judge.w).max() < 1e-8
    cv = cross_validate(x, y, 1e-3, 5, seed=0)
    assert cv["accuracy"] > 0.85 and len(cv["per_fold"]) == 5 and cv["n"] == 300
    # shuffled labels: held-out accuracy falls to chance (the in-sample fit would not)
    cv0 = cross_validate(x, rng.permutation(y), 1e-3, 5, seed=0)
    assert cv0["accuracy"] < 0.65
    with pytest.raises(InputError):
        fit_logistic(x, np.zeros(300), 1e-3)
    with pytest.raises(InputError):
        judge.prob(x[:, :3])


def test_neutral_openings_and_splits():
    from updatescope.experiments.sentiment_texts import neutral_openings, split_prompts

    sents = ["one two three four five six seven", "good good good good good good good", "a b c"]
    out = neutral_openings(sents, lambda t: 0.9 if "good" in t else 0.0, (2, 3), 0.05, seed=0)
    assert len(out) == 2 and out[0].startswith("one two") and out[1] == "a b"
    sel, test = split_prompts([f"p{i}" for i in range(10)], 3, 5, seed=1)
    assert len(sel) == 3 and len(test) == 5 and not set(sel) & set(test)
    with pytest.raises(InputError):
        split_prompts(["a", "b"], 2, 1, seed=0)


def test_verdict_rules_flip():
    assert verdicts.judge_usable(0.71, 0.7) and not verdicts.judge_usable(0.69, 0.7)
    assert verdicts.paired_word(0.1, 0.01, 0.05) == "better"
    assert verdicts.paired_word(-0.1, 0.01, 0.05) == "worse"
    assert verdicts.paired_word(0.1, 0.2, 0.05) == "no difference"
    win = {"mean": 0.2, "p_holm": 0.001}
    lose = {"mean": 0.2, "p_holm": 0.3}
    assert verdicts.caa_gate(0.8, win, 0.5, 0.05)["open"]
    shut = verdicts.caa_gate(0.3, win, 0.5, 0.05)
    assert not shut["open"] and not shut["reproducible"] and "split-half" in shut["reason"]
    shut = verdicts.caa_gate(0.8, lose, 0.5, 0.05)
    assert not shut["open"] and not shut["beats_random"]
    assert not verdicts.caa_gate(0.8, None, 0.5, 0.05)["open"]
    # against CAA: refused while the gate is shut, the paired word once it opens
    assert verdicts.comparison_word("pushforward - caa", win, False, 0.05) == "refused"
    assert verdicts.comparison_word("pushforward - caa", win, True, 0.05) == "better"
    assert verdicts.comparison_word("caa - prompting", {"mean": -0.2, "p_holm": 0.01}, True, 0.05) == "worse"
    # not against CAA: the gate does not matter
    assert verdicts.comparison_word("pushforward - random", win, False, 0.05) == "better"
    assert verdicts.comparison_word("pushforward - random", None, True, 0.05) == "not tested"
    # the fluency bound: the best admissible cell, None when none is admissible
    scores, ppl = [[0.1, 0.5], [0.3, 0.9]], [[1.0, 1.0], [1.0, 3.0]]
    assert verdicts.admissible_best(scores, ppl, 2.0) == (0, 1)
    assert verdicts.admissible_best(scores, ppl, 5.0) == (1, 1)
    assert verdicts.admissible_best(scores, ppl, 0.5) is None
