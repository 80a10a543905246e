"""Experiment folder: SMILES domains: alignment against perplexity reduction.

``config.py`` holds :class:`SmilesConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.smiles.config import SmilesConfig

Config = SmilesConfig

__all__ = ["Config", "SmilesConfig", "run"]


def run(config: SmilesConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.smiles.runner import run as run_

    return run_(config, out_dir)
