"""Layer x scale sweeps: which layer and how strong.  A table, then optionally a figure."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingExtraError

__all__ = ["sweep", "best_setting", "plot_sweep"]


def sweep(score: Callable[[int, float], float], layers: Sequence[int], scales: Sequence[float]) -> dict[str, Any]:
    """Call ``score(layer, scale)`` on the full grid.

    Returns ``{"layers": [...], "scales": [...], "scores": [[score per scale] per layer],
    "best": {"layer", "scale", "score"}}`` -- plain lists, so it goes straight to JSON.
    Choose the setting on one split and report it on another: the best cell of a grid is
    an optimistic estimate of its own score.
    """
    layers, scales = [int(x) for x in layers], [float(s) for s in scales]
    if not layers or not scales:
        raise InputError("a sweep needs at least one layer and one scale")
    scores = []
    for layer in layers:
        row = []
        for s in scales:
            value = float(score(layer, s))
            if math.isnan(value):
                raise InputError(f"score returned NaN at layer {layer}, scale {s}")
            row.append(value)
        scores.append(row)
    table: dict[str, Any] = {"layers": layers, "scales": scales, "scores": scores}
    table["best"] = best_setting(table)
    return table


def best_setting(table: dict[str, Any]) -> dict[str, float]:
    """The highest-scoring cell (first one on ties, in layer-then-scale order)."""
    best: dict[str, float] | None = None
    for layer, row in zip(table["layers"], table["scores"]):
        for s, value in zip(table["scales"], row):
            if best is None or value > best["score"]:
                best = {"layer": layer, "scale": s, "score": value}
    if best is None:
        raise InputError("empty sweep table")
    return best


def plot_sweep(table: dict[str, Any], path: str | Path, title: str | None = None, ylabel: str = "score") -> Path:
    """Score vs scale, one line per layer, next to a layer x scale heatmap; saved as PNG.

    Uses ``matplotlib.figure.Figure`` directly, so no pyplot state or global backend is touched.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report") from None
    fig = Figure(figsize=(10, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for layer, row in zip(table["layers"], table["scores"]):
        left.plot(table["scales"], row, marker="o", label=f"layer {layer}")
    left.set_xlabel("scale")
    left.set_ylabel(ylabel)
    left.legend(fontsize="small", ncol=2)
    im = right.imshow(table["scores"], aspect="auto", origin="lower", cmap="viridis")
    right.set_xticks(range(len(table["scales"])), [f"{s:g}" for s in table["scales"]])
    right.set_yticks(range(len(table["layers"])), [str(x) for x in table["layers"]])
    right.set_xlabel("scale")
    right.set_ylabel("layer")
    fig.colorbar(im, ax=right, label=ylabel)
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path
