"""CLI commands beyond the core verbs, one module each.

Every module in this package defines ``register(subparsers) -> None``, which adds its
subcommand with ``set_defaults(func=...)``; ``func(args) -> int`` runs it.  Modules are found
by listing this package (sorted by name), so adding a command is adding one file.  Command
modules must import nothing heavy at module level: ``updatescope --help`` stays torch-free.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

__all__ = ["register_all"]


def register_all(subparsers: Any) -> None:
    """Add every command module's subcommand to ``subparsers``."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{info.name}").register(subparsers)
