"""Result records: environment info, atomic JSON writing, portable paths.

Every experiment, benchmark and CLI command that writes a JSON result goes through this
module, so a record always carries the same environment fields and is never half-written.
Torch-free at import time (``env_info`` imports torch when called).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "env_info",
    "make_record",
    "write_json_atomic",
    "to_json",
    "json_default",
    "portable_command",
    "portable_config",
    "write_text_atomic",
    "write_bytes_atomic",
]


def env_info() -> dict[str, Any]:
    """Versions, device and git commit, recorded next to every result."""
    import numpy
    import torch

    from updatescope._version import __version__

    info: dict[str, Any] = {
        "updatescope": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "numpy": numpy.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        pkg = Path(__file__).resolve().parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=pkg)
        info["git_commit"] = commit.stdout.strip() or None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", str(pkg)],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=pkg,
        )
        # package source edited since that commit: the result may not be reproducible from it
        info["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = info["git_dirty"] = None
    return info


def make_record(name: str, config: dict[str, Any], metrics: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``{"name", "config", "metrics", "env", "seconds"}``: the record every experiment writes."""
    return {"name": name, "config": config, "metrics": metrics, "env": env_info(), "seconds": round(seconds, 3)}


def _portable_path(value: Any, outside_parts: int) -> Any:
    """An absolute path made relative to the working directory, or cut to its last
    ``outside_parts`` parts when it lies outside it; anything else unchanged."""
    if not (isinstance(value, str) and os.path.isabs(value)):
        return value
    rel = os.path.relpath(value)
    return rel if not rel.startswith("..") else "/".join(Path(value).parts[1:][-outside_parts:])  # no root


def portable_command(script: str, argv: list[str] | None = None) -> str:
    """The command line of a run (``argv`` defaults to ``sys.argv[1:]``), for a committed
    record: absolute paths become relative to the working directory, or keep their last
    three parts (e.g. PEER/bin/python) when they lie outside it."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join([f"python {script}", *(_portable_path(tok, 3) for tok in args)])


def portable_config(args: Any) -> dict[str, Any]:
    """``vars(args)`` with absolute paths made relative to the working directory.

    Results are committed; a path from the machine that made them says nothing to a reader
    and leaks the layout of that machine. Paths outside the working directory keep only
    their file name.
    """
    return {key: _portable_path(value, 1) for key, value in vars(args).items()}


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars/arrays, tensors and paths."""
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _strict(obj: Any) -> Any:
    """``obj`` with non-finite floats replaced by None (strict JSON has no NaN or Infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def to_json(obj: Any, *, strict: bool = False, indent: int | None = 2) -> str:
    """JSON text of ``obj``.  ``strict``: non-finite floats become ``null`` (for machine
    output read by strict parsers); records keep Python's NaN so older tools still read them."""
    if strict:
        obj = _strict(json.loads(json.dumps(obj, default=json_default)))
        return json.dumps(obj, indent=indent, allow_nan=False)
    return json.dumps(obj, indent=indent, default=json_default)


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; it is put back at once
    os.umask(mask)
    return mask


def write_bytes_atomic(data: bytes, path: str | os.PathLike) -> Path:
    """Write ``data`` through a uniquely named temporary file in the same folder, then rename:
    no half-written file is left behind (a full disk, an interrupt) and concurrent writers
    never share a temporary name."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); the result gets the mode a plain open() would give
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())  # the rename must never expose a file whose bytes are not on disk
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(text: str, path: str | os.PathLike) -> Path:
    """UTF-8 ``text`` written atomically (:func:`write_bytes_atomic`)."""
    return write_bytes_atomic(text.encode("utf-8"), path)


def write_json_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """JSON of ``obj`` written atomically (:func:`write_text_atomic`); the folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text_atomic(to_json(obj) + "\n", path)  # serialised first: a bad value leaves nothing
