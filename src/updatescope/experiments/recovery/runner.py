"""``updatescope reproduce recovery`` -- paper B's recovery-after-forgetting analyses on the
synthetic transformer, in a stable regime, over several replicates.

Per replicate (its own theta_mt from lab seed + r unless ``vary_theta_mt`` is off, and fresh
forgetting/recovery batches, see ``locallinear.lab``):
- regime: forgetting runs until its criterion (at most ``lab.forget_cap`` steps); the steps and
  the criterion value reached are recorded, and a replicate that stopped at the cap, or whose
  step size came from an unconverged power iteration, is refused: recorded with its reasons and
  its regime facts, left out of every summary;
- stability: eta = eta_lambda / rho(theta_forg), rho the spectral radius of the mix-loss Hessian,
  the largest of ``eta_draws`` power iterations on independent Hessian batches (each draw kept
  with its convergence checks); rho re-measured at theta_forg on another batch and at theta_rec,
  eta * lambda_max, whether the eval mix loss fell at every check, each task's lowest
  accuracy during recovery; every step norm;
- capture of Delta_GD by the trajectory prefix, and of the displacement *remaining* after
  k steps, with nulls: a random walk with the real step norms, the prefix of an
  independent recovery from the same theta_forg, and a static plane of the same width;
- static planes (local at theta_forg, pre-interference at theta_mt) from gradients of
  ``plane_n`` sequences each; the 4-dim task plane's drift, divided by its same-point
  resample floor, measured again at every drift step (drift / sqrt(floor_forg * floor_t));
- effective rank of ``rank_n`` per-example gradients per task against shuffled labels and
  Gaussian rows of the same shape (and the same row norms);
- Krylov at a matched horizon: deterministic full-batch GD from theta_forg at the same eta,
  capture of theta_k - theta_0 by K_k(H, g_0) and the overlap of span(u_1..u_k) with K_k,
  then the same for the real minibatch-SGD steps, against K_k(H, g_0) and against K_k(H, u_1)
  (started from the initial gradient direction, the first real step); the static plane null
  is also given with u_1 as its first direction.
Every number is kept per replicate and summarised as mean and standard error.
Figures: recovery_capture.png, recovery_drift.png, recovery_rank.png, recovery_training.png,
recovery_krylov.png.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from updatescope.experiments import Result, config_record
from updatescope.experiments.recovery import figures
from updatescope.experiments.recovery.config import RecoveryExperimentConfig
from updatescope.experiments.stats import mean_se
from updatescope.locallinear import (
    TASKS,
    capture_fraction,
    effective_rank,
    gaussian_like,
    gradient_stack,
    matched_horizon,
    orthonormal_basis,
    prefix_capture_curve,
    random_walk_prefix_null,
    rest_capture_curve,
    subspace_overlap,
    swapped_params,
    top_directions,
)
from updatescope.locallinear.lab import (
    independent_recovery,
    mix_loss_fn,
    recovery_stability,
    refusals,
    synthetic_recovery,
)
from updatescope.locallinear.protocol import unit_rows as _unit

NAME = "recovery"


def _grads(model, tasks, theta, index0: int, m: int, n: int, split: str = "select") -> torch.Tensor:
    """Per-task gradients at theta: m batches of n sequences per task -> (4 m, D), task-major."""
    with swapped_params(model, theta):
        return gradient_stack(
            model, [(lambda mod, t=t, j=j: tasks.loss(mod, t, index0 + j, split, n=n)) for t in TASKS for j in range(m)]
        )


def _example_grads(model: nn.Module, tasks, task: str, index: int, n: int, shuffle: bool) -> torch.Tensor:
    """n per-example gradients (one sequence each) of one task at the model's parameters -> (n, D)."""
    seq = tasks.batch(task, index, "select", n)
    y = seq[:, tasks.seq_len + 2 :]
    if shuffle:  # answers permuted across examples: same inputs, same label marginals
        y = y[torch.randperm(n, generator=torch.Generator().manual_seed(index + 17))]

    def loss(i):
        return lambda mod: nn.functional.cross_entropy(tasks.answer_logits(mod, seq[i : i + 1])[0], y[i])

    return gradient_stack(model, [loss(i) for i in range(n)])


