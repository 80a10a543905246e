"""``mixtures``'s figure, drawn from the record's numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_arms(metrics: dict[str, Any], path: Path) -> Path:
    """Mean transfer over targets of every arm (± SE over targets)."""
    from updatescope.report.figures import pyplot, save

    plt = pyplot()
    s = metrics["summary"]
    arms = list(s)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(arms, [s[a]["transfer"] for a in arms], yerr=[s[a]["transfer_se_over_targets"] or 0.0 for a in arms])
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("transfer (nats/token)")
    ax.set_title("mixtures at one token budget", fontsize=9)
    ax.tick_params(axis="x", rotation=45, labelsize=7)
    return save(fig, path)
