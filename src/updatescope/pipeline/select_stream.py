"""``select`` over a pool of any size: streamed in chunks, sharded over ranks, resumable.

The pool is cut into *chunks* of ``chunk_docs`` consecutive documents; the cut depends on the
pool alone.  Each chunk is scored on its own (``score_documents``: length buckets inside the
chunk), so a document's score depends only on its chunk, never on how many processes run or
where a run resumed.  One process scores the chunks in order.  Under torchrun the chunks come
in *rounds* of ``ROUND_CHUNKS × world``; the chunks of a round go to the ranks by their size
(``assign_chunks``: longest first to the least loaded rank, computed alike on every rank), so
the ranks finish a round close together; after each round the ranks all-gather the round's
per-document numbers (copies, never sums) and rank 0 writes them to the score file in pool
order and offers them to a top-k heap (``select.topk.TopK``).  So:

* memory is bounded by a round (one chunk in one process, ``ROUND_CHUNKS × world ×
  chunk_docs`` documents under torchrun) and the heap (``top`` documents), not by the pool;
  every rank reads the pool as a stream (``data.stream.iter_pool``) and tokenises only its own
  chunks;
* the top-k and the score file are the same bytes for one process and for N ranks (same
  thread count), and rank 0 alone writes them;
* a checkpoint after a round holds the heap (scores and indices; the documents are read again
  on resume), the number of chunks done and the length of the score file written so far, under
  a run key over every option and the pool's digest (``scan_pool``); ``resume`` continues it
  with any number of ranks and gives the bytes of an uninterrupted run.

Score file rows, in pool order: ``rank`` (the place in the kept top-k, null for a document not
kept), ``score``, ``score_se``, ``activation``, ``error`` (null when undefined), ``tokens``,
``short``, ``source``, ``index``.  They are streamed to a hidden partial file next to the score
file; the ranks of the kept documents are filled in by one more streamed pass that writes the
score file through a temporary name and a rename.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from updatescope.constants import RANK_BY
from updatescope.data.formats import Columns
from updatescope.data.stream import iter_pool
from updatescope.errors import InputError
from updatescope.select.documents import MIN_TOKENS
from updatescope.select.topk import TopK
from updatescope.sketch.signature import Signature

__all__ = [
    "CHUNK_DOCS",
    "CHECKPOINT_FORMAT",
    "PoolScan",
    "SelectOptions",
    "Selection",
    "scan_pool",
    "check_resume",
    "check_shards",
    "assign_chunks",
    "select_pool",
    "partial_path",
]

CHUNK_DOCS = 1024
ROUND_CHUNKS = 4  # chunks per rank per round under torchrun: room to balance the ranks' work
CHECKPOINT_FORMAT = "updatescope-select-checkpoint"
_COLS = 6  # per document: score, se, activation, error, tokens, short


@dataclass(frozen=True)
class PoolScan:
    """What one streamed pass over the pool found: its size and the digest of its documents."""

    documents: int
    digest: str


@dataclass(frozen=True)
class SelectOptions:
    """Everything that decides the outputs of a selection (the run key hashes all of it)."""

    top: int
    chunk_docs: int = CHUNK_DOCS
    token_budget: int = 1024
    min_tokens: int = MIN_TOKENS
    by: str = "fisher"  # the score that orders the pool: the joint one, or a marginal (RANK_BY)

    def __post_init__(self) -> None:
        for name, low in (("top", 1), ("chunk_docs", 1), ("token_budget", 2), ("min_tokens", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InputError(f"{name} must be an integer of at least {low}, got {v!r}")
        if self.by not in RANK_BY:
            raise InputError(f"by must be one of {', '.join(RANK_BY)}, got {self.by!r}")

    @property
    def column(self) -> str:
        """The field of a score record that orders the pool."""
        return "score" if self.by == "fisher" else self.by

    def chunks(self, n_docs: int) -> int:
        return -(-n_docs // self.chunk_docs)


@dataclass(frozen=True)
class Selection:
    """``top``: ``(record, document)`` of the kept documents, best first (records carry their
    rank); ``documents``: the pool's size; ``short``: documents flagged short; ``scored``:
    documents with a defined score."""

    top: list[tuple[dict[str, Any], Any]]
    documents: int
    short: int
    scored: int
    tokens: int = 0  # counted tokens scored by this call (a resumed run: after the checkpoint)
    seconds: float = 0.0  # wall time of this call's scoring rounds


def _row_digest(h: Any, source: str, row: int, doc: Any) -> None:
    h.update(json.dumps([source, row, doc], sort_keys=True, default=str, ensure_ascii=False).encode("utf-8"))
    h.update(b"\n")


def scan_pool(
    paths: Sequence[str | Path],
    columns: Columns | None,
    *,
    chunk_docs: int = CHUNK_DOCS,
    check_chunk: Callable[[list[Any]], None] | None = None,
) -> PoolScan:
    """Read the whole pool once, validating every document (before any model loads), and
    return its size and a digest of every document with its source and row.
    ``check_chunk(documents)`` is called on every chunk (e.g. can the export take these rows)."""
    h = hashlib.sha256()
    n, buf = 0, []
    for source, row, doc in iter_pool(paths, columns):
        _row_digest(h, source, row, doc)
        n += 1
        if check_chunk is not None:
            buf.append(doc)
            if len(buf) == chunk_docs:
                check_chunk(buf)
                buf = []
    if check_chunk is not None and buf:
        check_chunk(buf)
    if n == 0:
        raise InputError("no documents: the pool is empty")
    return PoolScan(n, h.hexdigest())


def partial_path(scores: Path) -> Path:
    """The hidden file the score rows stream into before the score file is complete."""
    return scores.with_name(f".{scores.name}.partial")


def _run_key(options: SelectOptions, settings: dict[str, Any]) -> str:
    text = json.dumps({"options": options.__dict__, **settings}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _read_checkpoint(path: Path) -> dict[str, Any]:
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"--resume: no checkpoint at {path} (run with --checkpoint-every N first)") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"checkpoint {path} is not a regular file; remove it or choose another --out")
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise InputError(f"not a readable select checkpoint (corrupt or another format): {path}") from None
    keys = {"run_key", "pool_digest", "fingerprint", "next_chunk", "scores_bytes", "short", "scored", "heap"}
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT or not keys <= set(state):
        raise InputError(f"not an updatescope select checkpoint: {path}")
    return state


def check_resume(path: Path, options: SelectOptions, settings: dict[str, Any], pool: PoolScan) -> dict[str, Any]:
    """The checkpoint at ``path`` when it belongs to this run: the same options and settings
    (model, target, columns, …) and the same pool; one-line InputError otherwise."""
    state = _read_checkpoint(path)
    if state["pool_digest"] != pool.digest:
        raise InputError(
            f"the pool changed since checkpoint {path} was written (its documents differ); delete the checkpoint "
            "and rerun without --resume"
        )
    if state["run_key"] != _run_key(options, settings):
        raise InputError(
            f"checkpoint {path} is from a different run (the model, the target, the columns or a flag that changes "
            "the outputs differ: --top, --chunk-docs, --token-budget, --min-tokens, --dtype); resume with the run's "
            "own flags, or delete it and rerun without --resume"
        )
    n_chunks = options.chunks(pool.documents)
    if not (isinstance(state["next_chunk"], int) and 0 < state["next_chunk"] <= n_chunks):
        raise InputError(f"select checkpoint is incomplete: {path}")
    return state


def check_shards(options: SelectOptions, pool: PoolScan, world: int, start: int = 0) -> None:
    """A one-line InputError when a rank would have no chunk to score (the pool, or what is left
    of it after a checkpoint, has fewer chunks than there are ranks)."""
    n_chunks = options.chunks(pool.documents)
    if n_chunks - start < world:
        left = f", {n_chunks - start} left to score" if start else ""
        raise InputError(
            f"the pool has {pool.documents} documents in {n_chunks} chunk(s) of {options.chunk_docs}{left}, fewer "
            f"than the {world} ranks: a rank would have no chunk to score; use fewer ranks or a smaller --chunk-docs"
        )


def _cost(items: list[tuple[str, int, Any]]) -> int:
    """A chunk's work, estimated before it is tokenised: the characters of its documents."""
    return sum(len(doc) if isinstance(doc, str) else len(json.dumps(doc, default=str)) for _, _, doc in items)


