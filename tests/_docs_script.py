"""Load a script of ``docs/`` (the table generators, record_noise) by path, as the docs tests do."""

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def docs_script(name: str) -> ModuleType:
    """The module ``docs/NAME.py``, freshly executed."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
