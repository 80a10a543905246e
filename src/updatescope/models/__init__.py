"""Model loaders: the packaged SmolLM2-135M (offline) and local Hugging Face folders."""
from updatescope.models.hf import head_fingerprint, load_causal_lm
from updatescope.models.smollm2 import load_smollm2, smollm2_gguf_path

__all__ = ["load_causal_lm", "head_fingerprint", "load_smollm2", "smollm2_gguf_path"]
