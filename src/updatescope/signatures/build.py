"""From a model and texts to a Signature: capture (forward only) feeding a FisherSketch."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch

from updatescope.sketch.fishersketch import FisherSketch
from updatescope.sketch.signature import Signature


def sketch_causal_lm(model: Any, tokenizer: Any, texts: Iterable[Any], *, sketch_dim: int = 4096, seed: int = 0,
                     max_tokens: int | None = None, token_budget: int = 1024, dtype: Any = None,
                     positions: Sequence[Any] | None = None, chunk_len: int | None = None,
                     progress: bool = True, desc: str = "sketch", fingerprint: str | None = None,
                     meta: dict[str, str] | None = None, act_map: str = "auto",
                     error_map: str = "auto") -> Signature:
    """Signature of the next-token head geometry of ``texts`` under ``model``.

    One forward pass per batch; the head input and logits are captured by a hook and
    streamed into the sketch (float64 accumulation), so memory is O(token_budget × K).
    The model's head fingerprint goes into the config: signatures of different models
    or tokenizers can never be compared silently.
    """
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint

    head = find_output_linear(model)
    k, d = head.weight.shape
    fp = fingerprint if fingerprint is not None else head_fingerprint(model, tokenizer)
    device = head.weight.device
    sk = FisherSketch(d, k, sketch_dim, seed, fingerprint=fp, device=device, act_map=act_map,
                     error_map=error_map)
    with torch.inference_mode():
        for acts, logits, labels in capture_causal_lm(model, texts, tokenizer, positions=positions,
                                                       chunk_len=chunk_len, token_budget=token_budget,
                                                       max_tokens=max_tokens, dtype=dtype,
                                                       progress=progress, desc=desc, compact=False):
            sk.update_logits(acts, logits, labels)
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    return sk.signature(model=str(name), tokens=str(sk.count), **(meta or {}))
