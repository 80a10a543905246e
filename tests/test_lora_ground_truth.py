"""LoRA ground truth: cached block inputs + tail model reproduce the full model exactly."""

import pytest
import torch

from _tiny_lm import WordTokenizer
from updatescope.capture.causal_lm import capture_causal_lm
from updatescope.errors import InputError
from updatescope.experiments.groundtruth import lora as _lora

TEXTS = ["a b c d e f g h i j k", "x y z w", "p q r s t u v w x y z a b c d e f g h", "solo"]


@pytest.fixture
def model(monkeypatch, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("n_last", [1, 2, 3])
def test_tail_on_cached_inputs_equals_full_model(model, n_last):
    tok = WordTokenizer(64)
    data = _lora.capture_block_inputs(model, tok, TEXTS, n_last=n_last, fp="t", seq_len=8)
    ref = list(capture_causal_lm(model, TEXTS, tok, chunk_len=8, progress=False))
    z_ref = torch.cat([b.logits for b in ref])
    keep = data["labels"] != _lora.IGNORE_INDEX
    assert torch.equal(data["labels"][keep], torch.cat([b.labels for b in ref]))
    tail = _lora.tail_model(model, n_last)
    with torch.no_grad():
        z = tail.lm_head(_lora._head_inputs(tail, data["hidden"], data["mask"], keep))
    torch.testing.assert_close(z, z_ref, rtol=1e-5, atol=1e-5)
    # the mean loss is the cross-entropy of the full model's logits
    ce = torch.nn.functional.cross_entropy(z_ref, data["labels"][keep]).item()
    assert _lora.mean_loss(tail, data, batch=2) == pytest.approx(ce, rel=1e-5)


def test_max_tokens_and_positions(model):
    tok = WordTokenizer(64)
    data = _lora.capture_block_inputs(model, tok, TEXTS, n_last=1, fp="t", seq_len=8, max_tokens=7, use_cache=False)
    assert int((data["labels"] != _lora.IGNORE_INDEX).sum()) == 7
    last = _lora.capture_block_inputs(
        model, tok, TEXTS[:3], n_last=1, fp="t", positions=[[-1]] * 3, seq_len=64, use_cache=False
    )
    assert (last["labels"] != _lora.IGNORE_INDEX).sum(1).tolist() == [1, 1, 1]


def test_lora_training_lowers_train_loss_and_leaves_model_alone(model):
    tok = WordTokenizer(64)
    data = _lora.capture_block_inputs(model, tok, TEXTS * 3, n_last=2, fp="t", seq_len=8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    base = _lora.mean_loss(_lora.tail_model(model, 2), data)
    tail = _lora.finetune_lora(model, data, n_last=2, r=4, alpha=8, lr=1e-2, steps=30, batch=4, seed=0)
    assert _lora.mean_loss(tail, data) < base - 0.1
    assert any("lora_A" in n for n, _ in tail.named_parameters())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # same seed -> same adapters
    again = _lora.finetune_lora(model, data, n_last=2, r=4, alpha=8, lr=1e-2, steps=30, batch=4, seed=0)
    assert _lora.mean_loss(again, data) == pytest.approx(_lora.mean_loss(tail, data), abs=1e-6)


def test_transfer_matrix_layout(model):
    tok = WordTokenizer(64)
    tr = {
        n: _lora.capture_block_inputs(model, tok, [t] * 3, n_last=1, fp="t", seq_len=8)
        for n, t in (("u", TEXTS[0]), ("v", TEXTS[2]))
    }
    gt = _lora.transfer_matrix(model, tr, tr, n_last=1, r=2, alpha=4, lr=1e-2, steps=5, batch=2)
    assert set(gt["transfer"]) == {"u", "v"} and set(gt["transfer"]["u"]) == {"u", "v"}
    for t in ("u", "v"):
        for s in ("u", "v"):
            assert gt["transfer"][t][s] == pytest.approx(gt["base_loss"][t] - gt["loss"][t][s])
        assert gt["transfer"][t][t] > 0  # training on the target's own (here identical) data helps it


def test_refuses_bad_settings(model):
    with pytest.raises(InputError, match="n_last"):
        _lora.tail_model(model, 4)
    with pytest.raises(InputError, match="layers"):
        _lora.tail_model(torch.nn.Linear(2, 2), 1)
    tok = WordTokenizer(64)
    data = _lora.capture_block_inputs(model, tok, TEXTS, n_last=1, fp="t", seq_len=8)
    with pytest.raises(InputError, match="LoRA target"):
        _lora.finetune_lora(model, data, n_last=1, r=2, alpha=4, lr=1e-2, steps=1, batch=2, targets=["nope"])


def test_sequence_losses_sum_to_the_per_token_cross_entropy(model):
    tok = WordTokenizer(64)
    data = _lora.capture_block_inputs(model, tok, TEXTS, n_last=2, fp="t", seq_len=8, use_cache=False)
    tail = _lora.tail_model(model, 2)
    sums, counts = _lora.sequence_losses(tail, data, batch=3)
    keep = data["labels"] != _lora.IGNORE_INDEX
    with torch.no_grad():
        z = tail.lm_head(_lora._head_inputs(tail, data["hidden"], data["mask"], keep)).double()
    tok_ce = torch.nn.functional.cross_entropy(z, data["labels"][keep], reduction="none")
    row = keep.nonzero()[:, 0]
    ref = torch.zeros(keep.shape[0], dtype=torch.float64).index_add_(0, row, tok_ce)
    assert torch.equal(counts, keep.sum(1))
    torch.testing.assert_close(sums, ref, rtol=1e-5, atol=1e-6)
    assert _lora.mean_loss(tail, data) == pytest.approx(float(ref.sum() / keep.sum()), rel=1e-6)


def test_transfer_matrix_candidates_and_resume(model, monkeypatch):
    tok = WordTokenizer(64)
    names = {"u": TEXTS[0], "v": TEXTS[2], "w": TEXTS[1] + " " + TEXTS[0]}
    tr = {n: _lora.capture_block_inputs(model, tok, [t] * 3, n_last=1, fp="t", seq_len=8) for n, t in names.items()}
    kw = dict(n_last=1, r=2, alpha=4, lr=1e-2, steps=4, batch=2, seed=7)
    full = _lora.transfer_matrix(model, tr, tr, **kw)
    cands = {"u": ["v"], "v": ["w"], "w": ["u", "v"]}
    part = _lora.transfer_matrix(model, tr, tr, candidates=cands, resume_tag="fp", **kw)
    # each row holds the target's candidates and itself, with the values of the full run
    for t, row in part["transfer"].items():
        assert set(row) == set(cands[t]) | {t}
        for s, v in row.items():
            assert v == pytest.approx(full["transfer"][t][s], abs=1e-6)
            seq = part["eval_sequences"]
            assert (sum(seq["base"][t]) - sum(seq["loss"][t][s])) / sum(seq["tokens"][t]) == pytest.approx(v, abs=1e-9)
    # a second run loads every (source, seed) result instead of fine-tuning again
    monkeypatch.setattr(_lora, "finetune_lora", lambda *a, **k: pytest.fail("fine-tuned again"))
    evaluated = []
    real_losses = _lora.sequence_losses
    monkeypatch.setattr(_lora, "sequence_losses", lambda *a, **k: evaluated.append(1) or real_losses(*a, **k))
    again = _lora.transfer_matrix(model, tr, tr, candidates=cands, resume_tag="fp", **kw)
    assert again["transfer"] == part["transfer"] and again["finetune_seconds"] == part["finetune_seconds"]
    assert evaluated == []  # the base model's losses come back from the cache too (any seed)
    assert again["eval_sequences"] == part["eval_sequences"]
    monkeypatch.setattr(_lora, "sequence_losses", real_losses)
    # a different hyper-parameter is a different result, not a cache hit
    with pytest.raises(pytest.fail.Exception, match="fine-tuned again"):
        _lora.transfer_matrix(model, tr, tr, candidates=cands, resume_tag="fp", **{**kw, "lr": 2e-2})
    # so is a result computed by other fine-tuning code
    monkeypatch.setattr(_lora, "_code_digest", lambda: "other code")
    with pytest.raises(pytest.fail.Exception, match="fine-tuned again"):
        _lora.transfer_matrix(model, tr, tr, candidates=cands, resume_tag="fp", **kw)
    with pytest.raises(InputError, match="unknown domains"):
        _lora.transfer_matrix(model, tr, tr, candidates={"u": ["nope"]}, **kw)
