"""coupling-dark: candidate construction, the verdict rule, and an end-to-end tiny run."""

from __future__ import annotations

import pytest

from _tiny_lm import loader, reproduce
from updatescope.experiments import mappings


def test_candidates_share_inputs_and_histogram_and_state_agreement():
    for n_cls, n_ans in ((3, 3), (6, 3)):
        maps = mappings.mappings_for(n_cls, n_ans)
        rows = [c for c in range(n_cls) for _ in range(4)]
        hists = {tuple(mappings.answer_histogram(m, rows, n_ans)) for m in maps}
        assert len(hists) == 1  # the same answer histogram for every candidate
        for t in maps:
            for s in maps:
                a = mappings.agreement(t, s)
                assert a == sum(x == y for x, y in zip(t, s)) / n_cls
                kind = mappings.candidate_kind(t, s)
                assert (kind == "same") == (a == 1.0)
                if kind == "none":
                    assert a == 0
        fr = {mappings.agreement(maps[0], s) for s in maps}
        assert {0.0, 1 / 3, 1.0} <= fr
        if n_cls == 6:
            assert 2 / 3 in fr
    assert mappings.candidate_kind((0, 1, 2), (1, 0, 2)) == "flip"


def test_verdict_word_flips_with_the_differences():
    targets = [f"t{i}" for i in range(8)]
    hi = {t: 0.8 + 0.01 * i for i, t in enumerate(targets)}
    lo = {t: 0.1 - 0.01 * i for i, t in enumerate(targets)}
    clusters = {t: t[:2] for t in targets}
    base = {m: lo for m in ("error", "product", "grad_cos", "cka", "exact_error", "exact_product")}
    good = mappings.coupling_verdicts({"fisher": hi, "exact_fisher": hi, **base}, clusters, n_boot=200)
    assert good["statement"] == mappings.SUPPORTED
    assert all(v["word"] == "better" for v in good["primary"])
    assert [v["comparison"] for v in good["primary"]] == [c[0] for c in mappings.COMPARISONS]
    bad = mappings.coupling_verdicts({"fisher": lo, "exact_fisher": lo, **{m: hi for m in base}}, clusters, n_boot=200)
    assert bad["statement"] == mappings.REFUTED
    assert all(v["word"] == "worse" for v in bad["primary"])
    assert mappings.coupling_verdicts({}, {})["statement"] == mappings.NOT_SCORED


@pytest.fixture
def tiny(monkeypatch):
    from updatescope.experiments import heads
    from updatescope.experiments.coupling_dark import runner

    monkeypatch.setattr(heads, "load_model", loader())
    words = {
        "python": "def return self",
        "licence": "licence warranty copy",
        "digits": "1 2 3 4",
        "news": "the minister said",
        "reviews": "a fine film",
        "docs": "returns the value",
    }

    def texts(name, n, seed):
        return [f"{words[name]} {name}{i % 5}" for i in range(n)]

    monkeypatch.setattr(runner, "class_texts", texts)


@pytest.mark.parametrize("enforce", [True, False])
def test_tiny_run_writes_every_method_checks_and_verdicts(tiny, tmp_path, enforce):
    settings = {
        "n_fit": 4,
        "n_sketch": 4,
        "n_val": 2,
        "n_eval": 3,
        "n_warm": 3,
        "warmup_steps": 2,
        "lora": {"steps": 2, "batch": 4, "n_last": 1},
        "sketch_dim": 64,
        "enforce_checks": enforce,
        "n_boot": 50,
    }
    rec = reproduce("coupling-dark", tmp_path, settings)
    m = rec["metrics"]
    assert len(rec["config"]["preregistration_sha256"]) == 64
    assert len(m["tasks"]) == 6 and m["powered"] is False
    reg = m["regime"]
    assert 0.0 <= reg["probe_accuracy"]["Colour:"] <= 1.0
    for row in reg["per_target"].values():
        assert {"val_transfer_same", "val_transfer_no_agreement", "passed"} <= set(row)
    hists = {tuple(h["eval"]) for h in m["answer_histograms"].values()}
    assert len(hists) == 1
    for name in ("fisher", "exact_fisher", "error", "exact_error", "activation", "product", "grad_cos", "cka"):
        assert name in m["scores"]
    assert {"overlap", "random", "exact_product"} <= set(m["scores"])
    assert len(m["ground_truth"]["by_seed"]) == 1
    warm = m["warm_up"]
    assert warm["steps"] == 2 and warm["rows"] == 9
    assert warm["merged_loss"] == pytest.approx(warm["train_loss_after"], rel=1e-3)
    for row in reg["per_target"].values():
        assert row["warm_ok"] == (abs(row["warm_loss_gap"]) <= reg["warm_tolerance"])
    v = m["verdicts"]
    assert v["statement"] in (mappings.SUPPORTED, mappings.REFUTED, mappings.NOT_SCORED)
    if not enforce:
        assert len(v["primary"]) == 4 and v["n_targets"] == 6
        assert v["statement"] != mappings.NOT_SCORED
    else:
        assert set(reg["scored_targets"]) == {t for t, r in reg["per_target"].items() if r["passed"]}


