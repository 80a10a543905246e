"""Steering vectors on disk (safetensors + string metadata) and the model fingerprint."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import InputError
from ..records import write_bytes_atomic
from .vector import SteeringVector

__all__ = ["model_fingerprint", "save_vector", "load_vector", "FORMAT", "FORMAT_VERSION"]

FORMAT = "updatescope.steering_vector"
FORMAT_VERSION = 1
# Config keys that change with where/how a model was loaded, not with what it computes.
_VOLATILE = {
    "transformers_version",
    "dtype",
    "torch_dtype",
    "architectures",
    "attn_implementation",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
}
_SAMPLE_ROWS = 16


def model_fingerprint(model: nn.Module) -> str:
    """sha256 (first 16 hex) of the config, the parameter shapes and a few embedding rows.

    Cheap on any model size: only ``_SAMPLE_ROWS`` evenly spaced embedding rows are hashed,
    rounded to bfloat16 so a float32 and a bfloat16 copy of one model agree.  Fine-tunes that
    leave the embeddings alone (e.g. LoRA) keep the base model's fingerprint, on purpose.
    """
    h = hashlib.sha256()
    config = getattr(model, "config", None)
    cfg: dict[str, Any] = config.to_dict() if hasattr(config, "to_dict") else {}
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in _VOLATILE}
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)};".encode())
    get_emb = getattr(model, "get_input_embeddings", None)
    emb = get_emb() if callable(get_emb) else None
    weight = getattr(emb, "weight", None)
    if weight is not None:
        n = weight.shape[0]
        rows = torch.linspace(0, n - 1, min(n, _SAMPLE_ROWS)).round().long().to(weight.device)
        sample = weight.detach()[rows].to(torch.bfloat16).float().cpu()
        h.update(sample.numpy().tobytes())
    return h.hexdigest()[:16]


def save_vector(vector: SteeringVector, path: str | Path) -> Path:
    """Write ``vector`` to ``path`` (safetensors; one tensor ``vectors`` plus metadata)."""
    from safetensors.torch import save as safetensors_bytes

    path = Path(path)
    meta = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "layers": json.dumps(list(vector.layers)),
        "position": json.dumps(vector.position),
        "method": vector.method,
        "model_fingerprint": vector.model_fingerprint or "",
        "normalisation": vector.normalisation,
        "norms": json.dumps(None if vector.norms is None else list(vector.norms)),
        "provenance": json.dumps(dict(vector.provenance), sort_keys=True),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    data = safetensors_bytes({"vectors": vector.vectors.detach().cpu().contiguous()}, metadata=meta)
    return write_bytes_atomic(data, path)


def load_vector(path: str | Path, model: nn.Module | None = None, fingerprint: str | None = None) -> SteeringVector:
    """Read a vector; with ``model`` (or ``fingerprint``) refuse one made for another model."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such steering-vector file")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            keys = list(f.keys())
            tensor = f.get_tensor("vectors") if "vectors" in keys else None
    except Exception as err:  # safetensors raises its own error types for bad headers
        raise InputError(f"{path}: not a readable safetensors file ({type(err).__name__})") from None
    if meta.get("format") != FORMAT or tensor is None:
        raise InputError(f"{path}: not an updatescope steering-vector file")
    try:
        version = int(meta.get("format_version", ""))
    except ValueError:
        raise InputError(f"{path}: bad format_version {meta.get('format_version')!r}") from None
    if version > FORMAT_VERSION:
        raise InputError(
            f"{path}: format version {version} is newer than this updatescope ({FORMAT_VERSION}); upgrade updatescope"
        )
    try:
        norms = json.loads(meta.get("norms", "null"))
        vector = SteeringVector(
            vectors=tensor,
            layers=tuple(json.loads(meta["layers"])),
            position=json.loads(meta["position"]),
            method=meta.get("method", "unknown"),
            model_fingerprint=meta.get("model_fingerprint") or None,
            normalisation=meta.get("normalisation", "none"),
            norms=None if norms is None else tuple(norms),
            provenance=json.loads(meta.get("provenance", "{}")),
        )
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: corrupt steering-vector metadata ({type(err).__name__})") from None
    except InputError as err:
        raise InputError(f"{path}: {err}") from None
    expected = model_fingerprint(model) if model is not None else fingerprint
    if expected is not None and vector.model_fingerprint != expected:
        raise InputError(f"{path}: vector was made for model {vector.model_fingerprint}, not this model ({expected})")
    return vector
