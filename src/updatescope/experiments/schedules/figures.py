"""``schedules``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot, save


def schedules_figure(m: Mapping[str, Any], path: Path) -> Path:
    """A ``schedules`` record: the eval mix loss and the share of the forgetting rise undone
    along recovery, for the simultaneous and the sequential schedule (means over replicates,
    ±1 SE bands; dotted lines: each schedule's pre-forgetting loss + the tolerance)."""
    plt = pyplot()
    per = m["summary"]["per_schedule"]
    steps = np.asarray(m["replicates"][0]["simultaneous"]["eval_steps"], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0))
    for name, per_s in per.items():
        for ax, key in zip(axes, ("eval_mix_loss", "share_undone_curve")):
            mean = np.asarray(per_s[key]["mean"], dtype=float)
            line = ax.plot(steps, mean, "-o", ms=2, label=name)[0]
            if per_s[key]["se"] is not None:
                se = np.asarray(per_s[key]["se"], dtype=float)
                ax.fill_between(steps, mean - se, mean + se, alpha=0.2, color=line.get_color())
        target = per_s["mix_loss_start"]["mean"] + m["recover_tol"]
        axes[0].axhline(target, ls=":", color=line.get_color(), label=f"{name}: start + {m['recover_tol']:g} nats")
    axes[0].set_ylabel("eval mix loss (nats)")
    axes[0].set_title("recovery after forgetting on " + m["focus"], fontsize=9)
    axes[1].set_ylabel("share of the forgetting rise undone")
    axes[1].axhline(1.0, color="gray", ls="--", lw=0.8)
    axes[1].set_title("(L_forg − L_k) / (L_forg − L_start)", fontsize=9)
    for ax in axes:
        ax.set_xlabel("recovery step k")
        ax.legend(fontsize=7)
    return save(fig, path)
