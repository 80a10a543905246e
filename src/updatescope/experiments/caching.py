"""The on-disk cache of captured streams: keys, paths, atomic writes.

Captures (head inputs, block inputs, image views) are the expensive, deterministic part of
an experiment; they are stored under ``$UPDATESCOPE_CACHE/experiments`` keyed by everything
that determines them, so a second run is a file read.  Deleting the folder only costs time.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from updatescope.errors import InputError
from updatescope.paths import cache_dir
from updatescope.records import write_bytes_atomic

__all__ = ["cache_key", "cache_file", "cached", "read_stored_json", "stored_json", "stored_json_path"]


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


def _normalised(directory: str | Path, kind: str, parts: dict[str, Any]) -> tuple[Any, Path]:
    """``parts`` as they read back from JSON, and the file they name in ``directory``."""
    norm = json.loads(json.dumps(parts, sort_keys=True, default=str))
    return norm, Path(directory) / f"{kind}-{cache_key(norm)}.json.gz"


def stored_json_path(directory: str | Path, kind: str, parts: dict[str, Any]) -> Path:
    """The file ``stored_json`` keeps ``parts``'s result in: ``<directory>/<kind>-<key>.json.gz``."""
    return _normalised(directory, kind, parts)[1]


def read_stored_json(directory: str | Path, kind: str, parts: dict[str, Any], default: Any = None) -> Any:
    """The result ``stored_json`` kept for ``parts`` in ``directory``, or ``default`` when there
    is none; a file that is not what its name says is refused as in ``stored_json``."""
    return _read(*_normalised(directory, kind, parts), kind, default)


def _read(norm: Any, path: Path, kind: str, default: Any) -> Any:
    if not path.exists():
        return default
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: not a readable stored result ({type(e).__name__})") from None
    if not isinstance(obj, dict) or obj.get("kind") != kind or obj.get("key_parts") != norm or "result" not in obj:
        raise InputError(f"{path}: its stored key parts are not this run's; move it away to recompute")
    return obj["result"]


def stored_json(directory: str | Path | None, kind: str, parts: dict[str, Any], build: Callable[[], Any]) -> Any:
    """``build()``'s JSON result, kept in ``directory`` (None: not kept) as
    ``<kind>-<key>.json.gz`` with ``key = cache_key(parts)``: a small committed file that lets
    a long run resume on another machine.  The file holds ``{"kind", "key_parts", "result"}``;
    a rerun with the same ``parts`` reads it back, any other ``parts`` (another config, code,
    model or input bits) names another file and is computed afresh.  A file that does not read
    back as gzip JSON, or whose stored parts are not ``parts``, is refused with one line naming
    it (nothing is overwritten)."""
    if directory is None:
        return build()
    norm, path = _normalised(directory, kind, parts)
    missing = object()
    got = _read(norm, path, kind, missing)
    if got is not missing:
        return got
    result = build()
    body = json.dumps({"kind": kind, "key_parts": norm, "result": result}, sort_keys=True, allow_nan=True)
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(gzip.compress(body.encode("utf-8"), mtime=0), path)
    return json.loads(body)["result"]  # what a resumed run reads back, so both runs record the same
