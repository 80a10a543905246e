"""Causal-LM capture on a tiny random Llama: exact activations, logits, labels and masks."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from updatescope.capture import LinearCapture, capture_causal_lm, find_output_linear  # noqa: E402
from updatescope.errors import InputError  # noqa: E402

VOCAB = 97


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    # a non-trivial final norm, so "after the norm" is distinguishable from "before"
    with torch.no_grad():
        model.model.norm.weight.uniform_(0.5, 2.0)
    return model


def _docs(lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in lengths]


def _reference(model, ids):
    """Per-document oracle: final-norm hidden states, full logits, next tokens (one doc, no padding)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        hidden = model.model(input_ids=x).last_hidden_state[0]  # (T, d), after the final norm
        logits = model(input_ids=x).logits[0]
    return hidden[:-1], logits[:-1], torch.tensor(ids[1:])


def _collect(batches):
    batches = list(batches)
    return (
        torch.cat([b.acts for b in batches]),
        torch.cat([b.logits for b in batches]),
        torch.cat([b.labels for b in batches]),
        len(batches),
    )


def test_matches_unpadded_oracle_with_padding_and_batching(tiny):
    docs = _docs([5, 17, 9, 30, 2])
    acts, logits, labels, nb = _collect(capture_causal_lm(tiny, docs, token_budget=64, progress=False))
    ref = [_reference(tiny, d) for d in docs]
    ref_a = torch.cat([r[0] for r in ref])
    ref_z = torch.cat([r[1] for r in ref])
    ref_y = torch.cat([r[2] for r in ref])
    assert nb > 1  # budget forced several batches, with right padding inside them
    assert labels.dtype == torch.int64 and acts.dtype == logits.dtype == torch.float32
    assert acts.shape == (sum(len(d) - 1 for d in docs), 32) and logits.shape[1] == VOCAB
    torch.testing.assert_close(labels, ref_y, rtol=0, atol=0)
    torch.testing.assert_close(acts, ref_a, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, ref_z, rtol=1e-4, atol=1e-5)
    # logits are the head applied to the captured activations
    torch.testing.assert_close(logits, acts @ tiny.lm_head.weight.T, rtol=1e-4, atol=1e-5)


def test_acts_are_after_final_norm(tiny):
    (doc,) = _docs([12])
    (b,) = list(capture_causal_lm(tiny, [doc], progress=False))
    seen = {}
    handle = tiny.model.norm.register_forward_hook(lambda m, args, out: seen.update(pre=args[0], post=out))
    try:
        with torch.no_grad():
            tiny(input_ids=torch.tensor([doc]))
    finally:
        handle.remove()
    pre_norm, post_norm = seen["pre"][0, :-1], seen["post"][0, :-1]
    torch.testing.assert_close(b.acts, post_norm, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(b.acts, pre_norm, atol=1e-3)  # negative control


def test_batch_budget_invariance(tiny):
    docs = _docs([7, 23, 11, 4, 16])
    a1, z1, y1, n1 = _collect(capture_causal_lm(tiny, docs, token_budget=32, progress=False))
    a2, z2, y2, n2 = _collect(capture_causal_lm(tiny, docs, token_budget=256, progress=False))
    assert n1 > n2
    torch.testing.assert_close(a1, a2, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y1, y2, rtol=0, atol=0)


def test_chunking_counts_every_target_once(tiny):
    (doc,) = _docs([50], seed=3)
    acts, logits, labels, _ = _collect(capture_causal_lm(tiny, [doc], chunk_len=8, progress=False))
    assert labels.tolist() == doc[1:]  # 49 targets, each exactly once, in order
    # within the first chunk the context is intact: equal to the unchunked oracle
    ref_a, _, _ = _reference(tiny, doc)
    torch.testing.assert_close(acts[:7], ref_a[:7], rtol=1e-4, atol=1e-5)
    # after a boundary the context is shorter, so the activations differ (negative control)
    assert not torch.allclose(acts[7:14], ref_a[7:14], atol=1e-4)
    # each chunk equals a fresh run on that window (stride chunk_len - 1)
    window = doc[7:15]
    ref_w, _, _ = _reference(tiny, window)
    torch.testing.assert_close(acts[7:14], ref_w, rtol=1e-4, atol=1e-5)


def test_max_tokens_truncates_exactly(tiny):
    docs = _docs([20, 20, 20])
    _, _, labels, _ = _collect(capture_causal_lm(tiny, docs, max_tokens=25, token_budget=32, progress=False))
    assert labels.tolist() == docs[0][1:] + docs[1][1:7]


def test_positions_indices_and_mask(tiny):
    docs = _docs([6, 9])
    full_a, _, full_y, _ = _collect(capture_causal_lm(tiny, docs, progress=False))
    # only the last token of each text (e.g. an answer) and, for text 2, target 3
    got_a, _, got_y, _ = _collect(capture_causal_lm(tiny, docs, positions=[[-1], [3, -1]], progress=False))
    assert got_y.tolist() == [docs[0][-1], docs[1][3], docs[1][-1]]
    want = torch.stack([full_a[4], full_a[5 + 2], full_a[5 + 7]])
    torch.testing.assert_close(got_a, want, rtol=1e-4, atol=1e-5)
    masks = [[False] * 5 + [True], [False, False, False, True] + [False] * 4 + [True]]
    got2_a, _, got2_y, _ = _collect(capture_causal_lm(tiny, docs, positions=masks, progress=False))
    torch.testing.assert_close(got2_a, got_a, rtol=0, atol=0)
    assert got2_y.tolist() == got_y.tolist()


def test_bad_positions_raise(tiny):
    docs = _docs([6])
    with pytest.raises(InputError, match="position 0"):
        list(capture_causal_lm(tiny, docs, positions=[[0]], progress=False))
    with pytest.raises(InputError, match="out of range"):
        list(capture_causal_lm(tiny, docs, positions=[[6]], progress=False))
    with pytest.raises(InputError, match="mask has"):
        list(capture_causal_lm(tiny, docs, positions=[[True, False]], progress=False))


def test_bf16_autocast_close_to_fp32(tiny):
    docs = _docs([12, 8])
    a32, z32, _, _ = _collect(capture_causal_lm(tiny, docs, progress=False))
    a16, z16, _, _ = _collect(capture_causal_lm(tiny, docs, dtype="bfloat16", progress=False))
    assert a16.dtype == torch.float32
    assert (a16 - a32).abs().max() < 0.1 * a32.abs().max()
    assert next(tiny.parameters()).dtype == torch.float32  # the model itself is untouched


def test_text_input_with_tokenizer_stub(tiny):
    class Tok:
        pad_token_id = 0

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [1 + (ord(c) % (VOCAB - 1)) for c in text]}

    (b,) = list(capture_causal_lm(tiny, ["hello world"], Tok(), progress=True))
    assert b.labels.shape == (10,)
    with pytest.raises(InputError, match="tokenizer"):
        list(capture_causal_lm(tiny, ["text"], None, progress=False))


