"""``select-evidence``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from updatescope.errors import InputError
from updatescope.report.figures import pyplot, save


def selection_bars(results: Mapping[str, Mapping[str, float]], path: Path, title: str) -> Path:
    """Grouped bars: per selector, the mean target loss reduction (nats, over targets and
    seeds) at each budget (``results[selector][budget] = mean``); FisherSketch first, in blue."""
    plt = pyplot()
    names = list(results)
    if not names:
        raise InputError("selection_bars: no selectors")
    budgets = list(results[names[0]])
    width = 0.8 / max(len(budgets), 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(names) + 1.5), 3.8))
    for j, b in enumerate(budgets):
        vals = [float(results[n].get(b, math.nan)) for n in names]
        xs = [i + (j - (len(budgets) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, vals, width=width, label=f"budget {b}", alpha=0.6 + 0.4 * j / max(len(budgets) - 1, 1))
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("target eval loss reduction (nats)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, path)
