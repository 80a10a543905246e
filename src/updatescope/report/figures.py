"""Every figure updatescope draws: report heatmaps and bars, and the experiments' figures.

matplotlib is an optional extra (``updatescope[report]``): it is imported only through
:func:`pyplot`, which selects the non-interactive Agg backend once and names the extra when
matplotlib is missing.  Figures take plain numbers (lists, arrays, dicts from result
records), never models, so any record can be redrawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.errors import InputError, MissingExtraError


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; MissingExtraError naming the extra if absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingExtraError("matplotlib", "report") from exc
    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def heatmaps(names: Sequence[str], mats: dict[str, np.ndarray], path: Path) -> Path:
    """One heatmap per similarity (rows: targets, columns: sources), values annotated."""
    plt = pyplot()
    k = len(mats)
    n = len(names)
    size = max(4.0, 0.55 * n + 2.2)
    fig, axes = plt.subplots(1, k, figsize=(size * k, size), squeeze=False)
    for ax, (title, m) in zip(axes[0], mats.items()):
        shown = np.where(np.isfinite(m), m, np.nan)
        im = ax.imshow(
            shown, vmin=min(0.0, np.nanmin(shown)) if np.isfinite(shown).any() else 0, vmax=1.0, cmap="viridis"
        )
        ax.set_title(title)
        ax.set_xticks(range(n), names, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(n), names, fontsize=7)
        ax.set_xlabel("source")
        ax.set_ylabel("target")
        if n <= 14:
            for i in range(n):
                for j in range(n):
                    v = m[i, j]
                    if math.isfinite(v) and i != j:
                        ax.text(
                            j,
                            i,
                            f"{v:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="white" if v < 0.6 else "black",
                        )
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def decomposition_bars(target: str, rows: Sequence[dict], path: Path) -> Path:
    """For one target: fisher, activation-only and error-only per source, best first."""
    plt = pyplot()
    names = [r["source"] for r in rows]
    x = np.arange(len(names))
    w = 0.27
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(names) + 2), 3.4))
    for off, key, label in (
        (-w, "fisher", "fisher (A_F)"),
        (0, "activation", "activation-only Scov(M_a)"),
        (w, "error", "error-only Scov(Γ_e)"),
    ):
        vals = np.array([r[key] for r in rows], dtype=float)
        errs = np.array([r.get(f"{key}_se", 0.0) for r in rows], dtype=float)
        ax.bar(x + off, np.nan_to_num(vals), w, yerr=np.nan_to_num(errs), label=label, capsize=2)
    ax.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("similarity to target")
    ax.set_title(f"target: {target}")
    ax.axhline(0, color="black", lw=0.5)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    _save(fig, out_png)


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
    _save(fig, out_png)


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
    _save(fig, out_png)


def _band(ax: Any, s: Mapping[str, Any], x: Any, key: str, style: str, label: str, color: Any = None) -> None:
    """Plot ``s[key]``'s mean over ``x`` with a ±1 SE band (a curve may be shorter or longer
    than ``x``, e.g. a static plane wider than the prefix: both are cut to the shorter)."""
    n = min(len(x), len(s[key]["mean"]))
    mean = np.asarray(s[key]["mean"][:n], dtype=float)
    line = ax.plot(x[:n], mean, style, ms=3, label=label, color=color)[0]
    if s[key]["se"] is not None:
        se = np.asarray(s[key]["se"][:n], dtype=float)
        ax.fill_between(x[:n], mean - se, mean + se, alpha=0.2, color=line.get_color())


def _capture_panel(ax: Any, s: Mapping[str, Any], k: Any, space: str, suffix: str, title: str) -> None:
    """One capture panel of a recovery summary: the trajectory prefix against its nulls (the
    random walk with the real step norms, an independent run's prefix, a static plane of the
    same width; the pre-interference plane on the main LoRA-space / synthetic panel).
    ``space``: "" or "dw_" (the BA space of a LoRA record); ``suffix``: "" (Δ_GD) or "_rest"
    (the displacement left after k steps)."""
    _band(ax, s, k, f"curve.{space}prefix{suffix}", "-o", "trajectory prefix")
    _band(ax, s, k, f"curve.{space}walk{suffix}", "--", "null: random walk, real step norms")
    _band(ax, s, k, f"curve.{space}independent{suffix}", "-s", "null: independent run's prefix")
    static = f"curve.dw_static{suffix}" if space else ("curve.static_rest" if suffix else "curve.local_plane")
    _band(ax, s, k, static, "-^", "static local plane, same width")
    if not space and not suffix:
        _band(ax, s, k, "curve.pre_interference_plane", "-v", "pre-interference plane")
    ax.set_xlabel("k (steps / dimensions)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(-0.02, 1.02)


def _drift_panel(ax: Any, s: Mapping[str, Any]) -> None:
    """The task plane's overlap with its θ_forg version along the recovery, raw and divided
    by the same-point resample floor, with the floor itself (log step axis)."""
    steps = np.asarray(s["drift.steps"], dtype=float)
    _band(ax, s, steps, "drift.overlap", "-o", "overlap with the plane at θ_forg")
    _band(ax, s, steps, "drift.normalised", "-s", "÷ same-point resample floor")
    ax.axhline(s["task_plane.resample_floor"]["mean"], color="gray", ls="--", label="resample floor")
    ax.set_xscale("log")
    ax.set_xlabel("recovery step")


def recovery_figure(m: Mapping[str, Any], path: Path) -> Path:
    """One figure of a recovery record, chosen by the file name (see RECOVERY_FIGURES):
    capture curves with nulls, drift over the resample floor, effective ranks against
    baselines, accuracy along the protocol, Krylov capture at a matched horizon.  Curves
    are means over replicates with ±1 SE bands."""
    plt = pyplot()
    which = Path(path).name
    s = m["summary"]

    def band(ax, x, key, style, label, color=None):
        _band(ax, s, x, key, style, label, color)

    if which == "recovery_capture.png":
        fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.0))
        k = np.arange(1, len(s["curve.prefix"]["mean"]) + 1)
        for ax, suffix, title in [
            (axes[0], "", "capture of Δ_GD by a k-dim basis"),
            (axes[1], "_rest", "capture of the displacement left after k steps"),
        ]:
            _capture_panel(ax, s, k, "", suffix, title)
        axes[0].set_ylabel("||P_U x||² / ||x||²")
        axes[0].legend(fontsize=7)
    elif which == "recovery_drift.png":
        fig, ax = plt.subplots(figsize=(5.4, 3.6))
        _drift_panel(ax, s)
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
        band(ax, k, "krylov.gd_capture", "-o", "full-batch GD: capture of θ_k−θ_0 by K_k")
        band(ax, k, "krylov.gd_overlap", "--o", "full-batch GD: overlap span(u_1..u_k), K_k")
        band(ax, k, "krylov.sgd_capture", "-s", "minibatch SGD: capture by K_k")
        band(ax, k, "krylov.sgd_overlap", "--s", "minibatch SGD: overlap with K_k")
        ax.set_xlabel("k")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    else:
        raise InputError(f"recovery_figure: unknown figure {which}")
    return _save(fig, Path(path))


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
    return _save(fig, Path(path))


RECOVERY_FIGURES = (
    "recovery_capture.png",
    "recovery_drift.png",
    "recovery_rank.png",
    "recovery_training.png",
    "recovery_krylov.png",
)
SEARCH_FIGURES = ("search_sigma_window.png", "search_gain_vs_n.png")


def layer_profiles(
    layers: Sequence[str],
    profiles: Mapping[str, Sequence[float]],
    path: Path,
    ses: Mapping[str, Sequence[float]] | None = None,
    title: str = "",
) -> Path:
    """Alignment against layer: one line per source (per-block alignment a_b in block order),
    ±1 SE bands where given; undefined blocks (NaN) leave gaps."""
    plt = pyplot()
    x = np.arange(len(layers))
    fig, ax = plt.subplots(figsize=(max(5.5, 0.32 * len(layers) + 3), 3.8))
    for i, (name, prof) in enumerate(profiles.items()):
        y = np.asarray(prof, dtype=float)
        line = ax.plot(x, y, "-o", ms=3, label=name, color=f"C{i % 10}")[0]
        if ses is not None and name in ses:
            se = np.asarray(ses[name], dtype=float)
            ax.fill_between(x, y - se, y + se, alpha=0.15, color=line.get_color())
    ax.set_xticks(x, list(layers), rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("per-block alignment a_b")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(title or "alignment vs layer", fontsize=9)
    if profiles:
        ax.legend(fontsize=7, loc="best")
    return _save(fig, Path(path))


def score_histogram(scores: Sequence[float], path: Path, threshold: float | None = None, title: str = "") -> Path:
    """Histogram of per-document scores (non-finite dropped); a dashed line at the lowest kept
    score when ``threshold`` is given."""
    plt = pyplot()
    s = np.asarray(scores, dtype=float)
    s = s[np.isfinite(s)]
    fig, ax = plt.subplots(figsize=(5.8, 3.4))
    if s.size:
        ax.hist(s, bins=min(60, max(5, int(np.sqrt(s.size)) * 2)), color="C0")
    if threshold is not None and math.isfinite(threshold):
        ax.axvline(threshold, color="C3", ls="--", lw=1, label="lowest selected score")
        ax.legend(fontsize=7)
    ax.set_xlabel("document score")
    ax.set_ylabel("documents")
    ax.set_title(title or f"scores of {s.size} documents", fontsize=9)
    return _save(fig, Path(path))


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
    return _save(fig, path)


def lora_recovery_figure(m: Mapping[str, Any], path: Path) -> Path:
    """Capture curves of a ``lora-recovery`` record with their nulls: Delta_GD and the
    displacement left after k steps, in LoRA space and in BA space, and the task plane's
    drift.  Means over replicates with ±1 SE bands."""
    plt = pyplot()
    s = m["summary"]
    fig, axes = plt.subplots(1, 5, figsize=(22.0, 4.0))
    k = np.arange(1, len(s["curve.prefix"]["mean"]) + 1)
    panels = [
        ("", "", "LoRA space: capture of Δ_GD"),
        ("", "_rest", "LoRA space: displacement left after k steps"),
        ("dw_", "", "BA space: capture of ΔW"),
        ("dw_", "_rest", "BA space: ΔW left after k steps"),
    ]
    for ax, (space, suffix, title) in zip(axes, panels):
        _capture_panel(ax, s, k, space, suffix, title)
    axes[0].set_ylabel("||P_U x||² / ||x||²")
    axes[0].legend(fontsize=7)
    ax = axes[4]
    _drift_panel(ax, s)
    ax.set_title("drift of the task plane", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


def network_selection_profiles(
    layers: Sequence[str],
    pairs: Sequence[Mapping[str, Any]],
    path: Path,
    title: str = "",
    ylim: tuple[float, float] = (-0.5, 1.5),
) -> Path:
    """Alignment vs layer for a few domain pairs (top; ±1 SE bands, values outside ``ylim``
    drawn at the edge as open triangles) and each pair's block energy shares n_b / Σ n_b of
    both domains (bottom, only when every pair has them), which is where the profile cosine
    comes from.  ``pairs[i]``: {"label", "profile", "profile_se"[, "energy_source", "energy_target"]}."""
    plt = pyplot()
    x = np.arange(len(layers))
    energy = bool(pairs) and all("energy_source" in p and "energy_target" in p for p in pairs)
    fig, axes = plt.subplots(
        2 if energy else 1,
        1,
        figsize=(max(6.0, 0.36 * len(layers) + 3), 6.2 if energy else 3.8),
        sharex=True,
        squeeze=False,
    )
    ax, bx = axes[0, 0], (axes[1, 0] if energy else axes[0, 0])
    lo, hi = ylim
    for i, p in enumerate(pairs):
        c = f"C{i % 10}"
        y = np.asarray(p["profile"], dtype=float)
        se = np.asarray(p.get("profile_se", [np.nan] * len(y)), dtype=float)
        yc = np.clip(y, lo, hi)
        ax.plot(x, yc, "-o", ms=3, color=c, label=p["label"])
        ax.fill_between(x, np.clip(y - se, lo, hi), np.clip(y + se, lo, hi), alpha=0.12, color=c)
        out = (y < lo) | (y > hi)
        if out.any():
            ax.scatter(x[out], np.where(y[out] > hi, hi, lo), marker="^", facecolors="none", edgecolors=c, s=60)
        for key, ls in (("energy_source", "-"), ("energy_target", "--")) if energy else ():
            e = np.asarray(p[key], dtype=float)
            bx.plot(x, e / e.sum() if e.sum() > 0 else e, ls, color=c, lw=1)
    ax.set_ylim(lo - 0.05, hi + 0.05)
    ax.axhline(0, color="black", lw=0.5)
    ax.axhline(1, color="gray", lw=0.5, ls=":")
    ax.set_ylabel("per-block alignment a_b")
    ax.set_title(title or "alignment vs layer", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    if energy:
        bx.set_ylabel("block energy share\n(solid: source, dashed: target)", fontsize=8)
    bx.set_xticks(x, list(layers), rotation=60, ha="right", fontsize=7)
    return _save(fig, Path(path))


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
    return _save(fig, Path(path))


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
    return _save(fig, path)
