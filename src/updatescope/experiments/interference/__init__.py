"""Experiment folder: interference between tasks trained one after another (the lab).

``config.py`` holds :class:`InterferenceConfig` (torch-free), ``tasks.py`` the task families,
``runner.py`` the run, ``analysis.py`` the pre-registered statistics and verdict rules,
``figures.py`` its figure, ``PREREGISTRATION.md`` the analysis fixed before the full run.
``lm.py`` runs the same pairs and plans on SmolLM2 with LoRA (:class:`InterferenceLMConfig`,
``reproduce interference-smollm2``).  :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.interference.config import InterferenceConfig, InterferenceLMConfig

Config = InterferenceConfig

__all__ = ["Config", "InterferenceConfig", "InterferenceLMConfig", "run"]


def run(config: InterferenceConfig | InterferenceLMConfig, out_dir: Path) -> Any:
    """Run the experiment (the lab: :mod:`.runner`; SmolLM2: :mod:`.lm`) -> its
    :class:`~updatescope.experiments.Result`."""
    if isinstance(config, InterferenceLMConfig):
        from updatescope.experiments.interference.lm import run as run_lm

        return run_lm(config, out_dir)
    from updatescope.experiments.interference.runner import run as run_

    return run_(config, out_dir)
