"""From a model and texts to a Signature: capture (forward only) feeding a FisherSketch."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from updatescope.errors import InputError
from updatescope.sketch.fishersketch import FisherSketch
from updatescope.sketch.signature import Signature


def sketch_causal_lm(
    model: Any,
    tokenizer: Any,
    texts: Iterable[Any],
    *,
    sketch_dim: int = 4096,
    seed: int = 0,
    max_tokens: int | None = None,
    token_budget: int = 1024,
    dtype: Any = None,
    positions: Sequence[Any] | None = None,
    chunk_len: int | None = None,
    progress: bool = True,
    desc: str = "sketch",
    fingerprint: str | None = None,
    meta: dict[str, str] | None = None,
    act_map: str = "auto",
    error_map: str = "auto",
) -> Signature:
    """Signature of the next-token head geometry of ``texts`` under ``model``.

    One forward pass per batch; the head input and logits are captured by a hook and
    streamed into the sketch (float64 accumulation), so memory is O(token_budget × K).
    A head with a bias is sketched with its bias block (``SketchConfig.head_bias``).
    The model's fingerprint (every weight and the vocabulary) goes into the config:
    signatures of different models or tokenizers can never be compared silently.
    """
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint

    head = find_output_linear(model)
    k, d = head.weight.shape
    fp = fingerprint if fingerprint is not None else head_fingerprint(model, tokenizer, head)
    device = head.weight.device
    sk = FisherSketch(
        d,
        k,
        sketch_dim,
        seed,
        fingerprint=fp,
        device=device,
        act_map=act_map,
        error_map=error_map,
        head_bias=head.bias is not None,
    )
    with torch.inference_mode():
        for acts, logits, labels in capture_causal_lm(
            model,
            texts,
            tokenizer,
            positions=positions,
            chunk_len=chunk_len,
            token_budget=token_budget,
            max_tokens=max_tokens,
            dtype=dtype,
            progress=progress,
            desc=desc,
            compact=False,
            head=head,
        ):
            sk.update_logits(acts, logits, labels)
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    return sk.signature(model=str(name), tokens=str(sk.count), **(meta or {}))


# ---------------------------------------------------------------- segmented, sharded, resumable
# The corpus is cut into contiguous segments of documents; each segment is sketched into a
# fresh state and the states are folded in segment order (``distributed.fold``).  The cut
# depends on the number of documents only, so one process, N ranks (each owning a contiguous
# block of segments) and a resumed run all add the same per-segment states in the same order:
# the same bytes.  Segments also bound the work lost to an interruption.
SEGMENT_MIN_DOCS = 16
MAX_SEGMENTS = 256  # bounds the all-reduce: slots × 197 KB at m = 4096
CHECKPOINT_FORMAT = "updatescope-sketch-checkpoint"


def segment_ranges(n_docs: int, segment_docs: int | None = None) -> list[range]:
    """Contiguous document ranges: ``segment_docs`` each (default: at least 16 and at most
    256 segments), the last one shorter."""
    size = segment_docs or max(SEGMENT_MIN_DOCS, -(-n_docs // MAX_SEGMENTS))
    if size < 1:
        raise InputError(f"segment_docs must be positive, got {size}")
    return [range(i, min(i + size, n_docs)) for i in range(0, n_docs, size)]


def _segment_budgets(
    tokenizer: Any,
    texts: Sequence[Any],
    positions: Sequence[Any] | None,
    segments: Sequence[range],
    max_tokens: int | None,
) -> list[int | None]:
    """Per segment, the tokens it may add so that the whole run stops after ``max_tokens``
    counted targets in stream order (None: no limit; 0: skip).  Tokenises only up to the cut."""
    if max_tokens is None:
        return [None] * len(segments)
    from updatescope.capture.chunks import target_mask, tokenize

    left, out = max_tokens, []
    for seg in segments:
        if left <= 0:
            out.append(0)
            continue
        n = 0
        for i in seg:
            ids = tokenize(tokenizer, texts[i], True, i)
            if len(ids) >= 2:
                n += sum(target_mask(len(ids), None if positions is None else positions[i], i))
        out.append(None if n <= left else left)
        left -= n
    return out


def _run_key(
    fingerprint: str, config: Any, texts: Sequence[Any], positions: Sequence[Any] | None, settings: dict[str, Any]
) -> str:
    """Hash of everything a checkpoint must share with the run that resumes it."""
    import hashlib
    import json

    h = hashlib.sha256(
        json.dumps({"fp": fingerprint, "config": config.to_dict(), **settings}, sort_keys=True, default=str).encode()
    )
    for i, t in enumerate(texts):
        h.update(f"\0{i}\0{t if isinstance(t, str) else list(t)}".encode())
        if positions is not None:
            p = positions[i]
            h.update(f"\1{p.tolist() if isinstance(p, torch.Tensor) else p}".encode())
    return h.hexdigest()


def _save_checkpoint(path: Path, sk: FisherSketch, next_segment: int, key: str) -> None:
    """State + position, atomically (:func:`updatescope.records.write_bytes_atomic`)."""
    import json

    from safetensors.torch import save

    from updatescope.records import write_bytes_atomic

    meta = {
        "format": CHECKPOINT_FORMAT,
        "run_key": key,
        "next_segment": str(next_segment),
        "config": json.dumps(sk.config.to_dict(), sort_keys=True),
    }
    data = save(
        {
            "sums": sk._sums.cpu().contiguous(),
            "diag": sk._diag.cpu().contiguous(),
            "counts": sk._counts.cpu().contiguous(),
        },
        metadata=meta,
    )
    write_bytes_atomic(data, path)


def _load_checkpoint(path: Path, like: FisherSketch, key: str) -> tuple[FisherSketch, int]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
            t = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception:
        raise InputError(f"not a readable sketch checkpoint (corrupt or another format): {path}") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"not an updatescope sketch checkpoint: {path}")
    if meta.get("run_key") != key:
        raise InputError(
            f"checkpoint {path} is from a different run (model, data, columns or settings changed); "
            "delete it or rerun without --resume"
        )
    sk = FisherSketch(config=like.config, device=like.device, meta=like.meta)
    sk._sums, sk._diag = t["sums"].to(like.device, torch.float64), t["diag"].to(like.device, torch.float64)
    sk._counts = t["counts"].to(torch.int64)
    return sk, int(meta["next_segment"])


def checkpoint_path(out: str | Path) -> Path:
    """Where ``sketch --checkpoint-every`` keeps the state of a run writing ``out``."""
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


def sketch_corpus(
    model: Any,
    tokenizer: Any,
    texts: Sequence[Any],
    *,
    positions: Sequence[Any] | None = None,
    sketch_dim: int = 4096,
    seed: int = 0,
    max_tokens: int | None = None,
    token_budget: int = 1024,
    act_map: str = "auto",
    error_map: str = "auto",
    segment_docs: int | None = None,
    checkpoint: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    progress: bool = True,
    meta: dict[str, str] | None = None,
    group: Any = None,
    on_segment: Callable[[int], None] | None = None,
) -> Signature | None:
    """Signature of ``texts`` (with optional per-text target ``positions``), segmented as in
    ``segment_ranges``; sharded by segment over the ranks of an initialised process group and
    folded exactly (``distributed``); every rank returns the same signature.

    ``checkpoint`` + ``checkpoint_every`` (documents): after the segment that crosses each
    multiple of that many documents, the folded state and the next segment are written
    atomically; ``resume=True`` continues from that file (single process only) and gives the
    same bytes as an uninterrupted run.  ``on_segment(i)`` is called after segment i is added.
    """
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.capture.hook import find_output_linear
    from updatescope.distributed import fold, gather_slots, rank_and_world, shard_range
    from updatescope.models.hf import head_fingerprint

    texts = list(texts)
    if positions is not None and len(positions) != len(texts):
        raise InputError(f"positions has {len(positions)} entries for {len(texts)} texts")
    if not texts:
        raise InputError("no documents to sketch")
    head = find_output_linear(model)
    k, d = head.weight.shape
    fp = head_fingerprint(model, tokenizer, head)
    like = FisherSketch(
        d,
        k,
        sketch_dim,
        seed,
        fingerprint=fp,
        device=head.weight.device,
        act_map=act_map,
        error_map=error_map,
        head_bias=head.bias is not None,
    )
    rank, world = rank_and_world()
    segments = segment_ranges(len(texts), segment_docs)
    budgets = _segment_budgets(tokenizer, texts, positions, segments, max_tokens)
    mine = shard_range(len(segments), rank, world)
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if (resume or checkpoint_every) and (ckpt is None or world > 1):
        raise InputError("--checkpoint-every/--resume need a checkpoint path and a single process (not torchrun)")
    key = (
        _run_key(
            fp,
            like.config,
            texts,
            positions,
            {"token_budget": token_budget, "max_tokens": max_tokens, "segments": len(segments)},
        )
        if ckpt
        else ""
    )
    acc, start = like, mine.start
    if resume:
        if not ckpt.exists():
            raise InputError(f"--resume: no checkpoint at {ckpt}")
        acc, start = _load_checkpoint(ckpt, like, key)
    bar = None
    if progress and rank == 0:
        from tqdm.auto import tqdm

        # with a token cap the bar counts tokens up to the cap; without one the total number of
        # tokens is unknown until everything is tokenised, so it counts documents (ETA) and
        # shows tokens/s beside them
        by_tokens = max_tokens is not None
        bar = tqdm(
            total=max_tokens if by_tokens else len(texts),
            unit="tok" if by_tokens else "doc",
            unit_scale=by_tokens,
            desc="sketch",
            dynamic_ncols=True,
            initial=0,
        )
        t_start, seen = time.perf_counter(), 0
    parts: dict[int, FisherSketch] = {}
    every = checkpoint_every or 0
    try:
        with torch.inference_mode():
            for s in range(start, mine.stop):
                seg, budget = segments[s], budgets[s]
                part = FisherSketch(config=like.config, device=like.device)
                if budget != 0:
                    pos = None if positions is None else [positions[i] for i in seg]
                    for acts, logits, labels in capture_causal_lm(
                        model,
                        [texts[i] for i in seg],
                        tokenizer,
                        positions=pos,
                        token_budget=token_budget,
                        max_tokens=budget,
                        progress=False,
                        compact=False,
                        head=head,
                    ):
                        before = part.count
                        part.update_logits(acts, logits, labels)
                        if bar is not None and by_tokens:
                            bar.update((part.count - before) * world)  # rank 0 speaks for all ranks
                if bar is not None and not by_tokens:
                    seen += part.count * world
                    bar.update(len(seg) * world)
                    bar.set_postfix_str(f"{seen / max(time.perf_counter() - t_start, 1e-9):,.0f} tok/s")
                if world > 1:
                    parts[s] = part
                else:  # fold as we go: the same additions, in the same order, as folding at the end
                    acc = acc.merge(part)
                    if ckpt is not None and every and (seg.stop // every > seg.start // every or s == mine.stop - 1):
                        _save_checkpoint(ckpt, acc, s + 1, key)
                if on_segment is not None:
                    on_segment(s)
    finally:
        if bar is not None:
            bar.close()
    if world > 1:
        acc = fold(gather_slots(parts, len(segments), like, group=group), like=like)
    name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    return acc.signature(model=str(name), tokens=str(acc.count), **(meta or {}))
