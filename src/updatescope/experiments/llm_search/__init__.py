"""Experiment folder: Best-of-N random search around SmolLM2's weights.

``config.py`` holds :class:`LLMSearchConfig` (torch-free), ``runner.py`` the run.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.llm_search.config import LLMSearchConfig

Config = LLMSearchConfig

__all__ = ["Config", "LLMSearchConfig", "run"]


def run(config: LLMSearchConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.llm_search.runner import run as run_

    return run_(config, out_dir)
