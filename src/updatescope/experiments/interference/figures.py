"""``interference``'s figure, drawn from the record's numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_interference(metrics: dict[str, Any], path: Path) -> Path:
    """Left: A_F at the start of B's training vs measured forgetting per ordered pair (same
    family in orange).  Right: pooled Spearman of every predictor at both states."""
    from updatescope.report.figures import pyplot, save

    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    start = metrics["states"]["start"]
    af = start["values"]["fisher"]
    for same, colour in ((False, "#4477aa"), (True, "#ee7733")):
        keys = [k for k in af if metrics["pairs"][k]["same_family"] == same]
        ax.scatter(
            [af[k] for k in keys],
            [metrics["pairs"][k]["forgetting"]["mean"] for k in keys],
            s=12,
            color=colour,
            label="same family" if same else "other family",
        )
    ax.set_xlabel("A_F (sketch) at θ_A")
    ax.set_ylabel("forgetting of A (nats)")
    ax.legend(fontsize=7)
    preds = list(start["correlation"])
    width = 0.4
    for i, state in enumerate(("start", "base")):
        vals = [metrics["states"][state]["correlation"][p]["spearman"] or 0.0 for p in preds]
        bx.bar([x + (i - 0.5) * width for x in range(len(preds))], vals, width, label=f"state: {state}")
    bx.axhline(0, color="black", lw=0.8)
    bx.set_xticks(range(len(preds)), preds, rotation=60, fontsize=7)
    bx.set_ylabel("Spearman vs forgetting")
    bx.legend(fontsize=7)
    fig.suptitle(f"interference: {metrics['conclusion']}", fontsize=8)
    return save(fig, path)