def assign_chunks(costs: Sequence[int], world: int) -> list[int]:
    """The rank of each chunk of a round: longest first to the least loaded rank (ties: the
    earlier chunk, then the rank with fewer chunks, then the lower rank), so the ranks of a round
    finish close together.  Every rank
    computes the same list from the same costs; which rank scores a chunk never changes its
    scores.  With at least ``world`` chunks every rank gets one."""
    load, count = [0] * world, [0] * world
    owners = [0] * len(costs)
    for j in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        r = min(range(world), key=lambda r: (load[r], count[r], r))
        owners[j] = r
        load[r] += costs[j]
        count[r] += 1
    return owners


def _slots(owners: Sequence[int], world: int) -> list[tuple[int, int]]:
    """(rank, position among that rank's chunks of the round) of each chunk."""
    seen = [0] * world
    out = []
    for r in owners:
        out.append((r, seen[r]))
        seen[r] += 1
    return out


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _record(v: list[float], source: str, index: int) -> dict[str, Any]:
    return {
        "rank": None,
        "score": _num(v[0]),
        "score_se": _num(v[1]),
        "activation": _num(v[2]),
        "error": _num(v[3]),
        "tokens": int(v[4]),
        "short": bool(v[5]),
        "source": source,
        "index": index,
    }


