"""Experiment folder: Best-of-N random search in subspaces of the synthetic lab.

``config.py`` holds :class:`RandomSearchConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.random_search.config import RandomSearchConfig

Config = RandomSearchConfig

__all__ = ["Config", "RandomSearchConfig", "run"]


def run(config: RandomSearchConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.random_search.runner import run as run_

    return run_(config, out_dir)
