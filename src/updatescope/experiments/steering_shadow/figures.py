"""``steering-shadow``'s figure, drawn from the record's numbers, never from models."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.report.figures import pyplot

#: the figure's rows: without the massive coordinate (primary, amendment 3), then the full space
ROWS = (("shadow_without_massive", "without the massive coordinate"), ("shadow", "full space"))


def draw_fractions(metrics: Mapping[str, Any], path: Path) -> None:
    """Per layer, the share of the mean shadow (solid) and of the per-token shadow (dotted)
    in each span, with the random null's percentile (grey) and, per token, the top-k
    ceiling (dashed); one column per measured shadow (the contrast FT_pos - FT_neg first, then
    each fine-tune against the base), one row per space (without the massive coordinate,
    primary; the full space, secondary; older records have only the second), log scale."""
    plt = pyplot()
    rows = [(key, label) for key, label in ROWS if key in metrics]
    dirs = [d for d, s in metrics["shadow"].items() if s is not None]
    if not dirs:
        return
    fig, axes = plt.subplots(len(rows), len(dirs), figsize=(6.5 * len(dirs), 4.2 * len(rows)), squeeze=False)
    layers = metrics["cosine"]["layers"]
    for ax_row, (key, space) in zip(axes, rows):
        for ax, d in zip(ax_row, dirs):
            for (span, v), colour in zip(metrics[key][d]["spans"].items(), ("C0", "C1")):
                ax.plot(layers, v["mean"], "-", color=colour, label=f"{span}: mean shadow")
                ax.plot(layers, v["token"], ":", color=colour, label=f"{span}: per token")
                ax.plot(layers, v["ceiling_token"], "--", color=colour, lw=0.8, label=f"top-k of D (k of {span})")
                ax.plot(layers, v["null_mean_q"], "-", color="grey", lw=0.8)
                ax.plot(layers, v["null_token_q"], ":", color="grey", lw=0.8)
            ax.set_yscale("log")
            ax.set_xlabel("layer")
            ax.set_ylabel("fraction of the shadow's energy in the span")
            what = "FT_pos − FT_neg" if d == "contrast" else f"{d} fine-tune − base"
            ax.set_title(f"{what}, {space} (grey: the null's percentile)", fontsize="medium")
            ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
