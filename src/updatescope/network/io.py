"""Network signature files: a ``NetworkSketch``'s state as safetensors, one entry per layer.

Tensors (float64 unless said), for blocks i = 0..L-1 in config order and m = sketch_dim,
G = N_BLOCKS feature blocks:

    layer.{i:04d}.sums (2, m)   layer.{i:04d}.diag (2, G)   block i's feature sums per stream half
    full.sums          (2, m)   full.diag          (2, G)   the whole-network feature
    counts             (2,) int64                            samples per stream half

Metadata (strings): ``format`` ("updatescope-network-signature"), ``format_version``,
``library_version``, ``config`` (JSON of NetworkConfig: layer names, widths, sketch_dim,
seed, mode, maps), ``layers`` (JSON list of the layer names, so a reader that only lists
the file sees them), ``sha256`` (checksum of the config and the tensor bytes), plus the
caller's free-form strings.  The bytes come from the head signature's deterministic
writer (``signatures.io``), so one state always gives one file; a head signature and a
network signature cannot be mistaken for each other (different ``format``).  Loading
checks every shape, the checksum and the value ranges (non-negative counts within int64
headroom, finite sums, non-negative squared norms, Cauchy–Schwarz between sums and
squared norms) and refuses anything else in one line (``SignatureFileError``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from updatescope._version import __version__
from updatescope.errors import InputError, SignatureFileError, UpdatescopeError
from updatescope.network.sketch import NetworkConfig, NetworkSketch
from updatescope.records import write_bytes_atomic
from updatescope.signatures.io import MAX_COUNT, check_format_version, check_tensors, checksum, serialize
from updatescope.sketch.signature import N_BLOCKS

__all__ = ["NETWORK_FORMAT", "load_network_signature", "save_network_signature"]

NETWORK_FORMAT = "updatescope-network-signature"
FORMAT_VERSION = 1
_RESERVED = {"format", "format_version", "library_version", "config", "layers", "sha256"}
_CS_RTOL = 1e-2  # rounding slack of the Cauchy–Schwarz check (float32 projections)


def _entry(i: int | None) -> str:
    return "full" if i is None else f"layer.{i:04d}"


def _tensors(sk: NetworkSketch) -> dict[str, torch.Tensor]:
    """The sketch state split into one (sums, diag) entry per layer plus the full feature."""
    state = sk.state_dict()
    sums, diag = state["sums"].detach().cpu(), state["diag"].detach().cpu()
    L = len(sk.config.layers)
    out = {"counts": state["counts"].detach().cpu().to(torch.int64).contiguous()}
    for i in [*range(L), None]:
        j = L if i is None else i
        out[f"{_entry(i)}.sums"] = sums[:, j].contiguous()
        out[f"{_entry(i)}.diag"] = diag[:, j].contiguous()
    return out


def save_network_signature(sketch: NetworkSketch, path: str | os.PathLike, **meta: str) -> Path:
    """Write ``sketch``'s state to ``path`` atomically (unique temporary file + rename).

    ``meta``: extra string fields (model, data description...).  Byte-identical output for
    the same state, config and metadata.  -> the path.
    """
    if not isinstance(sketch, NetworkSketch):
        raise InputError(f"save_network_signature needs a NetworkSketch, got {type(sketch).__name__}")
    if sketch.count == 0:
        raise InputError("the network sketch is empty: no samples were added; nothing to save")
    path = Path(path)
    if not path.parent.exists():
        raise InputError(f"output folder does not exist: {path.parent}")
    config_json = json.dumps(sketch.config.to_dict(), sort_keys=True)
    tensors = _tensors(sketch)
    fields = {**{k: str(v) for k, v in sketch.meta.items()}, **{k: str(v) for k, v in meta.items()}}
    fields = {k: v for k, v in fields.items() if k not in _RESERVED}
    fields.update(
        format=NETWORK_FORMAT,
        format_version=str(FORMAT_VERSION),
        library_version=__version__,
        config=config_json,
        layers=json.dumps(list(sketch.config.names)),
        sha256=checksum(config_json, tensors),
    )
    data = serialize(tensors, fields)
    return write_bytes_atomic(data, path)


def _open(path: Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    from safetensors import safe_open

    if not path.exists():
        raise SignatureFileError(f"network signature file not found: {path}")
    if not path.is_file():
        raise SignatureFileError(f"expected a network signature file, got a folder or special file: {path}")
    if path.stat().st_size == 0:
        raise SignatureFileError(f"network signature file is empty: {path}")
    try:
        with safe_open(str(path), framework="pt") as fh:
            return dict(fh.metadata() or {}), {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as exc:  # safetensors raises several types for corrupt/truncated files
        raise SignatureFileError(
            f"not a readable signature file (corrupt, truncated or another format): {path}"
        ) from exc


def load_network_signature(path: str | os.PathLike) -> NetworkSketch:
    """Read and validate a network signature file -> a ``NetworkSketch`` that can be updated,
    merged and compared like the one saved (its ``meta`` holds the free-form fields).
    SignatureFileError (one line) for a missing, corrupt, edited or foreign file."""
    path = Path(path)
    meta, tensors = _open(path)
    fmt = meta.get("format")
    if fmt != NETWORK_FORMAT:
        hint = " (a head signature: use load_signature)" if fmt == "updatescope-signature" else ""
        raise SignatureFileError(f"not an updatescope network signature (format={str(fmt)[:40]!r}){hint}: {path}")
    check_format_version(meta, FORMAT_VERSION, "network signature", path)
    try:
        cfg = json.loads(meta["config"])
        if not isinstance(cfg, dict):
            raise TypeError(f"config is a JSON {type(cfg).__name__}, not an object")
        cfg["layers"] = tuple(tuple(x) for x in cfg["layers"])
        config = NetworkConfig(**cfg)
    except (KeyError, ValueError, TypeError, RecursionError, UpdatescopeError) as exc:
        msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise SignatureFileError(f"network signature has an invalid config ({msg}): {path}") from None
    if meta.get("layers") != json.dumps(list(config.names)):
        raise SignatureFileError(f"network signature's layer list does not match its config: {path}")
    L, m = len(config.layers), config.sketch_dim
    expected = {"counts": ((2,), torch.int64)}
    for i in [*range(L), None]:
        expected[f"{_entry(i)}.sums"] = ((2, m), torch.float64)
        expected[f"{_entry(i)}.diag"] = ((2, N_BLOCKS), torch.float64)
    check_tensors(tensors, expected, "network signature", path)
    if meta.get("sha256") != checksum(meta["config"], tensors):
        raise SignatureFileError(f"network signature checksum mismatch: the file was modified or damaged: {path}")
    sums = torch.stack([tensors[f"{_entry(i)}.sums"] for i in [*range(L), None]], 1)  # (2, L + 1, m)
    diag = torch.stack([tensors[f"{_entry(i)}.diag"] for i in [*range(L), None]], 1)  # (2, L + 1, G)
    _check_ranges(sums, diag, tensors["counts"], path)
    sk = NetworkSketch.from_state_dict(
        {"config": config.to_dict(), "sums": sums, "diag": diag, "counts": tensors["counts"]}
    )
    sk.meta = {k: v for k, v in meta.items() if k not in _RESERVED}
    return sk


def _check_ranges(sums: torch.Tensor, diag: torch.Tensor, counts_t: torch.Tensor, path: Path) -> None:
    """Refuse values no sketch can hold.  sums (2, L + 1, m), diag (2, L + 1, G), counts (2,)."""
    counts = [int(c) for c in counts_t.tolist()]
    if any(c < 0 for c in counts) or sum(counts) == 0 or sum(counts) > MAX_COUNT:
        raise SignatureFileError(f"network signature has invalid sample counts {counts}: {path}")
    if not (torch.isfinite(sums).all() and torch.isfinite(diag).all()):
        raise SignatureFileError(f"network signature contains NaN or inf: {path}")
    if bool((diag < 0).any()):
        raise SignatureFileError(f"network signature has negative squared norms: {path}")
    # ‖Σ_i f_i‖² ≤ n Σ_i ‖f_i‖² per half, entry and feature block, after a per-entry scale
    h, e, g = diag.shape
    c = torch.maximum(sums.abs().amax(-1), diag.amax(-1).sqrt()).clamp(min=1e-300)[..., None]
    lhs = (sums / c).square().view(h, e, g, -1).sum(-1)
    n = torch.tensor([float(x) for x in counts], dtype=torch.float64)[:, None, None]
    if bool((lhs > n * diag / c.square() * (1 + _CS_RTOL) + 1e-12).any()):
        raise SignatureFileError(
            f"network signature sums are inconsistent with its counts and squared norms (corrupt or edited): {path}"
        )