def _replicate(config: RecoveryExperimentConfig, r: int) -> dict[str, Any]:
    cfg = replace(config.lab, seed=config.lab.seed + r) if config.vary_theta_mt else config.lab
    t0 = time.perf_counter()
    model, tasks, run_, info = synthetic_recovery(
        cfg, replicate=r, lam_draws=config.eta_draws, lam_iters=config.eta_iters
    )
    out: dict[str, Any] = {
        "replicate": r,
        "lab_seed": cfg.seed,
        "forget_steps": run_.forget_steps,
        "forget": info["forget"],
        "theta_mt_cached": info["cached"],
        "accuracy_mt": {t: info["metrics_mt"][t] for t in TASKS},
        "radius_draws": info["radius_draws"],
        "radius_converged": info["radius_converged"],
        "refused": refusals(info),
    }
    if out["refused"]:  # not reported: the regime facts only, no analysis of a run that missed its regime
        out["timings_s"] = {"train": time.perf_counter() - t0}
        return out
    delta = run_.delta_gd.double()
    d = delta.numel()
    kmax = cfg.dense_steps
    upd = run_.updates
    out["dim"] = d
    out["delta_norm"] = float(delta.norm())
    timings = {"train": time.perf_counter() - t0}

    # ---- stability ----------------------------------------------------------------------
    stability = recovery_stability(model, tasks, cfg, run_, info, config.eta_iters)
    rec_rows = [x for x in run_.history if x["phase"] == "recover" and "metrics" in x]
    forg = info["metrics_forg"]
    losses = [forg["mix_loss"]] + [x["metrics"]["mix_loss"] for x in rec_rows]
    rises = np.diff(losses)
    out["stability"] = {
        **stability,
        "eval_steps": [0] + [x["step"] for x in rec_rows],
        "eval_mix_loss": losses,
        "monotone": bool((rises <= 0).all()),
        "max_rise": float(max(0.0, rises.max())),
        "accuracy_mt": {t: info["metrics_mt"][t] for t in TASKS},
        "accuracy_forg": {t: forg[t] for t in TASKS},
        "accuracy_rec": {t: rec_rows[-1]["metrics"][t] for t in TASKS},
        "min_accuracy_during_recovery": {t: min(x["metrics"][t] for x in rec_rows) for t in TASKS},
        # a collapse: a task falls more than 0.1 below where recovery started
        "collapsed": [t for t in TASKS if min([forg[t]] + [x["metrics"][t] for x in rec_rows]) < forg[t] - 0.1],
    }
    out["step_norms"] = run_.step_norms.tolist()
    out["history"] = [
        {k: x[k] for k in ("phase", "step", "loss", "metrics") if k in x} for x in run_.history if "metrics" in x
    ]

    # ---- capture and its nulls -----------------------------------------------------------
    curves: dict[str, list[float]] = {}
    curves["prefix"] = prefix_capture_curve(upd, delta).tolist()
    curves["prefix_rest"] = rest_capture_curve(upd, delta).tolist()
    walk = random_walk_prefix_null(run_.step_norms, list(range(1, kmax + 1)), d, seed=1000 + r)
    curves["walk"] = [walk[k]["total"] for k in range(1, kmax + 1)]
    curves["walk_rest"] = [walk[k]["rest"] for k in range(1, kmax + 1)]
    indep = independent_recovery(model, tasks, cfg, run_.theta_forg, info["recover_lr"], stream=50 + r, steps=kmax)
    curves["independent"] = prefix_capture_curve(indep.updates, delta).tolist()
    curves["independent_rest"] = rest_capture_curve(indep.updates, delta, steps=upd).tolist()
    m, n = config.batches_per_task, config.plane_n
    g_forg = _grads(model, tasks, run_.theta_forg, 10 + 1000 * r, m, n)
    g_mt = _grads(model, tasks, run_.theta_mt, 10 + 1000 * r, m, n)
    local = top_directions(g_forg, g_forg.shape[0])
    pre = top_directions(g_mt, g_mt.shape[0])
    curves["local_plane"] = prefix_capture_curve(local, delta).tolist()
    curves["pre_interference_plane"] = prefix_capture_curve(pre, delta).tolist()
    # the same plane with the initial gradient direction (the first recovery step) as its first row
    local_g0 = orthonormal_basis(torch.cat([_unit(upd[:1].double()), local]))
    curves["local_plane_g0"] = prefix_capture_curve(local_g0, delta).tolist()
    w = min(kmax, local.shape[0])
    curves["static_rest"] = rest_capture_curve(local[:w], delta, steps=upd[:w]).tolist()
    timings["capture"] = time.perf_counter() - t0

    # ---- the 4-dim task plane: capture, floor, drift --------------------------------------
    def plane(theta, index0):
        return top_directions(_grads(model, tasks, theta, index0, 1, n), len(TASKS))

    ref = plane(run_.theta_forg, 100 + 1000 * r)
    floor = subspace_overlap(ref, plane(run_.theta_forg, 200 + 1000 * r))
    g0 = _unit(upd[:1].double())  # the initial gradient direction (the first recovery step)
    out["task_plane"] = {
        "capture_forg": capture_fraction(ref, delta),
        "capture_mt": capture_fraction(plane(run_.theta_mt, 100 + 1000 * r), delta),
        "capture_forg_g0": capture_fraction(orthonormal_basis(torch.cat([g0, ref])), delta),
        "capture_g0": capture_fraction(g0, delta),
        "resample_floor": floor,
        "random_overlap": len(TASKS) / d,
    }
    states = {0: run_.theta_forg}
    for t in config.drift_steps:
        if t <= kmax:
            states[t] = run_.theta_forg + upd[:t].sum(0)
        elif t in run_.snapshots:
            states[t] = run_.snapshots[t]
    # the resample floor is measured at every drift step, on the same two batch indices as at
    # theta_forg: drift is the overlap divided by the geometric mean of the floors at both ends
    drift, floors = {}, {}
    for t in sorted(states):
        if t == 0:
            continue
        here = plane(states[t], 100 + 1000 * r)
        drift[t] = subspace_overlap(ref, here)
        floors[t] = subspace_overlap(here, plane(states[t], 200 + 1000 * r))
    out["drift"] = {
        "steps": list(drift),
        "overlap": list(drift.values()),
        "floor": list(floors.values()),
        "normalised": [drift[t] / math.sqrt(floor * floors[t]) for t in drift],
        "normalised_start_floor": [v / floor for v in drift.values()],
    }
    timings["drift"] = time.perf_counter() - t0

    # ---- effective rank of per-example gradients ------------------------------------------
    rank: dict[str, dict] = {}
    with swapped_params(model, run_.theta_forg):
        for i, t in enumerate(TASKS):
            g = _example_grads(model, tasks, t, 7000 + 1000 * r, config.rank_n, shuffle=False)
            row = {"task": effective_rank(g).as_dict(), "task_unit": effective_rank(_unit(g)).as_dict()}
            gauss = gaussian_like(g, 31 * r + i)
            row["gaussian"] = effective_rank(gauss).as_dict()
            row["gaussian_unit"] = effective_rank(_unit(gauss)).as_dict()
            del g, gauss
            g = _example_grads(model, tasks, t, 7000 + 1000 * r, config.rank_n, shuffle=True)
            row["shuffled"] = effective_rank(g).as_dict()
            row["shuffled_unit"] = effective_rank(_unit(g)).as_dict()
            del g
            rank[t] = row
    out["rank"] = rank
    timings["rank"] = time.perf_counter() - t0

    # ---- Krylov at a matched horizon --------------------------------------------------------
    full = mix_loss_fn(tasks, 900 + r, cfg.hessian_n)  # the batch lambda_max was measured on
    out["krylov"] = matched_horizon(
        model, full, run_.theta_forg, info["recover_lr"], config.krylov_k, upd, sgd_start=upd[0]
    )
    timings["krylov"] = time.perf_counter() - t0

    out["curves"] = curves
    out["timings_s"] = timings
    return out


