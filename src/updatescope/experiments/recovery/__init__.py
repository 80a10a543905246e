"""Experiment folder: recovery after forgetting on the synthetic lab.

``config.py`` holds :class:`RecoveryExperimentConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.recovery.config import RecoveryExperimentConfig

Config = RecoveryExperimentConfig

__all__ = ["Config", "RecoveryExperimentConfig", "run"]


def run(config: RecoveryExperimentConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.recovery.runner import run as run_

    return run_(config, out_dir)
