"""A truth store: LoRA ground-truth results kept as small files that travel between machines.

The machine-local experiment cache (:mod:`updatescope.experiments.caching`) already lets an
interrupted run resume, but it holds tensors (block inputs, captures) and lives on one
machine.  A truth store keeps only what the ground truth is made of, so it can be committed
between sittings and a run of several hours finished on other machines:

    DIR/seed{S}/{source}.json.gz   the fine-tuning on ``source`` for ground-truth seed S

each a gzip-compressed JSON object {"format", "key", "key_parts", "source", "seed",
"train_after" (train loss after fine-tuning), "seconds" (fine-tuning + evaluation time when
it was computed), "eval": {target: [summed next-token CE of each eval sequence]}, and, when the
run has more to keep per result, "extra" (any JSON)}.  The
transfer and loss tables of every seed, and the per-sequence losses the evaluation bootstrap
resamples, follow from these files and the base model's losses (recomputed: they need no
fine-tuning).  A file is written atomically (temporary file, then rename) as soon as its
fine-tuning is evaluated, so an interrupted sitting loses at most the fine-tuning in flight.

The key is the sha256 of ``key_parts``: the fine-tuning recipe and its own seed, the digests of the
texts of the source's train split and of each evaluated target's eval split (the documents
the run read, and the token caps), the fine-tuning code digest (``lora._code_digest``) and
the model fingerprint.  Block inputs are not part of it: they are recomputed on each machine
and may differ in the last float bits between machines.  A file whose key differs from the
run's is **refused** with one line naming the file and the parts that differ: a store belongs
to one configuration, and silently recomputing would overwrite a committed result.

Several processes may share one store (two cores of one machine, or several machines on a
shared folder): before computing a missing result a process *claims* it with a small file
``DIR/seed{S}/.{source}.claim`` created exclusively (``O_EXCL``), holding its host, process id,
the process's start time and the claim's time, and removes it once the result is saved.  A
result claimed by another live process is left to it: the loop goes on with the next one and
afterwards waits for the claimed results to appear in the store.  A claim is stale, and is
taken over, when its process is gone (same host: no process with that id and start time) or,
from another host, when it is older than ``CLAIM_TTL``.  Claim files are not results: they
are never read as such, and the repository ignores them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import torch

from updatescope.errors import InputError
from updatescope.records import write_bytes_atomic

__all__ = ["FORMAT", "Claimed", "TruthStore", "claim_file", "claimed_at", "release_file", "settle", "texts_digest"]

T = TypeVar("T")
K = TypeVar("K")

FORMAT = 1

#: a claim made on another host counts as abandoned after this many seconds (its process
#: cannot be checked from here); on the same host the process itself is checked
CLAIM_TTL = 6 * 3600.0


def _process_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), which
    tells a live process from a later one that reuses its id; None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22 of stat, counted after the name


def _alive(holder: Mapping[str, Any]) -> bool:
    """Whether the claimant described by ``holder`` (a claim file's content) still runs; a
    claim this module cannot have written (fields of the wrong type) reads as abandoned."""
    try:
        made, pid = float(holder.get("time", 0.0)), int(holder.get("pid", -1))
    except (TypeError, ValueError, OverflowError):
        return False
    if holder.get("host") != socket.gethostname():  # a few minutes of clock skew between hosts, no more
        return -300.0 <= time.time() - made < CLAIM_TTL
    if pid <= 0:
        return False
    start = _process_start(pid)
    if start is not None or Path("/proc").is_dir():
        return start is not None and start == holder.get("start")
    try:  # no /proc: the process id alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _describe(holder: Mapping[str, Any]) -> str:
    return f"process {holder.get('pid')} on {holder.get('host')}"


class Claimed(NamedTuple):
    """What ``TruthStore.claimed`` got: the result and whether it was read from the store, or
    (``value`` None) the description of the live process that holds the claim."""

    value: Any
    stored: bool
    holder: str | None


def settle(
    items: Iterable[K],
    attempt: Callable[[K, bool], bool],
    poll: Callable[[], float],
    on_wait: Callable[[list[K]], None] | None = None,
) -> None:
    """Run ``attempt(item, first)`` over ``items`` once, then again every ``poll()`` seconds
    over those it returned False for (claimed by another live process), until all are done;
    ``on_wait`` is told which items were passed over in the first pass, if any."""
    waiting = [x for x in items if not attempt(x, True)]
    if waiting and on_wait is not None:
        on_wait(waiting)
    while waiting:
        time.sleep(poll())
        waiting = [x for x in waiting if not attempt(x, False)]


def texts_digest(texts: Sequence[str], max_tokens: int | None) -> str:
    """Short sha256 of a split's documents (in order) and its token cap."""
    h = hashlib.sha256(json.dumps(max_tokens).encode())
    for doc in texts:
        h.update(hashlib.sha256(doc.encode("utf-8", "surrogatepass")).digest())
    return h.hexdigest()[:16]


def _key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _differing(stored: Any, wanted: Any, prefix: str = "") -> list[str]:
    """The dotted names of the parts whose values differ (a whole part when not both dicts)."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        out: list[str] = []
        for k in sorted(set(stored) | set(wanted)):
            out += _differing(stored.get(k), wanted.get(k), f"{prefix}{k}.")
        return out
    return [] if stored == wanted else [prefix.rstrip(".")]


def claim_file(path: Path) -> str | None:
    """Claim the computation behind the claim file ``path`` for this process: None when the
    claim is this process's (made now, or left by it earlier), else a description of the live
    process that holds it.  A stale claim (module docstring) is taken over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    me = {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid), "time": time.time()}
    for _ in range(8):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _holder(path)
            if holder is None:  # removed in between: try again
                continue
            if holder.get("writing"):
                return "a process writing its claim"
            if holder.get("host") == me["host"] and holder.get("pid") == pid and holder.get("start") == me["start"]:
                return None
            if _alive(holder):
                return _describe(holder)
            _take_over(path, holder)
            continue
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        return None
    raise InputError(f"could not claim {path} (other processes keep changing it)")


