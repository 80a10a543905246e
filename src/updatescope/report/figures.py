"""Plotting helpers and the report's figures (heatmaps, decomposition bars, layer profiles,
score histograms).  Each experiment's own figures live in its folder under
:mod:`updatescope.experiments` and call :func:`pyplot` and :func:`save` from here.

matplotlib is an optional extra (``updatescope[report]``): it is imported only through
:func:`pyplot`, which selects the non-interactive Agg backend once and names the extra when
matplotlib is missing.  Figures take plain numbers (lists, arrays, dicts from result
records), never models, so any record can be redrawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.errors import MissingExtraError


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; MissingExtraError naming the extra if absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "report") from exc
    return plt


def save(fig: Any, path: Path) -> Path:
    """Lay out ``fig``, write it to ``path`` (110 dpi) and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def heatmaps(names: Sequence[str], mats: dict[str, np.ndarray], path: Path) -> Path:
    """One heatmap per similarity (rows: targets, columns: sources), values annotated."""
    plt = pyplot()
    k = len(mats)
    n = len(names)
    size = max(4.0, 0.55 * n + 2.2)
    fig, axes = plt.subplots(1, k, figsize=(size * k, size), squeeze=False)
    for ax, (title, m) in zip(axes[0], mats.items()):
        shown = np.where(np.isfinite(m), m, np.nan)
        im = ax.imshow(
            shown, vmin=min(0.0, np.nanmin(shown)) if np.isfinite(shown).any() else 0, vmax=1.0, cmap="viridis"
        )
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
                        ax.text(
                            j,
                            i,
                            f"{v:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="white" if v < 0.6 else "black",
                        )
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def decomposition_bars(target: str, rows: Sequence[dict], path: Path) -> Path:
    """For one target: fisher, activation-only and error-only per source, best first."""
    plt = pyplot()
    names = [r["source"] for r in rows]
    x = np.arange(len(names))
    w = 0.27
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(names) + 2), 3.4))
    for off, key, label in (
        (-w, "fisher", "fisher (A_F)"),
        (0, "activation", "activation-only Scov(M_a)"),
        (w, "error", "error-only Scov(Γ_e)"),
    ):
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


def layer_profiles(
    layers: Sequence[str],
    profiles: Mapping[str, Sequence[float]],
    path: Path,
    ses: Mapping[str, Sequence[float]] | None = None,
    title: str = "",
) -> Path:
    """Alignment against layer: one line per source (per-block alignment a_b in block order),
    ±1 SE bands where given; undefined blocks (NaN) leave gaps."""
    plt = pyplot()
    x = np.arange(len(layers))
    fig, ax = plt.subplots(figsize=(max(5.5, 0.32 * len(layers) + 3), 3.8))
    for i, (name, prof) in enumerate(profiles.items()):
        y = np.asarray(prof, dtype=float)
        line = ax.plot(x, y, "-o", ms=3, label=name, color=f"C{i % 10}")[0]
        if ses is not None and name in ses:
            se = np.asarray(ses[name], dtype=float)
            ax.fill_between(x, y - se, y + se, alpha=0.15, color=line.get_color())
    ax.set_xticks(x, list(layers), rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("per-block alignment a_b")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title or "alignment vs layer", fontsize=9)
    if profiles:
        ax.legend(fontsize=7, loc="best")
    return save(fig, Path(path))


def score_histogram(scores: Sequence[float], path: Path, threshold: float | None = None, title: str = "") -> Path:
    """Histogram of per-document scores (non-finite dropped); a dashed line at the lowest kept
    score when ``threshold`` is given."""
    plt = pyplot()
    s = np.asarray(scores, dtype=float)
    s = s[np.isfinite(s)]
    fig, ax = plt.subplots(figsize=(5.8, 3.4))
    if s.size:
        ax.hist(s, bins=min(60, max(5, int(np.sqrt(s.size)) * 2)), color="C0")
    if threshold is not None and math.isfinite(threshold):
        ax.axvline(threshold, color="C3", ls="--", lw=1, label="lowest selected score")
        ax.legend(fontsize=7)
    ax.set_xlabel("document score")
    ax.set_ylabel("documents")
    ax.set_title(title or f"scores of {s.size} documents", fontsize=9)
    return save(fig, Path(path))
