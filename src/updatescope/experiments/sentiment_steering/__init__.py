"""Experiment folder: sentiment steering of neutral news openings, judged offline.

``config.py`` holds :class:`SentimentSteeringConfig` (torch-free), ``judges.py`` the trained
judge (the prompts, the labelled polarity sentences, VADER, CAA's token means and the one-step
shift are shared with ``steering-shadow`` in :mod:`updatescope.experiments.sentiment_texts`),
``runner.py`` the run, ``figures.py`` the judge-against-fluency figure.  This package imports
only the config, so ``updatescope --help`` and the settings check stay torch-free; :func:`run`
imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.sentiment_steering.config import SentimentSteeringConfig

Config = SentimentSteeringConfig

__all__ = ["Config", "SentimentSteeringConfig", "run"]


def run(config: SentimentSteeringConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.sentiment_steering.runner import run as run_

    return run_(config, out_dir)
