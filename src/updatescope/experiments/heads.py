"""Head streams of the experiments: the model loader, the frozen head, cached captures,
and the head arithmetic every runner shares (logits, errors, one sketch per stream).

Logits are never cached: they are ``acts @ W.T (+ b)`` and cost one matmul to recompute
from the frozen head, against K floats per token to store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.experiments.caching import cache_key, cached
from updatescope.sketch.inputs import softmax_minus_onehot

__all__ = [
    "load_model",
    "head_weights",
    "fingerprint",
    "capture_acts",
    "logits_of",
    "errors_of",
    "sketch_stream",
    "SKETCH_ROWS",
]

#: rows per ``update_logits`` call when a cached stream is sketched: bounds the (rows, K) logits
SKETCH_ROWS = 256


def load_model(spec: str = "smollm2") -> tuple[Any, Any]:
    """(model, tokenizer), eval mode, float32.  Monkeypatched in tests."""
    from updatescope.models.hf import load_causal_lm

    return load_causal_lm(spec)


def head_weights(model: Any) -> tuple[Tensor, Tensor | None]:
    """The frozen head as float32 copies: W (K, d), b (K,) or None."""
    from updatescope.capture.hook import find_output_linear

    head = find_output_linear(model)
    w = head.weight.detach().to(torch.float32).clone()
    b = None if head.bias is None else head.bias.detach().to(torch.float32).clone()
    return w, b


def fingerprint(model: Any, tokenizer: Any) -> str:
    from updatescope.models.hf import head_fingerprint

    return head_fingerprint(model, tokenizer)


def capture_acts(
    model: Any,
    tokenizer: Any,
    texts: Sequence[Any],
    *,
    fp: str,
    positions: Sequence[Any] | None = None,
    max_tokens: int | None = None,
    token_budget: int = 1024,
    desc: str = "capture",
    use_cache: bool = True,
) -> dict[str, Tensor]:
    """{"acts": (n, d) float32, "labels": (n,) int64} for the counted positions of ``texts``.

    Cached by (fingerprint, texts, positions, max_tokens): a second call is a file read.
    """
    from updatescope.capture.causal_lm import capture_causal_lm

    def build() -> dict[str, Tensor]:
        acts, labels = [], []
        for a, _logits, y in capture_causal_lm(
            model,
            list(texts),
            tokenizer,
            positions=positions,
            token_budget=token_budget,
            max_tokens=max_tokens,
            progress=False,
            desc=desc,
        ):
            acts.append(a.float().cpu())
            labels.append(y.cpu())
        if not acts:
            raise InputError(f"{desc}: nothing captured (texts too short?)")
        return {"acts": torch.cat(acts), "labels": torch.cat(labels)}

    key = cache_key(
        "acts-v1",
        fp,
        list(texts),
        None if positions is None else [list(p) for p in positions],
        max_tokens,
        getattr(getattr(model, "config", None), "max_position_embeddings", None),
    )
    return cached("acts", key, build, use_cache=use_cache)


def logits_of(w: Tensor, b: Tensor | None, acts: Tensor) -> Tensor:
    """acts (n, d) -> logits (n, K) = acts Wᵀ + b, float32."""
    z = acts @ w.T
    return z if b is None else z + b


def errors_of(w: Tensor, b: Tensor | None, acts: Tensor, labels: Tensor) -> Tensor:
    """softmax(W a + b) − onehot(y), (n, K) float32 (labels must be valid ids)."""
    return softmax_minus_onehot(logits_of(w, b, acts), labels)


def sketch_stream(
    w0: Tensor,
    b0: Tensor | None,
    acts: Tensor,
    labels: Tensor,
    *,
    sketch_dim: int,
    seed: int,
    fp: str = "",
    name: str = "",
    act_map: str = "auto",
    error_map: str = "auto",
    logits: Tensor | None = None,
) -> Any:
    """The signature of one cached head stream: logits recomputed from the frozen head (or
    taken from ``logits`` (n, K)) and fed to ``update_logits`` in ``SKETCH_ROWS`` rows.
    The bias ``b0`` enters the logits only: these streams are compared with exact values
    computed from the same (acts, errors), i.e. the weight block of the Fisher, so the sketch
    keeps ``head_bias=False`` (the library's model-level builders include the bias block)."""
    from updatescope.pipeline import feed_sketch
    from updatescope.sketch.fishersketch import FisherSketch

    k, d = w0.shape
    sk = FisherSketch(d, k, sketch_dim, seed, fingerprint=fp, act_map=act_map, error_map=error_map)

    def rows() -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for i in range(0, acts.shape[0], SKETCH_ROWS):
            r = slice(i, i + SKETCH_ROWS)
            yield acts[r], (logits[r] if logits is not None else logits_of(w0, b0, acts[r])), labels[r]

    return feed_sketch(sk, rows()).signature(name=name)
