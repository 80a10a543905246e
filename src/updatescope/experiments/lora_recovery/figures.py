"""``lora-recovery``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.experiments.plotting import capture_panel, drift_panel
from updatescope.report.figures import pyplot, save


def lora_recovery_figure(m: Mapping[str, Any], path: Path) -> Path:
    """Capture curves of a ``lora-recovery`` record with their nulls: Delta_GD and the
    displacement left after k steps, in LoRA space and in BA space, and the task plane's
    drift.  Means over replicates with ±1 SE bands."""
    plt = pyplot()
    s = m["summary"]
    fig, axes = plt.subplots(1, 5, figsize=(22.0, 4.0))
    k = np.arange(1, len(s["curve.prefix"]["mean"]) + 1)
    panels = [
        ("", "", "LoRA space: capture of Δ_GD"),
        ("", "_rest", "LoRA space: displacement left after k steps"),
        ("dw_", "", "BA space: capture of ΔW"),
        ("dw_", "_rest", "BA space: ΔW left after k steps"),
    ]
    for ax, (space, suffix, title) in zip(axes, panels):
        capture_panel(ax, s, k, space, suffix, title)
    axes[0].set_ylabel("||P_U x||² / ||x||²")
    axes[0].legend(fontsize=7)
    ax = axes[4]
    drift_panel(ax, s)
    ax.set_title("drift of the task plane", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, path)
