"""Checkpoints of a long sketching run: the folded state and the next segment, written atomically.

A checkpoint carries a *run key*: a hash of everything that decides the sums — the model's
fingerprint, the sketch config, every document and its counted positions, and every option
that changes what is counted or how it is computed (token cap, forward dtype, window length,
token budget, segmentation).  Resuming with any of them changed is refused, so a resumed
signature is never part one run and part another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from updatescope.errors import InputError
from updatescope.sketch.fishersketch import FisherSketch

__all__ = [
    "CHECKPOINT_FORMAT",
    "checkpoint_path",
    "check_checkpoint_path",
    "run_key",
    "save_checkpoint",
    "load_checkpoint",
]

CHECKPOINT_FORMAT = "updatescope-sketch-checkpoint"


def checkpoint_path(out: str | Path) -> Path:
    """Where ``sketch --checkpoint-every`` keeps the state of a run writing ``out``."""
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


def run_key(
    fingerprint: str,
    config: Any,
    ids: Sequence[Sequence[int]],
    masks: Sequence[Sequence[bool]],
    settings: dict[str, Any],
) -> str:
    """Hash of everything a checkpoint must share with the run that resumes it (the module
    docstring); ``ids``/``masks``: the tokenised documents and their counted targets."""
    h = hashlib.sha256(
        json.dumps({"fp": fingerprint, "config": config.to_dict(), **settings}, sort_keys=True, default=str).encode()
    )
    for i, (x, m) in enumerate(zip(ids, masks)):
        h.update(f"\0{i}\0{list(x)}\1{[int(v) for v in m]}".encode())
    return h.hexdigest()


def save_checkpoint(path: Path, sketch: FisherSketch, next_segment: int, key: str) -> None:
    """The sketch's public state and the position, atomically."""
    from safetensors.torch import save

    from updatescope.records import write_bytes_atomic

    state = sketch.state_dict()
    meta = {
        "format": CHECKPOINT_FORMAT,
        "run_key": key,
        "next_segment": str(next_segment),
        "config": json.dumps(state["config"], sort_keys=True),
    }
    tensors = {k: state[k].cpu().contiguous() for k in ("sums", "diag", "counts")}
    write_bytes_atomic(save(tensors, metadata=meta), path)


def check_checkpoint_path(path: Path, *, resume: bool = False) -> None:
    """A one-line error unless ``path`` is absent or a regular file (never open a FIFO or a folder).

    ``resume``: the file is about to be resumed from, so its header is read as well (without
    the tensors): a file that is not a sketch checkpoint (corrupt, truncated, another format)
    is refused here, before any model loads, rather than after."""
    import os
    import stat

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"checkpoint {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"checkpoint {path} is not a regular file; remove it or choose another --out")
    if resume:
        _checkpoint_meta(path)


def _checkpoint_meta(path: Path) -> dict[str, str]:
    """The checkpoint's metadata, after checking that its header parses and names our format."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
            names = set(fh.keys())
    except Exception:
        raise InputError(f"not a readable sketch checkpoint (corrupt or another format): {path}") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"not an updatescope sketch checkpoint: {path}")
    if not {"sums", "diag", "counts"} <= names or not meta.get("run_key") or "next_segment" not in meta:
        raise InputError(f"sketch checkpoint is incomplete: {path}")
    return meta


def load_checkpoint(path: Path, like: FisherSketch, key: str) -> tuple[FisherSketch, int]:
    """(sketch, next segment) from a checkpoint of this run (same ``key``), on ``like``'s device."""
    from safetensors import safe_open

    check_checkpoint_path(path)
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
            f"checkpoint {path} is from a different run (the model, the data, the columns or a flag that changes "
            "the sums differ: --sketch-dim, --seed, --act-map, --error-map, --max-tokens, --dtype, --token-budget); "
            "resume with the run's own flags, or delete it and rerun without --resume"
        )
    try:
        state = {
            "config": like.config.to_dict(),
            "meta": dict(like.meta),
            **{k: t[k] for k in ("sums", "diag", "counts")},
        }
        sk = FisherSketch.from_state_dict(state, device=like.device)
        next_segment = int(meta["next_segment"])
    except (KeyError, ValueError):
        raise InputError(f"sketch checkpoint is incomplete: {path}") from None
    if sk.state_dict()["sums"].shape != like.state_dict()["sums"].shape:
        raise InputError(f"sketch checkpoint does not match this run's sketch shape: {path}")
    return sk, next_segment
