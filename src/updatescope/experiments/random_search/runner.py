"""``updatescope reproduce random-search`` -- paper B's Best-of-N random search at theta_forg
on the synthetic transformer.

Objective: the mix loss (all four tasks) -- the loss recovery descends.  Three disjoint
splits: the best of N candidates is chosen on a *selection* split; the scale sigma is
chosen on a *tuning* split (the sweep reports tuning gains only); every gain reported at
the chosen scale is measured on a *test* split ("heldout") with fresh candidate seeds, so
neither choice sees the numbers it is judged by.  Scales
are given as the expected step norm rho = ||sigma z||; per coordinate that is
sigma = rho / sqrt(r) in an r-dimensional subspace and rho / sqrt(D) isotropically, so
different subspaces are compared at the same distance from theta_forg.

Parts: (1) a scale sweep (the window); (2) gain vs N next to sigma ||P g|| E[max_N] and
sqrt(2 ln N); (3) subspaces compared at one scale; (4) gain vs ambient dimension at fixed
N (isotropic noise on nested parameter groups, and on a linear toy); (5) signal density
vs mass (a small aligned subspace vs a larger one containing it, equal step norm).
Regime first: theta_forg must be the protocol's (forgetting reached its criterion, the step
size came from a converged spectral radius); otherwise the record holds the regime facts and
no search.  Parts (3) and (5) are the pre-registered comparisons (PREREGISTRATION.md): every
space at one step norm no larger than recovery's own median SGD step norm, the same candidate
seeds in every space (paired), sign-flip tests with Holm over the family.
Figures: search_sigma_window.png, search_gain_vs_n.png.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.experiments import Result, config_record
from updatescope.experiments.random_search import figures
from updatescope.experiments.random_search.config import RandomSearchConfig
from updatescope.locallinear import (
    TASKS,
    ParamLayout,
    best_of_n,
    expected_max_normal,
    flat_grad,
    gradient_stack,
    orthonormal_basis,
    random_basis,
    set_flat_params,
    swapped_params,
    top_directions,
)
from updatescope.locallinear.lab import refusals, synthetic_recovery

NAME = "random-search"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
# The pre-registered comparisons (PREREGISTRATION.md): held-out gain of the first space minus the
# second's, paired by candidate seed, sign-flip test, Holm over the family, alpha 0.05.
PRESPECIFIED = (
    ("trajectory_prefix", "isotropic"),
    ("trajectory_prefix", "random"),
    ("trajectory_prefix", "local_task_plane"),
    ("trajectory_prefix", "pre_interference_plane"),
    ("small_aligned_r2", "large_containing_r40"),
)
ALPHA = 0.05


def prespecified_tests(compare: dict[str, Any], dens: dict[str, Any]) -> list[dict[str, Any]]:
    """The :data:`PRESPECIFIED` comparisons on the per-seed held-out gains of ``compare`` and
    ``dens`` (same candidate seeds in every space): per comparison the paired differences, their
    mean and SE, the sign-flip p-value and its Holm adjustment over the family, and the word
    ("better" / "worse" / "no difference", ``select.metrics.paired_verdicts``)."""
    from updatescope.select.metrics import paired_verdicts

    gains = {**{k: v["gain_heldout"] for k, v in compare.items()}, **{k: v["gain_heldout"] for k, v in dens.items()}}
    diffs = {f"{a} - {b}": [x - y for x, y in zip(gains[a], gains[b])] for a, b in PRESPECIFIED}
    out = []
    for v in paired_verdicts(diffs, family="random-search prespecified", alpha=ALPHA):
        d = diffs[v.comparison]
        se = float(np.std(d, ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
        out.append(
            {
                "comparison": v.comparison,
                "n": v.n,
                "mean": v.mean,
                "se": se,
                "diffs": d,
                "p": v.p,
                "p_holm": v.p_holm,
                "test": v.test,
                "word": v.word,
            }
        )
    return out


def run(config: RandomSearchConfig, out_dir: Path) -> Result:
    """Run every part."""
    t0 = time.perf_counter()
    cfg, seed = config.lab, config.seed
    # only the first dense_steps of recovery are needed (the prefix basis); the run is
    # deterministic, so they equal those of the recovery experiment with the same config
    cfg = replace(cfg, recover_steps=cfg.dense_steps, snapshot_every=cfg.dense_steps)
    n_eval = config.n_eval  # sequences per task in each split
    n_sweep, n_curve, reps = config.n_sweep, config.n_curve, config.reps
    r_sub = config.r_sub

    model, tasks, run_, info = synthetic_recovery(cfg, lam_draws=config.eta_draws, lam_iters=config.eta_iters)
    regime = {
        "forget": info["forget"],
        "radius_draws": info["radius_draws"],
        "radius_converged": info["radius_converged"],
        "refused": refusals(info),
    }
    sha = hashlib.sha256(PREREG.read_bytes()).hexdigest()
    record = config_record(config, lab=dataclasses.asdict(cfg), prespecified=PRESPECIFIED, preregistration_sha256=sha)
    if regime["refused"]:  # theta_forg is not the protocol's: no search is run or reported from it
        metrics = {"regime": regime, "timings_s": {"total": time.perf_counter() - t0}}
        return Result(NAME, record, metrics, time.perf_counter() - t0, figures={})
    theta = run_.theta_forg.clone()
    layout = ParamLayout.of(model)
    d = layout.dim

    def objective(split: str):
        @torch.no_grad()
        def f(vec: torch.Tensor) -> float:
            set_flat_params(model, vec)
            return float(torch.stack([tasks.loss(model, t, 0, split, n=n_eval) for t in TASKS]).mean())

        return f

    f_sel, f_tune, f_held = objective("select"), objective("tune"), objective("heldout")

    def grad_of(split: str) -> torch.Tensor:
        with swapped_params(model, theta):
            loss = torch.stack([tasks.loss(model, t, 0, split, n=n_eval) for t in TASKS]).mean()
            return flat_grad(loss, model).detach().double()

    g_sel, g_tune, g_held = grad_of("select"), grad_of("tune"), grad_of("heldout")

    # subspaces (r_sub-dimensional) at theta_forg
    with swapped_params(model, theta):
        g_stack = gradient_stack(
            model, [(lambda m, t=t, j=j: tasks.loss(m, t, j, "train", n=4)) for t in TASKS for j in range(4)]
        )
    with swapped_params(model, run_.theta_mt):
        g_mt = gradient_stack(
            model, [(lambda m, t=t, j=j: tasks.loss(m, t, j, "train", n=4)) for t in TASKS for j in range(4)]
        )
    bases = {
        "trajectory_prefix": orthonormal_basis(run_.updates[:r_sub]),
        "local_task_plane": top_directions(g_stack, r_sub),
        "pre_interference_plane": top_directions(g_mt, r_sub),
        "random": random_basis(d, r_sub, seed + 1234),
    }

    def search(basis, rho, n, s, f_rep=f_held):
        r = d if basis is None else basis.shape[0]
        res = best_of_n(theta, f_sel, f_rep, rho / math.sqrt(r), n, s, layout.numels, basis)
        return res

    def pred(basis, rho, n, g_rep=g_held):
        """Linear-regime prediction (selection, reporting split) of the best-of-n gain."""
        r = d if basis is None else basis.shape[0]
        ps, ph = (g_sel, g_rep) if basis is None else (basis @ g_sel, basis @ g_rep)
        sig, em = rho / math.sqrt(r), expected_max_normal(n)
        return sig * float(ps.norm()) * em, sig * float(ps @ ph) / float(ps.norm()) * em

    rhos, sweep = _sigma_window(search, pred, bases, f_tune, g_tune, n_sweep, seed)
    timings = {"sweep": time.perf_counter() - t0}
    best = {name: max(rows, key=lambda r: r["gain_tune"])["rho"] for name, rows in sweep.items()}
    best_rho = best["trajectory_prefix"]
    # the comparisons run at a step norm no larger than recovery's own (the median SGD step norm)
    rho_recovery = float(run_.step_norms.median())
    compare_rho = min(best_rho, rho_recovery)

    # (2) gain vs N, each space at its own best rho: best of the first n candidates, mean over reps
    gain_vs_n = _gain_vs_n(search, pred, bases, best, n_curve, reps, seed)
    timings["gain_vs_n"] = time.perf_counter() - t0

    # (3) subspaces at one scale (N = n_sweep, reps seeds each)
    compare = _compare(search, pred, bases, compare_rho, n_sweep, config.compare_reps, seed, g_sel)
    timings["compare"] = time.perf_counter() - t0

    # (4) ambient dimension at fixed N: isotropic noise on nested parameter groups, same
    # sigma per coordinate; gain / (sigma ||g_S||) should stay at E[max_N] while linear.
    ambient = _ambient(layout, theta, f_sel, f_held, g_sel, g_held, best_rho, n_sweep, seed)
    toy = _linear_toy(n_sweep, seed)
    timings["ambient"] = time.perf_counter() - t0

    # (5) density vs mass: 2-dim prefix vs the same + 38 random directions, equal step norm
    dens = _density(search, bases, compare_rho, d, n_sweep, config.compare_reps, seed, g_sel)
    set_flat_params(model, theta)
    tests = prespecified_tests(compare, dens)

    metrics = {
        "dim": d,
        "theta_mt_cached": info["cached"],
        "accuracy_theta_forg": tasks.accuracy(model, n=cfg.eval_n),
        "base_loss_select": f_sel(theta),
        "base_loss_tune": f_tune(theta),
        "base_loss_heldout": f_held(theta),
        "splits": {"candidate_selection": "select", "sigma_tuning": "tune", "reported": "heldout"},
        "recover_lr": info["recover_lr"],
        "eta_lambda": info["eta_lambda"],
        "grad_norm_select": float(g_sel.norm()),
        "grad_cos_select_heldout": float(g_sel @ g_held / g_sel.norm() / g_held.norm()),
        "regime": regime,
        "best_rho": best_rho,
        "best_rho_per_space": best,
        "rho_recovery": rho_recovery,
        "compare_rho": compare_rho,
        "prespecified": tests,
        "sigma_window": sweep,
        "gain_vs_n": gain_vs_n,
        "subspaces": compare,
        "ambient_dimension": ambient,
        "linear_toy": toy,
        "density_vs_mass": dens,
        "timings_s": {**timings, "total": time.perf_counter() - t0},
    }
    set_flat_params(model, theta)
    record = config_record(
        config, lab=dataclasses.asdict(cfg), rhos=rhos, prespecified=PRESPECIFIED, preregistration_sha256=sha
    )
    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={name: (lambda path: figures.search_figure(metrics, path)) for name in figures.SEARCH_FIGURES},
    )


def _sigma_window(
    search: Any, pred: Any, bases: dict[str, torch.Tensor], f_tune: Any, g_tune: torch.Tensor, n_sweep: int, seed: int
) -> tuple[dict, dict]:
    """(1) The scale window: best-of-``n_sweep`` gain on the tuning split against the step
    norm, isotropic and in the trajectory prefix -> (the step norms tried, rows per space)."""
    # isotropic noise spends its norm on D directions, so its window sits at larger rho
    rhos = {
        "isotropic": [0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0],
        "trajectory_prefix": [0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0],
    }
    sweep = {}
    for name, basis in [("isotropic", None), ("trajectory_prefix", bases["trajectory_prefix"])]:
        rows = []
        for rho in rhos[name]:
            res = search(basis, rho, n_sweep, seed, f_rep=f_tune)  # tuning split only
            ps, ph = pred(basis, rho, n_sweep, g_rep=g_tune)
            rows.append(
                {
                    "rho": rho,
                    "sigma": res.sigma,
                    "gain_select": res.gain_select,
                    "gain_tune": res.gain_heldout,
                    "pred_select": ps,
                    "pred_tune": ph,
                    "median_candidate_change": float(np.median(np.array(res.select) - res.base_select)),
                }
            )
        sweep[name] = rows
    return rhos, sweep


def _gain_vs_n(
    search: Any, pred: Any, bases: dict[str, torch.Tensor], best: dict[str, float], n_curve: int, reps: int, seed: int
) -> dict[str, Any]:
    """(2) Gain against the budget N, each space at its own best step norm: best of the first
    n candidates, mean over ``reps`` candidate seeds."""
    ns = [n for n in (1, 2, 4, 8, 16, 32, 64, 128) if n <= n_curve]
    gain_vs_n = {}
    for name, basis in [("isotropic", None), ("trajectory_prefix", bases["trajectory_prefix"])]:
        rho_n = best[name]
        results = [search(basis, rho_n, n_curve, seed + 100 + k) for k in range(reps)]
        sel = np.array([[r.best_of(n)[0] for n in ns] for r in results])
        held = np.array([[r.best_of(n)[1] for n in ns] for r in results])
        p = [pred(basis, rho_n, n) for n in ns]
        gain_vs_n[name] = {
            "rho": rho_n,
            "n": ns,
            "gain_select": sel.mean(0).tolist(),
            "gain_heldout": held.mean(0).tolist(),
            "gain_heldout_se": (held.std(0, ddof=1) / math.sqrt(reps)).tolist() if reps > 1 else None,
            "pred_select": [a for a, _ in p],
            "pred_heldout": [b for _, b in p],
            "sqrt_2lnN_scaled": [
                pred(basis, rho_n, 2)[0] / expected_max_normal(2) * math.sqrt(2 * math.log(n)) for n in ns
            ],
            "seeds": [r.seed for r in results],
        }
    return gain_vs_n


def _compare(
    search: Any,
    pred: Any,
    bases: dict[str, torch.Tensor],
    best_rho: float,
    n_sweep: int,
    reps: int,
    seed: int,
    g_sel: torch.Tensor,
) -> dict[str, Any]:
    """(3) Every subspace at one step norm (N = ``n_sweep``, ``reps`` seeds each)."""
    compare = {}
    for name, basis in [("isotropic", None)] + list(bases.items()):
        res = [search(basis, best_rho, n_sweep, seed + 200 + k) for k in range(reps)]
        held = [r.gain_heldout for r in res]
        compare[name] = {
            "gain_heldout_mean": float(np.mean(held)),
            "gain_heldout": held,
            "gain_heldout_se": float(np.std(held, ddof=1) / math.sqrt(len(held))) if len(held) > 1 else None,
            "pred_heldout": pred(basis, best_rho, n_sweep)[1],
            "capture_of_grad": 1.0 if basis is None else float((basis @ g_sel).pow(2).sum() / g_sel.pow(2).sum()),
        }
    return compare


def _ambient(
    layout: ParamLayout,
    theta: torch.Tensor,
    f_sel: Any,
    f_held: Any,
    g_sel: torch.Tensor,
    g_held: torch.Tensor,
    best_rho: float,
    n_sweep: int,
    seed: int,
) -> list[dict[str, Any]]:
    """(4) Ambient dimension at fixed N: isotropic noise on nested parameter groups, the same
    sigma per coordinate; gain / (sigma ||g_S||) should stay at E[max_N] while linear."""
    d = layout.dim
    groups = _nested_groups(layout)
    sigma_c = best_rho / math.sqrt(d) * 4
    ambient = []
    for label, mask in groups:
        gs, _gh = g_sel * mask, g_held * mask
        res = best_of_n(theta, f_sel, f_held, sigma_c, n_sweep, seed + 300, layout.numels, mask=mask)
        ambient.append(
            {
                "group": label,
                "dim": int(mask.sum()),
                "sigma": sigma_c,
                "gain_select": res.gain_select,
                "gain_heldout": res.gain_heldout,
                "norm_grad": float(gs.norm()),
                "normalised_gain_select": res.gain_select / (sigma_c * float(gs.norm())),
                "expected_max": expected_max_normal(n_sweep),
            }
        )
    return ambient


def _density(
    search: Any,
    bases: dict[str, torch.Tensor],
    best_rho: float,
    d: int,
    n_sweep: int,
    reps: int,
    seed: int,
    g_sel: torch.Tensor,
) -> dict[str, Any]:
    """(5) Density against mass: the 2-dim prefix against the same plus 38 random directions,
    equal step norm."""
    small = bases["trajectory_prefix"][:2]
    large = orthonormal_basis(torch.cat([small, random_basis(d, 38, seed + 555)]))
    dens = {}
    for name, basis in [("small_aligned_r2", small), ("large_containing_r40", large)]:
        held = [search(basis, best_rho, n_sweep, seed + 400 + k).gain_heldout for k in range(reps)]
        dens[name] = {
            "gain_heldout_mean": float(np.mean(held)),
            "gain_heldout": held,
            "gain_heldout_se": float(np.std(held, ddof=1) / math.sqrt(len(held))) if len(held) > 1 else None,
            "density": float((basis @ g_sel).norm() / math.sqrt(basis.shape[0])),
            "mass": float((basis @ g_sel).norm()),
        }
    return dens


def _nested_groups(layout: ParamLayout) -> list[tuple[str, torch.Tensor]]:
    """Masks over the flat vector: output head, then adding blocks from the top, then all."""
    slices = layout.slices()
    names = list(slices)
    n_blocks = len({n.split(".")[1] for n in names if n.startswith("blocks.")})
    out, chosen = [], set()
    stages = [("head", lambda n: n.startswith(("head", "ln_f")))]
    for b in reversed(range(n_blocks)):
        stages.append((f"+block{b}", lambda n, b=b: n.startswith(f"blocks.{b}.")))
    stages.append(("+embeddings", lambda n: True))
    for label, pick in stages:
        chosen |= {n for n in names if pick(n)}
        mask = torch.zeros(layout.dim, dtype=torch.float64)
        for n in chosen:
            mask[slices[n]] = 1.0
        out.append((label, mask))
    return out


def _linear_toy(n: int, seed: int) -> dict:
    """f(theta) = <g, theta>, ||g|| = 1, in D = 10 .. 10^5: gain/sigma vs E[max_N] (theory: flat in D)."""
    out = []
    for dim in (10, 1000, 100_000):
        g = torch.randn(dim, generator=torch.Generator().manual_seed(seed + dim), dtype=torch.float64)
        g /= g.norm()
        f = lambda th: float(g @ th)
        gains = [
            best_of_n(torch.zeros(dim, dtype=torch.float64), f, f, 1.0, n, seed + k).gain_select for k in range(40)
        ]
        out.append(
            {
                "dim": dim,
                "gain_mean": float(np.mean(gains)),
                "gain_se": float(np.std(gains, ddof=1) / math.sqrt(len(gains))),
                "theory": expected_max_normal(n),
            }
        )
    return {"n": n, "reps": 40, "rows": out}
