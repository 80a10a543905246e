"""``sentiment-steering``'s figure, drawn from the record's numbers, never from models."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.report.figures import pyplot


def draw_tradeoff(grid: Mapping[str, Any], limit_logppl: float, path: Path) -> None:
    """Mean VADER score toward the target against perplexity on the select prompts, one
    panel per direction, one curve per method (its (layer, scale) cells in order of scale,
    layer by layer); the base model and the prompting baseline as single points; the dashed
    line is the fluency bound."""
    plt = pyplot()
    dirs = list(grid)
    fig, axes = plt.subplots(1, len(dirs), figsize=(6 * len(dirs), 4.2), squeeze=False)
    for ax, direction in zip(axes[0], dirs):
        tab = grid[direction]
        for method, style in (("caa", "o-"), ("pushforward", "s-"), ("random", "^:")):
            if method not in tab:
                continue
            cells = tab[method]["cells"]
            xs, ys = [], []
            for row in cells:
                xs += [c["ppl"] for c in row] + [math.nan]
                ys += [c["vader"] for c in row] + [math.nan]
            ax.plot(xs, ys, style, label=method)
        for key, marker in (("base", "k*"), ("prompting", "rD")):
            ax.plot([tab[key]["ppl"]], [tab[key]["vader"]], marker, ms=10, label=key)
        ax.axvline(math.exp(limit_logppl), color="grey", ls="--", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("perplexity under the base model (select prompts)")
        ax.set_ylabel(f"mean VADER compound toward {direction}")
        ax.set_title(direction)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
