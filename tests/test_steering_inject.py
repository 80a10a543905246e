"""``steer``: hook hygiene, exact no-op at scale 0, direction, padding, positions, generate."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from updatescope.errors import InputError  # noqa: E402
from updatescope.steering import SteeringVector, pad_sequences, steer  # noqa: E402


def tiny(layers=2, hidden=32, vocab=97, seed=0, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
    )
    return LlamaForCausalLM(cfg).eval().to(dtype)


def n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def rows(vocab=97, lengths=(5, 3, 7), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab, (n,), generator=g).tolist() for n in lengths]


def test_hooks_removed_on_exit_and_on_error():
    model = tiny()
    before = n_hooks(model)
    v = torch.ones(32, dtype=torch.float64)
    with steer(model, v, layers=[0, 1], scale=2.0):
        assert n_hooks(model) == before + 4  # two layers + pre-hooks on the model and its decoder body
    assert n_hooks(model) == before
    with pytest.raises(RuntimeError, match="boom"):
        with steer(model, v, layers=[0, 1], scale=2.0):
            model(input_ids=torch.tensor([[3, 4, 5]]))
            raise RuntimeError("boom")
    assert n_hooks(model) == before


def test_scale_zero_is_bitwise_noop():
    model = tiny(dtype=torch.float32)
    ids = torch.tensor([rows()[2]])
    plain = model(input_ids=ids).logits
    with steer(model, torch.randn(32) * 100, layers=[0, 1], scale=0.0):
        zero = model(input_ids=ids).logits
    with steer(model, torch.randn(32), layers=[0, 1], scale=1.0):
        moved = model(input_ids=ids).logits
    assert torch.equal(plain, zero)
    assert not torch.equal(plain, moved)  # the same call with a real scale does change them


def test_vector_steers_logits_toward_target_token():
    # Adding s*v at the last layer's output: as s grows, final_norm(h + s v) -> g * v / rms(v),
    # so logits -> W_out (g * v) / rms(v).  With v = g * W_out[k], token k's logit gains
    # sum_j (g_j W_kj)^2 > 0, so the margin of k must grow with s and fall for s < 0.
    model = tiny()
    k = 17
    W, g = model.lm_head.weight.detach(), model.model.norm.weight.detach()
    v = g * W[k]
    ids = torch.tensor([rows()[2]])

    def margin(scale):
        with torch.no_grad(), steer(model, v, layers=[-1], scale=scale, positions="last"):
            logits = model(input_ids=ids).logits[0]
        return float(logits[-1, k] - logits[-1].mean()), logits

    margins = [margin(s)[0] for s in (-4.0, 0.0, 1.0, 4.0, 16.0)]
    assert margins == sorted(margins) and margins[-1] > margins[1] + 0.3  # bound here: |W_k| sqrt(d) ~ 0.6
    _, steered = margin(64.0)
    assert int(steered[-1].argmax()) == k
    with torch.no_grad():
        plain = model(input_ids=ids).logits[0]
    torch.testing.assert_close(steered[:-1], plain[:-1], rtol=0, atol=0)  # only the last token moved


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("positions", ["last", "all"])
def test_batched_padded_equals_unbatched(side, positions):
    model = tiny()
    seqs = rows()
    v = SteeringVector(
        torch.randn(2, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64), layers=(0, 1)
    )
    ids, mask = pad_sequences(seqs, pad_id=0, side=side)
    with torch.no_grad(), steer(model, v, scale=3.0, positions=positions):
        batched = model(input_ids=ids, attention_mask=mask).logits
        singles = [model(input_ids=torch.tensor([s])).logits[0] for s in seqs]
    for i, (_s, single) in enumerate(zip(seqs, singles)):
        real = mask[i].bool()
        got = batched[i][real]
        # RoPE scores depend on relative positions only, so left-padding shifts are exact up
        # to rounding; float32 RMSNorm inside HF Llama sets the tolerance.
        torch.testing.assert_close(got, single, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        plain = model(input_ids=torch.tensor([seqs[0]])).logits[0]
    assert (plain - singles[0]).abs().max() > 1e-3  # negative control: steering did act


@pytest.mark.parametrize("positions", ["last", "all"])
def test_inner_model_called_directly_sees_the_mask(positions):
    """Scoring code often calls the decoder body (``model.base_model``) and applies the head
    itself; the hooks must see that call's attention mask too, or "last" would steer the
    last *padded* position of every shorter row (and leave it unsteered)."""
    model = tiny()
    seqs = rows()
    v = SteeringVector(
        torch.randn(2, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64), layers=(0, 1)
    )
    ids, mask = pad_sequences(seqs, pad_id=0, side="right")
    body = model.base_model
    with torch.no_grad(), steer(model, v, scale=3.0, positions=positions):
        batched = body(input_ids=ids, attention_mask=mask).last_hidden_state
        singles = [body(input_ids=torch.tensor([s])).last_hidden_state[0] for s in seqs]
    with torch.no_grad():
        plain = [body(input_ids=torch.tensor([s])).last_hidden_state[0] for s in seqs]
    for i, s in enumerate(seqs):
        last = len(s) - 1
        torch.testing.assert_close(batched[i, last], singles[i][last], rtol=1e-5, atol=1e-5)
        assert (singles[i][last] - plain[i][last]).abs().max() > 1e-3  # every row was steered
    assert n_hooks(model) == 0


def test_generate_under_steering_and_generated_positions_leave_prompt_alone():
    model = tiny()
    seqs = rows(lengths=(4, 6))
    ids, mask = pad_sequences(seqs, pad_id=0, side="left")
    v = torch.randn(32, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 5
    kw = dict(
        attention_mask=mask,
        max_new_tokens=4,
        do_sample=False,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    before = n_hooks(model)
    with torch.no_grad():
        plain = model.generate(ids, **kw)
        with steer(model, v, layers=[0, 1], scale=4.0, positions="generated"):
            gen = model.generate(ids, **kw)
        with steer(model, v, layers=[0, 1], scale=4.0, positions="prompt"):
            prm = model.generate(ids, **kw)
    assert n_hooks(model) == before
    assert gen.sequences.shape == (2, ids.shape[1] + 4)
    # The first new token's logits come from the prompt pass: untouched by "generated" ...
    assert torch.equal(gen.logits[0], plain.logits[0])
    # ... but later steps see steered generated tokens, and "prompt" changes the first step.
    assert not torch.allclose(gen.logits[-1], plain.logits[-1])
    assert not torch.allclose(prm.logits[0], plain.logits[0])


def test_generated_and_last_positions_in_plain_forward():
    model = tiny()
    ids = torch.tensor([rows()[0]])
    v = torch.randn(32, dtype=torch.float64)
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with steer(model, v, layers=[0], scale=2.0, positions="generated"):
            gen = model(input_ids=ids).logits  # a cache-less call is all prompt
        with steer(model, v, layers=[0], scale=2.0, positions="prompt"):
            prm = model(input_ids=ids).logits
        with steer(model, v, layers=[0], scale=2.0, positions="all"):
            every = model(input_ids=ids).logits
    assert torch.equal(gen, plain)
    assert torch.equal(prm, every)


def test_bad_arguments_raise_input_error():
    model = tiny()
    before = n_hooks(model)
    v = torch.ones(32, dtype=torch.float64)
    with pytest.raises(InputError, match="positions"):
        with steer(model, v, layers=[0], positions="middle"):
            pass
    with pytest.raises(InputError, match="layers"):
        with steer(model, v):
            pass
    with pytest.raises(InputError, match="out of range"):
        with steer(model, v, layers=[5]):
            pass
    with pytest.raises(InputError, match="hidden size"):
        with steer(model, torch.ones(7), layers=[0]):
            pass
    with pytest.raises(InputError, match="no layer"):
        with steer(model, SteeringVector(v[None], layers=(0,)), layers=[1]):
            pass
    assert n_hooks(model) == before


def test_batched_generate_equals_per_row():
    model = tiny()
    seqs = rows(lengths=(3, 6, 4))
    ids, mask = pad_sequences(seqs, pad_id=0, side="left")
    v = torch.randn(32, generator=torch.Generator().manual_seed(4), dtype=torch.float64) * 3
    kw = dict(max_new_tokens=3, do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad(), steer(model, v, layers=[0, 1], scale=4.0, positions="generated"):
        batched = model.generate(ids, attention_mask=mask, **kw)
        singles = [model.generate(torch.tensor([s]), **kw) for s in seqs]
    for i, (_s, single) in enumerate(zip(seqs, singles)):
        assert batched.sequences[i, -3:].tolist() == single.sequences[0, -3:].tolist()
        for step in range(3):
            torch.testing.assert_close(batched.logits[step][i], single.logits[step][0], rtol=1e-5, atol=1e-5)


def test_decoder_layers_found_through_a_wrapper_or_refused():
    from updatescope.steering import decoder_layers

    model = tiny()
    wrapper = torch.nn.Module()
    wrapper.inner = torch.nn.Module()
    wrapper.inner.net = model
    assert decoder_layers(wrapper) is model.model.layers
    with pytest.raises(InputError, match="decoder layers"):
        decoder_layers(torch.nn.Linear(3, 3))
