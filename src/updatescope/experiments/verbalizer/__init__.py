"""Experiment folder: one fixed prompt, answer-word sets as tasks.

``config.py`` holds :class:`VerbalizerConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.verbalizer.config import VerbalizerConfig

Config = VerbalizerConfig

__all__ = ["Config", "VerbalizerConfig", "run"]


def run(config: VerbalizerConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.verbalizer.runner import run as run_

    return run_(config, out_dir)
