"""``coupling-dark``'s figure, drawn from the record's numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_spearman(metrics: dict[str, Any], path: Path) -> Path:
    """Mean per-target Spearman of every method (scored targets only)."""
    from updatescope.report.figures import pyplot, save

    plt = pyplot()
    vals = {m: v for m, v in metrics["spearman"].items() if v is not None}
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(list(vals), list(vals.values()), color="#4477aa")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("mean Spearman vs LoRA transfer")
    ax.set_title(f"coupling-dark: {metrics['verdicts']['statement']}", fontsize=8)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    return save(fig, path)