def test_check_c_compares_with_ln_of_the_answer_words_not_of_the_classes(tiny, tmp_path):
    """Six classes share three answer words: the warm-up's uniform loss is ln 3, not ln 6."""
    import math

    settings = {
        "classes": ["python", "licence", "digits", "news", "reviews", "docs"],
        "n_fit": 2,
        "n_sketch": 2,
        "n_val": 1,
        "n_eval": 2,
        "n_warm": 3,
        "warmup_steps": 1,
        "lora": {"steps": 1, "batch": 4, "n_last": 1},
        "sketch_dim": 64,
        "enforce_checks": False,
        "n_boot": 20,
    }
    m = reproduce("coupling-dark", tmp_path, settings)["metrics"]
    per = m["warm_up"]["per_family"]["Colour:"]
    assert per["uniform_loss"] == pytest.approx(math.log(3))
    for row in m["regime"]["per_target"].values():
        assert row["warm_loss_gap"] == pytest.approx(per["val_loss_after"] - math.log(3))


def test_warm_labels_give_every_class_every_answer_equally_often():
    import numpy as np

    from updatescope.experiments.coupling_dark.runner import warm_labels

    cls = np.repeat(np.arange(6), 6)
    labels = warm_labels(cls, np.arange(cls.size), [11, 22, 33]).numpy()
    for k in range(6):
        vals, counts = np.unique(labels[cls == k], return_counts=True)
        assert vals.tolist() == [11, 22, 33] and counts.tolist() == [2, 2, 2]


def test_no_warm_up_records_none_and_skips_check_c(tiny, tmp_path):
    settings = {
        "n_fit": 4,
        "n_sketch": 4,
        "n_val": 2,
        "n_eval": 3,
        "n_warm": 3,
        "warmup_steps": 0,
        "lora": {"steps": 2, "batch": 4, "n_last": 1},
        "sketch_dim": 64,
        "n_boot": 50,
    }
    m = reproduce("coupling-dark", tmp_path, settings)["metrics"]
    assert m["warm_up"] is None and m["regime"]["warm_tolerance"] is None
    assert all(r["warm_ok"] and r["warm_loss_gap"] is None for r in m["regime"]["per_target"].values())


def test_merged_warm_up_reproduces_the_lora_tail():
    import torch

    from _tiny_lm import loader
    from updatescope.experiments.coupling_dark.runner import merge_tail
    from updatescope.experiments.groundtruth import lora as lora_gt

    model, _tok = loader()()
    torch.manual_seed(0)
    n, s, d = 8, 5, model.config.hidden_size
    data = {
        "hidden": torch.randn(n, s, d),
        "mask": torch.ones(n, s, dtype=torch.long),
        "labels": torch.randint(0, model.config.vocab_size, (n, s)),
    }
    tail = lora_gt.finetune_lora(model, data, n_last=1, r=2, alpha=4, lr=1e-2, steps=3, batch=4, seed=0)
    merged = merge_tail(model, tail, 1)
    a = lora_gt.mean_loss(tail, data)
    b = lora_gt.mean_loss(lora_gt.tail_model(merged, 1), data)
    assert a == pytest.approx(b, rel=1e-5)
    assert a != pytest.approx(lora_gt.mean_loss(lora_gt.tail_model(model, 1), data), rel=1e-5)


def test_truth_store_resumes_without_fine_tuning_and_refuses_a_stale_table(tiny, tmp_path, monkeypatch):
    import json

    from updatescope.errors import InputError
    from updatescope.experiments.coupling_dark import runner

    store = tmp_path / "store"
    settings = {
        "n_fit": 4,
        "n_sketch": 4,
        "n_val": 2,
        "n_eval": 3,
        "n_warm": 3,
        "warmup_steps": 2,
        "lora": {"steps": 2, "batch": 4, "n_last": 1},
        "sketch_dim": 64,
        "n_boot": 50,
        "truth_store": str(store),
    }
    first = reproduce("coupling-dark", tmp_path / "a", settings)["metrics"]
    files = sorted(store.glob("*.json"))
    assert len(files) == 1  # one family, one seed

    def refuse(*a, **k):
        raise AssertionError("fine-tuned although the table was stored")

    monkeypatch.setattr(runner, "truth_one_seed", refuse)
    second = reproduce("coupling-dark", tmp_path / "b", settings)["metrics"]
    assert second["ground_truth"] == first["ground_truth"]
    assert second["verdicts"]["primary"] == first["verdicts"]["primary"]
    data = json.loads(files[0].read_text())
    data["key"] = "0" * 64
    files[0].write_text(json.dumps(data))
    with pytest.raises(InputError, match="does not match"):
        reproduce("coupling-dark", tmp_path / "c", settings)
