"""Model + corpus -> head signature: tokenise once, capture the head (forward only), feed a sketch.

The corpus is cut into contiguous segments of documents; each segment is sketched into a
fresh state and the states are folded in segment order (``distributed.fold``).  The cut
depends on the number of documents only, so one process, N ranks (each owning a contiguous
block of segments) and a resumed run all add the same per-segment states in the same order:
the same bytes.  Segments also bound the work lost to an interruption.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from updatescope.errors import InputError
from updatescope.pipeline.corpus import Corpus, Tokens
from updatescope.pipeline.options import SketchOptions
from updatescope.sketch.fishersketch import FisherSketch
from updatescope.sketch.signature import Signature

__all__ = [
    "sketch_corpus",
    "feed_sketch",
    "segment_ranges",
    "head_sketch",
    "check_memory",
    "SEGMENT_MIN_DOCS",
    "MAX_SEGMENTS",
]

SEGMENT_MIN_DOCS = 16
MAX_SEGMENTS = 256  # bounds the all-reduce: slots × 197 KB at m = 4096


def segment_ranges(n_docs: int, segment_docs: int | None = None) -> list[range]:
    """Contiguous document ranges: ``segment_docs`` each (default: at least 16 and at most
    256 segments), the last one shorter."""
    size = segment_docs or max(SEGMENT_MIN_DOCS, -(-n_docs // MAX_SEGMENTS))
    if size < 1:
        raise InputError(f"segment_docs must be positive, got {size}")
    return [range(i, min(i + size, n_docs)) for i in range(0, n_docs, size)]


def _segment_budgets(counted: Sequence[int], segments: Sequence[range], max_tokens: int | None) -> list[int | None]:
    """Per segment, the tokens it may add so that the whole run stops after ``max_tokens``
    counted targets in stream order (None: no limit; 0: skip)."""
    if max_tokens is None:
        return [None] * len(segments)
    left, out = max_tokens, []
    for seg in segments:
        n = sum(counted[i] for i in seg)
        out.append(0 if left <= 0 else None if n <= left else left)
        left -= n
    return out


def check_memory(config: Any, token_budget: int, device: Any) -> None:
    """Refuse, with the numbers, a sketch whose random bases and per-batch features cannot fit."""
    from updatescope.devices import available_memory
    from updatescope.sketch.config import sketch_memory_bytes

    need = sketch_memory_bytes(config, token_budget)
    free = available_memory(device)
    if free is not None and need > free:
        raise InputError(
            f"this sketch needs at least {need / 2**30:.1f} GiB on {device} (random bases for act_dim "
            f"{config.act_dim}, out_dim {config.out_dim}, sketch_dim {config.sketch_dim}, maps "
            f"{config.act_map}/{config.error_map}, token budget {token_budget}) and {free / 2**30:.1f} GiB is "
            "free; lower --sketch-dim or --token-budget, or choose --act-map/--error-map srht"
        )


def head_sketch(
    model: Any, tokenizer: Any, options: SketchOptions, fingerprint: str | None = None
) -> tuple[FisherSketch, Any]:
    """An empty sketch of ``model``'s head under ``options`` (config and fingerprint set), and the
    head.  ``fingerprint``: the model's (``models.hf.head_fingerprint``), when the caller has it."""
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint

    head = find_output_linear(model)
    k, d = head.weight.shape
    fp = fingerprint if fingerprint is not None else head_fingerprint(model, tokenizer, head)
    config = options.config(int(d), int(k), fingerprint=fp, head_bias=head.bias is not None)
    return FisherSketch(config=config, device=head.weight.device), head


def feed_sketch(
    sketch: FisherSketch, stream: Iterable[tuple[Any, Any, Any]], on_batch: Callable[[int], None] | None = None
) -> FisherSketch:
    """Add every ``(acts (n, d), logits (n, K), labels (n,))`` batch of ``stream`` to ``sketch``
    (labels ``IGNORE_INDEX`` are skipped): the one "capture, then feed a sketch" loop, for a
    live capture (``capture_causal_lm``) and for cached head streams alike.  ``on_batch(n)``
    gets the number of samples each batch added.  -> ``sketch`` (updated in place)."""
    with torch.inference_mode():
        for acts, logits, labels in stream:
            before = sketch.count
            sketch.update_logits(acts, logits, labels)
            if on_batch is not None:
                on_batch(sketch.count - before)
    return sketch


def _tokens(corpus: Corpus | Tokens | Sequence[Any], tokenizer: Any) -> Tokens:
    if isinstance(corpus, Tokens):
        return corpus
    if not isinstance(corpus, Corpus):
        corpus = Corpus.from_texts(list(corpus))
    return corpus.tokenise(tokenizer)


