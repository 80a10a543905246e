"""``smiles``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.report.figures import pyplot, save


def plot_smiles(
    pairs: Mapping[str, Sequence[float]], truth: Sequence[float], tests: Mapping[str, Any], out_png: Path, title: str
) -> None:
    """Scatter of A_F and Scov(M_a) against the perplexity reduction (one point per ordered
    (target, source) pair: ``pairs[method]`` and ``truth`` aligned), and pooled ρ per method."""
    plt = pyplot()
    y = np.asarray(truth, dtype=float)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1, 1, 1.3]})
    for a_, method, lab in ((ax[0], "fisher", "FisherSketch A_F"), (ax[1], "activation", "Scov(M_a) (sketch)")):
        if method not in pairs:
            continue
        x = np.asarray(pairs[method], dtype=float)
        a_.scatter(x, y, s=12)
        pl = tests[method]["pooled"]
        a_.set_title(f"{lab}: ρ={pl['rho']:.2f}, p={pl['p']:.3g}, p_perm={pl['p_perm']:.3g}", fontsize=9)
        a_.set_xlabel(lab)
        a_.set_ylabel("relative perplexity reduction on target")
    methods = [m for m in tests if math.isfinite(tests[m]["pooled"]["rho"])]
    rhos = [tests[m]["pooled"]["rho"] for m in methods]
    cols = ["C3" if tests[m]["pooled"]["p_perm"] < 0.05 else "C7" for m in methods]
    ax[2].bar(range(len(methods)), rhos, color=cols)
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set_xticks(range(len(methods)))
    ax[2].set_xticklabels(methods, rotation=60, ha="right", fontsize=8)
    ax[2].set_ylabel("pooled Spearman ρ (red: permutation p < 0.05)")
    fig.suptitle(title, fontsize=10)
    save(fig, out_png)
