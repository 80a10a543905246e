"""From files or lists to signatures and scores: one typed corpus, tokenised once, captured,
fed to a sketch.

    corpus = Corpus.from_files(["email.jsonl"])             # validated before any model loads
    model, tok = load_model("smollm2")
    sig = sketch_corpus(model, tok, corpus, SketchOptions(max_tokens=400))
    scores = score_documents(model, tok, pool, sig)         # one score per document of a pool

This layer sits between the shells (CLI, experiments) and the pieces it joins: ``data``
(reading files), ``models`` (loading), ``capture`` (forward passes) and ``sketch``.
"""

from __future__ import annotations

from typing import Any

from updatescope.pipeline.checkpoint import checkpoint_path
from updatescope.pipeline.corpus import Corpus, Tokens
from updatescope.pipeline.head import check_memory, feed_sketch, segment_ranges, sketch_corpus
from updatescope.pipeline.network import layer_batches, layer_config, sketch_network_corpus
from updatescope.pipeline.options import SketchOptions
from updatescope.pipeline.route import Router
from updatescope.pipeline.score import score_documents

__all__ = [
    "Corpus",
    "Router",
    "SketchOptions",
    "Tokens",
    "check_memory",
    "checkpoint_path",
    "feed_sketch",
    "layer_batches",
    "layer_config",
    "load_model",
    "score_documents",
    "segment_ranges",
    "sketch_corpus",
    "sketch_network_corpus",
]


def load_model(spec: str = "smollm2", dtype: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode: ``"smollm2"`` (the packaged model) or a local Hugging
    Face causal-LM folder; ``dtype`` one of float32 (default), bfloat16, float16."""
    from updatescope.models.hf import load_causal_lm

    return load_causal_lm(spec, dtype=dtype) if dtype is not None else load_causal_lm(spec)
