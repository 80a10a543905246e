"""Validation and conversion of (activation, error) batches; error vectors from logits."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError


def as_tensor(x: Any, name: str) -> Tensor:
    """torch or numpy (or nested lists) -> a floating torch tensor, without copying torch input."""
    try:
        if isinstance(x, Tensor):
            t = x
        elif isinstance(x, np.ndarray):
            t = torch.from_numpy(np.ascontiguousarray(x))
        else:
            t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(
            f"{name} must be a real tensor or array, got {type(x).__name__} ({getattr(x, 'dtype', 'no dtype')})"
        ) from exc
    if t.is_complex():
        # the imaginary part would be dropped silently by a cast to a real dtype
        raise InputError(f"{name} is complex ({t.dtype}); the sketch takes real values")
    if not t.is_floating_point():
        t = t.to(torch.float32)
    return t.detach()  # the sketch is a statistic of the data, never part of a graph


def compute_dtype(*ts: Tensor) -> torch.dtype:
    """float64 when every input is float64 (exact checks), else float32."""
    return torch.float64 if all(t.dtype == torch.float64 for t in ts) else torch.float32


def check_finite(t: Tensor, name: str, batch: int) -> None:
    # One reduction first: a finite sum means every entry is finite (NaN and ±inf propagate);
    # only a non-finite sum (bad entry, or a float overflow) pays for the elementwise check.
    if t.numel() == 0 or bool(torch.isfinite(t.sum())):
        return
    if not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).any(dim=-1).nonzero()[0, 0]) if t.ndim > 1 else 0
        raise InputError(f"{name} in batch {batch} contain NaN or inf (first bad row {bad}); nothing was added")


def check_2d(t: Tensor, name: str, width: int, width_name: str) -> None:
    if t.ndim != 2 or t.shape[1] != width:
        raise InputError(f"{name} must have shape (n, {width_name}={width}), got {tuple(t.shape)}")


def kept_rows(labels: Tensor, k: int, n: int, *, batch: int = 0) -> tuple[Tensor, Tensor]:
    """Validate labels (n,) against K outputs; -> (labels as int64 (n,), kept row indices (n',))."""
    if labels.ndim != 1 or labels.shape[0] != n:
        raise InputError(f"labels must have shape ({n},), got {tuple(labels.shape)}")
    if labels.is_floating_point():
        if not bool((labels == labels.round()).all()):
            raise InputError(f"labels in batch {batch} must be integers")
    labels = labels.to(torch.int64)
    keep = labels != IGNORE_INDEX
    bad = keep & ((labels < 0) | (labels >= k))
    if bool(bad.any()):
        v = int(labels[bad][0])
        raise InputError(f"label {v} in batch {batch} is outside [0, {k}) and is not -100")
    return labels, keep.nonzero().squeeze(1)


def error_dtype(logits_dtype: torch.dtype) -> torch.dtype:
    """The dtype error vectors are computed in: float64 for float64 logits, else float32
    (bf16/fp16 logits are upcast for a faithful softmax)."""
    return torch.float64 if logits_dtype == torch.float64 else torch.float32


def softmax_minus_onehot(logits: Tensor, labels: Tensor, out: Tensor | None = None) -> Tensor:
    """softmax(logits) - onehot(labels) for valid labels.  (n, K), (n,) -> (n, K)

    Computed in float32 or better (bf16 logits are upcast) for a faithful error vector;
    written into ``out`` (of that dtype) when given.
    """
    err = torch.softmax(logits, dim=1, dtype=error_dtype(logits.dtype), out=out)
    err[torch.arange(err.shape[0], device=err.device), labels] -= 1.0
    return err


def error_vectors(logits: Tensor, labels: Tensor, *, batch: int = 0) -> tuple[Tensor, Tensor]:
    """softmax(logits) - onehot(labels), rows with label -100 dropped.

    logits (n, K), labels (n,) -> (errors (n', K), kept row indices (n',)).  Softmax is
    computed in float32 or better (bf16 logits are upcast) for a faithful error vector.
    """
    labels, idx = kept_rows(labels, logits.shape[1], logits.shape[0], batch=batch)
    if idx.numel() == logits.shape[0]:
        return softmax_minus_onehot(logits, labels), idx
    return softmax_minus_onehot(logits.index_select(0, idx), labels.index_select(0, idx)), idx
