"""``estimator``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot, save


def plot_estimator(acc: dict[str, Any], sp: dict[str, Any], out_png: Path, title: str) -> None:
    plt = pyplot()
    kinds = [k for k in acc if k != "groups"]  # "groups" holds subset readings of the same pairs

    fig, ax = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 4))
    for a_, kind in zip(ax, kinds):
        x = np.asarray(acc[kind]["exact"])
        for r in acc[kind]["per_seed"]:
            a_.scatter(x, r["sketch"], s=10, alpha=0.6, label=f"seed {r['seed']}")
        lo, hi = np.nanmin(x), np.nanmax(x)
        a_.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        a_.set_title(f"{kind}: Spearman {acc[kind]['spearman_mean']:.2f}", fontsize=9)
        a_.set_xlabel("exact")
        a_.set_ylabel("sketch")
    ax[0].legend(fontsize=7)
    fig.suptitle(f"{title}; speed-up at n={sp['n_per_task'][0]}/task: {sp['speedup']:.1f}x", fontsize=10)
    save(fig, out_png)
