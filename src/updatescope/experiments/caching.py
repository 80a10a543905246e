"""The on-disk cache of captured streams: keys, paths, atomic writes.

Captures (head inputs, block inputs, image views) are the expensive, deterministic part of
an experiment; they are stored under ``$UPDATESCOPE_CACHE/experiments`` keyed by everything
that determines them, so a second run is a file read.  Deleting the folder only costs time.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from updatescope.paths import cache_dir
from updatescope.records import write_bytes_atomic

__all__ = ["cache_key", "cache_file", "cached"]


def cache_key(*parts: Any) -> str:
    """A 24-hex-digit digest of ``parts`` (JSON with sorted keys; anything else via str)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:24]


def cache_file(kind: str, key: str) -> Path:
    """``<cache>/experiments/<kind>-<key>.pt``."""
    return cache_dir("experiments") / f"{kind}-{key}.pt"


def cached(kind: str, key: str, build: Callable[[], Any], *, use_cache: bool = True) -> Any:
    """Load the cached object for (kind, key), or ``build()`` it and store it atomically
    (:func:`updatescope.records.write_bytes_atomic`)."""
    path = cache_file(kind, key)
    if use_cache and path.is_file():
        return torch.load(path, weights_only=True)
    obj = build()
    if use_cache:
        buf = io.BytesIO()
        torch.save(obj, buf)
        write_bytes_atomic(buf.getvalue(), path)  # concurrent runs never see half a file
    return obj
