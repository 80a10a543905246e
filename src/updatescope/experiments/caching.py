"""The on-disk cache of captured streams: keys, paths, atomic writes.

Captures (head inputs, block inputs, image views) are the expensive, deterministic part of
an experiment; they are stored under ``$UPDATESCOPE_CACHE/experiments`` keyed by everything
that determines them, so a second run is a file read.  Deleting the folder only costs time.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from updatescope.paths import cache_dir

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
    (a unique temporary file renamed into place: concurrent runs never see half a file)."""
    path = cache_file(kind, key)
    if use_cache and path.is_file():
        return torch.load(path, weights_only=True)
    obj = build()
    if use_cache:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        try:
            torch.save(obj, tmp)
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    return obj
