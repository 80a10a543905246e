"""Experiment folder: rank candidate source domains per target against their fine-tuning transfer.

``config.py`` holds :class:`SelectionConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.source_selection.config import SelectionConfig

Config = SelectionConfig

__all__ = ["Config", "SelectionConfig", "run"]


def run(config: SelectionConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.source_selection.runner import run as run_

    return run_(config, out_dir)
