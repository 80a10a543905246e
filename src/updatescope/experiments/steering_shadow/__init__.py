"""Experiment folder: the activation shadow of a LoRA fine-tune, and how much of it a few
steering vectors span.

``config.py`` holds :class:`SteeringShadowConfig` (torch-free), ``spans.py`` the span
fractions and their random null (pure tensors), ``verdicts.py`` the rules that turn the
numbers into words (torch-free), ``runner.py`` the run, ``figures.py`` the per-layer figure,
``PREREGISTRATION.md`` the analysis fixed before the first record.  The polarity sentences,
the news openings, VADER, CAA's token means and the one-step shift come from the shared
:mod:`updatescope.experiments.sentiment_texts`.
This package imports only the config; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.steering_shadow.config import SteeringShadowConfig

Config = SteeringShadowConfig

__all__ = ["Config", "SteeringShadowConfig", "run"]


def run(config: SteeringShadowConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.steering_shadow.runner import run as run_

    return run_(config, out_dir)
