"""``routing``'s figure, drawn from the record's numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_gaps(metrics: dict[str, Any], path: Path) -> Path:
    """Mean routed loss minus the oracle's, per router, in- and outside the library (± SE)."""
    from updatescope.report.figures import pyplot, save

    plt = pyplot()
    groups = [g for g in ("in_library", "outside") if g in metrics["summary"]]
    routers = [r for r in metrics["summary"]["all"] if isinstance(metrics["summary"]["all"][r], dict) and r != "oracle"]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.8 / max(len(groups), 1)
    for j, g in enumerate(groups):
        row = metrics["summary"][g]
        xs = [i + j * width for i, r in enumerate(routers) if r in row]
        ys = [row[r]["oracle_gap"] for r in routers if r in row]
        es = [row[r]["oracle_gap_se"] or 0.0 for r in routers if r in row]
        ax.bar(xs, ys, width, yerr=es, label=g.replace("_", " "))
    ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(routers))])
    ax.set_xticklabels(routers, rotation=45, fontsize=7)
    ax.set_ylabel("routed loss − oracle (nats/token)")
    ax.legend(fontsize=7)
    ax.set_title("routing among LoRA adapters", fontsize=9)
    return save(fig, path)
