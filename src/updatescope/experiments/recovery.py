"""``updatescope reproduce recovery`` -- paper B's recovery-after-forgetting analyses on the
synthetic transformer: capture of Delta_GD by every subspace (with nulls), drift of the
local task plane, effective rank of task gradients vs noise, and the Krylov basis.

Figures (PNG, beside the record, drawn by ``report.figures.recovery_figures``):
recovery_capture.png, recovery_drift.png, recovery_rank.png, recovery_training.png.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from updatescope.experiments import Result, config_record
from updatescope.experiments.configs import RecoveryConfig
from updatescope.locallinear import (
    TASKS,
    ParamLayout,
    capture_fraction,
    effective_rank,
    flat_grad,
    gaussian_like,
    gradient_stack,
    krylov_basis,
    make_hvp,
    orthonormal_basis,
    prefix_capture_curve,
    random_walk_prefix_null,
    rest_capture_curve,
    restrict,
    subspace_overlap,
    swapped_params,
    top_directions,
)
from updatescope.locallinear.lab import synthetic_recovery
from updatescope.report import figures

NAME = "recovery"


def _plane_losses(tasks, split, index0, m, n):
    """Closures for per-task gradients on m small batches of n sequences per task."""
    return [
        (lambda mod, t=t, j=j: tasks.loss(mod, t, index0 + j, split, n=n))
        for t in TASKS for j in range(m)
    ]


def _task_plane(model, tasks, theta, index0):
    """span of the 4 per-task gradients (32 sequences each) at theta: (4, D)."""
    with swapped_params(model, theta):
        g = gradient_stack(model, _plane_losses(tasks, "select", index0, 1, 32))
    return top_directions(g, len(TASKS))


def run(config: RecoveryConfig, out_dir: Path) -> Result:
    """Run the protocol and every analysis."""
    t0 = time.perf_counter()
    cfg, seed = config.lab, config.seed
    ks = list(config.ks)
    m_batches, small_n = config.batches_per_task, config.batch  # gradient stack: 4 tasks x m batches
    krylov_k = config.krylov_k
    drift_every = cfg.snapshot_every

    model, tasks, run_, info = synthetic_recovery(cfg)
    delta = run_.delta_gd.double()
    d = delta.numel()
    timings = {"train": time.perf_counter() - t0}

    # ---- capture curves ---------------------------------------------------------------
    kmax = cfg.dense_steps
    curves: dict[str, list[float]] = {}
    curves["trajectory_prefix"] = prefix_capture_curve(run_.updates, delta).tolist()
    curves["trajectory_prefix_rest"] = rest_capture_curve(run_.updates, run_.theta_rec - run_.theta_forg).tolist()
    with swapped_params(model, run_.theta_forg):
        g_forg = gradient_stack(model, _plane_losses(tasks, "select", 0, m_batches, small_n))
        g_shuf = gradient_stack(
            model,
            [(lambda mod, t=t, j=j: tasks.loss(mod, t, j, "select", shuffle_labels=True, n=small_n))
             for t in TASKS for j in range(m_batches)],
        )
    with swapped_params(model, run_.theta_mt):
        g_mt = gradient_stack(model, _plane_losses(tasks, "select", 0, m_batches, small_n))
    local_plane = top_directions(g_forg, g_forg.shape[0])
    pre_plane = top_directions(g_mt, g_mt.shape[0])
    curves["local_task_plane"] = prefix_capture_curve(local_plane, delta).tolist()
    curves["pre_interference_plane"] = prefix_capture_curve(pre_plane, delta).tolist()
    timings["planes"] = time.perf_counter() - t0

    # Krylov basis of the mix loss at theta_forg on one fixed batch (32 per task)
    hess_loss = lambda mod: torch.stack([tasks.loss(mod, t, 7, "select", n=32) for t in TASKS]).mean()
    with swapped_params(model, run_.theta_forg):
        g0 = flat_grad(hess_loss(model), model).detach()
        kry = krylov_basis(make_hvp(hess_loss, model), g0, krylov_k)
    curves["krylov"] = prefix_capture_curve(kry, delta).tolist()
    timings["krylov"] = time.perf_counter() - t0

    gen = torch.Generator().manual_seed(seed + 99)
    curves["random"] = prefix_capture_curve(torch.randn(kmax, d, generator=gen), delta).tolist()
    walk = random_walk_prefix_null(run_.step_norms, list(range(1, kmax + 1)), d, seed=seed + 7)
    curves["random_walk_prefix_null"] = [walk[k]["total"] for k in range(1, kmax + 1)]
    curves["random_walk_prefix_rest_null"] = [walk[k]["rest"] for k in range(1, kmax + 1)]

    def at(name: str, k: int) -> float | None:
        c = curves[name]
        return c[k - 1] if k <= len(c) else None

    capture_table = {name: {str(k): at(name, k) for k in ks} for name in curves}

    # per layer: each parameter group's share of ||Delta||^2 and the capture of its part of
    # Delta by the same group's part of the first 10 updates (a per-layer prefix basis)
    layout = ParamLayout.of(model)
    k10 = min(10, kmax)
    per_layer = {}
    for group, sls in layout.groups(_layer_of).items():
        part = restrict(delta, sls)
        per_layer[group] = {
            "dim": int(part.numel()),
            "share_of_delta_sq": float(part.pow(2).sum() / delta.pow(2).sum()),
            f"prefix{k10}_capture": capture_fraction(orthonormal_basis(restrict(run_.updates[:k10], sls)), part),
        }

    # ---- drift of the local task plane --------------------------------------------------
    ref = _task_plane(model, tasks, run_.theta_forg, 100)
    floor = subspace_overlap(ref, _task_plane(model, tasks, run_.theta_forg, 200))
    states = dict(run_.snapshots)
    for t in (1, 2, 5):  # early points from the dense updates: the first steps are the largest
        if t <= kmax:
            states[t] = run_.theta_forg + run_.updates[:t].sum(0)
    drift = {}
    for step in sorted(states):
        if step % drift_every == 0 or step in (1, 2, 5):
            drift[step] = subspace_overlap(ref, _task_plane(model, tasks, states[step], 100))
    timings["drift"] = time.perf_counter() - t0

    # ---- effective rank vs noise ---------------------------------------------------------
    rank = {
        "task_gradients": effective_rank(g_forg).as_dict(),
        "gaussian_same_norms": effective_rank(gaussian_like(g_forg, seed)).as_dict(),
        "shuffled_labels": effective_rank(g_shuf).as_dict(),
        "task_gradients_theta_mt": effective_rank(g_mt).as_dict(),
        # rows scaled to unit norm: the rank of the *directions*, free of norm differences
        # between tasks (a Gaussian stack of unit rows has entropy rank ~ n)
        "task_gradients_unit_rows": effective_rank(_unit(g_forg)).as_dict(),
        "shuffled_labels_unit_rows": effective_rank(_unit(g_shuf)).as_dict(),
        "gaussian_unit_rows": effective_rank(_unit(gaussian_like(g_forg, seed))).as_dict(),
        "per_task": {
            t: {
                "task": effective_rank(g_forg[i * m_batches : (i + 1) * m_batches]).as_dict(),
                "shuffled_labels": effective_rank(g_shuf[i * m_batches : (i + 1) * m_batches]).as_dict(),
                "gaussian_same_norms": effective_rank(
                    gaussian_like(g_forg[i * m_batches : (i + 1) * m_batches], seed + i)).as_dict(),
            }
            for i, t in enumerate(TASKS)
        },
    }

    acc = {r["phase"]: r["metrics"] for r in run_.history if "metrics" in r}  # last per phase
    metrics = {
        "dim": d,
        "delta_norm": float(delta.norm()),
        "forget_steps": run_.forget_steps,
        "theta_mt_cached": info["cached"],
        "accuracy": {"theta_mt": info["accuracy"], **{f"end_{k}": v for k, v in acc.items()}},
        "capture_at_k": capture_table,
        "capture_curves": curves,
        "per_layer": per_layer,
        "local_plane_dim4_capture": at("local_task_plane", 4),
        "drift_overlap": {str(k): v for k, v in drift.items()},
        "drift_same_point_resample_overlap": floor,
        "drift_random_expected": len(TASKS) / d,
        "rank": rank,
        "krylov_dim": int(kry.shape[0]),
        "timings_s": timings,
        "history": [
            {k: r[k] for k in ("phase", "step", "loss", "metrics") if k in r}
            for r in run_.history if "metrics" in r
        ],
    }
    record = config_record(config, hessian_batch_per_task=32,
                           drift_plane="span of 4 per-task gradients (32 seq each)")
    return Result(NAME, record, metrics, time.perf_counter() - t0, figures={
        name: (lambda path: figures.recovery_figure(metrics, path)) for name in figures.RECOVERY_FIGURES})


def _unit(g: torch.Tensor) -> torch.Tensor:
    return g / g.norm(dim=1, keepdim=True).clamp_min(1e-30)


def _layer_of(name: str) -> str:
    """Parameter name -> layer group: 'block<i>', 'embeddings' or 'head'."""
    if name.startswith("blocks."):
        return "block" + name.split(".")[1]
    return "embeddings" if name.startswith(("tok", "pos")) else "head"
