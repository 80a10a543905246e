"""One runner per reproduced claim: ``updatescope reproduce NAME [--quick]``.

Each runner module defines ``run(quick: bool, out_dir: Path, seed: int = 0) -> dict`` that
returns ``{"name", "config", "metrics", "env", "seconds"}`` (see ``_common.finish``) and
writes its figures (PNG) into ``out_dir``.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

# name -> module under updatescope.experiments
RUNNERS: dict[str, str] = {
    "estimator": "estimator",
    "source-selection": "source_selection",
    "verbalizer": "verbalizer",
    "smiles": "smiles",
    "recovery": "recovery",
    "random-search": "random_search",
    "steering": "steering",
}


def available() -> list[str]:
    """Names whose runner module exists in this installation."""
    out = []
    for name, mod in RUNNERS.items():
        if importlib.util.find_spec(f"updatescope.experiments.{mod}") is not None:
            out.append(name)
    return out


def run_experiment(name: str, quick: bool, out_dir: Path, seed: int = 0,
                   config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one experiment.  ``config``: overrides of the runner's settings (``--set``); only
    runners with a ``config`` parameter accept them."""
    import inspect

    from updatescope.errors import InputError

    if name not in available():
        raise InputError(f"unknown experiment {name!r}; available: {', '.join(available())}")
    module = importlib.import_module(f"updatescope.experiments.{RUNNERS[name]}")
    if config and "config" not in inspect.signature(module.run).parameters:
        raise InputError(f"experiment {name!r} takes no --set settings")
    out_dir.mkdir(parents=True, exist_ok=True)
    if config:
        return module.run(quick=quick, out_dir=out_dir, seed=seed, config=config)
    return module.run(quick=quick, out_dir=out_dir, seed=seed)
