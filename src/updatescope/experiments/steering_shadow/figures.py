"""``steering-shadow``'s figure, drawn from the record's numbers, never from models."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.report.figures import pyplot


def draw_fractions(metrics: Mapping[str, Any], path: Path) -> None:
    """Per layer, the share of the mean shadow (solid) and of the per-token shadow (dotted)
    in each span, with the random null's percentile (grey) and, per token, the top-k
    ceiling (dashed); one panel per measured shadow (the contrast FT_pos - FT_neg first, then
    each fine-tune against the base), log scale."""
    plt = pyplot()
    dirs = [d for d, s in metrics["shadow"].items() if s is not None]
    if not dirs:
        return
    fig, axes = plt.subplots(1, len(dirs), figsize=(6.5 * len(dirs), 4.2), squeeze=False)
    layers = metrics["cosine"]["layers"]
    for ax, d in zip(axes[0], dirs):
        for (span, v), colour in zip(metrics["shadow"][d]["spans"].items(), ("C0", "C1")):
            ax.plot(layers, v["mean"], "-", color=colour, label=f"{span}: mean shadow")
            ax.plot(layers, v["token"], ":", color=colour, label=f"{span}: per token")
            ax.plot(layers, v["ceiling_token"], "--", color=colour, lw=0.8, label=f"top-k of D (k of {span})")
            ax.plot(layers, v["null_mean_q"], "-", color="grey", lw=0.8)
            ax.plot(layers, v["null_token_q"], ":", color="grey", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_ylabel("fraction of the shadow's energy in the span")
        what = "FT_pos − FT_neg" if d == "contrast" else f"{d} fine-tune − base"
        ax.set_title(f"{what} (grey: the random null's percentile)")
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