def release_file(path: Path) -> None:
    """Remove the claim file ``path`` if this process holds it."""
    holder = _holder(path)
    if holder is not None and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
        path.unlink(missing_ok=True)


def claimed_at(path: Path, load: Callable[[], T | None], compute: Callable[[], T]) -> Claimed:
    """A result: ``load()`` from its store, or else ``compute()`` under this process's claim
    ``path`` (``compute`` saves it; looked for again once claimed, in case it was saved in
    between; the claim is released however ``compute`` ends).  When another live process
    holds the claim, -> ``Claimed(None, False, holder)``: ask again later."""
    got = load()
    if got is not None:
        return Claimed(got, True, None)
    holder = claim_file(path)
    if holder is not None:
        return Claimed(None, False, holder)
    try:
        got = load()
        return Claimed(got, True, None) if got is not None else Claimed(compute(), False, None)
    finally:
        release_file(path)


def _holder(path: Path) -> dict[str, Any] | None:
    """A claim file's content; None when it is missing.  An unreadable one younger than a
    minute is being written ({"writing": True}); an older one reads as a dead claimant's."""
    try:
        holder = json.loads(path.read_text())
        if not isinstance(holder, dict):
            raise ValueError("not an object")
        return holder
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        try:
            young = time.time() - path.stat().st_mtime < 60
        except OSError:
            return None
        return {"writing": True} if young else {"host": "", "pid": -1, "time": 0.0}