def test_linear_capture_and_head_lookup(tiny):
    head = find_output_linear(tiny)
    assert head is tiny.lm_head
    with LinearCapture(head) as cap:
        with pytest.raises(RuntimeError):
            cap.pop()
        with torch.no_grad():
            tiny(input_ids=torch.tensor([[1, 2, 3]]))
        x, y = cap.pop()
    assert x.shape == (1, 3, 32) and y.shape == (1, 3, VOCAB)
    assert not head._forward_hooks  # removed on exit
    with pytest.raises(InputError, match="linear output head"):
        find_output_linear(torch.nn.Sequential(torch.nn.ReLU()))


@pytest.mark.parametrize(
    "kw", [dict(token_budget=64), dict(max_tokens=25, token_budget=32), dict(positions=[[-1], [2, 5]], token_budget=64)]
)
def test_uncompacted_batches_hold_the_same_records(tiny, kw):
    """compact=False: every position, -100 where not counted; the counted rows are the compact ones."""
    docs = _docs([20, 9, 17]) if "positions" not in kw else _docs([6, 9])
    acts, logits, labels, nb = _collect(capture_causal_lm(tiny, docs, progress=False, **kw))
    full = list(capture_causal_lm(tiny, docs, progress=False, compact=False, **kw))
    assert len(full) == nb
    fa, fz, fy = (torch.cat(t) for t in zip(*full))
    keep = fy != -100
    assert fa.shape[0] == fz.shape[0] == fy.shape[0] > int(keep.sum())  # padding / last positions kept as -100
    torch.testing.assert_close(fy[keep], labels, rtol=0, atol=0)
    torch.testing.assert_close(fa[keep], acts, rtol=0, atol=0)
    torch.testing.assert_close(fz[keep], logits, rtol=0, atol=0)


def test_capture_runs_in_eval_mode_and_restores_training(tiny):
    """The forward runs with dropout off whatever mode the model is in; a model in training
    mode is put back in it afterwards, one in eval mode is left untouched (a submodule left in
    training mode under an eval root is switched to eval, as ``eval()`` would)."""
    seen = []
    hook = tiny.model.layers[0].register_forward_pre_hook(lambda mod, args: seen.append(mod.training))
    try:
        tiny.train()
        list(capture_causal_lm(tiny, _docs([9]), progress=False))
        assert seen == [False] and tiny.training and all(m.training for m in tiny.modules())
        tiny.eval()
        tiny.model.layers[1].train()
        list(capture_causal_lm(tiny, _docs([9]), progress=False))
        assert seen == [False, False] and not any(m.training for m in tiny.modules())
        list(capture_causal_lm(tiny, _docs([9]), progress=False))
        assert seen == [False, False, False] and not any(m.training for m in tiny.modules())
    finally:
        hook.remove()
        tiny.eval()
