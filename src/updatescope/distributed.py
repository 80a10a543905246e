"""torch.distributed helpers: deterministic document shards and an exact all-reduce of sketches.

Exactness.  A FisherSketch sends sample i of the *whole* stream to half i mod 2, so a rank
cannot place its samples before it knows how many came before it; and a float64 sum
reduced in an order the collective chooses (ring, tree) is not bit-reproducible.  Both are
avoided the same way: every rank writes its states into its own rows of a zero tensor
(one row per slot: a rank, or a segment of the corpus), the rows are summed with
``all_reduce`` — x + 0 = x exactly, so every rank receives every slot's state unchanged —
and every rank then folds the slots in slot order with ``FisherSketch.merge``, which
carries the halves.  The result is the same bytes on every rank, whatever the number of
ranks and the reduction algorithm, and equals merging the slots in one process.  The cost
is slots × (6m + 6G) float64 per all-reduce: 197 KB per slot at m = 4096.

Backends: gloo for CPU tensors, NCCL for CUDA ones (the state lives on the sketch's device).

Errors under torchrun.  A rank that fails must neither leave the others waiting in a
collective nor make every rank print the same line.  Two mechanisms:

* *Agreement.*  Every collective point of a run (``gather_slots`` and the success path of
  ``shutdown``) starts with one all-reduce of an error flag (``agree``).  A rank that fails
  between two such points meets the others at the next one from its error path
  (``shutdown(synchronise=False)``) with the flag set, so every rank leaves together and
  the healthy ones raise :class:`PeerFailed` instead of waiting forever.
* *One line.*  ``report_error`` decides who prints: rank 0 prints its own message, or, when
  only other ranks failed, the message of the lowest failing rank, read through the
  launcher's key-value store (torchrun's agent store, ``MASTER_ADDR:MASTER_PORT``); the other
  ranks print nothing and leave only after rank 0 has printed.  Without that store rank 0
  prints its own message, or a line saying another rank failed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from updatescope.devices import resolve_device  # noqa: F401  (re-exported: the CLI's --device)
from updatescope.errors import InputError, UpdatescopeError
from updatescope.sketch.fishersketch import FisherSketch
from updatescope.sketch.signature import N_BLOCKS

__all__ = [
    "shutdown",
    "rank_and_world",
    "shard_range",
    "resolve_device",
    "init_from_env",
    "gather_slots",
    "gather_rows",
    "fold",
    "all_reduce_sketch",
    "PeerFailed",
    "agree",
    "report_error",
]

_STORE_WAIT_S = 30.0  # how long a rank waits for the others' error messages or rank 0's line
_ANOTHER = "updatescope: error: another rank failed (see its own output)"
_device = torch.device("cpu")  # the device of the group init_from_env created
_settled = False  # this rank already knows the run failed on every rank (an agreement said so)


class PeerFailed(UpdatescopeError):
    """Another rank failed; it (or rank 0 on its behalf) reports why."""

    def __init__(self) -> None:
        super().__init__("another rank failed; its error is reported by rank 0")


def agree(failed: bool, group: Any = None, device: torch.device | None = None) -> None:
    """The one collective that tells every rank whether any rank failed.  Every rank calls it
    at the same point: healthy ranks with ``failed=False`` (they raise :class:`PeerFailed`
    when another rank failed), failing ranks with ``failed=True`` from their error path (they
    return, and leave with their own error).  Without a process group: nothing to agree."""
    import torch.distributed as dist

    global _settled
    if _settled or not (dist.is_available() and dist.is_initialized()):
        return
    if device is None:
        device = _device if str(dist.get_backend(group)) == "nccl" else torch.device("cpu")
    flag = torch.tensor([1 if failed else 0], dtype=torch.int64, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if int(flag) or failed:
        _settled = True  # every rank now knows: none of them meets another collective
        if not failed:
            raise PeerFailed()


def rank_and_world() -> tuple[int, int]:
    """(rank, world size): from the initialised default group, else the launcher's environment
    (``RANK``/``WORLD_SIZE``, set by torchrun and accelerate), else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise InputError(
            f"RANK/WORLD_SIZE must be integers, got {os.environ.get('RANK')!r}/{os.environ.get('WORLD_SIZE')!r}"
        ) from None
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"invalid RANK={rank} for WORLD_SIZE={world}")
    return rank, world


