"""Experiment folder: interference between tasks trained one after another (the lab).

``config.py`` holds :class:`InterferenceConfig` (torch-free), ``tasks.py`` the task families,
``runner.py`` the run, ``analysis.py`` the pre-registered statistics and verdict rules,
``figures.py`` its figure, ``PREREGISTRATION.md`` the analysis fixed before the full run.
:func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.interference.config import InterferenceConfig

Config = InterferenceConfig

__all__ = ["Config", "InterferenceConfig", "run"]


def run(config: InterferenceConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.interference.runner import run as run_

    return run_(config, out_dir)
