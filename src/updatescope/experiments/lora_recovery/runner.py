"""``updatescope reproduce lora-recovery`` -- paper B's recovery after forgetting with LoRA
adapters on the packaged causal LM (SmolLM2), measured in LoRA space and in BA space.

Set-up.  Each task is a built-in domain (``config.tasks``); its block inputs for the last
``lora.n_last`` blocks are captured once (:func:`groundtruth.lora.capture_block_inputs`), and
every step runs only the tail (:func:`groundtruth.lora.tail_model`) with LoRA adapters on the
attention projections (the ground truth's peft injection: :func:`groundtruth.lora.finetune_lora`
with zero steps gives a fresh adapted tail).  The LoRA tensors are the only trainable
parameters, so the lab's flat vector theta (:mod:`updatescope.locallinear`) is the LoRA vector.
The tail's attention runs in eager mode: Hessian-vector products need a double backward,
which the fused CPU attention kernel does not have.

Protocol (the lab's pieces, :mod:`updatescope.locallinear.trajectory`), per replicate r:
1. multitask: Adam on the mix (equal-weight mean of the task losses) -> theta_mt, the
   replicate's own (LoRA initialisation seed + r, multitask batch indices shifted by r) unless
   ``vary_theta_mt`` is off (then one theta_mt from ``seed``, shared);
2. forgetting: Adam on ``focus`` until the other tasks' mean eval loss has risen by
   ``forget_rise`` nats over theta_mt, at most ``forget_cap`` steps -> theta_forg (the rise per
   task, the steps, the criterion's value and target and whether it was reached are recorded);
3. recovery: SGD on the mix at eta = ``eta_lambda`` / rho(theta_forg), rho the spectral radius
   of the mix-loss Hessian: the largest of ``eta_draws`` power iterations on independent
   Hessian batches (:func:`locallinear.spectral_radius`, stopped by its convergence checks,
   each draw recorded with its iterations, residual and converged flag), every step recorded
   (:func:`locallinear.record_phase`); stability: rho re-measured at theta_forg on another
   batch and at theta_rec (eta * rho at both) and the eval mix loss every
   ``recover_eval_every`` steps.
The regime rules of the synthetic lab (:func:`locallinear.lab.refusals`): a replicate whose
forgetting stopped at the cap before its criterion, or whose largest radius draw did not
converge, is refused: recorded with its reasons and regime facts, never recovered or measured,
left out of the summary and the verdicts (``reported_replicates``, ``refused``).
Minibatches are drawn by the ground truth's rule (:func:`groundtruth.minibatch_indices`) from
the task's cached sequences, seeded by (batch index, task); replicate r shifts the batch
indices of every phase and of every measurement.

Measures (per replicate; mean +- SE over replicates in ``summary``), as in
:mod:`updatescope.experiments.recovery`:
- capture of Delta_GD = theta_rec - theta_forg by the trajectory prefix and of the
  displacement remaining after k steps, with nulls: random walk with the real step norms,
  an independent recovery from theta_forg, a static local plane of the same width and the
  same plane with the initial gradient direction (the first recovery step) as its first row;
- the same in BA space: x_t = concat over adapted modules of vec(s (B_t A_t - B_0 A_0)),
  s = alpha / r, theta_0 = theta_forg; the prefix spans the per-step increments x_t - x_{t-1}
  (the span of the first k of them is the span of x_1..x_k); nulls: a random walk with the
  BA step norms, the independent run's BA increments, and the static plane pushed into BA
  space by the Jacobian at theta_forg, d(BA) = dB A_0 + B_0 dA (also with the pushed first
  step as its first row);
- task plane: top ``len(tasks)`` directions of one gradient per task over ``plane_batch``
  sequences (accumulated over micro-batches), at theta_forg (local) and theta_mt
  (pre-interference); its capture (also with the initial gradient direction added), its drift
  along the recovery (same sequences at every point) and the same-point resample floor (a
  second draw, disjoint while the task has 2 x ``plane_batch`` sequences, else both drawn
  with replacement and recorded so), measured again at every drift step: the drift is the
  overlap divided by sqrt(floor at theta_forg * floor at the step), as in the lab;
- static planes of width tasks x ``batches_per_task``: top directions of the micro-batch
  gradients of both draws (``batches_per_task`` / 2 per draw) at theta_forg and theta_mt;
- effective rank of ``rank_n`` per-sequence gradients per task at theta_forg against
  shuffled labels (next tokens permuted across the counted positions of the same sequences)
  and Gaussian rows with the same norms;
- the task plane, its resample floor, its drift and the effective rank again in BA space:
  every gradient pushed by the Jacobian of theta -> BA at its own point (at theta_forg for
  the plane, the floor and the ranks, at theta_mt for the pre-interference plane, at theta_t
  for the drift), i.e. the direction a gradient step moves BA to first order; its capture is
  of the BA displacement x_T, the Gaussian rank baseline is drawn in BA space.
No Krylov basis is built here (the synthetic lab's matched-horizon Krylov analysis has no
LoRA counterpart yet).
Resuming: every finished replicate is stored in the experiment cache under a key of the model,
the config, theta_mt (when shared), the captured tensors and this code; a rerun after a stop loads them and
lists them in ``resumed_replicates``.
Verdict rule (as docs/locallinear_table.py): a claim is beyond its nulls when its mean - 2 SE
exceeds every null's mean + 2 SE.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from updatescope.constants import IGNORE_INDEX
from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.caching import cache_file, cache_key, cached
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import minibatch_indices
from updatescope.experiments.lora_recovery import figures
from updatescope.experiments.lora_recovery.config import LoRARecoveryConfig
from updatescope.experiments.stats import mean_se
from updatescope.locallinear import (
    PhaseConfig,
    capture_fraction,
    effective_ranks,
    flat_params,
    gaussian_like,
    gradient_stack,
    make_hvp,
    orthonormal_basis,
    prefix_capture_curve,
    random_walk_prefix_null,
    record_phase,
    rest_capture_curve,
    set_flat_params,
    spectral_radius,
    subspace_overlap,
    swapped_params,
    top_directions,
    train_phase,
)
from updatescope.locallinear.lora import ba_increments as _w_increments
from updatescope.locallinear.lora import ba_pairs, delta_w, push_w  # noqa: F401 (public here too)
from updatescope.locallinear.protocol import unit_rows as _unit

NAME = "lora-recovery"
STREAM = 100_000  # batch-index shift between replicates
FIGURE = "lora_recovery.png"
#: curves whose k = 10 / k = 20 values carry a claim, with their nulls
CAPTURE_CLAIMS = {
    "prefix": ("walk", "independent", "local_plane", "local_plane_g0"),
    "prefix_rest": ("walk_rest", "independent_rest", "static_rest"),
    "dw_prefix": ("dw_walk", "dw_independent", "dw_static", "dw_static_g0"),
    "dw_prefix_rest": ("dw_walk_rest", "dw_independent_rest", "dw_static_rest"),
}


def load_texts(name: str, split: str, max_chars: int) -> list[str]:
    """Documents of a domain split, whole documents up to ``max_chars`` characters
    (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    return load_domain(name, split, max_chars=max_chars)


# ------------------------------------------------------------------------------ losses
def _rows(n: int, batch: int, seed: int) -> Tensor:
    """One minibatch of ``batch`` row indices out of n, by the ground truth's rule."""
    return next(minibatch_indices(n, batch, 1, seed))


def _loss(tail: nn.Module, data: Mapping[str, Tensor], rows: Tensor, labels: Tensor | None = None) -> Tensor:
    """Mean next-token CE of sequences ``rows`` (labels overridable, same rows)."""
    lab = data["labels"][rows] if labels is None else labels
    keep = lab != IGNORE_INDEX
    z = tail.lm_head(lora_gt._head_inputs(tail, data["hidden"][rows], data["mask"][rows], keep))
    return F.cross_entropy(z.float(), lab[keep])


def _task_losses(data: Mapping[str, Mapping[str, Tensor]], batch: int) -> dict[str, Callable]:
    """Task -> closure (model, index) -> loss on the index's minibatch (seeded by index, task)."""
    return {
        t: (lambda m, i, t=t, k=k: _loss(m, data[t], _rows(data[t]["labels"].shape[0], batch, 64 * i + k)))
        for k, t in enumerate(data)
    }


def _mix(losses: Mapping[str, Callable]) -> Callable:
    return lambda m, i: torch.stack([fn(m, i) for fn in losses.values()]).mean()


def _eval_fn(evals: Mapping[str, Mapping[str, Tensor]]) -> Callable[[nn.Module], dict[str, float]]:
    def metrics(m: nn.Module) -> dict[str, float]:
        out = {t: lora_gt.mean_loss(m, d) for t, d in evals.items()}
        out["mix_loss"] = sum(out.values()) / len(evals)
        return out

    return metrics


# ------------------------------------------------------------------------------ model
def _eager(tail: nn.Module) -> nn.Module:
    """Eager attention in the tail: HVPs need a double backward through attention."""
    tail.config._attn_implementation = "eager"
    for blk in tail.model.layers:
        attn = getattr(blk, "self_attn", None)
        if attn is not None and hasattr(attn, "config"):
            attn.config._attn_implementation = "eager"
    return tail


def lora_tail(model: nn.Module, data: Mapping[str, Tensor], cfg: LoRARecoveryConfig) -> nn.Module:
    """A fresh LoRA tail (the ground truth's injection, zero training steps), LoRA tensors the
    only trainable ones; the caller's global random state is left as it was."""
    lc = cfg.lora
    with torch.random.fork_rng(devices=[]):
        tail = lora_gt.finetune_from_config(model, data, lc, seed=cfg.seed, steps=0)
    return _eager(tail)


# ------------------------------------------------------------------------------ measures
def plane_draws(n: int, batch: int, seed: int) -> tuple[Tensor, Tensor, bool]:
    """Two draws of ``batch`` rows out of n for the task plane and its resample floor ->
    (first, second, disjoint).  Disjoint, without replacement, while 2 * batch <= n; otherwise
    each draw samples its rows with replacement, independently (the record says so)."""
    g = torch.Generator().manual_seed(seed)
    if 2 * batch <= n:
        order = torch.randperm(n, generator=g)
        return order[:batch], order[batch : 2 * batch], True
    return torch.randint(n, (batch,), generator=g), torch.randint(n, (batch,), generator=g), False


def _part_grads(tail, data, rows: Tensor, parts: int) -> tuple[Tensor, Tensor]:
    """Gradients of the mean CE over ``rows``, accumulated over ``parts`` equal micro-batches
    (the whole batch never sits in memory at once) -> (each part's own mean-CE gradient
    (parts, D) float32, the whole batch's gradient (D,) float64 = the parts weighted by their
    counted targets)."""
    chunks = rows.chunk(parts)
    counts = torch.tensor([float((data["labels"][c] != IGNORE_INDEX).sum()) for c in chunks], dtype=torch.float64)
    g = gradient_stack(tail, [(lambda m, c=c: _loss(m, data, c)) for c in chunks])  # (parts, D)
    return g, (counts[:, None] * g.double()).sum(0) / counts.sum()


def _plane_grads(tail, data, theta, draws: Mapping[str, Sequence[Tensor]], parts: int) -> tuple[Tensor, Tensor]:
    """At theta, for every task and draw: the draw's gradient and its micro-batch gradients
    -> (task-major draw gradients (tasks * draws, D), micro-batch gradients (tasks * draws *
    parts, D))."""
    whole, micro = [], []
    with swapped_params(tail, theta):
        for t in data:
            for rows in draws[t]:
                g, full = _part_grads(tail, data[t], rows, parts)
                micro.append(g)
                whole.append(full)
    return torch.stack(whole), torch.cat(micro)


def _grads(tail, data, theta, draws: Mapping[str, Sequence[Tensor]], parts: int = 1) -> Tensor:
    """Task-major gradients at theta, one per (task, draw) in ``draws``.  -> (n, D)."""
    return _plane_grads(tail, data, theta, draws, parts)[0].float()


def _shuffled(labels: Tensor, seed: int) -> Tensor:
    """Next-token labels permuted across the counted positions: same inputs, same marginal."""
    out = labels.clone()
    keep = out != IGNORE_INDEX
    vals = out[keep]
    out[keep] = vals[torch.randperm(vals.numel(), generator=torch.Generator().manual_seed(seed))]
    return out


def _push_rows(g: Tensor, theta: Tensor, pairs: Sequence[tuple]) -> Tensor:
    """Rows of g (n, D) pushed into ΔW = BA space by the Jacobian at theta, one at a time
    into one (n, P) float32 stack."""
    first = push_w(g[0].float(), theta, pairs)
    out = torch.empty(g.shape[0], first.numel(), dtype=torch.float32)
    out[0] = first
    for i in range(1, g.shape[0]):
        out[i] = push_w(g[i].float(), theta, pairs)
    return out


def _rank_rows(tail, data, rows: Tensor, seed: int, push: Callable[[Tensor], Tensor] | None = None) -> dict[str, dict]:
    """Effective rank of per-sequence gradients, shuffled labels and Gaussian rows of the same
    norms; with ``push`` also of the same stacks pushed into ΔW = BA space (``dw_*`` kinds;
    the Gaussian rows are drawn in that space with the pushed rows' norms)."""

    def per_seq(labels: Tensor) -> Tensor:
        return gradient_stack(
            tail, [(lambda m, i=i: _loss(m, data, rows[i : i + 1], labels[i : i + 1])) for i in range(rows.numel())]
        )

    def ranks(g: Tensor, kind: str, row: dict, gauss: bool) -> None:
        # the rows and the unit rows from one Gram (a BA-space stack is 100 x P)
        for k, z in ((kind, g),) + (((kind.replace("task", "gaussian"), gaussian_like(g, seed)),) if gauss else ()):
            raw, unit = effective_ranks(z)
            row[k], row[f"{k}_unit"] = raw.as_dict(), unit.as_dict()

    row: dict[str, dict] = {}
    for labels, kind in ((data["labels"][rows], "task"), (_shuffled(data["labels"][rows], seed + 1), "shuffled")):
        g = per_seq(labels)
        ranks(g, kind, row, kind == "task")
        if push is not None:
            ranks(push(g), f"dw_{kind}", row, kind == "task")
        del g
    return row


def _theta_mt(
    cfg: LoRARecoveryConfig,
    seed: int,
    offset: int,
    model: nn.Module,
    tail: nn.Module,
    data: dict,
    mets: Callable[[nn.Module], dict[str, float]],
) -> tuple[Tensor, dict[str, float], list[dict]]:
    """The multitask phase: Adam on the mix from the LoRA initialisation of ``seed`` (the ground
    truth's injection), its minibatches from batch index ``offset`` on; the tail ends at theta_mt.
    -> (theta_mt (D,), its eval losses, the phase's log rows)."""
    lc = cfg.lora
    set_flat_params(tail, flat_params(lora_tail(model, data[cfg.tasks[0]], replace(cfg, seed=seed))))
    mt = PhaseConfig(steps=lc.steps, lr=lc.lr, warmup=max(1, lc.steps // 10), eval_every=max(1, lc.steps // 4))
    rows = train_phase(
        tail, _mix(_task_losses(data, lc.batch)), mt, phase="multitask", metrics=mets, index_offset=offset
    )
    hist = [{k: x[k] for k in ("phase", "step", "loss", "metrics") if k in x} for x in rows]
    return flat_params(tail).float(), mets(tail), hist


def _radius_draw(cfg: LoRARecoveryConfig, tail: nn.Module, data: dict, theta: Tensor, seed: int) -> dict:
    """Spectral radius of the mix-loss Hessian at theta on ``hessian_batch`` sequences per task
    (batch ``900 + seed``) by the lab's power iteration with its convergence checks
    (:func:`locallinear.spectral_radius`, start vector from ``seed``).
    -> :meth:`PowerIteration.as_dict` plus "seed"."""
    hess = {t: _rows(data[t]["labels"].shape[0], cfg.hessian_batch, 900 + seed) for t in data}
    full = lambda m: torch.stack([_loss(m, data[t], hess[t]) for t in data]).mean()
    with swapped_params(tail, theta):
        res = spectral_radius(
            make_hvp(full, tail),
            theta.numel(),
            cfg.power_iters,
            seed,
            rtol=cfg.power_rtol,
            residual_tol=cfg.power_residual_tol,
        )
    return {**res.as_dict(), "seed": seed}


def forget_facts(
    rows: list[dict], loss_mt: dict, loss_forg: dict, others: Sequence[str], cfg: LoRARecoveryConfig
) -> dict:
    """Did forgetting reach its criterion?  The criterion: the mean eval loss of the tasks
    ``others`` has risen by at least ``forget_rise`` nats over theta_mt (measured at theta_forg,
    the last check).  -> {"steps", "cap", "measure", "start_value" (their mean loss at theta_mt),
    "target" (the rise), "value" (the rise reached), "reached"}."""
    start = sum(loss_mt[t] for t in others) / len(others)
    value = sum(loss_forg[t] for t in others) / len(others) - start
    return {
        "steps": len(rows),
        "cap": cfg.forget_cap,
        "measure": "rise of the other tasks' mean eval loss over theta_mt (nats)",
        "start_value": start,
        "target": cfg.forget_rise,
        "value": value,
        "reached": bool(value >= cfg.forget_rise),
    }


def refusals(forget: dict, radius_converged: bool) -> list[str]:
    """Why a replicate must not be reported (empty when it may), by the lab's rules: forgetting
    stopped at its cap before the criterion, or the spectral radius that set eta did not converge."""
    out = []
    if not forget["reached"]:
        out.append(
            f"forgetting stopped at the cap ({forget['steps']} steps) with the other tasks' mean eval loss "
            f"{forget['value']:+.3f} nats over theta_mt, short of the target +{forget['target']:.3f}"
        )
    if not radius_converged:
        out.append("the power iteration that set eta did not converge")
    return out


def _forget_and_radius(
    cfg: LoRARecoveryConfig, r: int, tail: nn.Module, data: dict, losses: dict, mets: Callable, loss_mt: dict
) -> tuple[dict[str, float], dict[str, Any]]:
    """Forgetting on ``focus`` from the tail's parameters (theta_mt) until the criterion or the
    cap, then ``eta_draws`` spectral-radius draws at theta_forg.  The tail ends at theta_forg.
    -> (the eval losses at theta_forg, the replicate's regime facts)."""
    others = [t for t in data if t != cfg.focus]
    rise = lambda m: sum(m[t] - loss_mt[t] for t in others) / len(others)
    forget = PhaseConfig(steps=cfg.forget_cap, lr=cfg.forget_lr, eval_every=cfg.forget_eval_every)
    flog = train_phase(
        tail,
        losses[cfg.focus],
        forget,
        phase="forget",
        index_offset=1_000_000 + r * STREAM,
        metrics=mets,
        stop=lambda m: rise(m) >= cfg.forget_rise,
    )
    theta_forg = flat_params(tail).float()
    loss_forg = mets(tail)
    facts = forget_facts(flog, loss_mt, loss_forg, others, cfg)
    # draw j: start vector seed r + 1000 j, Hessian batch 900 + that seed (draw 0 is the old rule's)
    draws = [_radius_draw(cfg, tail, data, theta_forg, r + 1000 * j) for j in range(cfg.eta_draws)]
    top = max(draws, key=lambda x: x["radius"])
    converged = bool(top["converged"])
    regime = {
        "forget_steps": len(flog),
        "forget": facts,
        "radius_draws": draws,
        "radius_converged": converged,
        "refused": refusals(facts, converged),
        "forget_log": [{k: x[k] for k in ("phase", "step", "loss", "metrics") if k in x} for x in flog],
    }
    return loss_forg, regime


def _recover(
    cfg: LoRARecoveryConfig,
    r: int,
    tail: nn.Module,
    data: dict,
    mix: Callable,
    mets: Callable,
    theta_forg: Tensor,
    loss_forg: dict[str, float],
    draws: list[dict],
) -> tuple[Any, dict[str, Any]]:
    """SGD on the mix from theta_forg at eta = eta_lambda / the largest radius draw, then rho
    re-measured at theta_forg on another Hessian batch (seed 500 + r) and at theta_rec (seed r),
    as the lab's ``recovery_stability``.  -> (the recovery's PhaseRecord, its stability facts)."""
    top = max(draws, key=lambda x: x["radius"])
    lam = top["radius"]
    if not lam > 0:
        raise FloatingPointError(f"the Hessian's spectral radius at theta_forg is {lam}; eta cannot be set from it")
    eta = cfg.eta_lambda / lam
    rec = record_phase(
        tail,
        mix,
        PhaseConfig(steps=cfg.recover_steps, lr=eta, optimizer="sgd", eval_every=cfg.recover_eval_every),
        dense_steps=cfg.dense_steps,
        snapshot_every=1,
        index_offset=2_000_000 + r * STREAM,
        metrics=mets,
    )
    check = _radius_draw(cfg, tail, data, theta_forg, 500 + r)
    again = _radius_draw(cfg, tail, data, rec.end, r)
    rows = [x for x in rec.history if "metrics" in x]
    evl = [loss_forg["mix_loss"]] + [x["metrics"]["mix_loss"] for x in rows]
    rises = [b - a for a, b in zip(evl, evl[1:])]
    return rec, {
        "recover_lr": eta,
        "lambda_max_forg": lam,
        "lambda_max_forg_draws": [x["radius"] for x in draws],
        "radius_draws": draws,
        "radius_converged": bool(top["converged"]),
        "lambda_max_forg_check": check["radius"],
        "radius_check": check,
        "lambda_max_rec": again["radius"],
        "radius_rec": again,
        "eta_lambda_set": eta * lam,
        "eta_lambda_forg": eta * max(lam, check["radius"]),
        "eta_lambda_rec": eta * again["radius"],
        "eval_steps": [0] + [x["step"] for x in rows],
        "eval_mix_loss": evl,
        "monotone": all(x <= 0 for x in rises),
        "max_rise": max([0.0] + rises),
    }


def _replicate(
    cfg: LoRARecoveryConfig,
    r: int,
    model: nn.Module,
    tail: nn.Module,
    data: dict,
    evals: dict,
    shared: tuple[Tensor, dict[str, float], list[dict]] | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    t0 = time.perf_counter()
    tasks, kmax = list(data), cfg.dense_steps
    losses = _task_losses(data, cfg.lora.batch)
    mix = _mix(losses)
    mets = _eval_fn(evals)
    # theta_mt: the replicate's own (seed + r, its own multitask batches) or the shared one
    mt_seed = cfg.seed if shared is not None else cfg.seed + r
    theta_mt, loss_mt, mt_hist = shared or _theta_mt(cfg, mt_seed, r * STREAM, model, tail, data, mets)
    set_flat_params(tail, theta_mt)

    # ---- forgetting to its criterion, the spectral radius at theta_forg ----------------------
    loss_forg, regime = _forget_and_radius(cfg, r, tail, data, losses, mets, loss_mt)
    theta_forg = flat_params(tail).float()
    d = theta_forg.numel()
    flog = regime.pop("forget_log")
    out: dict[str, Any] = {"replicate": r, "mt_seed": mt_seed, "dim": d, **regime}
    out["forget_rise"] = {t: loss_forg[t] - loss_mt[t] for t in tasks}
    out["multitask_history"] = mt_hist
    if out["refused"]:  # not reported: the regime facts only, no analysis of a run that missed its regime
        out["losses"] = {"mt": loss_mt, "forg": loss_forg}
        out["history"] = flog
        out["timings_s"] = {"train": time.perf_counter() - t0}
        log(f"replicate {r}: refused ({'; '.join(out['refused'])})")
        return out

    # ---- stable recovery -------------------------------------------------------------------
    rec, stability = _recover(cfg, r, tail, data, mix, mets, theta_forg, loss_forg, regime["radius_draws"])
    theta_rec = rec.end
    rows = [x for x in rec.history if "metrics" in x]
    loss_rec = rows[-1]["metrics"]
    out.update(
        {
            "delta_norm": float((theta_rec - theta_forg).norm()),
            "losses": {
                "mt": loss_mt,
                "forg": loss_forg,
                "rec": loss_rec,
                "max_during_recovery": {t: max(x["metrics"][t] for x in rows) for t in tasks},
            },
            "stability": stability,
            "step_norms": rec.step_norms.tolist(),
            "history": flog + [{k: x[k] for k in ("phase", "step", "loss", "metrics") if k in x} for x in rec.history],
        }
    )
    timings = {"train": time.perf_counter() - t0}
    eta, lam_f, lam_r = stability["recover_lr"], stability["eta_lambda_forg"], stability["eta_lambda_rec"]
    log(
        f"replicate {r}: {out['forget_steps']} forgetting steps (others +{out['forget']['value']:.3f} nats), "
        f"eta {eta:.3g} (eta*rho {lam_f:.2f} -> {lam_r:.2f}), mix eval loss "
        f"{loss_mt['mix_loss']:.3f} -> {loss_forg['mix_loss']:.3f} -> {loss_rec['mix_loss']:.3f}"
    )

    # ---- capture in LoRA space ---------------------------------------------------------------
    delta = (theta_rec - theta_forg).double()
    upd = rec.updates
    ks = list(range(1, kmax + 1))
    c: dict[str, list[float]] = {}
    c["prefix"] = prefix_capture_curve(upd, delta).tolist()
    c["prefix_rest"] = rest_capture_curve(upd, delta).tolist()
    walk = random_walk_prefix_null(rec.step_norms, ks, d, seed=1000 + r)
    c["walk"], c["walk_rest"] = [walk[k]["total"] for k in ks], [walk[k]["rest"] for k in ks]
    indep = _independent_run(tail, mix, theta_forg, kmax, stability["recover_lr"], r)
    c["independent"] = prefix_capture_curve(indep.updates, delta).tolist()
    c["independent_rest"] = rest_capture_curve(indep.updates, delta, steps=upd).tolist()
    # the task plane's two draws of plane_batch sequences per task, each gradient accumulated
    # over batches_per_task / 2 micro-batches; those micro-batch gradients span the static planes
    nseq = {t: data[t]["labels"].shape[0] for t in tasks}
    picks = {t: plane_draws(nseq[t], cfg.plane_batch, 100 + 1000 * r + k) for k, t in enumerate(tasks)}
    two = {t: list(v[:2]) for t, v in picks.items()}
    parts = cfg.batches_per_task // 2
    width = len(tasks) * cfg.batches_per_task
    g_forg, micro_forg = _plane_grads(tail, data, theta_forg, two, parts)  # (2 tasks, D), (width, D)
    g_mt, micro_mt = _plane_grads(tail, data, theta_mt, two, parts)
    local = top_directions(micro_forg, width)
    pre = top_directions(micro_mt, width)
    del micro_forg, micro_mt
    c["local_plane"] = prefix_capture_curve(local, delta).tolist()
    c["pre_interference_plane"] = prefix_capture_curve(pre, delta).tolist()
    # the same plane with the initial gradient direction (the first recovery step) as its first row
    c["local_plane_g0"] = prefix_capture_curve(torch.cat([_unit(upd[:1].double()), local]), delta).tolist()
    w = min(kmax, local.shape[0])
    c["static_rest"] = rest_capture_curve(local[:w], delta, steps=upd[:w]).tolist()
    timings["capture"] = time.perf_counter() - t0

    # ---- capture in BA space -----------------------------------------------------------------
    pairs, target_w, p_dim = _capture_ba(cfg, r, tail, rec, indep, theta_forg, local, w, ks, c)
    out["dw_dim"] = p_dim
    out["dw_delta_norm"] = float(target_w.norm())
    timings["capture_ba"] = time.perf_counter() - t0

    # ---- the tasks-dim task plane: capture, resample floor, drift ------------------------------
    out.update(
        _task_plane(cfg, tail, data, rec, picks, two, parts, g_forg, g_mt, theta_forg, theta_mt, pairs, delta, target_w)
    )
    timings["drift"] = time.perf_counter() - t0

    # ---- effective rank of per-sequence gradients -----------------------------------------------
    out["rank"] = _ranks(cfg, r, tail, data, nseq, theta_forg, pairs)
    timings["rank"] = time.perf_counter() - t0
    out["curves"] = c
    out["timings_s"] = timings
    log(
        f"replicate {r}: prefix capture k=10 {c['prefix'][min(9, kmax - 1)]:.3f} (walk "
        f"{c['walk'][min(9, kmax - 1)]:.3f}), BA space {c['dw_prefix'][min(9, kmax - 1)]:.3f}; "
        f"{timings['rank']:.0f}s"
    )
    return out


def _independent_run(tail: nn.Module, mix: Any, theta_forg: Tensor, kmax: int, eta: float, r: int) -> Any:
    """An independent recovery of ``kmax`` SGD steps from θ_forg on its own batch stream (the
    "independent run's prefix" null); the tail's weights are left as they were."""
    with swapped_params(tail, theta_forg):
        return record_phase(
            tail,
            mix,
            PhaseConfig(steps=kmax, lr=eta, optimizer="sgd"),
            dense_steps=kmax,
            snapshot_every=kmax,
            phase="independent",
            index_offset=3_000_000 + r * STREAM,
        )


def _capture_ba(
    cfg: LoRARecoveryConfig,
    r: int,
    tail: nn.Module,
    rec: Any,
    indep: Any,
    theta_forg: Tensor,
    local: Tensor,
    w: int,
    ks: list[int],
    c: dict[str, list[float]],
) -> tuple[Any, Tensor, int]:
    """Capture in BA space: the recovery's BA increments against their random walk, the
    independent run's and the static plane's (pushed into BA space); the curves are added
    to ``c``.  -> (the BA pairs, the BA displacement, its dimension)."""
    kmax = cfg.dense_steps
    pairs = ba_pairs(tail)
    snaps = [rec.snapshots[t] for t in range(1, cfg.recover_steps + 1)]
    incr, w_norms, target_w = _w_increments(snaps, theta_forg, pairs, kmax)  # (k, P), (T,), (P,)
    p_dim = target_w.numel()
    c["dw_prefix"] = prefix_capture_curve(incr, target_w).tolist()
    c["dw_prefix_rest"] = rest_capture_curve(incr, target_w).tolist()
    wwalk = random_walk_prefix_null(w_norms, ks, p_dim, seed=2000 + r)
    c["dw_walk"], c["dw_walk_rest"] = [wwalk[k]["total"] for k in ks], [wwalk[k]["rest"] for k in ks]
    ind_thetas = list(theta_forg + indep.updates.cumsum(0))
    ind_w = _w_increments(ind_thetas, theta_forg, pairs, kmax)[0]
    c["dw_independent"] = prefix_capture_curve(ind_w, target_w).tolist()
    c["dw_independent_rest"] = rest_capture_curve(ind_w, target_w, steps=incr).tolist()
    del ind_w
    mapped = torch.stack([push_w(v.float(), theta_forg, pairs) for v in local])
    c["dw_static"] = prefix_capture_curve(mapped, target_w).tolist()
    c["dw_static_rest"] = rest_capture_curve(mapped[:w], target_w, steps=incr[:w]).tolist()
    # with the initial gradient direction first: the first step pushed by the Jacobian at theta_forg
    # (the BA direction it moves to first order), as the static plane's rows are
    u1 = _unit(push_w(rec.updates[0].float(), theta_forg, pairs)[None])
    c["dw_static_g0"] = prefix_capture_curve(torch.cat([u1, mapped]), target_w).tolist()
    del mapped, incr
    return pairs, target_w, p_dim


def _task_plane(
    cfg: LoRARecoveryConfig,
    tail: nn.Module,
    data: dict,
    rec: Any,
    picks: dict[str, Any],
    two: dict[str, list],
    parts: int,
    g_forg: Tensor,
    g_mt: Tensor,
    theta_forg: Tensor,
    theta_mt: Tensor,
    pairs: Any,
    delta: Tensor,
    target_w: Tensor,
) -> dict[str, Any]:
    """The tasks-dim task plane in LoRA and BA space: capture (also with the initial gradient
    direction, the first recovery step, added), resample floor and drift along the recovery.
    The floor is measured again at every drift step on the same two draws: the drift there is
    the overlap divided by the geometric mean of the floors at both ends (``normalised``; by the
    start's floor alone: ``normalised_start_floor``), as the synthetic lab's.
    -> {"task_plane", "task_plane_dw", "drift", "drift_dw"}."""
    tasks, d, p_dim = list(data), theta_forg.numel(), target_w.numel()
    out: dict[str, Any] = {}
    plane = lambda g: top_directions(g, len(tasks))
    with_g0 = lambda g0, basis: orthonormal_basis(torch.cat([g0, basis.to(g0.dtype)]))
    ref = plane(g_forg[0::2])  # task-major: draw 0 of every task
    floor = subspace_overlap(ref, plane(g_forg[1::2]))
    g0 = _unit(rec.updates[:1].double())  # the initial gradient direction (the first recovery step)
    out["task_plane"] = {
        "capture_forg": capture_fraction(ref, delta),
        "capture_mt": capture_fraction(plane(g_mt[0::2]), delta),
        "capture_forg_g0": capture_fraction(with_g0(g0, ref), delta),
        "capture_g0": capture_fraction(g0, delta),
        "resample_floor": floor,
        "random_overlap": len(tasks) / d,
        "sequences_per_gradient": cfg.plane_batch,
        "batches_disjoint": all(v[2] for v in picks.values()),
        "with_replacement": [t for t, v in picks.items() if not v[2]],
    }
    # the same plane in ΔW = BA space: each task gradient pushed by the Jacobian at its own point
    # (the direction a gradient step moves BA to first order), capture of the BA displacement
    ref_w = plane(_push_rows(g_forg[0::2], theta_forg, pairs))
    floor_w = subspace_overlap(ref_w, plane(_push_rows(g_forg[1::2], theta_forg, pairs)))
    g0_w = _unit(_push_rows(rec.updates[:1], theta_forg, pairs).double())
    out["task_plane_dw"] = {
        "capture_forg": capture_fraction(ref_w, target_w),
        "capture_mt": capture_fraction(plane(_push_rows(g_mt[0::2], theta_mt, pairs)), target_w),
        "capture_forg_g0": capture_fraction(with_g0(g0_w, ref_w), target_w),
        "capture_g0": capture_fraction(g0_w, target_w),
        "resample_floor": floor_w,
        "random_overlap": len(tasks) / p_dim,
    }
    ov: dict[str, dict[int, float]] = {"drift": {}, "floor": {}, "drift_w": {}, "floor_w": {}}
    for t in cfg.drift_steps:
        theta_t = rec.snapshots[t]
        g_t = _grads(tail, data, theta_t, two, parts)  # task-major: draws 0 and 1 of every task
        here, there = plane(g_t[0::2]), plane(g_t[1::2])
        ov["drift"][t], ov["floor"][t] = subspace_overlap(ref, here), subspace_overlap(here, there)
        pushed = _push_rows(g_t, theta_t, pairs)
        here, there = plane(pushed[0::2]), plane(pushed[1::2])
        ov["drift_w"][t], ov["floor_w"][t] = subspace_overlap(ref_w, here), subspace_overlap(here, there)
        del g_t, pushed
    for key, sfx, start in (("drift", "", floor), ("drift_dw", "_w", floor_w)):
        dr, fl = ov[f"drift{sfx}"], ov[f"floor{sfx}"]
        out[key] = {
            "steps": list(dr),
            "overlap": list(dr.values()),
            "floor": list(fl.values()),
            "normalised": [dr[t] / math.sqrt(start * fl[t]) for t in dr],
            "normalised_start_floor": [v / start for v in dr.values()],
        }
    return out


def _ranks(
    cfg: LoRARecoveryConfig,
    r: int,
    tail: nn.Module,
    data: dict,
    nseq: dict[str, int],
    theta_forg: Tensor,
    pairs: Any,
) -> dict[str, dict]:
    """Effective rank of ``rank_n`` per-sequence gradients per task at θ_forg (and pushed into BA space)."""
    tasks = list(data)
    rank: dict[str, dict] = {}
    with swapped_params(tail, theta_forg):
        for k, t in enumerate(tasks):
            n = min(cfg.rank_n, nseq[t])
            rows_t = torch.randperm(nseq[t], generator=torch.Generator().manual_seed(7000 + 1000 * r + k))[:n]
            rank[t] = _rank_rows(tail, data[t], rows_t, 31 * r + k, push=lambda g: _push_rows(g, theta_forg, pairs))
    return rank


# ------------------------------------------------------------------------------ summary
def summarise(reps: list[dict]) -> dict[str, Any]:
    """Mean +- SE over the reported replicates of every number the docs use (keys a record
    before the regime rules lacks are summarised only where the replicates have them)."""
    s: dict[str, Any] = {}
    tasks = list(reps[0]["rank"])
    for key in reps[0]["curves"]:
        s[f"curve.{key}"] = mean_se([x["curves"][key] for x in reps])
    for key in (
        "recover_lr",
        "lambda_max_forg",
        "lambda_max_rec",
        "eta_lambda_forg",
        "eta_lambda_rec",
        "max_rise",
        "lambda_max_forg_check",
        "eta_lambda_set",
    ):
        if key in reps[0]["stability"]:
            s[f"stability.{key}"] = mean_se([x["stability"][key] for x in reps])
    s["stability.monotone_all"] = all(x["stability"]["monotone"] for x in reps)
    for part in ("mt", "forg", "rec", "max_during_recovery"):
        for t in tasks + (["mix_loss"] if part != "max_during_recovery" else []):
            s[f"loss_{part}.{t}"] = mean_se([x["losses"][part][t] for x in reps])
    for t in tasks:
        s[f"forget_rise.{t}"] = mean_se([x["forget_rise"][t] for x in reps])
    for plane in ("task_plane", "task_plane_dw"):
        for key in ("capture_forg", "capture_mt", "resample_floor", "capture_forg_g0", "capture_g0"):
            if key in reps[0][plane]:
                s[f"{plane}.{key}"] = mean_se([x[plane][key] for x in reps])
    for drift in ("drift", "drift_dw"):
        s[f"{drift}.steps"] = reps[0][drift]["steps"]
        for key in ("overlap", "normalised", "floor", "normalised_start_floor"):
            if key in reps[0][drift]:
                s[f"{drift}.{key}"] = mean_se([x[drift][key] for x in reps])
    for t in tasks:
        for kind in reps[0]["rank"][t]:
            for stat in ("entropy_rank", "stable_rank"):
                s[f"rank.{t}.{kind}.{stat}"] = mean_se([x["rank"][t][kind][stat] for x in reps])
    for key in ("delta_norm", "dw_delta_norm", "forget_steps"):
        s[key] = mean_se([x[key] for x in reps])
    if "forget" in reps[0]:
        s["forget_value"] = mean_se([x["forget"]["value"] for x in reps])
    return s


def beyond(s: Mapping[str, Any], key: str, i: int, nulls: Sequence[str]) -> bool | None:
    """The verdict rule: mean - 2 SE of ``key`` at index i exceeds every null's mean + 2 SE
    (None when the curve is shorter than i + 1; an SE of None, one replicate, counts as 0)."""

    def at(k: str) -> tuple[float, float] | None:
        ms = s[f"curve.{k}"]
        if i >= len(ms["mean"]):
            return None
        return ms["mean"][i], (ms["se"][i] if ms["se"] is not None else 0.0) or 0.0

    own = at(key)
    if own is None:
        return None
    lo = own[0] - 2 * own[1]
    return all(v is None or lo > v[0] + 2 * v[1] for v in (at(n) for n in nulls))


def verdicts(s: Mapping[str, Any], tasks: Sequence[str], focus: str) -> dict[str, Any]:
    """One verdict per claim, computed from the summary by the rules in the docstrings."""
    out: dict[str, Any] = {}
    for key, nulls in CAPTURE_CLAIMS.items():
        for k in (10, 20):
            out[f"{key}.k{k}"] = beyond(s, key, k - 1, nulls)
    others = [t for t in tasks if t != focus]
    # forgetting is clear when every other task's loss rose by more than 2 SE (and > 0.05 nats)
    out["forgetting_clear"] = all(
        s[f"forget_rise.{t}"]["mean"] - 2 * (s[f"forget_rise.{t}"]["se"] or 0.0) > 0.05 for t in others
    )
    out["recovery_stable"] = bool(s["stability.monotone_all"]) and s["stability.eta_lambda_rec"]["mean"] < 2
    for plane in ("task_plane", "task_plane_dw"):
        suffix = "_dw" if plane.endswith("_dw") else ""
        out[f"static_local_gt_pre{suffix}"] = s[f"{plane}.capture_forg"]["mean"] > s[f"{plane}.capture_mt"]["mean"]
    out["rule"] = "beyond the nulls: mean - 2 SE > every null's mean + 2 SE (SE over replicates)"
    return out


def _tensor_digest(t: Tensor) -> str:
    return cache_key(list(t.shape), str(t.dtype), hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest())


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """A digest of the code a cached replicate depends on (this module, the lab's package and
    the ground truth's LoRA helpers), so an edited version never loads an earlier result."""
    import inspect

    import updatescope.locallinear as lab
    from updatescope import __version__

    mods = [sys.modules[__name__], lora_gt] + [
        m for n, m in sorted(sys.modules.items()) if n.startswith(lab.__name__ + ".") or n == lab.__name__
    ]
    try:
        src = "".join(inspect.getsource(m) for m in mods)
    except (OSError, TypeError):
        src = __version__
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def run(config: LoRARecoveryConfig, out_dir: Path) -> Result:
    """Capture the tasks, run every replicate (each with its own theta_mt unless
    ``vary_theta_mt`` is off) and summarise the reported ones (:func:`refusals` names the
    others, which are recorded with their regime facts and left out of every number)."""
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    lc = config.lora
    model, tok = heads.load_model(config.model)
    fp = heads.fingerprint(model, tok)
    data, evals = {}, {}
    for t in config.tasks:
        for split, tokens, dest in (("train", config.train_tokens, data), ("eval", config.eval_tokens, evals)):
            texts = load_texts(t, split, 8 * tokens)
            dest[t] = lora_gt.capture_block_inputs(
                model, tok, texts, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len, max_tokens=tokens, desc=f"{t} {split}"
            )
    counted = {
        split: {t: int((d["labels"] != IGNORE_INDEX).sum()) for t, d in src.items()}
        for split, src in (("train", data), ("eval", evals))
    }
    seqs = {t: int(d["labels"].shape[0]) for t, d in data.items()}
    log(
        f"captured block inputs: train tokens {counted['train']}, eval tokens {counted['eval']} "
        f"({time.perf_counter() - t0:.0f}s)"
    )

    tail = lora_tail(model, data[config.tasks[0]], config)
    mets = _eval_fn(evals)
    loss_base = mets(tail)  # B = 0 at initialisation: the base model
    dim = flat_params(tail).numel()
    dw_dim = sum(p.b_shape[0] * p.a_shape[1] for p in ba_pairs(tail))
    shared = None
    if not config.vary_theta_mt:
        shared = _theta_mt(config, config.seed, 0, model, tail, data, mets)
        log(
            f"multitask LoRA ({dim:,} parameters): eval loss {loss_base['mix_loss']:.3f} -> "
            f"{shared[1]['mix_loss']:.3f} ({time.perf_counter() - t0:.0f}s)"
        )

    # each replicate is cached under everything it depends on, so a run stopped by a time limit
    # resumes at the first replicate it had not finished (the record lists the ones loaded)
    key = cache_key(
        NAME,
        _code_digest(),
        fp,
        config_record(config),
        "theta_mt per replicate" if shared is None else _tensor_digest(shared[0]),
        {t: {k: _tensor_digest(v) for k, v in sorted(src[t].items())} for src in (data, evals) for t in src},
    )
    reps, resumed = [], []
    for r in range(config.seeds):
        path = cache_file(f"{NAME}-rep{r}", key)
        if path.is_file():
            resumed.append(r)
            log(f"replicate {r}: loaded from the cache ({path.name})")
        reps.append(
            cached(f"{NAME}-rep{r}", key, lambda r=r: _replicate(config, r, model, tail, data, evals, shared, log))
        )
    reported = [x for x in reps if not x["refused"]]
    s = summarise(reported) if reported else None
    if s is not None:
        for t in config.tasks:
            s[f"loss_base.{t}"] = loss_base[t]
    metrics = {
        "dim": dim,
        "dw_dim": dw_dim,
        "seeds": config.seeds,
        "tasks": list(config.tasks),
        "focus": config.focus,
        "tokens": counted,
        "sequences": seqs,
        # sample sizes the docs state: sequences per task gradient (planes, floor, drift),
        # micro-batch gradients spanning the static planes, per-sequence gradients per task
        "plane_n": config.plane_batch,
        "static_width": len(config.tasks) * config.batches_per_task,
        "plane_with_replacement": sorted({t for x in reported for t in x["task_plane"]["with_replacement"]}),
        "rank_n": min((x["rank"][t]["task"]["n"] for x in reported for t in config.tasks), default=None),
        "eta_rule": {
            "eta_lambda": config.eta_lambda,
            "draws": config.eta_draws,
            "iters": config.power_iters,
            "curvature": "spectral radius (power iteration with convergence checks)",
            "rtol": config.power_rtol,
            "residual_tol": config.power_residual_tol,
        },
        "forget_rule": {"rise": config.forget_rise, "cap": config.forget_cap, "every": config.forget_eval_every},
        "reported_replicates": [x["replicate"] for x in reported],
        "refused": [{"replicate": x["replicate"], "reasons": x["refused"]} for x in reps if x["refused"]],
        "loss_base": loss_base,
        "summary": s,
        "verdicts": verdicts(s, config.tasks, config.focus) if s is not None else None,
        "replicates": reps,
        "seconds_per_replicate": [max(x["timings_s"].values()) for x in reps],
        # replicates computed by an earlier, interrupted run of the same code and inputs;
        # "seconds" above covers this run only, seconds_per_replicate every replicate
        "resumed_replicates": resumed,
    }
    if shared is not None:
        metrics["multitask_history"] = shared[2]
    how = "one theta_mt per replicate (seed + r)" if shared is None else "shared theta_mt"
    record = config_record(
        config, replicates=f"{how}; fresh forgetting, recovery and measurement minibatches per replicate"
    )
    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={} if s is None else {FIGURE: lambda path: figures.lora_recovery_figure(metrics, path)},
    )