def sketch_corpus(
    model: Any,
    tokenizer: Any,
    corpus: Corpus | Tokens | Sequence[Any],
    options: SketchOptions | None = None,
    *,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    progress: bool = True,
    meta: dict[str, str] | None = None,
    segment_docs: int | None = None,
    group: Any = None,
    on_segment: Callable[[int], None] | None = None,
    fingerprint: str | None = None,
) -> Signature:
    """The head signature of ``corpus`` under ``model``: forward passes only.

    corpus:  a :class:`Corpus` (files or lists), its :class:`Tokens`, or a list of strings
             or token-id lists.
    options: sketch size, seed, maps, token cap, budget, dtype (:class:`SketchOptions`).
    Under an initialised process group the segments are sharded over the ranks and folded
    exactly (``distributed``); every rank returns the same signature.  ``checkpoint`` +
    ``checkpoint_every`` (documents): after the segment that crosses each multiple of that many
    documents, the folded state and the next segment are written atomically; ``resume=True``
    continues from that file (single process only) and gives the same bytes as an
    uninterrupted run.  ``on_segment(i)`` is called after segment i is added.  ``fingerprint``:
    the model's, when the caller already has it (hashing every weight takes a while).
    """
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.distributed import fold, gather_slots, rank_and_world, shard_range
    from updatescope.pipeline.checkpoint import load_checkpoint, run_key, save_checkpoint

    options = options or SketchOptions()
    tokens = _tokens(corpus, tokenizer)
    if not len(tokens):
        raise InputError("no documents to sketch")
    like, head = head_sketch(model, tokenizer, options, fingerprint)
    check_memory(like.config, options.token_budget, like.device)
    rank, world = rank_and_world()
    segments = segment_ranges(len(tokens), segment_docs)
    counted = tokens.counted()
    budgets = _segment_budgets(counted, segments, options.max_tokens)
    mine = shard_range(len(segments), rank, world)
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if (resume or checkpoint_every) and (ckpt is None or world > 1):
        raise InputError("--checkpoint-every/--resume need a checkpoint path and a single process (not torchrun)")
    settings = {**options.to_dict(), "segments": len(segments)}
    key = run_key(like.config.fingerprint, like.config, tokens.ids, tokens.masks, settings) if ckpt else ""
    acc, start = like, mine.start
    if resume:
        if not ckpt.exists():
            raise InputError(f"--resume: no checkpoint at {ckpt}")
        acc, start = load_checkpoint(ckpt, like, key)
    bar = _Progress(options.max_tokens, len(tokens), world) if progress and rank == 0 else None
    parts: dict[int, FisherSketch] = {}
    every = checkpoint_every or 0
    try:
        with torch.inference_mode():
            for s in range(start, mine.stop):
                seg, budget = segments[s], budgets[s]
                part = FisherSketch(config=like.config, device=like.device)
                if budget != 0:
                    stream = capture_causal_lm(
                        model,
                        [tokens.ids[i] for i in seg],
                        tokenizer,
                        positions=[tokens.masks[i] for i in seg],
                        token_budget=options.token_budget,
                        max_tokens=budget,
                        dtype=options.dtype,
                        chunk_len=options.chunk_len,
                        progress=False,
                        compact=False,
                        head=head,
                    )
                    feed_sketch(part, stream, None if bar is None else bar.tokens)
                if bar is not None:
                    bar.segment(len(seg), part.count)
                if world > 1:
                    parts[s] = part
                else:  # fold as we go: the same additions, in the same order, as folding at the end
                    acc = acc.merge(part)
                    crossed = seg.stop // every > seg.start // every if every else False
                    if ckpt is not None and every and (crossed or s == mine.stop - 1):
                        save_checkpoint(ckpt, acc, s + 1, key)
                if on_segment is not None:
                    on_segment(s)
    finally:
        if bar is not None:
            bar.close()
    if world > 1:
        acc = fold(gather_slots(parts, len(segments), like, group=group), like=like)
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    return acc.signature(model=str(name), tokens=str(acc.count), **(meta or {}))


class _Progress:
    """With a token cap the bar counts tokens up to the cap; without one the total number of
    tokens is unknown until everything is captured, so it counts documents (ETA) and shows
    tokens/s beside them.  Rank 0 speaks for all ranks (its counts × the world size)."""

    def __init__(self, max_tokens: int | None, n_docs: int, world: int) -> None:
        from tqdm.auto import tqdm

        self.by_tokens, self.world = max_tokens is not None, world
        total = max_tokens if self.by_tokens else n_docs
        unit = "tok" if self.by_tokens else "doc"
        self.bar = tqdm(total=total, unit=unit, unit_scale=self.by_tokens, desc="sketch", dynamic_ncols=True)
        self.t0, self.seen = time.perf_counter(), 0

    def tokens(self, n: int) -> None:
        if self.by_tokens:
            self.bar.update(n * self.world)

    def segment(self, docs: int, count: int) -> None:
        if not self.by_tokens:
            self.seen += count * self.world
            self.bar.update(docs * self.world)
            self.bar.set_postfix_str(f"{self.seen / max(time.perf_counter() - self.t0, 1e-9):,.0f} tok/s")

    def close(self) -> None:
        self.bar.close()
