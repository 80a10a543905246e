"""Signature files: safetensors (no pickle) with string metadata.

Tensors: ``sums`` (2, 3, m) float64, ``diag`` (2, 3, G) float64, ``counts`` (2,) int64.
Metadata: ``format`` ("updatescope-signature"), ``format_version``, ``library_version``,
``config`` (JSON of SketchConfig), ``sha256`` (checksum of the config and the tensor
bytes), plus free-form strings (model, data description, token count).

Files are written by a small deterministic writer of the safetensors layout (8-byte
little-endian header length, JSON header with sorted keys padded to 8 bytes, tensors in
name order), so the same signature always gives the same bytes; the safetensors library
itself serialises metadata in hash-map order.  Loading checks every shape and field, the
checksum when present (files written before it existed still load), the value ranges
(non-negative counts within int64 headroom, finite sums, non-negative squared norms
consistent with the sums) and refuses anything else in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from updatescope._version import __version__
from updatescope.errors import InputError, SignatureFileError, UpdatescopeError
from updatescope.records import write_bytes_atomic
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import N_BLOCKS, Signature

FORMAT = "updatescope-signature"
FORMAT_VERSION = 1
MAX_COUNT = 2**62  # total samples above this would overflow the int64 counts of a later merge
_RESERVED = {"format", "format_version", "library_version", "config", "sha256"}
_DTYPES = {torch.float64: "F64", torch.int64: "I64"}
_CS_RTOL = 1e-2  # rounding slack of the Cauchy–Schwarz check (float32 or TF32 projections)


def checksum(config_json: str, tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over the config JSON and, per tensor in name order, its name, dtype, shape and bytes."""
    h = hashlib.sha256(config_json.encode("utf-8"))
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        h.update(f"\0{name}\0{_DTYPES.get(t.dtype, str(t.dtype))}\0{list(t.shape)}\0".encode())
        h.update(t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def serialize(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> bytes:
    """The safetensors bytes of ``tensors`` and ``meta``, deterministically (sorted keys)."""
    header: dict[str, object] = {"__metadata__": dict(sorted(meta.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous().cpu()
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def save_signature(sig: Signature, path: str | os.PathLike) -> Path:
    """Write ``sig`` to ``path`` atomically (unique temporary file + rename).  Returns the path.

    The same signature (state, config and metadata) always gives byte-identical files.
    """
    if not isinstance(sig, Signature):
        raise InputError(f"save_signature needs a Signature, got {type(sig).__name__}")
    path = Path(path)
    config_json = json.dumps(sig.config.to_dict(), sort_keys=True)
    tensors = {k: v.contiguous() for k, v in sig.state_dict().items()}
    meta = {k: str(v) for k, v in sig.meta.items() if k not in _RESERVED}
    meta.update(
        format=FORMAT,
        format_version=str(FORMAT_VERSION),
        library_version=__version__,
        config=config_json,
        sha256=checksum(config_json, tensors),
    )
    if path.parent and not path.parent.exists():
        raise InputError(f"output folder does not exist: {path.parent}")
    data = serialize(tensors, meta)
    return write_bytes_atomic(data, path)


def check_format_version(meta: dict[str, str], supported: int, what: str, path: Path) -> int:
    """The file's ``format_version``: SignatureFileError unless it is a plain positive integer
    no newer than ``supported``; shared by every file kind that stores sketch state."""
    raw = meta.get("format_version", "")
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 10**6:
        raise SignatureFileError(f"{what} has no valid format_version ({raw[:20]!r}): {path}")
    if int(raw) > supported:
        raise SignatureFileError(
            f"{what} format {int(raw)} is newer than this updatescope supports "
            f"({supported}); upgrade updatescope: {path}"
        )
    return int(raw)


def check_tensors(
    tensors: dict[str, torch.Tensor], expected: dict[str, tuple[tuple[int, ...], torch.dtype]], what: str, path: Path
) -> None:
    """SignatureFileError unless ``tensors`` holds exactly the ``expected`` names with their
    (shape, dtype); shared by every file kind that stores sketch state."""
    for name, (shape, dtype) in expected.items():
        tensor = tensors.get(name)
        if tensor is None:
            raise SignatureFileError(f"{what} lacks tensor {name!r}: {path}")
        if tuple(tensor.shape) != shape or tensor.dtype != dtype:
            raise SignatureFileError(
                f"{what} tensor {name!r} has shape {tuple(tensor.shape)} {tensor.dtype}, "
                f"expected {shape} {dtype}: {path}"
            )
    if set(tensors) != set(expected):
        raise SignatureFileError(f"{what} has unexpected tensors {sorted(set(tensors) - set(expected))[:3]}: {path}")


def load_signature(path: str | os.PathLike) -> Signature:
    """Read and validate a signature file; SignatureFileError (one line) on anything wrong."""
    from safetensors import safe_open

    path = Path(path)
    try:
        path.stat()
    except PermissionError:
        raise SignatureFileError(f"signature file is not readable (permission denied): {path}") from None
    except OSError:
        pass  # not found or a broken path: the checks below name it
    if not path.exists():
        raise SignatureFileError(f"signature file not found: {path}")
    if path.is_dir():
        raise SignatureFileError(f"expected a signature file, got a folder: {path}")
    if not path.is_file():
        raise SignatureFileError(f"not a regular file (a pipe, device or socket?): {path}")
    if not os.access(path, os.R_OK):
        raise SignatureFileError(f"signature file is not readable (permission denied): {path}")
    if path.stat().st_size == 0:
        raise SignatureFileError(f"signature file is empty: {path}")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = dict(fh.metadata() or {})
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except PermissionError:
        raise SignatureFileError(f"signature file is not readable (permission denied): {path}") from None
    except Exception as exc:  # safetensors raises several types for corrupt/truncated files
        if (
            isinstance(getattr(exc, "__cause__", None) or getattr(exc, "__context__", None), PermissionError)
            or "permission denied" in str(exc).lower()
        ):
            raise SignatureFileError(f"signature file is not readable (permission denied): {path}") from None
        raise SignatureFileError(
            f"not a readable signature file (corrupt, truncated or another format): {path}"
        ) from exc
    if meta.get("format") != FORMAT:
        raise SignatureFileError(f"not an updatescope signature (format={str(meta.get('format'))[:40]!r}): {path}")
    check_format_version(meta, FORMAT_VERSION, "signature", path)
    try:
        raw_config = json.loads(meta["config"])
        if not isinstance(raw_config, dict):
            raise TypeError(f"config is a JSON {type(raw_config).__name__}, not an object")
        config = SketchConfig.from_dict(raw_config)
    except (KeyError, ValueError, TypeError, RecursionError, UpdatescopeError) as exc:
        raise SignatureFileError(
            "signature has an invalid config "
            f"({str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}): {path}"
        ) from None
    m = config.sketch_dim
    expected = {
        "sums": ((2, 3, m), torch.float64),
        "diag": ((2, 3, N_BLOCKS), torch.float64),
        "counts": ((2,), torch.int64),
    }
    check_tensors(tensors, expected, "signature", path)
    if "sha256" in meta and meta["sha256"] != checksum(meta["config"], tensors):
        raise SignatureFileError(f"signature checksum mismatch: the file was modified or damaged: {path}")
    _check_ranges(tensors, path)
    extra = {k: v for k, v in meta.items() if k not in _RESERVED}
    return Signature(config, tensors["sums"].clone(), tensors["diag"].clone(), tensors["counts"].clone(), extra)


def _check_ranges(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Refuse values no sketch can hold (one line naming the problem)."""
    sums, diag = tensors["sums"], tensors["diag"]
    counts = [int(c) for c in tensors["counts"].tolist()]  # Python ints: no wrap-around
    if any(c < 0 for c in counts) or sum(counts) == 0 or sum(counts) > MAX_COUNT:
        raise SignatureFileError(f"signature has invalid sample counts {counts} (each ≥ 0, total in 1..2^62): {path}")
    if not (torch.isfinite(sums).all() and torch.isfinite(diag).all()):
        raise SignatureFileError(f"signature contains NaN or inf: {path}")
    if bool((diag < 0).any()):
        raise SignatureFileError(f"signature has negative squared norms: {path}")
    # Cauchy–Schwarz per half, kind and feature block: ‖Σ_i f_i‖² ≤ n Σ_i ‖f_i‖².  Computed
    # after dividing by the largest entry so the squares cannot overflow.
    g = diag.shape[-1]
    c = torch.maximum(sums.abs().amax(-1), diag.amax(-1).sqrt()).clamp(min=1e-300)[..., None]  # (2, 3, 1)
    lhs = (sums / c).square().view(2, 3, g, -1).sum(-1)
    n = torch.tensor([float(x) for x in counts], dtype=torch.float64)[:, None, None]
    rhs = n * diag / c.square()
    if bool((lhs > rhs * (1 + _CS_RTOL) + 1e-12).any()):
        raise SignatureFileError(
            f"signature sums are inconsistent with its counts and squared norms (corrupt or edited): {path}"
        )
