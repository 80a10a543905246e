"""``network``'s figures, drawn from the record's numbers (lists and dicts), never from
models, so any record can be redrawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot


def plot_profile(metrics: dict[str, Any], path: Path) -> Path:
    """Alignment vs layer for the lowest, middle and highest full alignment pair per model."""
    plt = pyplot()
    models = metrics["models"]
    fig, axes = plt.subplots(len(models), 1, figsize=(10, 3.2 * len(models)), squeeze=False)
    for ax, mm in zip(axes[:, 0], models):
        pairs = sorted(mm["pairs"], key=lambda r: r["full"])
        pick = [pairs[0], pairs[len(pairs) // 2], pairs[-1]]
        xs = np.arange(len(mm["layers"]))
        for r, c in zip(pick, ("tab:red", "tab:orange", "tab:green")):
            lab = f"agree {r['label_agreement']:.2f}, overlap {r['input_overlap']:.2f}: A_F={r['full']:.2f}"
            ax.plot(xs, r["exact"]["profile"], "-", color=c, label=f"exact ({lab})")
            ax.plot(xs, r["sketch"]["profile"], "o", color=c, ms=3, alpha=0.7)
            ax.axhline(r["full"], color=c, ls=":", lw=1)
        ax.set_xticks(xs)
        ax.set_xticklabels(
            [n.replace("model.layers.", "L").replace("blocks.", "B") for n in mm["layers"]], rotation=90, fontsize=6
        )
        ax.set_ylabel("per-layer alignment a_b")
        ax.set_title(f"{mm['model']}: alignment vs layer (lines exact, dots sketch, dotted = full A_F)", fontsize=9)
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_tracking(metrics: dict[str, Any], path: Path) -> Path:
    """Each approximation (exact values) against the exact full alignment."""
    plt = pyplot()
    models = metrics["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.2), squeeze=False)
    for ax, mm in zip(axes[0], models):
        full = [r["full"] for r in mm["pairs"]]
        for k, mk in zip(("head", "block_diag", "last_k", "all_linear"), ("o", "s", "^", "x")):
            rho = mm["tracking"]["exact"][k]["spearman"]
            ax.plot(full, [r["exact"][k] for r in mm["pairs"]], mk, ms=5, alpha=0.8, label=f"{k} (ρ={rho:.2f})")
        ax.plot(
            full,
            [r["sketch"]["head_token"] for r in mm["pairs"]],
            ".",
            color="k",
            alpha=0.6,
            label=f"head_token sketch (ρ={mm['tracking']['sketch']['head_token']['spearman']:.2f})",
        )
        lo, hi = min(full + [0.0]), max(full + [1.0])
        ax.plot([lo, hi], [lo, hi], "k:", lw=1)
        ax.set_xlabel("exact full-network A_F")
        ax.set_ylabel("approximation")
        ax.set_title(mm["model"], fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
