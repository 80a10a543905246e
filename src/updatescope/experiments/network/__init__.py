"""Experiment folder: head / block-diagonal / last-k sketches against the exact network Fisher.

``config.py`` holds :class:`NetworkExperimentConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.network.config import NetworkExperimentConfig

Config = NetworkExperimentConfig

__all__ = ["Config", "NetworkExperimentConfig", "run"]


def run(config: NetworkExperimentConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.network.runner import run as run_

    return run_(config, out_dir)
