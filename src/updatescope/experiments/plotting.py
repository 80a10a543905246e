"""Figure pieces several experiments share: the source-ranking summary (``source-selection``,
``verbalizer``) and the capture / drift panels of the recovery records (``recovery``,
``lora-recovery``).  Plain numbers in, matplotlib through :func:`updatescope.report.figures.pyplot`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot, save


def plot_selection(
    head: Mapping[str, Mapping[str, Any]],
    transfer: Mapping[str, Mapping[str, float]],
    fisher: Mapping[str, Mapping[str, float]],
    out_png: Path,
    title: str,
) -> None:
    """Two panels: top-1 per method (chance line) and the transfer matrix next to A_F."""
    plt = pyplot()

    methods = [m for m, h in head.items() if "error" not in h]
    names = list(transfer)
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    vals = [head[m]["top1"] for m in methods]
    ax[0].bar(range(len(methods)), vals, color=["C3" if m == "fisher" else "C0" for m in methods])
    chance = next(iter(head[m]["chance_top1"] for m in methods)) if methods else None
    if chance is not None:
        ax[0].axhline(chance, color="k", ls="--", lw=1, label="chance")
        ax[0].legend()
    ax[0].set_xticks(range(len(methods)))
    ax[0].set_xticklabels(methods, rotation=60, ha="right", fontsize=8)
    ax[0].set_ylabel("top-1 accuracy")
    ax[0].set_ylim(0, 1)
    # sources a target did not list as candidates are blank, like the diagonal
    tr = np.array([[transfer[t].get(s, np.nan) if s != t else np.nan for s in names] for t in names])
    fi = np.array([[fisher[t][s] if s != t else np.nan for s in names] for t in names])
    for a_, mat, lab in ((ax[1], tr, "transfer (eval loss reduction, nats)"), (ax[2], fi, "FisherSketch A_F")):
        im = a_.imshow(mat, cmap="viridis")
        a_.set_title(lab, fontsize=9)
        a_.set_xticks(range(len(names)))
        a_.set_yticks(range(len(names)))
        a_.set_xticklabels(names, rotation=90, fontsize=6)
        a_.set_yticklabels(names, fontsize=6)
        a_.set_xlabel("source")
        a_.set_ylabel("target")
        fig.colorbar(im, ax=a_, fraction=0.046)
    fig.suptitle(title, fontsize=10)
    save(fig, out_png)


def band(ax: Any, s: Mapping[str, Any], x: Any, key: str, style: str, label: str, color: Any = None) -> None:
    """Plot ``s[key]``'s mean over ``x`` with a ±1 SE band (a curve may be shorter or longer
    than ``x``, e.g. a static plane wider than the prefix: both are cut to the shorter)."""
    n = min(len(x), len(s[key]["mean"]))
    mean = np.asarray(s[key]["mean"][:n], dtype=float)
    line = ax.plot(x[:n], mean, style, ms=3, label=label, color=color)[0]
    if s[key]["se"] is not None:
        se = np.asarray(s[key]["se"][:n], dtype=float)
        ax.fill_between(x[:n], mean - se, mean + se, alpha=0.2, color=line.get_color())


def capture_panel(ax: Any, s: Mapping[str, Any], k: Any, space: str, suffix: str, title: str) -> None:
    """One capture panel of a recovery summary: the trajectory prefix against its nulls (the
    random walk with the real step norms, an independent run's prefix, a static plane of the
    same width; the pre-interference plane on the main LoRA-space / synthetic panel).
    ``space``: "" or "dw_" (the BA space of a LoRA record); ``suffix``: "" (Δ_GD) or "_rest"
    (the displacement left after k steps)."""
    band(ax, s, k, f"curve.{space}prefix{suffix}", "-o", "trajectory prefix")
    band(ax, s, k, f"curve.{space}walk{suffix}", "--", "null: random walk, real step norms")
    band(ax, s, k, f"curve.{space}independent{suffix}", "-s", "null: independent run's prefix")
    static = f"curve.dw_static{suffix}" if space else ("curve.static_rest" if suffix else "curve.local_plane")
    band(ax, s, k, static, "-^", "static local plane, same width")
    if not space and not suffix:
        band(ax, s, k, "curve.pre_interference_plane", "-v", "pre-interference plane")
    ax.set_xlabel("k (steps / dimensions)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.02, 1.02)


def drift_panel(ax: Any, s: Mapping[str, Any]) -> None:
    """The task plane's overlap with its θ_forg version along the recovery, raw and divided
    by the same-point resample floor, with the floor itself (log step axis)."""
    steps = np.asarray(s["drift.steps"], dtype=float)
    band(ax, s, steps, "drift.overlap", "-o", "overlap with the plane at θ_forg")
    band(ax, s, steps, "drift.normalised", "-s", "÷ same-point resample floor")
    ax.axhline(s["task_plane.resample_floor"]["mean"], color="gray", ls="--", label="resample floor")
    ax.set_xscale("log")
    ax.set_xlabel("recovery step")
