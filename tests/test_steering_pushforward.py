"""The pushforward J_θ h · δθ against a central difference and a dense Jacobian (float64)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from updatescope.constants import IGNORE_INDEX  # noqa: E402
from updatescope.errors import InputError  # noqa: E402
from updatescope.steering import (
    direction_norm,
    gradient_step,
    layer_outputs,
    pushforward,  # noqa: E402
    random_direction,
)


@pytest.fixture(autouse=True)
def exact_float64(monkeypatch):
    """HF's Llama RMSNorm computes in float32 even in a float64 model, which would cap every
    oracle comparison at ~1e-7; swap in the same formula without the cast for these tests."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    monkeypatch.setattr(LlamaRMSNorm, "forward", forward)


def tiny(hidden=32, layers=2, vocab=97, seed=0, inter=64, heads=4):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval().double()


def batch(vocab=97, n=3, L=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, vocab, (n, L), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row
    mask[-1, -3:] = 0  # a right-padded row
    return ids, mask


def shifted(model, delta, eps):
    params = {k: p.detach() + eps * delta[k] if k in delta else p.detach() for k, p in model.named_parameters()}
    return params


@pytest.mark.parametrize("position", ["last", "all", 1])
def test_jvp_equals_central_difference(position):
    model = tiny()
    ids, mask = batch()
    delta = random_direction(dict(model.named_parameters()), seed=3, norm=1.0)
    jvp = pushforward(model, delta, ids, mask, position=position)  # (2, 3, 32)
    eps = 1e-4
    with torch.no_grad():
        plus = layer_outputs(model, shifted(model, delta, eps), ids, mask, [0, 1], position)
        minus = layer_outputs(model, shifted(model, delta, -eps), ids, mask, [0, 1], position)
    fd = (torch.stack(plus) - torch.stack(minus)) / (2 * eps)
    rel = (jvp - fd).norm() / fd.norm()
    assert jvp.shape == (2, 3, 32)
    assert fd.norm() > 1e-3  # the shift is not trivially zero
    assert rel < 1e-5, rel


def test_jvp_equals_dense_jacobian():
    model = tiny(hidden=8, layers=1, vocab=11, inter=16, heads=2)
    ids, mask = batch(vocab=11, n=2, L=4)
    names = [k for k, _ in model.named_parameters()]
    base = {k: p.detach() for k, p in model.named_parameters()}
    sizes = [base[k].numel() for k in names]
    flat0 = torch.cat([base[k].reshape(-1) for k in names])

    def f(flat):
        parts = dict(zip(names, (c.reshape(base[k].shape) for k, c in zip(names, flat.split(sizes)))))
        return torch.stack(layer_outputs(model, parts, ids, mask, [0], "last")).reshape(-1)

    J = torch.autograd.functional.jacobian(f, flat0)  # (1*2*8, n_params), by reverse mode
    delta = random_direction(base, seed=5)
    flat_delta = torch.cat([delta[k].reshape(-1) for k in names])
    expected = (J @ flat_delta).reshape(1, 2, 8)
    got = pushforward(model, delta, ids, mask, layers=[0], position="last")
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_pushforward_linear_causal_and_batch_invariant():
    model = tiny(layers=3)
    ids, mask = batch(n=5)
    # Only layer 2's MLP moves: layers 0 and 1 cannot see it (negative control), layer 2 must.
    name = "model.layers.2.mlp.down_proj.weight"
    p = dict(model.named_parameters())[name]
    delta = random_direction({name: p}, seed=0)
    shift = pushforward(model, delta, ids, mask, batch_size=2)
    assert shift[:2].abs().max() == 0
    assert shift[2].norm() > 1e-3
    double = pushforward(model, {name: 2 * delta[name]}, ids, mask, batch_size=5)
    torch.testing.assert_close(double, 2 * shift, rtol=1e-12, atol=1e-14)


def test_gradient_step_matches_hf_loss():
    model = tiny()
    ids, mask = batch()
    labels = ids.clone()
    labels[mask == 0] = IGNORE_INDEX
    delta = gradient_step(model, ids, labels, mask, lr=0.5)
    # Oracle by hand (HF's own loss casts logits to float32): mean -log p(next token).
    logp = model(input_ids=ids, attention_mask=mask).logits[:, :-1].log_softmax(-1)
    target = labels[:, 1:]
    keep = target != IGNORE_INDEX
    loss = -logp[keep].gather(1, target[keep][:, None]).mean()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    for (name, _), g in zip(model.named_parameters(), grads):
        ref = torch.zeros_like(delta[name]) if g is None else -0.5 * g
        torch.testing.assert_close(delta[name], ref, rtol=1e-10, atol=1e-14)
    assert all(p.grad is None for p in model.parameters())  # no state left on the model
    with pytest.raises(InputError):
        gradient_step(model, ids, torch.full_like(ids, IGNORE_INDEX))


def test_random_direction_same_norm_seeded_and_local():
    model = tiny()
    like = gradient_step(model, *batch()[:1], batch()[0])
    state = torch.get_rng_state()
    a, b, c = random_direction(like, seed=1), random_direction(like, seed=1), random_direction(like, seed=2)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator was not used
    assert abs(direction_norm(a) - direction_norm(like)) < 1e-9 * direction_norm(like)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_bad_direction_raises():
    model = tiny()
    ids, mask = batch()
    with pytest.raises(InputError, match="does not have"):
        pushforward(model, {"nope": torch.zeros(3)}, ids, mask)
    with pytest.raises(InputError, match="shape"):
        pushforward(model, {"model.norm.weight": torch.zeros(3)}, ids, mask)
    with pytest.raises(InputError, match="position"):
        pushforward(model, {"model.norm.weight": torch.zeros(32)}, ids, mask, position="first")
