"""``recovery``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.errors import InputError
from updatescope.experiments.plotting import band, capture_panel, drift_panel
from updatescope.report.figures import pyplot, save

RECOVERY_FIGURES = (
    "recovery_capture.png",
    "recovery_drift.png",
    "recovery_rank.png",
    "recovery_training.png",
    "recovery_krylov.png",
)


def recovery_figure(m: Mapping[str, Any], path: Path) -> Path:
    """One figure of a recovery record, chosen by the file name (see RECOVERY_FIGURES):
    capture curves with nulls, drift over the resample floor, effective ranks against
    baselines, accuracy along the protocol, Krylov capture at a matched horizon.  Curves
    are means over replicates with ±1 SE bands."""
    plt = pyplot()
    which = Path(path).name
    s = m["summary"]

    def krylov_band(ax, x, key, style, label, color=None):
        band(ax, s, x, key, style, label, color)

    if which == "recovery_capture.png":
        fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.0))
        k = np.arange(1, len(s["curve.prefix"]["mean"]) + 1)
        for ax, suffix, title in [
            (axes[0], "", "capture of Δ_GD by a k-dim basis"),
            (axes[1], "_rest", "capture of the displacement left after k steps"),
        ]:
            capture_panel(ax, s, k, "", suffix, title)
        axes[0].set_ylabel("||P_U x||² / ||x||²")
        axes[0].legend(fontsize=7)
    elif which == "recovery_drift.png":
        fig, ax = plt.subplots(figsize=(5.4, 3.6))
        drift_panel(ax, s)
        ax.set_ylabel("mean cos² of principal angles")
        ax.legend(fontsize=7)
    elif which == "recovery_rank.png":
        fig, ax = plt.subplots(figsize=(7.0, 3.8))
        tasks = list(m["replicates"][0]["rank"])
        kinds = ["task", "shuffled", "gaussian", "task_unit", "shuffled_unit", "gaussian_unit"]
        width = 0.8 / len(kinds)
        for j, kind in enumerate(kinds):
            vals = [s[f"rank.{t}.{kind}.entropy_rank"]["mean"] for t in tasks]
            ax.bar(np.arange(len(tasks)) + (j - len(kinds) / 2 + 0.5) * width, vals, width, label=kind)
        ax.set_xticks(range(len(tasks)), tasks)
        ax.set_yscale("log")
        ax.set_ylabel(f"entropy rank of {m['rank_n']} per-example gradients")
        ax.legend(fontsize=7, ncol=2)
    elif which == "recovery_training.png":
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        hist = m["replicates"][0]["history"]
        x0 = 0
        for phase in ("multitask", "forget", "recover"):
            rows = [r for r in hist if r["phase"] == phase]
            if not rows:
                continue
            for i, t in enumerate(k for k in rows[0]["metrics"] if k != "mix_loss"):
                ax.plot(
                    [x0 + r["step"] for r in rows],
                    [r["metrics"][t] for r in rows],
                    color=f"C{i}",
                    label=t if phase == "forget" else None,
                )
            x0 += rows[-1]["step"]
            ax.axvline(x0, color="gray", lw=0.5)
        ax.set_xlabel("step (forget | recover), replicate 0")
        ax.set_ylabel("exact-match accuracy")
        ax.legend(fontsize=7)
    elif which == "recovery_krylov.png":
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        k = np.arange(1, len(s["krylov.gd_capture"]["mean"]) + 1)
        krylov_band(ax, k, "krylov.gd_capture", "-o", "full-batch GD: capture of θ_k−θ_0 by K_k")
        krylov_band(ax, k, "krylov.gd_overlap", "--o", "full-batch GD: overlap span(u_1..u_k), K_k")
        krylov_band(ax, k, "krylov.sgd_capture", "-s", "minibatch SGD: capture by K_k")
        krylov_band(ax, k, "krylov.sgd_overlap", "--s", "minibatch SGD: overlap with K_k")
        ax.set_xlabel("k")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    else:
        raise InputError(f"recovery_figure: unknown figure {which}")
    return save(fig, Path(path))
