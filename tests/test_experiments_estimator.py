"""The estimator runner on a tiny random Llama: sketch vs exact plumbing and the speed record."""
import math

import numpy as np
import pytest

from updatescope.experiments import _lm, estimator, source_selection

from _tiny_lm import loader


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_lm, "load_model", loader(vocab_size=128))
    vocab = {"a": "alpha beta gamma delta", "b": "one two three four", "c": "red green blue cyan",
             "d": "alpha two red four"}

    def texts(name, split, max_chars):
        words = vocab[name[-1]].split()
        salt = {"sketch": 0, "train": 1, "eval": 2}[split]
        return [" ".join(words[(i * 7 + j * (j + salt)) % 4] for j in range(20)) for i in range(4)]

    monkeypatch.setattr(source_selection, "load_texts", texts)
    return tmp_path


def test_estimator_tiny_run(tiny):
    cfg = {"domains": ["dom_a", "dom_b", "dom_c", "dom_d"], "tokens": {"sketch": 60, "train": 40, "eval": 40},
           "sketch_dim": 512, "seeds": [0, 1], "speed_n": 100, "repeats": 1, "exact_repeats": 1}
    res = estimator.run(quick=True, out_dir=tiny / "out", seed=0, config=cfg)
    m = res["metrics"]
    acc = m["accuracy"]
    assert set(acc) == {"fisher", "activation", "error", "coupling"}
    for kind, a in acc.items():
        assert a["pairs"] == 6 and len(a["per_seed"]) == 2
        assert math.isfinite(a["mean_abs_err"])
    # with m much larger than the data's effective rank the sketch tracks the exact value closely
    assert acc["fisher"]["mean_abs_err"] < 0.1 and acc["activation"]["mean_abs_err"] < 0.1
    # the recorded exact values are the exact reference, not the sketch
    assert not np.allclose(acc["fisher"]["exact"], acc["fisher"]["per_seed"][0]["sketch"], atol=0, rtol=0)
    sp = m["speed"]
    assert sp["n_per_task"] == [100, 100] and sp["sketch_median_s"] > 0 and sp["exact_median_s"] > 0
    assert (tiny / "out" / "estimator.png").is_file()
