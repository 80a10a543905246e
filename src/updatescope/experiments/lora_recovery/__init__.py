"""Experiment folder: recovery after forgetting with LoRA on SmolLM2.

``config.py`` holds :class:`LoRARecoveryConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.lora_recovery.config import LoRARecoveryConfig

Config = LoRARecoveryConfig

__all__ = ["Config", "LoRARecoveryConfig", "run"]


def run(config: LoRARecoveryConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.lora_recovery.runner import run as run_

    return run_(config, out_dir)