def _curve_mean_se(curves: list[list[float]]) -> dict[str, Any]:
    """mean_se of capture curves over replicates.  A plane's curve is as long as its basis,
    and a basis from per-task gradients loses the directions whose singular values vanish
    (``top_directions``), so replicates can differ in length: a shorter curve is extended
    with its last value (a basis with no further direction captures no more), and the
    lengths are recorded."""
    lengths = [len(c) for c in curves]
    if len(set(lengths)) == 1:
        return mean_se(curves)
    top = max(lengths)
    out = mean_se([list(c) + [c[-1]] * (top - len(c)) if c else [math.nan] * top for c in curves])
    out["lengths"] = lengths
    return out


def summarise(reps: list[dict]) -> dict[str, Any]:
    """Mean +- SE over replicates of every number the docs use."""
    s: dict[str, Any] = {}
    for key in reps[0]["curves"]:
        s[f"curve.{key}"] = _curve_mean_se([x["curves"][key] for x in reps])
    for key in ("recover_lr", "lambda_max_forg", "lambda_max_rec", "eta_lambda_forg", "eta_lambda_rec", "max_rise"):
        s[f"stability.{key}"] = mean_se([x["stability"][key] for x in reps])
    s["stability.monotone_all"] = all(x["stability"]["monotone"] for x in reps)
    s["stability.collapsed_any"] = sorted({t for x in reps for t in x["stability"]["collapsed"]})
    for part in ("accuracy_forg", "accuracy_rec", "min_accuracy_during_recovery"):
        for t in TASKS:
            s[f"{part}.{t}"] = mean_se([x["stability"][part][t] for x in reps])
    for key in ("capture_forg", "capture_mt", "capture_forg_g0", "capture_g0", "resample_floor"):
        s[f"task_plane.{key}"] = mean_se([x["task_plane"][key] for x in reps])
    s["drift.steps"] = reps[0]["drift"]["steps"]
    for key in ("overlap", "floor", "normalised", "normalised_start_floor"):
        s[f"drift.{key}"] = mean_se([x["drift"][key] for x in reps])
    for t in TASKS:
        for kind in reps[0]["rank"][t]:
            for stat in ("entropy_rank", "stable_rank"):
                s[f"rank.{t}.{kind}.{stat}"] = mean_se([x["rank"][t][kind][stat] for x in reps])
    for key in ("gd_capture", "gd_overlap", "sgd_capture", "sgd_overlap", "sgd_g0_capture", "sgd_g0_overlap"):
        s[f"krylov.{key}"] = mean_se([x["krylov"][key] for x in reps])
    s["delta_norm"] = mean_se([x["delta_norm"] for x in reps])
    s["forget_steps"] = mean_se([x["forget_steps"] for x in reps])
    s["forget_value"] = mean_se([x["forget"]["value"] for x in reps])
    return s


