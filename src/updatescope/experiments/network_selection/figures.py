"""``network-selection``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot, save


def network_selection_profiles(
    layers: Sequence[str],
    pairs: Sequence[Mapping[str, Any]],
    path: Path,
    title: str = "",
    ylim: tuple[float, float] = (-0.5, 1.5),
) -> Path:
    """Alignment vs layer for a few domain pairs (top; ±1 SE bands, values outside ``ylim``
    drawn at the edge as open triangles) and each pair's block energy shares n_b / Σ n_b of
    both domains (bottom, only when every pair has them), which is where the profile cosine
    comes from.  ``pairs[i]``: {"label", "profile", "profile_se"[, "energy_source", "energy_target"]}."""
    plt = pyplot()
    x = np.arange(len(layers))
    energy = bool(pairs) and all("energy_source" in p and "energy_target" in p for p in pairs)
    fig, axes = plt.subplots(
        2 if energy else 1,
        1,
        figsize=(max(6.0, 0.36 * len(layers) + 3), 6.2 if energy else 3.8),
        sharex=True,
        squeeze=False,
    )
    ax, bx = axes[0, 0], (axes[1, 0] if energy else axes[0, 0])
    lo, hi = ylim
    for i, p in enumerate(pairs):
        c = f"C{i % 10}"
        y = np.asarray(p["profile"], dtype=float)
        se = np.asarray(p.get("profile_se", [np.nan] * len(y)), dtype=float)
        yc = np.clip(y, lo, hi)
        ax.plot(x, yc, "-o", ms=3, color=c, label=p["label"])
        ax.fill_between(x, np.clip(y - se, lo, hi), np.clip(y + se, lo, hi), alpha=0.12, color=c)
        out = (y < lo) | (y > hi)
        if out.any():
            ax.scatter(x[out], np.where(y[out] > hi, hi, lo), marker="^", facecolors="none", edgecolors=c, s=60)
        for key, ls in (("energy_source", "-"), ("energy_target", "--")) if energy else ():
            e = np.asarray(p[key], dtype=float)
            bx.plot(x, e / e.sum() if e.sum() > 0 else e, ls, color=c, lw=1)
    ax.set_ylim(lo - 0.05, hi + 0.05)
    ax.axhline(0, color="black", lw=0.5)
    ax.axhline(1, color="gray", lw=0.5, ls=":")
    ax.set_ylabel("per-block alignment a_b")
    ax.set_title(title or "alignment vs layer", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    if energy:
        bx.set_ylabel("block energy share\n(solid: source, dashed: target)", fontsize=8)
    bx.set_xticks(x, list(layers), rotation=60, ha="right", fontsize=7)
    return save(fig, Path(path))
