"""Stream text through a Hugging Face causal LM and capture (head input, logits, next token).

Forward only (``torch.no_grad``); nothing is trained. For every counted position t
of a token sequence ``x``, the record is

    acts[t]   = a_t, the input of the output head (after the final norm), shape (d,)
    logits[t] = W a_t (+ b), shape (K,)
    labels[t] = x[t + 1], the observed next token

so ``errors = softmax(logits) - onehot(labels)`` is the empirical-Fisher error of paper A.

Positions. By default every next-token target of every document is counted exactly once.
``positions`` restricts this: for text i, either a list of *target* token indices (index j
means "count the prediction of token j from tokens < j"; negative indices count from the end,
so ``[-1]`` counts only the last token, e.g. the answer of a prompt) or a boolean mask over
the text's tokens (True = count that token as a target). Target index 0 has no context and
is never counted.

Long documents are cut into chunks of ``chunk_len`` tokens (default: the model's context
length, at most ``DEFAULT_CHUNK_LEN``) that overlap by one token, so every target keeps
exactly one prediction and only the context before a chunk boundary is lost. Chunks with no
counted target are skipped.

Batches hold at most ``token_budget`` padded tokens (right padding plus an attention mask,
so real tokens never attend to padding and keep their positions). Logits (n, K) dominate
memory: 1,024 tokens x 49,152 logits x 4 bytes = 200 MB, hence the modest default budget.
The budget only groups chunks into batches; it never changes the chunks, so it cannot
change what is counted or the activations (a chunk longer than the budget is passed alone,
exceeding the budget for that pass).  Earlier versions shortened the chunks to the budget,
which made a small budget cut every document into short windows and changed the sums.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from updatescope.capture.chunks import causal_batches, tokenize
from updatescope.capture.hook import LinearCapture, find_output_linear
from updatescope.constants import IGNORE_INDEX, torch_dtype
from updatescope.errors import InputError

__all__ = ["CaptureBatch", "capture_causal_lm", "context_length", "count_tokens", "DEFAULT_CHUNK_LEN", "pad_id_of"]

#: Default window for long documents when the model's context is longer: with the default
#: token budget of 1,024 this is the window every signature so far was sketched with.
DEFAULT_CHUNK_LEN = 1024


class CaptureBatch(NamedTuple):
    """One batch of captured records; unpacks as ``acts, logits, labels``."""

    acts: Tensor  # (n, d) float32, head input
    logits: Tensor  # (n, K) float32, head output
    labels: Tensor  # (n,) int64, observed next token


def context_length(model: nn.Module) -> int:
    """The model's context length from its config (2,048 when the config does not say)."""
    cfg = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 1:
            return value
    return 2048


def default_chunk_len(model: nn.Module) -> int:
    """The window for long documents: the model's context, at most ``DEFAULT_CHUNK_LEN``."""
    return min(context_length(model), DEFAULT_CHUNK_LEN)


def pad_id_of(tokenizer: Any) -> int:
    """The tokenizer's padding id (0 when it has none: padded positions are masked anyway)."""
    pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    return int(pad) if pad is not None else 0


def count_tokens(tokenizer: Any, texts: Iterable[str], add_special_tokens: bool = True) -> int:
    """Number of next-token targets the default capture would count (sum of len - 1)."""
    return sum(max(len(tokenize(tokenizer, t, add_special_tokens, i)) - 1, 0) for i, t in enumerate(texts))