def run(config: RecoveryExperimentConfig, out_dir: Path) -> Result:
    """Run every replicate and summarise the reported ones (:func:`lab.refusals` names the
    others, which are recorded with their regime facts and left out of every number)."""
    t0 = time.perf_counter()
    reps = [_replicate(config, r) for r in range(config.seeds)]
    reported = [x for x in reps if not x["refused"]]
    metrics = {
        "dim": reported[0]["dim"] if reported else None,
        "seeds": config.seeds,
        "rank_n": config.rank_n,
        "plane_n": config.plane_n,
        "eta_rule": {
            "eta_lambda": config.lab.eta_lambda,
            "draws": config.eta_draws,
            "iters": config.eta_iters,
            "curvature": "spectral radius (power iteration with convergence checks)",
            "rtol": config.lab.power_rtol,
            "residual_tol": config.lab.power_residual_tol,
        },
        "reported_replicates": [x["replicate"] for x in reported],
        "refused": [{"replicate": x["replicate"], "reasons": x["refused"]} for x in reps if x["refused"]],
        "summary": summarise(reported) if reported else None,
        "replicates": reps,
        "seconds_per_replicate": [max(x["timings_s"].values()) for x in reps],
    }
    shared = "one theta_mt per replicate (lab seed + r)" if config.vary_theta_mt else "shared theta_mt"
    record = config_record(
        config, replicates=f"{shared}; fresh forgetting, recovery and measurement batches per replicate"
    )
    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={}
        if not reported
        else {name: (lambda path: figures.recovery_figure(metrics, path)) for name in figures.RECOVERY_FIGURES},
    )
