"""capture_linear_grads: one forward + backward per batch equals autograd per-example gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.network import (
    NetworkConfig,
    NetworkSketch,
    capture_linear_grads,
    exact_network_alignment,
    match_linear_layers,
)


def tiny_llama_untied():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg).double().eval()


def _batch(seed: int, b: int = 3, t: int = 6):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 32, (b, t), generator=g)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = ids[:, 1:]  # next-token targets, aligned with the logits
    labels[:, :2] = IGNORE_INDEX  # a prompt: no loss there, but gradient from later tokens
    return ids, labels


PATTERNS = ["model.layers.*.self_attn.q_proj", "model.layers.1.mlp.down_proj", "lm_head"]


def test_per_sequence_capture_equals_autograd_on_tiny_llama():
    pytest.importorskip("transformers")
    model = tiny_llama_untied()
    ids, labels = _batch(0)
    names = match_linear_layers(model, PATTERNS)
    assert names == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.1.self_attn.q_proj",
        "model.layers.1.mlp.down_proj",
        "lm_head",
    ]
    cap = capture_linear_grads(model, PATTERNS, {"input_ids": ids}, labels)
    mods = dict(model.named_modules())
    for i in range(ids.shape[0]):  # oracle: each sequence on its own, autograd w.r.t. the weights
        z = model(input_ids=ids[i : i + 1]).logits
        loss = nn.functional.cross_entropy(z[0], labels[i], ignore_index=IGNORE_INDEX, reduction="sum")
        grads = torch.autograd.grad(loss, [mods[n].weight for n in names])
        for n, g in zip(names, grads):
            a, e = cap.sequences()[n]
            torch.testing.assert_close(torch.einsum("tk,td->kd", e[i], a[i]), g, rtol=1e-10, atol=1e-12)
    # the head's output gradient at a labelled token is softmax − onehot, zero where unlabelled
    a, e = cap.layers["lm_head"]
    z = model(input_ids=ids).logits
    want = torch.softmax(z, -1) - nn.functional.one_hot(labels.clamp(min=0), 32)
    torch.testing.assert_close(e[cap.labelled], want[cap.labelled], rtol=1e-10, atol=1e-12)
    assert e[~cap.labelled].abs().max() == 0
    # but an internal layer carries gradient at unlabelled (prompt) positions
    assert cap.layers["model.layers.0.self_attn.q_proj"][1][:, 0].abs().max() > 0
    assert all(p.grad is None for p in model.parameters())  # nothing written to the model


def test_per_token_capture_equals_per_token_autograd():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 7, 4, generator=g, dtype=torch.float64)  # position-wise model over (B, T)
    y = torch.randint(0, 3, (5, 7), generator=g)
    y[1, 3] = IGNORE_INDEX
    cap = capture_linear_grads(model, ["*"], x, y)
    toks = cap.tokens()
    assert toks["0"][0].shape == (34, 4)
    rows = cap.labelled.nonzero().tolist()
    for r, (i, t) in enumerate(rows):  # oracle: gradient of each token's own loss
        loss = nn.functional.cross_entropy(model(x[i, t : t + 1]), y[i, t : t + 1], reduction="sum")
        grads = torch.autograd.grad(loss, [model[0].weight, model[2].weight])
        for name, gw in zip(("0", "2"), grads):
            a, e = toks[name]
            torch.testing.assert_close(torch.outer(e[r], a[r]), gw, rtol=1e-10, atol=1e-12)


def test_capture_with_frozen_weights_and_classifier_logits():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)).double()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn(6, 4, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, IGNORE_INDEX, 1, 0])
    cap = capture_linear_grads(model, ["0", "2"], x, y)
    a, e = cap.tokens()["2"]
    assert a.shape == (5, 5) and e.shape == (5, 3)
    want = torch.softmax(model(x), -1) - nn.functional.one_hot(y.clamp(min=0), 3)
    torch.testing.assert_close(e, want[y != IGNORE_INDEX], rtol=1e-10, atol=1e-12)
    assert cap.tokens()["0"][1].abs().max() > 0  # gradient reaches the frozen first layer


def test_capture_feeds_network_sketch_and_exact_reference():
    pytest.importorskip("transformers")
    model = tiny_llama_untied()
    names = match_linear_layers(model, PATTERNS)
    mods = dict(model.named_modules())
    layers = tuple((n, mods[n].in_features, mods[n].out_features) for n in names)
    caps = [capture_linear_grads(model, PATTERNS, {"input_ids": ids}, lab) for ids, lab in (_batch(5), _batch(6))]
    for mode in ("token", "sequence"):
        take = (lambda c: c.tokens()) if mode == "token" else (lambda c: c.sequences())
        sks = [NetworkSketch(NetworkConfig(layers, 64, 0, mode)).update(take(c)) for c in caps]
        n = caps[0].labelled.sum() if mode == "token" else caps[0].labelled.shape[0]
        assert sks[0].count == int(n)
        ex = exact_network_alignment(
            [take(caps[0])[k] for k in names], [take(caps[1])[k] for k in names], names=names, self_pairs=True
        )
        assert ex.bound_lower <= ex.full <= ex.bound_upper
        assert len(ex.profile) == 4


def test_capture_errors():
    model = nn.Sequential(nn.Linear(4, 3))
    x = torch.randn(2, 4)
    with pytest.raises(InputError, match="matches no"):
        capture_linear_grads(model, ["nope*"], x, torch.tensor([0, 1]))
    with pytest.raises(InputError, match="labels have shape"):
        capture_linear_grads(model, ["0"], x, torch.tensor([0, 1, 2]))
    with pytest.raises(InputError, match="out of range"):
        capture_linear_grads(model, ["0"], x, torch.tensor([0, 7]))

    # a layer that sees positions while labels are per example has no per-token samples
    class Pool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, 3)

        def forward(self, x):  # (B, T, 4) -> (B, 3)
            return self.head(self.inner(x).mean(1))

    cap = capture_linear_grads(Pool(), ["*"], torch.randn(2, 5, 4), torch.tensor([0, 2]))
    assert cap.sequences()["inner"][0].shape == (2, 5, 4) and cap.sequences()["head"][0].shape == (2, 1, 4)
    with pytest.raises(InputError, match="positions"):
        cap.tokens()
    # hooks are removed after an error
    assert not model[0]._forward_hooks
    # all labels ignored: zero gradients, no backward error
    cap = capture_linear_grads(model, ["0"], x, torch.tensor([IGNORE_INDEX, IGNORE_INDEX]))
    assert cap.layers["0"][1].abs().max() == 0 and cap.tokens()["0"][0].shape[0] == 0


def test_pooled_classifier_mixed_positions_per_sequence():
    # internal layer over T positions, head over one pooled vector: per-sequence mode handles both
    class Pool(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner, self.head = nn.Linear(4, 4), nn.Linear(4, 3)

        def forward(self, x):
            return self.head(torch.tanh(self.inner(x)).mean(1))

    torch.manual_seed(4)
    model = Pool().double()
    x = torch.randn(4, 5, 4, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 1])
    cap = capture_linear_grads(model, ["*"], x, y)
    for i in range(4):
        loss = nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1], reduction="sum")
        for (_name, (a, e)), g in zip(
            cap.sequences().items(), torch.autograd.grad(loss, [model.inner.weight, model.head.weight])
        ):
            torch.testing.assert_close(torch.einsum("tk,td->kd", e[i], a[i]), g, rtol=1e-10, atol=1e-12)
    sk = NetworkSketch(NetworkConfig((("inner", 4, 4), ("head", 4, 3)), 32, 0, "sequence")).update(cap.sequences())
    assert sk.count == 4
