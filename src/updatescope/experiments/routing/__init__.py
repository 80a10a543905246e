"""Experiment folder: routing requests among LoRA adapters (``updatescope reproduce routing``).

``config.py`` holds :class:`RoutingConfig` (torch-free), ``runner.py`` the run, ``figures.py``
its figure, ``PREREGISTRATION.md`` the analysis fixed before the full run.  :func:`run`
imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.routing.config import RoutingConfig

Config = RoutingConfig

__all__ = ["Config", "RoutingConfig", "run"]


def run(config: RoutingConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.routing.runner import run as run_

    return run_(config, out_dir)
