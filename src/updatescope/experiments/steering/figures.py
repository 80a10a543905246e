"""``steering``'s figures, drawn from the record's numbers (lists and dicts), never from
models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from updatescope.report.figures import pyplot


def draw_cosine(cosine: Mapping[str, Any], path: Path) -> None:
    """Cosine with CAA per layer: the one-step shift (mean, contrast) and the nulls (±1 SE)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    x = cosine["layers"]
    ax.plot(x, cosine["pushforward_mean"], "o-", label="one-step shift (mean)")
    ax.plot(x, cosine["pushforward_contrast"], "s-", label="one-step shift (true-false)")
    for key, style in (("search_mean", "-"), ("random_step_mean", ":"), ("shuffled_caa", "--"), ("half_caa", "-.")):
        m, s = cosine[key]["mean"], cosine[key]["se"]
        ax.errorbar(x, m, yerr=s, ls=style, label=key.replace("_", " "))
    ax.axhline(0.58, color="grey", lw=0.8)
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("cosine with CAA")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_scale(grid: Mapping[str, Any], steer_layers: Sequence[int], base_accuracy: float, path: Path) -> None:
    """Select-split accuracy against the steering scale, one panel per layer, every vector."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(steer_layers), figsize=(4 * len(steer_layers), 3.5), squeeze=False)
    for i, layer in enumerate(steer_layers):
        ax = axes[0][i]
        for name, tab in grid.items():
            ax.plot(tab["scales"], tab["accuracy"][i], "o-" if not name.startswith("random") else ".:", label=name)
        ax.axhline(base_accuracy, color="grey", lw=0.8)
        ax.set_title(f"layer {layer} (select split)")
        ax.set_xlabel("scale (x residual norm)")
        ax.set_ylabel("accuracy")
    axes[0][0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
