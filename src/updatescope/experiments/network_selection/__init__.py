"""Experiment folder: LoRA-layer against head sketch as a predictor of LoRA transfer.

``config.py`` holds :class:`NetworkSelectionConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.network_selection.config import NetworkSelectionConfig

Config = NetworkSelectionConfig

__all__ = ["Config", "NetworkSelectionConfig", "run"]


def run(config: NetworkSelectionConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.network_selection.runner import run as run_

    return run_(config, out_dir)
