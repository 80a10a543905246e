"""``llm-search``'s figures, drawn from the record's numbers (lists and dicts),
never from models, so any record can be redrawn."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.report.figures import pyplot, save


def llm_search_figure(m: Mapping[str, Any], path: Path) -> Path:
    """An llm-search record: tune-split gain vs σ (left) and held-out gain vs N at the tuned σ
    against σ‖g‖E[max_N] (right); mean ± SE over candidate seeds."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    sw = m["sigma_window"]
    s = [r["sigma"] for r in sw]
    a.errorbar(
        s,
        [r["gain_tune"]["mean"] for r in sw],
        yerr=[r["gain_tune"]["se"] for r in sw],
        fmt="-o",
        ms=3,
        capsize=2,
        label="best of N, tune split",
    )
    a.plot(s, [r["pred_tune"] for r in sw], ":", label="linear prediction")
    a.axhline(0, color="k", lw=0.5)
    a.axvline(1e-4, color="grey", lw=0.8, ls="--", label="paper: σ ≈ 1e-4 (Qwen2.5-0.5B)")
    a.set_xscale("log")
    hi = max(max(r["gain_tune"]["mean"] + r["gain_tune"]["se"] for r in sw), 1e-6)
    a.set_ylim(max(min(r["gain_tune"]["mean"] - r["gain_tune"]["se"] for r in sw), -3 * hi), 1.5 * hi)
    a.set_xlabel("σ (absolute, per coordinate)")
    a.set_ylabel("gain (decrease of − mean signed margin)")
    a.set_title(f"σ window, isotropic, D = {m['dim']:,}", fontsize=9)
    a.legend(fontsize=7)
    c = m["gain_vs_n"]
    b.errorbar(
        c["n"],
        [x["mean"] for x in c["gain_heldout"]],
        yerr=[x["se"] for x in c["gain_heldout"]],
        fmt="-s",
        ms=3,
        capsize=2,
        label="held out",
    )
    b.errorbar(
        c["n"],
        [x["mean"] for x in c["gain_select"]],
        yerr=[x["se"] for x in c["gain_select"]],
        fmt="-o",
        ms=3,
        capsize=2,
        label="selection split",
    )
    b.plot(c["n"], c["pred_heldout"], ":", label="σ⟨g_sel, g_held⟩/‖g_sel‖ E[max_N]")
    b.plot(c["n"], c["pred_select"], "--", lw=0.8, label="σ‖g_sel‖E[max_N]")
    b.axhline(0, color="k", lw=0.5)
    b.set_xscale("log", base=2)
    b.set_xlabel("budget N")
    b.set_title(f"gain vs N at σ = {c['sigma']:.0e}", fontsize=9)
    b.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, Path(path))
