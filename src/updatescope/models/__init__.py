"""Model loaders: the packaged SmolLM2-135M (offline), local Hugging Face folders, EfficientNet-lite0."""

from updatescope.models.efficientnet import efficientnet_preprocess, load_efficientnet_lite0
from updatescope.models.hf import head_fingerprint, load_causal_lm
from updatescope.models.smollm2 import load_smollm2, smollm2_gguf_path

__all__ = [
    "load_causal_lm",
    "head_fingerprint",
    "load_smollm2",
    "smollm2_gguf_path",
    "load_efficientnet_lite0",
    "efficientnet_preprocess",
]
