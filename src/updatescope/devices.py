"""Device names users give (``--device``, ``device=``) turned into torch devices, checked.

``auto`` is the first CUDA device when one is present, else the CPU.  Asking for a device
this machine does not have is a one-line ``InputError``, never a bare assertion from deep
inside torch.
"""
from __future__ import annotations

import re
from typing import Any

import torch

from updatescope.errors import InputError

__all__ = ["resolve_device", "DEVICE_HELP"]

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
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    m = re.fullmatch(r"cuda(?::(\d+))?", name)
    if m is None:
        raise InputError(f"unknown device {spec!r}: use {DEVICE_HELP}")
    if not torch.cuda.is_available():
        raise InputError(f"device {spec!r} was asked for, but this torch build or machine has no CUDA device")
    index = int(m.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise InputError(f"device {spec!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)
