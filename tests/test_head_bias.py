"""A head with a bias: its gradient block is part of the Fisher, and the sketch keeps it.

Oracle: per-token gradients of the cross-entropy with respect to (W, b) by autograd, the
Fisher alignment of two streams formed from their Gram matrix in float64.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from _tiny_lm import WordTokenizer, tiny_llama
from updatescope.capture.causal_lm import capture_causal_lm
from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.pipeline import SketchOptions, sketch_corpus
from updatescope.sketch.align import alignment, exact_alignment
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.fishersketch import FisherSketch, with_bias
from updatescope.sketch.inputs import softmax_minus_onehot

VOCAB, HIDDEN = 64, 16
TEXTS_S = [" ".join(f"w{(3 * i + j) % 40}" for j in range(30)) for i in range(4)]
TEXTS_T = [" ".join(f"w{(7 * i + 2 * j) % 40}" for j in range(30)) for i in range(4)]


def biased_model(bias_scale: float = 2.0):
    torch.manual_seed(0)
    model = tiny_llama(VOCAB, HIDDEN)
    model.config.tie_word_embeddings = False
    head = nn.Linear(HIDDEN, VOCAB, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.get_input_embeddings().weight)
        head.bias.copy_(torch.randn(VOCAB) * bias_scale)
    model.lm_head = head
    return model.eval(), WordTokenizer(VOCAB)


def stream(model, tok, texts):
    acts, logits, labels = zip(*capture_causal_lm(model, texts, tok, progress=False))
    return torch.cat(acts).double(), torch.cat(logits).double(), torch.cat(labels)


def autograd_grads(model, acts, labels):
    """(n, K·d + K): per-token ∂CE/∂(W, b) of the head, by autograd (float64)."""
    w = model.lm_head.weight.detach().double().requires_grad_(True)
    b = model.lm_head.bias.detach().double().requires_grad_(True)
    rows = []
    for a, y in zip(acts, labels):
        loss = nn.functional.cross_entropy((a @ w.T + b)[None], y[None])
        gw, gb = torch.autograd.grad(loss, (w, b))
        rows.append(torch.cat((gw.reshape(-1), gb)))
    return torch.stack(rows)


def fisher_from_grads(gs, gt):
    """A_F from per-sample gradients: mean cross ⟨g, g'⟩² over the unbiased norms."""

    def norm2(g):
        k = (g @ g.T).square()
        n = g.shape[0]
        return (k.sum() - k.diagonal().sum()) / (n * (n - 1))

    cross = (gs @ gt.T).square().mean()
    return float(cross / (norm2(gs) * norm2(gt)).sqrt())


def test_biased_head_fisher_matches_autograd():
    model, tok = biased_model()
    a_s, z_s, y_s = stream(model, tok, TEXTS_S)
    a_t, z_t, y_t = stream(model, tok, TEXTS_T)
    with torch.no_grad():  # the capture's logits are the biased head's output
        assert torch.allclose(z_s, a_s @ model.lm_head.weight.double().T + model.lm_head.bias.double(), atol=1e-5)
    truth = fisher_from_grads(autograd_grads(model, a_s, y_s), autograd_grads(model, a_t, y_t))
    cfg = SketchConfig(HIDDEN, VOCAB, 256, 0, head_bias=True)
    w, b = model.lm_head.weight.detach().double(), model.lm_head.bias.detach().double()
    # errors from float64 logits, as the autograd oracle forms them (the capture's are float32)
    e_s, e_t = softmax_minus_onehot(a_s @ w.T + b, y_s), softmax_minus_onehot(a_t @ w.T + b, y_t)
    # identity first: (a·a' + 1)(e·e') is the gradient inner product of the biased head
    exact = exact_alignment(with_bias(cfg, a_s), e_s, with_bias(cfg, a_t), e_t)
    assert exact.fisher == pytest.approx(truth, rel=1e-10)
    # negative control: dropping the bias block changes the value
    dropped = exact_alignment(a_s, e_s, a_t, e_t)
    assert abs(dropped.fisher - truth) > 1e-3
    # the library path: sketch_corpus records the bias and estimates the biased Fisher
    sigs = [
        sketch_corpus(model, tok, texts, SketchOptions(sketch_dim=4096, seed=s), progress=False)
        for s in (0,)
        for texts in (TEXTS_S, TEXTS_T)
    ]
    assert sigs[0].config.head_bias and sigs[0].config.map_act_dim == HIDDEN + 1
    est = alignment(*sigs)
    # tolerance from the estimate's own standard error (±4·se: a ~1e-4 false-failure rate)
    assert abs(est.fisher - truth) <= 4 * est.fisher_se + 1e-9, (est.fisher, est.fisher_se, truth)


def test_sketch_with_bias_equals_sketch_of_augmented_acts():
    """head_bias=True is exactly the unbiased sketch of (a, 1) with a map over d + 1 inputs."""
    torch.manual_seed(1)
    a, e = torch.randn(50, 8, dtype=torch.float64), torch.randn(50, 12, dtype=torch.float64)
    biased = FisherSketch(8, 12, 256, 3, head_bias=True).update(a, e).signature()
    plain = FisherSketch(9, 12, 256, 3).update(torch.cat((a, torch.ones(50, 1, dtype=a.dtype)), 1), e).signature()
    assert torch.equal(biased.sums, plain.sums) and torch.equal(biased.diag, plain.diag)


def test_bias_is_part_of_the_compatibility_key(tmp_path):
    from updatescope.signatures.io import load_signature, save_signature

    a, e = torch.randn(20, 8), torch.randn(20, 12)
    with_b = FisherSketch(8, 12, 64, 0, head_bias=True).update(a, e).signature()
    without = FisherSketch(8, 12, 64, 0).update(a, e).signature()
    with pytest.raises(IncompatibleSignatureError, match="head_bias"):
        alignment(with_b, without)
    path = save_signature(with_b, tmp_path / "b.sig")
    assert load_signature(path).config.head_bias is True
    with pytest.raises(InputError, match="head_bias"):
        SketchConfig(8, 12, 64, 0, head_bias="yes")  # type: ignore[arg-type]
