"""Model + corpus + target signature -> one score per document (``select``'s work).

The definition of the score and its standard error is in :mod:`updatescope.select.documents`;
this module runs the forward passes: tokenise once, capture the head, map each counted token
to its features in the target's basis, and add its terms to its document's sums.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.pipeline.corpus import Corpus, Tokens
from updatescope.select.documents import MIN_TOKENS, DocumentScores, score_features, scores_from_sums, target_directions
from updatescope.sketch.signature import Signature

__all__ = ["score_documents", "head_basis", "token_features", "length_order", "padded_ratio"]


def length_order(tokens: Tokens, entries: Sequence[int]) -> list[int]:
    """``entries`` longest first (stable): batches of similar lengths waste little padding."""
    return sorted(entries, key=lambda i: -len(tokens.ids[i]))


def padded_ratio(tokens: Tokens, entries: Sequence[int], *, chunk_len: int, token_budget: int) -> float:
    """Padded tokens fed to the model / real tokens, for the batches the capture forms from
    ``entries`` in this order (the capture's own windows and greedy packing)."""
    from updatescope.capture.chunks import document_chunks, pack_batches

    chunks = document_chunks(
        None, [tokens.ids[i] for i in entries], chunk_len=chunk_len, positions=[tokens.masks[i] for i in entries]
    )
    real = padded = 0
    for batch in pack_batches(chunks, token_budget):
        padded += len(batch) * max(len(c.ids) for c in batch)
        real += sum(len(c.ids) for c in batch)
    return padded / max(real, 1)


def _tokens(corpus: Corpus | Tokens | Sequence[Any], tokenizer: Any, positions: Sequence[Any] | None) -> Tokens:
    if isinstance(corpus, Tokens):
        return corpus
    if isinstance(corpus, Corpus):
        return corpus.tokenise(tokenizer, keep_empty=True)
    from updatescope.capture.chunks import target_mask, tokenize

    docs = list(corpus)
    if positions is not None and len(positions) != len(docs):
        raise InputError(f"positions has {len(positions)} entries for {len(docs)} documents")
    ids = [tokenize(tokenizer, t, True, i) for i, t in enumerate(docs)]
    masks = [
        target_mask(len(x), None if positions is None else positions[i], i) if len(x) >= 2 else []
        for i, x in enumerate(ids)
    ]
    return Tokens(ids, masks, list(range(len(docs))))


def head_basis(model: Any, tokenizer: Any, like: Any, fingerprint: str | None = None) -> tuple[Any, Any]:
    """(head, SketchConfig) of ``model``'s head in the basis of the signature config ``like``
    (its sketch size, seed and maps); ``IncompatibleSignatureError`` naming the field when the
    model is not the one ``like`` was sketched with.  ``fingerprint``: the model's, when known."""
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint
    from updatescope.sketch.config import SketchConfig

    head = find_output_linear(model)
    k, d = head.weight.shape
    fp = fingerprint if fingerprint is not None else head_fingerprint(model, tokenizer, head)
    cfg = SketchConfig(d, k, like.sketch_dim, like.seed, like.act_map, like.error_map, fp, head.bias is not None)
    like.check_compatible(cfg)
    return head, cfg


def token_features(
    model: Any,
    tokenizer: Any,
    tokens: Tokens,
    entries: Sequence[int],
    config: Any,
    head: Any,
    *,
    token_budget: int,
    dtype: Any = None,
    progress: bool = False,
    desc: str = "score",
) -> Iterator[Tensor]:
    """Joint, activation and error features ``(n, 3, m)`` of the counted tokens of ``entries``
    (in that order, the capture's stream order), a cache-sized chunk of a captured batch at a
    time: the forward pass that document scores and routing share.  Each yielded tensor lives
    in the thread's workspace and is overwritten by the next one: use (or copy) it first."""
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.constants import IGNORE_INDEX
    from updatescope.sketch.fishersketch import error_chunks, features

    with torch.inference_mode():
        # every position of a batch, as views (compact=False): the counted rows' errors are
        # made a cache-sized chunk at a time in a reused buffer, not from an (n, K) copy
        for acts, logits, labels in capture_causal_lm(
            model,
            [tokens.ids[i] for i in entries],
            tokenizer,
            positions=[tokens.masks[i] for i in entries],
            token_budget=token_budget,
            dtype=dtype,
            progress=progress,
            desc=desc,
            head=head,
            compact=False,
        ):
            kept = (labels != IGNORE_INDEX).nonzero().squeeze(1)
            for a, errors in error_chunks(acts, logits, labels, kept, logits.device):
                yield features(config, a.to(errors.dtype), errors, tag="token_features")


def score_documents(
    model: Any,
    tokenizer: Any,
    corpus: Corpus | Tokens | Sequence[Any],
    target: Signature,
    *,
    token_budget: int = 1024,
    dtype: Any = None,
    min_tokens: int = MIN_TOKENS,
    progress: bool = True,
    positions: Sequence[Any] | None = None,
    fingerprint: str | None = None,
    bucket: bool = True,
) -> DocumentScores:
    """Score every document of ``corpus`` against ``target``: one entry per document, in order.

    corpus: a :class:`Corpus`, its ``tokenise(keep_empty=True)``, or a list of strings /
    token-id lists (then ``positions`` may give, per document, the counted target indices or
    a boolean mask, as in ``capture_causal_lm``).  A document with no counted token gets an
    undefined (NaN) score.  The model's head, the target's sketch_dim/seed/maps and the model
    fingerprint define the basis; a target of another model or config raises
    ``IncompatibleSignatureError`` naming the field, before any forward pass.
    """
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
        raise InputError(f"min_tokens must be a positive integer, got {min_tokens!r}")
    if not isinstance(target, Signature):
        raise InputError(f"the target must be a Signature, got {type(target).__name__}")
    head, cfg = head_basis(model, tokenizer, target.config, fingerprint)
    directions = target_directions(target)
    tokens = _tokens(corpus, tokenizer, positions)
    # the capture counts each entry's targets in order, so record r belongs to the entry that
    # owns position r of the stream
    counted = tokens.counted()
    counts = torch.tensor(counted, dtype=torch.int64)
    keep = [i for i, c in enumerate(counted) if c > 0]
    if bucket:
        keep = length_order(tokens, keep)
    owner = torch.repeat_interleave(torch.tensor(keep, dtype=torch.int64), counts[keep])
    sums = torch.zeros(len(counted), 3, dtype=torch.float64)
    sq = torch.zeros(len(counted), 3, dtype=torch.float64)
    done = 0
    stream = token_features(
        model,
        tokenizer,
        tokens,
        keep,
        cfg,
        head,
        token_budget=token_budget,
        dtype=dtype,
        progress=progress,
        desc="score documents",
    )
    for feats in stream:
        n = feats.shape[0]
        c = score_features(feats, directions).cpu()  # (n, 3)
        who = owner[done : done + n]
        sums.index_add_(0, who, c)
        sq.index_add_(0, who, c.square())
        done += n
    if done != int(counts.sum()):  # the capture's counting rule changed: refuse to misattribute scores
        raise RuntimeError(f"captured {done} records for {int(counts.sum())} counted tokens")
    scores = scores_from_sums(sums, sq, counts, min_tokens)
    if len(tokens.documents) != len(counted) or tokens.documents != list(range(len(counted))):
        raise RuntimeError("document scores must keep one entry per document")
    return scores
