"""Experiment folder: CAA against the pushforward of one gradient step.

``config.py`` holds :class:`SteeringConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.steering.config import SteeringConfig

Config = SteeringConfig

__all__ = ["Config", "SteeringConfig", "run"]


def run(config: SteeringConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.steering.runner import run as run_

    return run_(config, out_dir)
