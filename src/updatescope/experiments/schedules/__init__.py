"""Experiment folder: simultaneous multitask against sequential specialisation.

``config.py`` holds :class:`SchedulesConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.schedules.config import SchedulesConfig

Config = SchedulesConfig

__all__ = ["Config", "SchedulesConfig", "run"]


def run(config: SchedulesConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.schedules.runner import run as run_

    return run_(config, out_dir)
