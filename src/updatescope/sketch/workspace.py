"""Reusable scratch memory for the sketch's inner loop.

Every chunk of a streaming update needs the same few multi-megabyte temporaries (the
projections, the Hadamard stages, the softmax of a block of logits).  Allocated afresh for
each chunk, they go through the C allocator, which on Linux (glibc) may hand the pages back
to the kernel when they are freed and fault them in again, zeroed, on the next chunk.
Measured on a 2-core VM (``benchmarks/alloc_faults.py``): with fresh allocations
``update_logits`` took up to 66 minor page faults per token and ran 1.15–1.7× slower than
with this workspace, by an amount that depends on the allocator's state.  A workspace
keeps one flat
buffer per name and hands out views of it, so steady-state updates allocate nothing large.

Buffers are per thread (``threading.local``), keyed by (name, dtype, device), and only
grow; their size is bounded by the chunk sizes of the callers (tens of MB at
sketch_dim 4096).  Only internal code that consumes a buffer before asking for the same
name again may use it: public functions return tensors they own.  ``release()`` frees the
calling thread's buffers.
"""

from __future__ import annotations

import math
import threading

import torch
from torch import Tensor

_local = threading.local()
# Off: every request gets a fresh tensor (the allocation pattern without a workspace), for
# benchmarks that measure what the workspace saves (``benchmarks/alloc_faults.py``).
enabled = True


def scratch(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """An uninitialised (shape) tensor backed by this thread's buffer called ``name``."""
    if not enabled:
        return torch.empty(shape, dtype=dtype, device=device)
    bufs: dict = getattr(_local, "bufs", None) or {}
    _local.bufs = bufs
    need = math.prod(shape)
    key = (name, dtype, torch.device(device))
    buf = bufs.get(key)
    if buf is None or buf.numel() < need:
        with torch.inference_mode(False):  # a normal tensor, usable in and out of inference mode
            buf = torch.empty(need, dtype=dtype, device=device)
        bufs[key] = buf
    return buf[:need].view(shape)


def temp(tag: str | None, name: str, shape: tuple[int, ...], like: Tensor) -> Tensor:
    """``scratch(tag.name)`` when a tag is given, else a fresh tensor (dtype, device of ``like``)."""
    if tag is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return scratch(f"{tag}.{name}", shape, like.dtype, like.device)


def held_bytes() -> int:
    """Bytes held by this thread's buffers."""
    return sum(b.numel() * b.element_size() for b in (getattr(_local, "bufs", None) or {}).values())


def release() -> None:
    """Free this thread's buffers."""
    _local.bufs = {}