def _chunks(paths: Sequence[str | Path], columns: Columns | None, size: int) -> Iterator[list[tuple[str, int, Any]]]:
    buf: list[tuple[str, int, Any]] = []
    for item in iter_pool(paths, columns):
        buf.append(item)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


def _score_chunk(
    model: Any,
    tokenizer: Any,
    docs: list[Any],
    layout: Columns | None,
    target: Signature,
    options: SelectOptions,
    fingerprint: str,
) -> torch.Tensor:
    """Per-document (score, se, activation, error, tokens, short) of one chunk.  (n, 6) float64"""
    from updatescope.pipeline.corpus import Corpus
    from updatescope.pipeline.score import score_documents

    corpus = Corpus(tuple(docs), layout)
    try:
        res = score_documents(
            model,
            tokenizer,
            corpus,
            target,
            token_budget=options.token_budget,
            min_tokens=options.min_tokens,
            progress=False,
            fingerprint=fingerprint,
        )
    except InputError as exc:
        if not str(exc).startswith("no row has a token to count"):
            raise
        # every row of this chunk has an empty completion or no assistant turn: nothing to
        # score here (the pool as a whole is refused only when no chunk has a token)
        out = torch.full((len(docs), _COLS), float("nan"), dtype=torch.float64)
        out[:, 4], out[:, 5] = 0.0, 1.0
        return out
    cols = (res.score, res.se, res.activation, res.error, res.tokens, res.short)
    return torch.stack([c.to(torch.float64) for c in cols], dim=1)


