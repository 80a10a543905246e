"""Device names users give (``--device``, ``device=``) turned into torch devices, checked.

``auto`` is CUDA when present, else the CPU; a bare ``cuda`` (and ``auto`` on a GPU machine)
is ``cuda:LOCAL_RANK`` under torchrun, one GPU per rank, else ``cuda:0``.  Asking for a device
this machine does not have is a one-line ``InputError``, never a bare assertion from deep
inside torch.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from updatescope.errors import InputError

__all__ = ["resolve_device", "available_memory", "DEVICE_HELP"]

DEVICE_HELP = "cpu, cuda, cuda:N or auto (CUDA when present, else CPU)"


def resolve_device(spec: Any = "cpu") -> torch.device:
    """``"cpu" | "cuda" | "cuda:N" | "auto" | torch.device`` -> a torch.device that exists here."""
    if isinstance(spec, torch.device):
        name = str(spec)
    elif isinstance(spec, str):
        name = spec.strip().lower()
    else:
        raise InputError(f"device must be a string ({DEVICE_HELP}), got {type(spec).__name__}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if m is None:
        raise InputError(f"unknown device {spec!r}: use {DEVICE_HELP}")
    if not torch.cuda.is_available():
        raise InputError(f"device {spec!r} was asked for, but this torch build or machine has no CUDA device")
    count = torch.cuda.device_count()
    index = int(m.group(1)) if m.group(1) is not None else int(os.environ.get("LOCAL_RANK", "0")) % count
    if index >= count:
        raise InputError(f"device {spec!r} does not exist: this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


def available_memory(device: Any) -> int | None:
    """Bytes free on ``device`` now (GPU: the driver's count; CPU: MemAvailable), None if unknown."""
    if getattr(device, "type", str(device)).startswith("cuda"):
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
