"""Experiment folder: the coupling-dark benchmark (input classes, answer-word mappings).

``config.py`` holds :class:`CouplingDarkConfig` (torch-free), ``runner.py`` the run,
``figures.py`` its figure, ``PREREGISTRATION.md`` the analysis fixed before the full run.
:func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.coupling_dark.config import CouplingDarkConfig

Config = CouplingDarkConfig

__all__ = ["Config", "CouplingDarkConfig", "run"]


def run(config: CouplingDarkConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.coupling_dark.runner import run as run_

    return run_(config, out_dir)
