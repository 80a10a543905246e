"""Token chunks for causal-LM passes: tokenise documents, mark counted targets, cut into
overlapping windows and pack them into padded batches under a token budget.

Shared by :mod:`updatescope.capture.causal_lm` (head streams) and the LoRA ground truth
(block inputs), so both count exactly the same targets.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError

__all__ = [
    "Chunk",
    "tokenize",
    "target_mask",
    "split_chunks",
    "document_chunks",
    "pack_batches",
    "pad_batch",
    "causal_batches",
]


class Chunk(NamedTuple):
    ids: list[int]  # (L,) token ids fed to the model
    count: list[bool]  # (L,) whether position k's prediction (target ids[k+1]) is counted


def target_mask(n: int, spec: Any, index: int) -> list[bool]:
    """Boolean mask over the n tokens of text ``index``: True = counted as a target."""
    if spec is None:
        return [False] + [True] * (n - 1)
    if isinstance(spec, Tensor):
        spec = spec.tolist()
    spec = list(spec)
    if spec and all(isinstance(v, bool) for v in spec):
        if len(spec) != n:
            raise InputError(f"text {index}: position mask has {len(spec)} entries for {n} tokens")
        mask = list(spec)
    else:
        mask = [False] * n
        for v in spec:
            if isinstance(v, bool) or not isinstance(v, int):
                raise InputError(f"text {index}: positions must be ints or a bool mask, got {v!r}")
            if not -n <= v < n:
                raise InputError(f"text {index}: position {v} out of range for {n} tokens")
            mask[v % n] = True
    if n and mask[0]:
        raise InputError(f"text {index}: target position 0 has no context and cannot be counted")
    return mask


def split_chunks(ids: list[int], mask: list[bool], chunk_len: int) -> Iterator[Chunk]:
    """Overlapping windows of ``chunk_len`` tokens; stride chunk_len - 1 counts each target once."""
    n = len(ids)
    start = 0
    while start < n - 1:
        stop = min(start + chunk_len, n)
        # position k in the chunk predicts document token start + k + 1
        count = [mask[start + k + 1] for k in range(stop - start - 1)] + [False]
        if any(count):
            yield Chunk(ids[start:stop], count)
        if stop == n:
            break
        start = stop - 1


def tokenize(tokenizer: Any, text: Any, add_special_tokens: bool, index: int) -> list[int]:
    if isinstance(text, str):
        if tokenizer is None:
            raise InputError("a tokenizer is needed to capture raw text")
        return list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    if isinstance(text, Tensor):
        return [int(v) for v in text.reshape(-1).tolist()]
    if isinstance(text, Sequence) and all(isinstance(v, int) for v in text):
        return list(text)
    raise InputError(f"text {index}: expected a string or a list of token ids, got {type(text).__name__}")


def pack_batches(chunks: Iterable[Chunk], token_budget: int) -> Iterator[list[Chunk]]:
    """Greedy, order-preserving packing: rows x longest row <= token_budget."""
    batch: list[Chunk] = []
    longest = 0
    for ch in chunks:
        new_longest = max(longest, len(ch.ids))
        if batch and (len(batch) + 1) * new_longest > token_budget:
            yield batch
            batch, new_longest = [], len(ch.ids)
        batch.append(ch)
        longest = new_longest
    if batch:
        yield batch


def document_chunks(
    tokenizer: Any,
    texts: Iterable[Any],
    *,
    chunk_len: int,
    positions: Iterable[Any] | None = None,
    add_special_tokens: bool = True,
) -> Iterator[Chunk]:
    """Chunks of every text in order; ``positions[i]`` selects text i's counted targets
    (None: every next-token target).  Texts shorter than two tokens are skipped."""
    pos_iter = iter(positions) if positions is not None else None
    for i, text in enumerate(texts):
        spec = None
        if pos_iter is not None:
            try:
                spec = next(pos_iter)
            except StopIteration:
                raise InputError(f"positions has fewer entries than texts (none for text {i})") from None
        ids = tokenize(tokenizer, text, add_special_tokens, i)
        if len(ids) < 2:
            continue
        yield from split_chunks(ids, target_mask(len(ids), spec, i), chunk_len)


def pad_batch(batch: Sequence[Chunk], pad_id: int, width: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded ``(ids, attention_mask, labels)``, each (rows, width) int64; labels hold
    the next token at counted positions and ``IGNORE_INDEX`` elsewhere."""
    width = width or max(len(ch.ids) for ch in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE_INDEX, dtype=torch.long)
    for r, ch in enumerate(batch):
        n = len(ch.ids)
        row = torch.tensor(ch.ids)
        ids[r, :n] = row
        attn[r, :n] = 1
        nxt = torch.cat([row[1:], torch.tensor([IGNORE_INDEX])])
        labels[r, :n] = torch.where(torch.tensor(ch.count), nxt, IGNORE_INDEX)
    return ids, attn, labels


def causal_batches(
    tokenizer: Any,
    texts: Iterable[Any],
    *,
    chunk_len: int,
    token_budget: int,
    pad_id: int = 0,
    positions: Iterable[Any] | None = None,
    max_tokens: int | None = None,
    add_special_tokens: bool = True,
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Padded causal-LM batches ``(ids, attention_mask, labels)`` (each (rows, width) int64) of
    ``texts``: the windows of :func:`document_chunks`, packed under ``token_budget`` padded
    tokens.  ``labels`` hold the next token at counted positions and ``IGNORE_INDEX``
    elsewhere; with ``max_tokens`` the labels after the first ``max_tokens`` counted targets
    (in stream order) are ignored too, and no batch follows the one that reaches it.

    The one batcher of the library: the head capture, network sketches and the experiments'
    layer passes all count the same targets with the same contexts, whatever the budget."""
    left = max_tokens
    chunks = document_chunks(
        tokenizer, texts, chunk_len=chunk_len, positions=positions, add_special_tokens=add_special_tokens
    )
    for batch in pack_batches(chunks, token_budget):
        ids, attn, labels = pad_batch(batch, pad_id)
        if left is not None:
            counted = labels != IGNORE_INDEX
            over = counted & (counted.reshape(-1).cumsum(0).reshape(counted.shape) > left)
            labels = labels.masked_fill(over, IGNORE_INDEX)  # the cap falls inside this batch: exact cut
            left -= int((counted & ~over).sum())
        yield ids, attn, labels
        if left is not None and left <= 0:
            return
