"""Experiment folder: sketch against exact Fisher alignment on SmolLM2 streams and EfficientNet tasks.

``config.py`` holds :class:`EstimatorConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.estimator.config import EstimatorConfig

Config = EstimatorConfig

__all__ = ["Config", "EstimatorConfig", "run"]


def run(config: EstimatorConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.estimator.runner import run as run_

    return run_(config, out_dir)
