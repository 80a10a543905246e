"""``select-evidence``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from updatescope.errors import InputError
from updatescope.report.figures import pyplot, save


def selection_bars(
    results: Mapping[str, Mapping[str, float]], path: Path, title: str, noise_floor: float | None = None
) -> Path:
    """One bar per selection method: mean target loss reduction (nats) with ± SE error bars
    (``results[method] = {"mean", "se"}``); a dashed band ± ``noise_floor`` around the first
    method's mean marks differences the fine-tuning noise cannot resolve."""
    plt = pyplot()
    names = list(results)
    if not names:
        raise InputError("selection_bars: no methods")
    means = [float(results[n]["mean"]) for n in names]
    ses = [float(results[n].get("se", math.nan)) for n in names]
    ses = [s if math.isfinite(s) else 0.0 for s in ses]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(names) + 1.5), 3.8))
    ax.bar(range(len(names)), means, yerr=ses, capsize=4, color=["tab:blue"] + ["tab:gray"] * (len(names) - 1))
    if noise_floor is not None and math.isfinite(noise_floor):
        ax.axhspan(
            means[0] - noise_floor,
            means[0] + noise_floor,
            color="tab:blue",
            alpha=0.12,
            label=f"{names[0]} ± noise floor",
        )
        ax.legend(fontsize=8, loc="lower right")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("target eval loss reduction (nats)")
    ax.set_title(title, fontsize=9)
    return save(fig, path)
