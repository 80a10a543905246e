"""Where updatescope keeps files of its own.  Torch-free."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "cache_dir"]


def cache_root() -> Path:
    """Root of updatescope's cache: ``$UPDATESCOPE_CACHE`` or ``~/.cache/updatescope``.

    Dequantised models, captured activations and trained lab checkpoints live below it;
    deleting it only costs recomputation.
    """
    env = os.environ.get("UPDATESCOPE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "updatescope"


def cache_dir(*parts: str) -> Path:
    """``cache_root() / parts...``, created if missing."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
