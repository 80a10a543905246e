"""``random-search``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.errors import InputError
from updatescope.report.figures import pyplot, save

SEARCH_FIGURES = ("search_sigma_window.png", "search_gain_vs_n.png")


def search_figure(m: Mapping[str, Any], path: Path) -> Path:
    """One figure of a random-search record (the σ window or gain against the budget N). The figure drawn is chosen "
    "by the file name: search_sigma_window.png, search_gain_vs_n.png."""
    plt = pyplot()
    which = Path(path).name
    if which == "search_sigma_window.png":
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for i, (name, rows) in enumerate(m["sigma_window"].items()):
            rho = [r["rho"] for r in rows]
            ax.plot(rho, [r["gain_tune"] for r in rows], "-o", color=f"C{i}", ms=3, label=f"{name}: tuning-split gain")
            ax.plot(rho, [r["pred_tune"] for r in rows], ":", color=f"C{i}", label=f"{name}: linear prediction")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("step norm ρ = E||σz||")
        ax.set_ylabel("loss decrease of best of N")
        lo = min(min(r["gain_tune"] for r in rows) for rows in m["sigma_window"].values())
        hi = max(max(r["gain_tune"] for r in rows) for rows in m["sigma_window"].values())
        ax.set_ylim(max(lo, -2 * abs(hi) - 1e-3), 1.5 * hi + 1e-3)
        ax.legend(fontsize=7)
    elif which == "search_gain_vs_n.png":
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for i, (name, c) in enumerate(m["gain_vs_n"].items()):
            ax.plot(c["n"], c["gain_select"], "-o", color=f"C{i}", ms=3, label=f"{name}: selection")
            ax.plot(c["n"], c["gain_heldout"], "--s", color=f"C{i}", ms=3, label=f"{name}: held-out")
            ax.plot(c["n"], c["pred_select"], ":", color=f"C{i}", label=f"{name}: σ||Pg||E[max_N]")
            ax.plot(c["n"], c["sqrt_2lnN_scaled"], "-.", color=f"C{i}", lw=0.8, label=f"{name}: σ||Pg||√(2 ln N)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget N")
        ax.set_ylabel("loss decrease of best of N")
        ax.legend(fontsize=6)
    else:
        raise InputError(f"search_figure: unknown figure {which}")
    return save(fig, Path(path))
