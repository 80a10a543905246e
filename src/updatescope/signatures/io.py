"""Signature files: safetensors (no pickle) with string metadata.

Tensors: ``sums`` (2, 3, m) float64, ``diag`` (2, 3, G) float64, ``counts`` (2,) int64.
Metadata: ``format`` ("updatescope-signature"), ``format_version``, ``library_version``,
``config`` (JSON of SketchConfig), plus free-form strings (model, data description, token
count).  Loading checks every shape and field and refuses anything else in one line.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from updatescope._version import __version__
from updatescope.errors import InputError, SignatureFileError
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import N_BLOCKS, Signature

FORMAT = "updatescope-signature"
FORMAT_VERSION = 1
_RESERVED = {"format", "format_version", "library_version", "config"}


def save_signature(sig: Signature, path: str | os.PathLike) -> Path:
    """Write ``sig`` to ``path`` atomically (temporary file + rename).  Returns the path."""
    from safetensors.torch import save_file

    if not isinstance(sig, Signature):
        raise InputError(f"save_signature needs a Signature, got {type(sig).__name__}")
    path = Path(path)
    meta = {k: str(v) for k, v in sig.meta.items() if k not in _RESERVED}
    meta.update(format=FORMAT, format_version=str(FORMAT_VERSION), library_version=__version__,
                config=json.dumps(sig.config.to_dict(), sort_keys=True))
    tensors = {k: v.contiguous() for k, v in sig.state_dict().items()}
    if path.parent and not path.parent.exists():
        raise InputError(f"output folder does not exist: {path.parent}")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load_signature(path: str | os.PathLike) -> Signature:
    """Read and validate a signature file; SignatureFileError (one line) on anything wrong."""
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise SignatureFileError(f"signature file not found: {path}")
    if path.is_dir():
        raise SignatureFileError(f"expected a signature file, got a folder: {path}")
    if path.stat().st_size == 0:
        raise SignatureFileError(f"signature file is empty: {path}")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as exc:  # safetensors raises several types for corrupt/truncated files
        raise SignatureFileError(f"not a readable signature file (corrupt, truncated or another format): {path}") from exc
    if meta.get("format") != FORMAT:
        raise SignatureFileError(f"not an updatescope signature (format={meta.get('format')!r}): {path}")
    try:
        version = int(meta.get("format_version", ""))
    except ValueError:
        raise SignatureFileError(f"signature has no valid format_version: {path}") from None
    if version > FORMAT_VERSION:
        raise SignatureFileError(f"signature format {version} is newer than this updatescope supports "
                                 f"({FORMAT_VERSION}); upgrade updatescope: {path}")
    try:
        config = SketchConfig.from_dict(json.loads(meta["config"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise SignatureFileError(f"signature has an invalid config ({exc}): {path}") from None
    m = config.sketch_dim
    expected = {"sums": ((2, 3, m), torch.float64), "diag": ((2, 3, N_BLOCKS), torch.float64),
                "counts": ((2,), torch.int64)}
    for name, (shape, dtype) in expected.items():
        t = tensors.get(name)
        if t is None:
            raise SignatureFileError(f"signature lacks tensor {name!r}: {path}")
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise SignatureFileError(f"signature tensor {name!r} has shape {tuple(t.shape)} {t.dtype}, "
                                     f"expected {shape} {dtype}: {path}")
    if not (torch.isfinite(tensors["sums"]).all() and torch.isfinite(tensors["diag"]).all()):
        raise SignatureFileError(f"signature contains NaN or inf: {path}")
    if bool((tensors["counts"] < 0).any()) or int(tensors["counts"].sum()) == 0:
        raise SignatureFileError(f"signature has invalid sample counts {tensors['counts'].tolist()}: {path}")
    if bool((tensors["diag"] < 0).any()):
        raise SignatureFileError(f"signature has negative squared norms: {path}")
    extra = {k: v for k, v in meta.items() if k not in _RESERVED}
    return Signature(config, tensors["sums"].clone(), tensors["diag"].clone(), tensors["counts"].clone(), extra)