def shard_range(n: int, rank: int, world: int) -> range:
    """The contiguous block of items ``rank`` owns out of ``n`` (sizes differ by at most one;
    earlier ranks take the extra items).  Contiguous blocks keep the stream order, which the
    halves of the sketch depend on."""
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"invalid rank {rank} of world size {world}")
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def init_from_env(device: torch.device) -> bool:
    """Initialise the default process group from torchrun's environment when WORLD_SIZE > 1
    and none exists; NCCL for a CUDA device, gloo otherwise.  Returns True when this call
    created the group (the caller then destroys it)."""
    import torch.distributed as dist

    _, world = rank_and_world()
    if world == 1 or dist.is_initialized():
        return False
    if not dist.is_available():
        raise InputError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    global _device
    _device = device  # where this rank's agreement flag lives (NCCL reduces device tensors only)
    return True


def _config_key(sk: FisherSketch) -> int:
    import hashlib
    import json

    text = json.dumps(sk.config.to_dict(), sort_keys=True).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:7], "little")


def _flat(state: Mapping[str, Any]) -> torch.Tensor:
    """A sketch's float64 sums and diagonal blocks as one vector (its ``state_dict()``)."""
    return torch.cat((state["sums"].reshape(-1), state["diag"].reshape(-1)))


def gather_slots(
    slots: Mapping[int, FisherSketch], n_slots: int, like: FisherSketch, group: Any = None
) -> list[FisherSketch]:
    """Every slot's sketch on every rank, bit for bit.  ``slots``: this rank's slots
    (index -> sketch); each index must be owned by exactly one rank.  ``like`` gives the
    config, device and metadata of the result.  Slots nobody filled come back empty."""
    import torch.distributed as dist

    global _settled
    m = like.config.sketch_dim
    width = 2 * 3 * m + 2 * 3 * N_BLOCKS
    dev = like.device
    states = torch.zeros(n_slots, width, dtype=torch.float64, device=dev)
    # counts travel on the state's device (NCCL reduces device tensors only), as int64: exact
    counts = torch.zeros(n_slots, 2, dtype=torch.int64, device=dev)
    owned = torch.zeros(n_slots, dtype=torch.int64, device=dev)
    for i, sk in slots.items():
        if not 0 <= i < n_slots:
            raise InputError(f"slot {i} out of range 0..{n_slots - 1}")
        like.config.check_compatible(sk.config)
        state = sk.state_dict()
        states[i] = _flat(state).to(dev)
        counts[i] = state["counts"].to(dev)
        owned[i] = 1
    if dist.is_available() and dist.is_initialized():
        agree(False, group=group, device=dev)  # a rank that failed before this point meets us here
        # the same config on every rank, or the sums below would add unrelated bases
        key = torch.tensor([_config_key(like)], dtype=torch.int64, device=dev)
        lo, hi = key.clone(), key.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
        if int(lo) != int(hi):
            _settled = True  # every rank raises this same error: no agreement is left to meet
            raise InputError("the ranks sketch with different configs (seed, sketch_dim, maps or model)")
        for t in (states, counts, owned):
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    if bool((owned > 1).any()):
        raise InputError(f"slots {torch.nonzero(owned > 1).squeeze(1).tolist()} were filled by more than one rank")
    out = []
    split = 2 * 3 * m
    config = like.config.to_dict()
    for i in range(n_slots):
        state = {
            "config": config,
            "meta": dict(like.meta),
            "sums": states[i, :split].reshape(2, 3, m),
            "diag": states[i, split:].reshape(2, 3, N_BLOCKS),
            "counts": counts[i].cpu(),
        }
        out.append(FisherSketch.from_state_dict(state, device=dev))
    return out


