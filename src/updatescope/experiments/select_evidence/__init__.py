"""Experiment folder: top-k documents of a mixed pool by each selector, judged by LoRA.

``config.py`` holds :class:`SelectEvidenceConfig` (torch-free), ``selectors.py`` the
selectors and their costs, ``dsir.py`` DSIR through its package, ``runner.py`` the run and its
ground truth, ``verdicts.py`` the analysis fixed in ``PREREGISTRATION.md``.
This package imports only the config, so ``updatescope --help`` and the settings check stay
torch-free; :func:`run` imports the runner when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from updatescope.experiments.select_evidence.config import SelectEvidenceConfig

Config = SelectEvidenceConfig

__all__ = ["Config", "SelectEvidenceConfig", "run"]


def run(config: SelectEvidenceConfig, out_dir: Path) -> Any:
    """Run the experiment (see :mod:`.runner`) -> its :class:`~updatescope.experiments.Result`."""
    from updatescope.experiments.select_evidence.runner import run as run_

    return run_(config, out_dir)
