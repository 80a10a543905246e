"""Shared pieces of experiment runners and benchmarks: environment record, JSON output."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


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
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        info["git_commit"] = commit.stdout.strip() or None
        pkg = Path(__file__).resolve().parents[1]
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", str(pkg)], capture_output=True,
            text=True, timeout=5, cwd=pkg,
        )
        # package source edited since that commit: the result may not be reproducible from it
        info["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = info["git_dirty"] = None
    return info


def finish(name: str, config: dict[str, Any], metrics: dict[str, Any], t0: float) -> dict[str, Any]:
    """The result record every runner returns."""
    return {
        "name": name,
        "config": config,
        "metrics": metrics,
        "env": env_info(),
        "seconds": round(time.perf_counter() - t0, 3),
    }


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


def write_json_atomic(obj: Any, path: Path) -> None:
    """Write JSON through a temporary file and rename, so no half-written file is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2, default=_json_default)
        fh.write("\n")
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:
        pass
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def merge_config(cfg: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Apply ``overrides`` to a runner's default ``cfg`` in place and return it.

    Keys must exist in the defaults (a typo must not be silently ignored); a dict value
    merges into a dict default key by key (so ``{"lora": {"lr": 3e-4}}`` keeps the other LoRA
    settings).  Raises ``InputError`` naming the unknown key.
    """
    from updatescope.errors import InputError

    def merge(dst: dict[str, Any], src: dict[str, Any], where: str) -> None:
        for key, value in src.items():
            if key not in dst:
                known = ", ".join(sorted(dst))
                raise InputError(f"unknown setting {where + key!r}; known: {known}")
            if isinstance(dst[key], dict) and isinstance(value, dict):
                merge(dst[key], value, f"{where}{key}.")
            else:
                dst[key] = value

    merge(cfg, dict(overrides or {}), "")
    return cfg


def parse_settings(items: list[str] | None) -> dict[str, Any]:
    """``["ground_truth=head", "lora.lr=3e-4"]`` -> {"ground_truth": "head", "lora": {"lr": 0.0003}}.

    Values are read as JSON where they parse (numbers, true/false, lists), else as strings.
    """
    from updatescope.errors import InputError

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"--set {item!r} conflicts with an earlier setting of {part!r}")
        node[parts[-1]] = value
    return out