def capture_causal_lm(
    model: nn.Module,
    texts: Iterable[Any],
    tokenizer: Any = None,
    *,
    positions: Sequence[Any] | None = None,
    chunk_len: int | None = None,
    token_budget: int = 1024,
    max_tokens: int | None = None,
    dtype: torch.dtype | str | None = None,
    add_special_tokens: bool = True,
    progress: bool = True,
    desc: str = "capture",
    compact: bool = True,
    head: nn.Linear | None = None,
) -> Iterator[CaptureBatch]:
    """Yield ``CaptureBatch(acts (n,d), logits (n,K), labels (n,))`` for a stream of texts.

    ``texts``: strings (tokenised with ``tokenizer``) or lists of token ids, consumed lazily.
    ``positions``: per text, target indices or a boolean target mask (module docstring).
    ``chunk_len``: window length for long documents (default: the model's context length,
    at most ``DEFAULT_CHUNK_LEN``); it decides the counted contexts.
    ``token_budget``: padded tokens per forward pass (memory ~ budget x K x 4 bytes); it only
    batches: any budget gives the same records.
    ``max_tokens``: stop after this many counted records (the last batch is truncated).
    ``dtype``: None runs the model as it is; ``torch.bfloat16``/"bfloat16" runs the forward
    under autocast (outputs are still returned as float32).
    Outputs live on the model's device, so a GPU sketch never round-trips through the host.
    ``compact=False`` yields every position of the batch instead (views of the captured
    tensors, in the model's dtype, no copy of the (n, K) logits), with label -100 at the
    positions that are not counted: the form ``FisherSketch.update_logits`` skips in place.
    ``head``: the output linear layer, when the caller has already found it (else it is found).
    """
    head = head if head is not None else find_output_linear(model)  # callers that know it pass it
    if isinstance(dtype, str):
        dtype = torch_dtype(dtype)  # type: ignore[assignment]
    chunk_len = chunk_len or default_chunk_len(model)
    if chunk_len < 2:
        raise InputError(f"chunk_len must be at least 2, got {chunk_len}")
    try:
        budget_ok = not isinstance(token_budget, bool) and operator.index(token_budget) >= 1
    except TypeError:
        budget_ok = False
    if not budget_ok:
        raise InputError(f"token_budget must be a positive integer, got {token_budget!r}")
    token_budget = operator.index(token_budget)
    if max_tokens is not None and max_tokens <= 0:
        raise InputError(f"max_tokens must be positive, got {max_tokens}")
    param = next(model.parameters())
    device = param.device
    pad_id = pad_id_of(tokenizer)
    use_autocast = dtype is not None and dtype != param.dtype
    autocast = torch.autocast(device_type=device.type, dtype=dtype) if use_autocast else nullcontext()

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_tokens, unit="tok", unit_scale=True, desc=desc, dynamic_ncols=True)
    done = 0
    was_training = model.training
    # eval() walks every module (about a millisecond on a small LM, per call): skip it when
    # nothing is training, as for a serving loop that routes one request at a time
    if any(m.training for m in model.modules()):
        model.eval()
    try:
        with LinearCapture(head) as cap:
            batches = causal_batches(
                tokenizer,
                texts,
                chunk_len=chunk_len,
                token_budget=token_budget,
                pad_id=pad_id,
                positions=positions,
                max_tokens=max_tokens,
                add_special_tokens=add_special_tokens,
            )
            for ids, attn, labels in batches:
                keep = labels != IGNORE_INDEX
                ids, attn, keep, labels = ids.to(device), attn.to(device), keep.to(device), labels.to(device)
                with torch.no_grad(), autocast:
                    model(input_ids=ids, attention_mask=attn, use_cache=False)
                acts, logits = cap.pop()
                assert logits is not None
                if compact:
                    out = CaptureBatch(
                        acts[keep].to(torch.float32),
                        logits[keep].to(torch.float32),
                        labels[keep],
                    )
                    counted = out.labels.shape[0]
                else:
                    out = CaptureBatch(
                        acts.reshape(-1, acts.shape[-1]),
                        logits.reshape(-1, logits.shape[-1]),
                        labels.masked_fill(~keep, IGNORE_INDEX).reshape(-1),
                    )
                    counted = int(keep.sum())
                del acts, logits
                done += counted
                if bar is not None:
                    bar.update(counted)
                yield out
    finally:
        if bar is not None:
            bar.close()
        if was_training:
            model.train()
