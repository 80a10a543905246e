"""Experiment folder: training-free mixture weights from signatures (``updatescope reproduce mixtures``).

``config.py`` holds :class:`MixturesConfig` (torch-free), ``runner.py`` the run, ``figures.py``
its figure, ``PREREGISTRATION.md`` the analysis fixed before the full run.  :func:`run`
imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.mixtures.config import MixturesConfig

Config = MixturesConfig

__all__ = ["Config", "MixturesConfig", "run"]


def run(config: MixturesConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.mixtures.runner import run as run_

    return run_(config, out_dir)
