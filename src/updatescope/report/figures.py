"""Figures for reports: similarity heatmaps and decomposition bars (matplotlib, Agg)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from updatescope.errors import MissingExtraError


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover
        raise MissingExtraError("matplotlib", "report") from exc
    return plt


def heatmaps(names: Sequence[str], mats: dict[str, np.ndarray], path: Path) -> Path:
    """One heatmap per similarity (rows: targets, columns: sources), values annotated."""
    plt = _plt()
    k = len(mats)
    n = len(names)
    size = max(4.0, 0.55 * n + 2.2)
    fig, axes = plt.subplots(1, k, figsize=(size * k, size), squeeze=False)
    for ax, (title, m) in zip(axes[0], mats.items()):
        shown = np.where(np.isfinite(m), m, np.nan)
        im = ax.imshow(shown, vmin=min(0.0, np.nanmin(shown)) if np.isfinite(shown).any() else 0, vmax=1.0,
                       cmap="viridis")
        ax.set_title(title)
        ax.set_xticks(range(n), names, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("target")
        if n <= 14:
            for i in range(n):
                for j in range(n):
                    v = m[i, j]
                    if math.isfinite(v) and i != j:
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if v < 0.6 else "black")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def decomposition_bars(target: str, rows: Sequence[dict], path: Path) -> Path:
    """For one target: fisher, activation-only and error-only per source, best first."""
    plt = _plt()
    names = [r["source"] for r in rows]
    x = np.arange(len(names))
    w = 0.27
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(names) + 2), 3.4))
    for off, key, label in ((-w, "fisher", "fisher (A_F)"), (0, "activation", "activation-only Scov(M_a)"),
                            (w, "error", "error-only Scov(Γ_e)")):
        vals = np.array([r[key] for r in rows], dtype=float)
        errs = np.array([r.get(f"{key}_se", 0.0) for r in rows], dtype=float)
        ax.bar(x + off, np.nan_to_num(vals), w, yerr=np.nan_to_num(errs), label=label, capsize=2)
    ax.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("similarity to target")
    ax.set_title(f"target: {target}")
    ax.axhline(0, color="black", lw=0.5)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