def select_pool(
    model: Any,
    tokenizer: Any,
    paths: Sequence[str | Path],
    columns: Columns | None,
    target: Signature,
    options: SelectOptions,
    pool: PoolScan,
    *,
    scores: Path | None = None,
    checkpoint: Path | None = None,
    checkpoint_every: int | None = None,
    resume: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    progress: bool = False,
    group: Any = None,
    on_chunk: Callable[[int], None] | None = None,
) -> Selection | None:
    """Score every document of the pool against ``target`` and keep the top ``options.top``
    (module docstring).  Under an initialised process group every rank calls this; rank 0
    writes ``scores`` (every document's row) and returns the selection, the other ranks
    return None.  ``pool``: ``scan_pool`` of the same files.  ``checkpoint`` +
    ``checkpoint_every`` (documents): after the round that crosses each multiple, the state is
    written atomically; ``resume``: a checkpoint state (``check_resume``) to continue from.
    ``on_chunk(i)`` is called after chunk i is scored on this rank."""
    from updatescope.capture.hook import find_output_linear
    from updatescope.data.formats import is_table_input
    from updatescope.distributed import gather_rows, rank_and_world
    from updatescope.models.hf import head_fingerprint
    from updatescope.pipeline.score import head_basis

    rank, world = rank_and_world()
    n_chunks = options.chunks(pool.documents)
    start = int(resume["next_chunk"]) if resume else 0
    check_shards(options, pool, world, start)
    columns = columns or Columns()
    layout = columns if is_table_input(paths, columns) else None  # as Corpus.from_files decides
    fingerprint = head_fingerprint(model, tokenizer, find_output_linear(model))
    head_basis(model, tokenizer, target.config, fingerprint)  # a target of another model: refused now
    if resume and resume["fingerprint"] != fingerprint:
        raise InputError("the checkpoint was written with another model (its head fingerprint differs)")
    settings = settings or {}
    dev = torch.device("cpu")
    if world > 1:
        import torch.distributed as dist

        if dist.is_initialized() and str(dist.get_backend(group)) == "nccl":
            dev = next(model.parameters()).device
    writer = rank == 0 and scores is not None
    heap = TopK(options.top)
    short = scored = 0
    want: dict[int, list[Any]] = {}
    if resume:
        short, scored = int(resume["short"]), int(resume["scored"])
        for score, index, record in resume["heap"]:
            payload = [record, None]
            heap.update(score, index, payload)
            want[int(index)] = payload
    part = partial_path(scores) if writer else None
    fh = None
    bar = None
    if rank == 0 and progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=pool.documents, unit="doc", desc="select", dynamic_ncols=True)
    every = checkpoint_every or 0
    try:
        if writer:
            if resume:
                if not part.is_file() or part.stat().st_size < int(resume["scores_bytes"]):
                    raise InputError(
                        f"the score rows written before the checkpoint ({part}) are missing or cut short; delete "
                        f"{checkpoint} and rerun without --resume"
                    )
                fh = open(part, "r+b")  # noqa: SIM115  (kept open across the rounds)
                fh.truncate(int(resume["scores_bytes"]))
                fh.seek(0, os.SEEK_END)
            else:
                fh = open(part, "wb")  # noqa: SIM115
        chunk_iter = _chunks(paths, columns, options.chunk_docs)
        done = 0
        for c in range(start):  # the part a checkpoint holds: read past it, picking up the kept documents
            items = next(chunk_iter)
            for j, (_, _, doc) in enumerate(items):
                p = want.get(c * options.chunk_docs + j)
                if p is not None:
                    p[1] = doc
            done += len(items)
        if bar is not None:
            bar.update(done)
        t0, tokens = time.perf_counter(), 0
        per_round = world * ROUND_CHUNKS if world > 1 else 1
        for first in range(start, n_chunks, per_round):
            round_items = [next(chunk_iter) for _ in range(first, min(first + per_round, n_chunks))]
            owners = assign_chunks([_cost(items) for items in round_items], world) if world > 1 else [0]
            slots = _slots(owners, world)
            size = options.chunk_docs
            local = torch.zeros(len(round_items) * size, _COLS, dtype=torch.float64)
            for j, items in enumerate(round_items):
                if owners[j] != rank:
                    continue
                docs = [doc for _, _, doc in items]
                at = slots[j][1] * size
                local[at : at + len(docs)] = _score_chunk(model, tokenizer, docs, layout, target, options, fingerprint)
                if on_chunk is not None:
                    on_chunk(first + j)
            gathered = gather_rows(local.to(dev), group=group) if world > 1 else [local]
            if rank == 0:
                lines = []
                for j, items in enumerate(round_items):
                    owner, slot = slots[j]
                    vals = gathered[owner][slot * size : slot * size + len(items)].cpu().tolist()
                    base = (first + j) * options.chunk_docs
                    for k, ((source, row_index, doc), v) in enumerate(zip(items, vals)):
                        rec = _record(v, source, row_index)
                        short += rec["short"]
                        tokens += rec["tokens"]
                        if rec[options.column] is not None:
                            scored += 1
                            heap.update(rec[options.column], base + k, [rec, doc])
                        lines.append(json.dumps(rec))
                if fh is not None:
                    fh.write(("\n".join(lines) + "\n").encode("utf-8"))
                    fh.flush()
            before = done
            done += sum(len(items) for items in round_items)
            if bar is not None:
                bar.update(done - before)
            last = first + per_round >= n_chunks
            if writer and checkpoint is not None and every and not last and done // every > before // every:
                _save_checkpoint(
                    checkpoint, heap, first + per_round, fh.tell(), short, scored, options, settings, pool, fingerprint
                )
    except BaseException:
        if fh is not None:
            fh.close()
            fh = None
            if checkpoint is None or not checkpoint.exists():
                part.unlink(missing_ok=True)  # nothing to resume from: leave nothing behind
        raise
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - t0
    if rank != 0:
        return None
    if fh is not None:
        fh.close()
    best = heap.best()
    top = [({**rec, "rank": r}, doc) for r, (_, _, (rec, doc)) in enumerate(best, 1)]
    if writer:
        _finish_scores(part, scores, {index: r for r, (_, index, _) in enumerate(best, 1)})
    return Selection(top, pool.documents, short, scored, tokens, seconds)


def _save_checkpoint(
    path: Path,
    heap: TopK,
    next_chunk: int,
    scores_bytes: int,
    short: int,
    scored: int,
    options: SelectOptions,
    settings: dict[str, Any],
    pool: PoolScan,
    fingerprint: str,
) -> None:
    from updatescope.records import write_text_atomic

    state = {
        "format": CHECKPOINT_FORMAT,
        "run_key": _run_key(options, settings),
        "pool_digest": pool.digest,
        "fingerprint": fingerprint,
        "next_chunk": next_chunk,
        "scores_bytes": scores_bytes,
        "short": short,
        "scored": scored,
        "heap": [[score, index, rec] for score, index, (rec, _) in heap.best()],
    }
    write_text_atomic(json.dumps(state) + "\n", path)  # records keep their field order


def _finish_scores(part: Path, scores: Path, rank_of: dict[int, int]) -> None:
    """The score file from the partial rows: the kept documents get their rank; written
    through a temporary name and renamed, then the partial file is removed."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{scores.name}.", suffix=".tmp", dir=scores.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        prefix = b'{"rank": null'
        with os.fdopen(fd, "wb") as out, open(part, "rb") as src:
            for g, line in enumerate(src):
                r = rank_of.get(g)
                if r is not None:
                    if not line.startswith(prefix):
                        raise RuntimeError(f"score row {g} does not start with its rank field")
                    line = b'{"rank": ' + str(r).encode() + line[len(prefix) :]
                out.write(line)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, scores)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    part.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