def gather_rows(local: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
    """Every rank's ``local`` tensor (the same shape and dtype on every rank), in rank order,
    on every rank: an all-gather, which copies and never adds, so values (NaN, -0.0 included)
    arrive bit for bit.  Starts with an agreement, so a rank that failed since the last
    collective makes the others raise :class:`PeerFailed` instead of waiting.  Without an
    initialised process group: ``[local]``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [local]
    agree(False, group=group, device=local.device)
    out = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, local.contiguous(), group=group)
    return out


def fold(sketches: Sequence[FisherSketch], like: FisherSketch | None = None) -> FisherSketch:
    """Merge sketches left to right, as if their streams were concatenated in this order."""
    if not sketches and like is None:
        raise InputError("nothing to fold: no sketches")
    first = like if like is not None else sketches[0]
    acc = FisherSketch(config=first.config, device=first.device, meta=first.meta)
    for sk in sketches:
        acc = acc.merge(sk)
    return acc


def all_reduce_sketch(sketch: FisherSketch, group: Any = None) -> FisherSketch:
    """The sketch of all ranks' streams concatenated in rank order, on every rank.

    For users who sketch inside their own distributed loop: rank r's ``sketch`` holds its
    shard; the result equals one process sketching shard 0, then shard 1, … (halves exact,
    sums bit-identical on every rank; see the module docstring).  The input is not mutated.
    Without an initialised process group it returns a copy of ``sketch``.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return fold([sketch], like=sketch)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    return fold(gather_slots({rank: sketch}, world, sketch, group=group), like=sketch)


def shutdown(*, synchronise: bool) -> None:
    """Leave the process group this process created.

    ``synchronise`` (the success path, every rank calls it): an agreement (:func:`agree`: it
    orders the work, rank 0 has written, and learns whether a rank failed after the last
    collective), a barrier, then destroy.  The barrier lets gloo's worker threads finish
    tearing down the first collective's connections — without it ``destroy_process_group``
    aborted a rank that had done all its work ("terminate called without an active
    exception") about one run in six on 2 CPU cores.  On an error path
    (``synchronise=False``) the rank meets the others at their next agreement with its error
    flag set, unless an agreement already told every rank, then destroys the group.
    """
    import torch.distributed as dist

    global _settled
    if not dist.is_initialized():
        return
    try:
        if synchronise:
            agree(False)
            dist.barrier()
        elif not _settled:
            agree(True)
    finally:
        _settled = False
        dist.destroy_process_group()


def _store() -> Any:
    """A client of the launcher's key-value store (torchrun's agent store), or None."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    from datetime import timedelta

    import torch.distributed as dist

    try:
        return dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=timedelta(seconds=_STORE_WAIT_S),
        )
    except Exception:  # no store to reach: rank 0 speaks for itself
        return None


def _poll(store: Any, keys: Sequence[str], deadline: float, *, every: bool) -> list[str]:
    """The keys of ``keys`` present in ``store`` once all (``every``) or any of them are, or at
    the deadline."""
    import time

    while True:
        have = [k for k in keys if store.check([k])]
        if (len(have) == len(keys) if every else have) or time.monotonic() >= deadline:
            return have
        time.sleep(0.02)


def report_error(line: str | None, rank: int, world: int) -> None:
    """Print a user error's line once for all ranks (the module docstring), to stderr.

    ``line``: this rank's line, or None when it only learnt that another rank failed
    (:class:`PeerFailed`).  Rank 0 prints its own line, or the lowest failing rank's; the
    other ranks print nothing and return once rank 0 has printed (so the launcher does not
    stop rank 0 before it has), or after a wait in which rank 0 never reported — then a
    failing rank prints its own line, as nobody else will."""
    import sys
    import time

    store = _store() if world > 1 else None
    if store is None:
        if rank == 0:
            print(line or _ANOTHER, file=sys.stderr)
        return
    env = os.environ
    prefix = f"updatescope/{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    deadline = time.monotonic() + _STORE_WAIT_S
    try:
        if line is not None:
            store.set(f"{prefix}/error/{rank}", line)
        if rank == 0:
            if line is None:
                keys = [f"{prefix}/error/{r}" for r in range(1, world)]
                found = _poll(store, keys, deadline, every=False)
                line = store.get(found[0]).decode() if found else None
            print(line or _ANOTHER, file=sys.stderr)
            sys.stderr.flush()
            store.set(f"{prefix}/printed", "1")
            return
        if not _poll(store, [f"{prefix}/printed"], deadline, every=True) and line is not None:
            print(line, file=sys.stderr)  # rank 0 never reported (it is stuck or gone): say it here
    except Exception:  # the store went away (the launcher is stopping the ranks): say what we know
        if rank == 0 and line is not None:
            print(line, file=sys.stderr)