def _take_over(path: Path, stale: Mapping[str, Any]) -> None:
    """Move a stale claim aside, atomically, unless another process has replaced it since it
    was read (then put that one back: the caller looks again)."""
    aside = path.with_name(f"{path.name}.{uuid.uuid4().hex}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    try:
        now = json.loads(aside.read_text())
    except (OSError, ValueError):
        now = dict(stale)
    if now != dict(stale):  # a fresh claim was made in between: restore it, never clobbering
        try:
            os.link(aside, path)
        except OSError:
            pass
    aside.unlink(missing_ok=True)


class TruthStore:
    """The truth store in ``directory`` for one run.

    ``context``: the key parts every file of the run shares (model fingerprint, code digest,
    token caps, ...); ``text_digests``: {"train"|"eval": {domain: :func:`texts_digest`}}."""

    def __init__(
        self, directory: str | Path, context: Mapping[str, Any], text_digests: Mapping[str, Mapping[str, str]]
    ) -> None:
        self.directory = Path(directory)
        self.context = dict(context)
        self.text_digests = {k: dict(v) for k, v in text_digests.items()}

    def path(self, source: str, seed: int) -> Path:
        return self.directory / f"seed{seed}" / f"{source}.json.gz"

    def key_parts(self, source: str, seed: int, targets: Sequence[str], recipe: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **self.context,
            "recipe": dict(recipe),
            "source": source,
            "seed": seed,
            "train_text": self.text_digests["train"][source],
            "eval_text": {t: self.text_digests["eval"][t] for t in targets},
        }

    def load(self, source: str, seed: int, targets: Sequence[str], recipe: Mapping[str, Any]) -> dict[str, Any] | None:
        """The stored result of (source, seed) -> {"train_after", "eval": {t: (n_seq,) float64
        tensor}, "seconds"}, or None when there is no file.  A file computed for another
        configuration (or unreadable) raises InputError naming it."""
        path = self.path(source, seed)
        if not path.exists():
            return None
        parts = self.key_parts(source, seed, targets, recipe)
        try:
            rec = json.loads(gzip.decompress(path.read_bytes()))
            stored_key, stored_parts = rec["key"], rec["key_parts"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"truth store: {path} is not a readable truth-store file ({exc})") from exc
        if stored_key != _key(parts) or rec.get("format") != FORMAT:
            diff = _differing(stored_parts, parts) or ["format"]
            raise InputError(
                f"truth store: {path} was computed for another configuration ({', '.join(diff[:6])} differ"
                f"{', ...' if len(diff) > 6 else ''}); use another truth_store directory or remove the file"
            )
        return {
            "train_after": float(rec["train_after"]),
            "eval": {t: torch.tensor(rec["eval"][t], dtype=torch.float64) for t in targets},
            "seconds": float(rec["seconds"]),
            "extra": rec.get("extra"),
        }

    def claim_path(self, source: str, seed: int) -> Path:
        return self.directory / f"seed{seed}" / f".{source}.claim"

    def claim(self, source: str, seed: int) -> str | None:
        """Claim the computation of (source, seed) for this process (:func:`claim_file`)."""
        return claim_file(self.claim_path(source, seed))

    def claimed(self, source: str, seed: int, load: Callable[[], T | None], compute: Callable[[], T]) -> Claimed:
        """(source, seed)'s result, read or computed under this process's claim (:func:`claimed_at`)."""
        return claimed_at(self.claim_path(source, seed), load, compute)

    def release(self, source: str, seed: int) -> None:
        """Remove this process's claim on (source, seed), if it holds one."""
        release_file(self.claim_path(source, seed))

    def save(
        self, source: str, seed: int, targets: Sequence[str], recipe: Mapping[str, Any], res: Mapping[str, Any]
    ) -> Path:
        """Write one result atomically (gzip JSON, mtime 0 so equal results give equal bytes)."""
        parts = self.key_parts(source, seed, targets, recipe)
        rec = {
            "format": FORMAT,
            "key": _key(parts),
            "key_parts": parts,
            "source": source,
            "seed": seed,
            "train_after": float(res["train_after"]),
            "seconds": float(res["seconds"]),
            # float64 -> JSON float keeps every bit (repr round-trips)
            "eval": {t: [float(v) for v in torch.as_tensor(res["eval"][t]).tolist()] for t in targets},
        }
        if res.get("extra") is not None:
            rec["extra"] = res["extra"]
        path = self.path(source, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_bytes_atomic(gzip.compress(json.dumps(rec, sort_keys=True).encode(), mtime=0), path)
