"""The ``select`` experiment: config checks, a tiny end-to-end run, and the per-example
gradient baseline against autograd on a tiny Llama."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from _tiny_lm import WordTokenizer, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import heads
from updatescope.experiments.configs import LoRAConfig
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.select_evidence import runner as select_evidence
from updatescope.experiments.select_evidence.config import SelectEvidenceConfig
from updatescope.select.baselines import gradient_cosine_scores, project_rows

VOCAB = {"a": "alpha beta gamma delta", "b": "one two three four", "c": "red green blue cyan"}


def _texts(name, split, n_docs, doc_chars):
    words = VOCAB[name[-1]].split()
    salt = {"sketch": 0, "train": 1, "eval": 2}[split]
    return [" ".join(words[(i * 7 + j + salt) % 4] for j in range(12 + i % 3))[:doc_chars] for i in range(n_docs)]


# ------------------------------------------------------------------------------ config
def test_defaults_are_valid_and_quick_is_small():
    full, quick = SelectEvidenceConfig.defaults(False, 3), SelectEvidenceConfig.defaults(True, 3)
    assert full.seed == quick.seed == 3 and quick.quick and not full.quick
    assert quick.seeds >= 3 and quick.k < quick.docs_per_domain * len(quick.pool)
    assert quick.docs_per_domain * len(quick.pool) <= 120 and quick.lora.steps <= full.lora.steps


@pytest.mark.parametrize(
    "change, words",
    [
        ({"target": "reviews"}, "target"),
        ({"k": 10**6}, "k="),
        ({"seeds": 2}, "seeds"),
        ({"pool": ("wiki_people",), "target": "wiki_people"}, "pool"),
        ({"proj_dim": 0}, "proj_dim"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"sketch_dim": 3}, "sketch"),
    ],
)
def test_bad_configs_are_refused(change, words):
    with pytest.raises(InputError, match=words):
        dataclasses.replace(SelectEvidenceConfig(), **change)


# --------------------------------------------------------------------- tiny end to end
@pytest.fixture
def tiny(monkeypatch, tmp_path):
    from _tiny_lm import loader

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=64))
    monkeypatch.setattr(select_evidence, "load_texts", _texts)
    return tmp_path


def test_select_tiny_run(tiny):
    cfg = {
        "pool": ["dom_a", "dom_b", "dom_c"],
        "target": "dom_a",
        "docs_per_domain": 4,
        "doc_chars": 200,
        "target_docs": 3,
        "eval_docs": 3,
        "k": 4,
        "sketch_dim": 64,
        "proj_dim": 32,
        "warmup_steps": 2,
        "lora": {
            "n_last": 1,
            "r": 2,
            "alpha": 4,
            "targets": ["q_proj", "v_proj"],
            "lr": 1e-2,
            "steps": 3,
            "batch": 2,
            "seq_len": 16,
        },
    }
    rec = reproduce("select", tiny / "out", cfg)
    m = rec["metrics"]
    assert m["n_pool"] == 12 and sorted(m["origin"]) == sorted(["dom_a"] * 4 + ["dom_b"] * 4 + ["dom_c"] * 4)
    assert set(m["methods"]) == set(select_evidence.METHODS)
    for name, meth in m["methods"].items():
        lr = meth["loss_reduction"]
        assert lr["n"] == 3 and len(meth["by_seed"]) == 3 and all(math.isfinite(v) for v in meth["by_seed"])
        assert lr["mean"] == pytest.approx(sum(meth["by_seed"]) / 3)
        assert 0.0 <= meth["own_domain_fraction"] <= 1.0 and meth["selection_tokens"] > 0
        assert meth["cost"]["seconds"] >= 0 and meth["cost"]["peak_bytes"] >= 0
        if name != "fisher":  # paired difference: mean of the per-seed differences, CI around it
            diff = [a - b for a, b in zip(meth["by_seed"], m["methods"]["fisher"]["by_seed"])]
            mf = meth["minus_fisher"]
            assert mf["mean"] == pytest.approx(sum(diff) / 3) and mf["ci"][0] <= mf["mean"] <= mf["ci"][1]
        if name != "random":
            assert len(meth["selected"]) == 4 and len(set(meth["selected"])) == 4
    # own-domain fraction is read from the hidden origins of the selected documents
    fs = m["methods"]["fisher"]
    assert fs["own_domain_fraction"] == sum(m["origin"][i] == "dom_a" for i in fs["selected"]) / 4
    # the top-k of a deterministic score is the k highest scores
    sc = m["scores"]["fisher"]
    assert min(sc[i] for i in fs["selected"]) >= max(s for i, s in enumerate(sc) if i not in fs["selected"])
    assert m["methods"]["per_example_gradient"]["cost"]["bytes_per_doc"] == 8 * 32
    assert m["noise"]["n_seeds"] == 3 and m["noise"]["floor"] >= 0
    for v in m["verdicts"].values():
        assert v["verdict"] in ("reproduced", "not reproduced", "undecided")
    assert (tiny / "out" / "select.png").is_file()


# ------------------------------------------------------------ per-example gradients
def _tiny_tail(n_docs):
    model, tok = tiny_llama(vocab_size=64, hidden=16, seed=1), WordTokenizer(64)
    docs = [" ".join(VOCAB["abc"[i % 3]].split()[(i + j) % 4] for j in range(5 + 2 * i)) for i in range(n_docs)]
    parts = [lora_gt.capture_block_inputs(model, tok, [d], n_last=1, fp="t", seq_len=64, use_cache=False) for d in docs]
    # two warm-up steps so both LoRA factors have a non-zero gradient
    tail = lora_gt.finetune_lora(
        model,
        select_evidence.stack_parts(parts),
        n_last=1,
        r=2,
        alpha=4,
        lr=5e-2,
        steps=2,
        batch=2,
        seed=0,
        targets=("q_proj", "v_proj"),
    )
    return tail, tok, docs, parts


def test_document_gradients_match_autograd_on_the_full_sequence():
    tail, tok, docs, parts = _tiny_tail(4)
    params = [p for n, p in tail.named_parameters() if "lora_" in n]
    got = select_evidence.document_gradients(tail, parts)
    assert got.shape == (4, sum(p.numel() for p in params))
    for i, d in enumerate(docs):
        # oracle: the whole model on the token ids (embedding included, no padding, no cached
        # block inputs), mean next-token cross-entropy of this document alone
        ids = torch.tensor(tok(d)["input_ids"])[None]
        logits = tail(input_ids=ids).logits[0, :-1]
        loss = F.cross_entropy(logits, ids[0, 1:])
        want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double()
        assert want.norm() > 0
        torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-6)
    # identity projection keeps the exact gradients; the cosine is the plain cosine
    assert torch.equal(project_rows(got, None, 0), got)
    cos = gradient_cosine_scores(project_rows(got, None, 0), got[:2])
    mu = got[:2].mean(0)
    torch.testing.assert_close(cos, (got @ mu) / (got.norm(dim=1) * mu.norm()))


def test_projection_is_one_seeded_matrix_and_preserves_inner_products_in_expectation():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, generator=g, dtype=torch.float64)
    # the projection is x R / sqrt(p) for one R, whatever the block size used to draw it
    r = project_rows(torch.eye(50, dtype=torch.float64), 16, seed=7, block=50)
    torch.testing.assert_close(project_rows(x, 16, seed=7, block=50), x @ r, rtol=1e-12, atol=1e-12)
    assert set((r * 4).round().unique().tolist()) == {-1.0, 1.0}
    assert not torch.equal(project_rows(x, 16, seed=8), project_rows(x, 16, seed=7))
    # E<Px, Py> = <x, y>: the mean over 400 seeds lies within 4 measured SEs of the truth
    exact = float(x[0] @ x[1])
    vals = torch.tensor(
        [float(project_rows(x[:2], 16, seed=s)[0] @ project_rows(x[:2], 16, seed=s)[1]) for s in range(400)],
        dtype=torch.float64,
    )
    se = float(vals.std()) / math.sqrt(400)
    assert abs(float(vals.mean()) - exact) < 4 * se


def test_batched_document_blocks_equal_one_capture_per_document():
    model, tok = tiny_llama(vocab_size=64, hidden=16, seed=2), WordTokenizer(64)
    docs = ["alpha beta gamma", "one two three four five six", "red green"]
    got = select_evidence.document_blocks(model, tok, docs, n_last=1, fp="t", seq_len=32)
    for d, part in zip(docs, got):
        one = lora_gt.capture_block_inputs(model, tok, [d], n_last=1, fp="t", seq_len=32, use_cache=False)
        for k in ("labels", "mask"):
            assert torch.equal(part[k], one[k])
        torch.testing.assert_close(part["hidden"], one["hidden"], rtol=1e-5, atol=1e-6)
    # a document longer than seq_len makes several chunks: captured one document at a time
    long = select_evidence.document_blocks(model, tok, [" ".join(["w"] * 40), "a b"], n_last=1, fp="t", seq_len=16)
    assert long[0]["labels"].shape[0] == 3 and long[1]["labels"].shape[0] == 1


def test_top_k_puts_undefined_scores_last():
    s = torch.tensor([0.1, float("nan"), 0.9, 0.5])
    assert select_evidence.top_k(s, 3) == [2, 3, 0]


def test_stack_parts_pads_to_one_width():
    a = {"hidden": torch.ones(1, 3, 2), "labels": torch.zeros(1, 3, dtype=torch.long), "mask": torch.ones(1, 3)}
    b = {"hidden": torch.ones(2, 5, 2), "labels": torch.zeros(2, 5, dtype=torch.long), "mask": torch.ones(2, 5)}
    out = select_evidence.stack_parts([a, b])
    assert out["hidden"].shape == (3, 5, 2) and (out["labels"][0, 3:] == -100).all() and (out["mask"][0, 3:] == 0).all()


def test_lora_config_of_quick_defaults_is_a_lora_config():
    assert isinstance(SelectEvidenceConfig.defaults(True).lora, LoRAConfig)
