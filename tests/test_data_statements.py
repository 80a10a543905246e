"""Offline true/false statements: splits, balance, determinism, and answer-margin scoring."""

import pytest
import torch

from _tiny_lm import WordTokenizer, tiny_llama
from updatescope.data import statements as S
from updatescope.errors import InputError

pytest.importorskip("gensim")


@pytest.mark.parametrize("task", S.TASKS)
def test_splits_are_disjoint_balanced_and_stable(task):
    items = S.load_statements(task)
    assert len(items) >= 40
    by_split = {s: [x for x in items if x.split == s] for s in S.SPLITS}
    subjects = {s: {x.subject for x in v} for s, v in by_split.items()}
    assert not (subjects["train"] & subjects["test"]) and not (subjects["select"] & subjects["test"])
    assert not (subjects["train"] & subjects["select"])
    for v in by_split.values():
        assert v and sum(x.label for x in v) * 2 == len(v)  # one true and one false per subject
    # pairs are adjacent, true first, same subject, different text
    for t, f in zip(items[::2], items[1::2]):
        assert (t.label, f.label) == (1, 0) and t.subject == f.subject and t.text != f.text
    assert S.load_statements(task, "test") == by_split["test"]
    assert [x.text for x in S.load_statements(task)] == [x.text for x in items]


def test_known_facts():
    caps = {x.text for x in S.load_statements("capitals") if x.label == 1}
    assert "Athens is the capital of Greece." in caps and "Athens is the capital of Iraq." not in caps
    assert S.prompt_of("X.") == "Statement: X. Is this statement true? Answer:"


def test_bad_names_are_refused():
    with pytest.raises(InputError):
        S.load_statements("boolq")
    with pytest.raises(InputError):
        S.load_statements("capitals", "dev")
    with pytest.raises(InputError):
        S.answer_ids(WordTokenizer(), "maybe")


def test_margins_equal_full_logits_and_summary():
    model, tok = tiny_llama(), WordTokenizer()
    prompts = ["Statement: a b. Is this statement true? Answer:", "Statement: c. Is this true? Answer:", "x"]
    ids = S.answer_ids(tok)
    got = S.answer_margins(model, tok, prompts, ids, batch_size=2)
    for p, m in zip(prompts, got):
        with torch.no_grad():
            lg = model(input_ids=torch.tensor([tok(p)["input_ids"]])).logits[0, -1].double()
        assert float(m) == pytest.approx(float(lg[ids[0]] - lg[ids[1]]), abs=1e-5)
    s = S.margin_summary(torch.tensor([1.0, -2.0, 3.0, 0.5]), torch.tensor([1, 0, 0, 1]))
    assert s["accuracy"] == 0.75 and s["true_rate"] == 0.75
    assert s["signed_margin"] == pytest.approx((1 + 2 - 3 + 0.5) / 4)
    assert s["auc"] == pytest.approx(0.5)  # positives 1, 0.5 vs negatives -2, 3: 2 of 4 pairs ordered
