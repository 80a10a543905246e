"""Model + corpus -> network signature: the chosen ``nn.Linear`` layers plus the head, one
forward and one backward pass per batch, over the same windows and counted targets as the
head sketch (``capture.chunks.causal_batches``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from updatescope.errors import InputError
from updatescope.pipeline.corpus import Corpus, Tokens
from updatescope.pipeline.options import SketchOptions

__all__ = ["check_layer_options", "layer_config", "layer_batches", "sketch_network_corpus"]


def check_layer_options(options: SketchOptions) -> None:
    """Network sketches need two-factor maps: refuse countsketch before any model loads."""
    if "countsketch" in (options.act_map, options.error_map):
        raise InputError(
            "--layers needs two-factor maps (dense, srht, fold, spread, stack, foldspread), not countsketch"
        )


def layer_config(model: Any, patterns: Sequence[str], options: SketchOptions, mode: str = "token") -> Any:
    """The ``NetworkConfig`` of the layers matching ``patterns`` plus the head (always included).
    A pattern that matches no linear layer is refused, naming the nearest layer names."""
    import difflib
    import fnmatch

    from torch import nn

    from updatescope.capture.hook import find_output_linear
    from updatescope.network import network_config

    check_layer_options(options)
    head = find_output_linear(model)
    head_name = next(n for n, m in model.named_modules() if m is head)
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    for pat in patterns:
        if not any(fnmatch.fnmatchcase(n, pat) for n in linears):
            near = difflib.get_close_matches(pat, linears, n=3, cutoff=0.3) or linears[:3]
            raise InputError(
                f"--layers pattern {pat!r} matches no nn.Linear layer of the model ({len(linears)} "
                f"linear layers, e.g. {', '.join(near) or 'none'})"
            )
    return network_config(
        model,
        [*patterns, head_name],
        sketch_dim=options.sketch_dim,
        seed=options.seed,
        mode=mode,
        act_map=options.act_map,
        error_map=options.error_map,
    )


def layer_batches(model: Any, tokenizer: Any, tokens: Tokens, options: SketchOptions) -> Iterator[dict[str, Any]]:
    """Padded causal-LM batches ``{input_ids, attention_mask, labels, use_cache}`` of ``tokens``
    (labels aligned with the logits), cut after ``options.max_tokens`` counted targets.  The
    window length never depends on the token budget, so the budget only batches."""
    from updatescope.capture.causal_lm import default_chunk_len, pad_id_of
    from updatescope.capture.chunks import causal_batches

    for ids, attn, labels in causal_batches(
        tokenizer,
        tokens.ids,
        chunk_len=options.chunk_len or default_chunk_len(model),
        token_budget=options.token_budget,
        pad_id=pad_id_of(tokenizer),
        positions=tokens.masks,
        max_tokens=options.max_tokens,
    ):
        yield {"input_ids": ids, "attention_mask": attn, "labels": labels, "use_cache": False}


def sketch_network_corpus(
    model: Any,
    tokenizer: Any,
    corpus: Corpus | Tokens | Sequence[Any],
    patterns: Sequence[str],
    options: SketchOptions | None = None,
    *,
    mode: str = "token",
    progress: bool = True,
) -> Any:
    """The ``NetworkSketch`` of ``corpus``'s gradients at the layers matching ``patterns`` and the head."""
    from updatescope.network import sketch_layers

    options = options or SketchOptions()
    if isinstance(corpus, Tokens):
        tokens = corpus
    else:
        corpus = corpus if isinstance(corpus, Corpus) else Corpus.from_texts(list(corpus))
        tokens = corpus.tokenise(tokenizer)
    config = layer_config(model, patterns, options, mode)
    batches: Any = layer_batches(model, tokenizer, tokens, options)
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc=f"sketching {len(config.layers)} layers", unit="batch")
    sketch = sketch_layers(model, config, batches)
    if sketch.count == 0:
        raise InputError("no tokens to sketch (documents shorter than two tokens?)")
    return sketch
