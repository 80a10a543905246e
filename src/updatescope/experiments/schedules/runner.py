"""``updatescope reproduce schedules`` -- paper B's practical claim that simultaneous
multitask training is more robust than sequential specialisation, on the synthetic lab.

Two starting points from the same initialisation, step budget and optimiser settings
(``locallinear.lab``):
- simultaneous: theta_mt, every step on the mix of the four tasks (cached);
- sequential: the tasks one after another, ``mt_steps / 4`` steps each, in ``order``
  (default: the focus task first, so its specialisation is the oldest), each step on
  ``4 * batch_size`` sequences of its task, so both schedules take ``mt_steps`` steps in all and
  see as many sequences per task; each phase is a fresh Adam run with its own warm-up and
  cosine decay (``lab.sequential_model``).
Regime check (before any comparison): the simultaneous start reaches ``regime_min`` exact
match on every task; the sequential start reaches it on its last task, and the focus task
reached it at the end of its own phase; every recovery is stable (below).  When the check
fails the verdict is "cannot be decided: <reason>" -- a start that never learned has
nothing to forget, so its recovery cost says nothing about robustness.
From each, per replicate: the same forgetting rule on the focus task and the same stable
recovery (SGD at eta = eta_lambda / rho(theta_forg), rho the spectral radius of the Hessian,
the largest of ``eta_draws`` power iterations on independent Hessian batches with at most
``check_iters`` matvecs each and a convergence check, eta_lambda < 1 a margin; eta * rho is
re-measured at theta_forg on yet another batch and at theta_rec, and must stay below 2), via
``lab.forget_and_recover``.  An arm whose forgetting stopped at its cap before the criterion, or
whose step size came from an unconverged power iteration, is refused (``lab.refusals``): its
replicate is recorded with the reasons and left out of every summary and of the comparison.
A NaN or inf anywhere in a recovery ends the run with an error.  Replicate r
gives both schedules the same forgetting and recovery batches, so the comparison is paired.

Measured per schedule and replicate:
- forgetting damage: each non-focus task's exact-match drop and eval-loss rise, start -> theta_forg;
- recovery cost: the first evaluated recovery step at which the eval mix loss is within
  ``recover_tol`` nats of its value at the start (before forgetting).  Censored at
  ``lab.recover_steps`` when it never gets there; a censored cost is the cap, a lower bound;
- a secondary cost with one target for both: steps until the eval mix loss is within
  ``recover_tol`` of theta_mt's (the simultaneous start), same cap (a schedule that starts
  worse on the mix can "recover" to its own start cheaply without reaching the multitask level);
- the share of the forgetting rise of the eval mix loss undone after k steps,
  (L_forg - L_k) / (L_forg - L_start);
- the capture of Delta_GD by the first k recovery steps, with the random-walk null (same
  step norms, isotropic directions).
Paired differences simultaneous - sequential: mean, SE and a 95% t interval (n - 1 degrees
of freedom).  Verdict on the recovery cost: "more robust" when the interval lies below 0
(simultaneous recovers in fewer steps), "opposite" when it lies above 0, else "not shown";
"cannot be decided: <reason>" when the regime check fails.
Figure: schedules.png (recovery curves with ±1 SE bands).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.experiments import Result, config_record
from updatescope.experiments.schedules import figures
from updatescope.experiments.schedules.config import SchedulesConfig
from updatescope.experiments.stats import mean_se
from updatescope.locallinear import (
    TASKS,
    flat_params,
    prefix_capture_curve,
    random_walk_prefix_null,
    set_flat_params,
    swapped_params,
)
from updatescope.locallinear.lab import (
    forget_and_recover,
    multitask_model,
    recovery_stability,
    refusals,
    sequential_model,
)

NAME = "schedules"
SCHEDULES = ("simultaneous", "sequential")
VERDICT_RULE = (
    "recovery cost, paired difference simultaneous - sequential: 'more robust' if its 95% t "
    "interval lies below 0, 'opposite' if it lies above 0, else 'not shown'; 'cannot be decided: "
    "<reason>' when the regime check (both starts learned, every reported recovery stable) fails or "
    "fewer than 2 replicates are reported (an arm that did not reach the forgetting criterion, or whose "
    "step came from an unconverged power iteration, is refused with its replicate)"
)


def resolve_order(config: SchedulesConfig) -> tuple[str, ...]:
    """The sequential order: ``config.order``, or the focus task first, then the others."""
    if config.order:
        return tuple(config.order)
    focus = config.lab.focus
    return (focus,) + tuple(t for t in TASKS if t != focus)


@torch.no_grad()
def _evaluate(model, tasks, n: int) -> dict[str, Any]:
    """Per-task exact match and eval loss on the lab's fixed eval batch (index 0, n per task)."""
    acc = tasks.accuracy(model, n=n)
    loss = {t: float(tasks.loss(model, t, 0, "eval", n=n)) for t in TASKS}
    return {"accuracy": {t: acc[t] for t in TASKS}, "loss": loss, "mix_loss": float(np.mean(list(loss.values())))}


def _recovery_cost(steps: list[int], losses: list[float], target: float, cap: int) -> tuple[int, bool]:
    """First evaluated step whose loss is <= target -> (step, censored); (cap, True) if none."""
    for s, v in zip(steps, losses):
        if v <= target:
            return s, False
    return cap, True


def _arm(model, tasks, config: SchedulesConfig, theta: torch.Tensor, r: int, common: float) -> dict[str, Any]:
    """Forgetting and recovery from theta with replicate r's batches; every number of one arm.
    ``common``: the target eval mix loss shared by both schedules (theta_mt's + tolerance)."""
    lab = config.lab
    set_flat_params(model, theta)
    start = _evaluate(model, tasks, lab.eval_n)
    run_, info = forget_and_recover(
        model, tasks, lab, replicate=r, lam_draws=config.eta_draws, lam_iters=config.check_iters
    )
    with swapped_params(model, run_.theta_forg):
        forg = _evaluate(model, tasks, lab.eval_n)
    rec = _evaluate(model, tasks, lab.eval_n)  # the model ends at theta_rec
    others = [t for t in TASKS if t != lab.focus]

    rows = [x for x in run_.history if x["phase"] == "recover" and "metrics" in x]
    steps = [0] + [x["step"] for x in rows]
    curve = [info["metrics_forg"]["mix_loss"]] + [x["metrics"]["mix_loss"] for x in rows]
    l_start, l_forg = info["metrics_mt"]["mix_loss"], curve[0]
    cost, censored = _recovery_cost(steps, curve, l_start + config.recover_tol, lab.recover_steps)
    cost_common, censored_common = _recovery_cost(steps, curve, common, lab.recover_steps)
    rise = l_forg - l_start
    share = [(l_forg - v) / rise if rise > 0 else float("nan") for v in curve]

    _check_finite(run_, curve, r, info["recover_lr"])
    stability = recovery_stability(model, tasks, lab, run_, info, config.check_iters)
    diffs = np.diff(curve)
    delta = run_.delta_gd.double()
    prefix = prefix_capture_curve(run_.updates, delta)
    walk = random_walk_prefix_null(run_.step_norms, list(config.capture_k), delta.numel(), seed=1000 + r)
    return {
        "forget_steps": run_.forget_steps,
        "forget": info["forget"],
        "refused": refusals(info),
        "start": start,
        "forg": forg,
        "rec": rec,
        "damage_accuracy": {t: start["accuracy"][t] - forg["accuracy"][t] for t in others},
        "damage_loss": {t: forg["loss"][t] - start["loss"][t] for t in others},
        "damage_accuracy_mean": float(np.mean([start["accuracy"][t] - forg["accuracy"][t] for t in others])),
        "damage_loss_mean": float(np.mean([forg["loss"][t] - start["loss"][t] for t in others])),
        "mix_loss_start": l_start,
        "mix_loss_forg": l_forg,
        "mix_loss_rec": curve[-1],
        "mix_loss_rise": rise,
        "recovery_cost": cost,
        "censored": censored,
        "recovery_cost_common": cost_common,
        "censored_common": censored_common,
        "eval_steps": steps,
        "eval_mix_loss": curve,
        "share_undone_curve": share,
        "share_undone": {str(k): share[steps.index(k)] for k in config.share_steps},
        "capture": {str(k): float(prefix[k - 1]) for k in config.capture_k},
        "capture_walk": {str(k): walk[k]["total"] for k in config.capture_k},
        "stability": {
            **stability,
            "stable": bool(stability["eta_lambda_forg"] < 2 and stability["eta_lambda_rec"] < 2),
            "monotone": bool((diffs <= 0).all()),
            "max_rise": float(max(0.0, diffs.max(initial=0.0))),
        },
        "delta_norm": float(delta.norm()),
    }


def _check_finite(run_, curve: list[float], r: int, eta: float) -> None:
    """A recovery that produced NaN or inf ends the run (train_phase checks each loss before its
    step; this catches the last update and the evaluations)."""
    if not (torch.isfinite(run_.theta_rec).all() and np.isfinite(curve).all()):
        raise FloatingPointError(
            f"schedules: recovery of replicate {r} produced NaN/inf "
            f"(eta = {eta:.3g}); lower lab.eta_lambda "
            f"or raise lab.power_iters"
        )


def _scalars(arm: dict[str, Any]) -> dict[str, float]:
    """The per-replicate numbers that are summarised and compared, flat."""
    out = {
        k: float(arm[k])
        for k in (
            "recovery_cost",
            "recovery_cost_common",
            "forget_steps",
            "damage_accuracy_mean",
            "damage_loss_mean",
            "mix_loss_start",
            "mix_loss_forg",
            "mix_loss_rec",
            "mix_loss_rise",
            "delta_norm",
        )
    }
    for k, v in arm["share_undone"].items():
        out[f"share_undone.{k}"] = v
    for k, v in arm["capture"].items():
        out[f"capture.{k}"] = v
        out[f"capture_walk.{k}"] = arm["capture_walk"][k]
    for k in (
        "eta_lambda_forg",
        "eta_lambda_rec",
        "recover_lr",
        "lambda_max_forg",
        "lambda_max_forg_check",
        "max_rise",
    ):
        out[f"stability.{k}"] = arm["stability"][k]
    for part in ("damage_accuracy", "damage_loss"):
        for t, v in arm[part].items():
            out[f"{part}.{t}"] = v
    return out


def paired(a: list[float], b: list[float]) -> dict[str, Any]:
    """Paired difference a - b over replicates: mean, SE and the 95% t interval (n - 1 dof)."""
    from scipy import stats

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n = d.size
    mean = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    half = float(stats.t.ppf(0.975, n - 1)) * se if n > 1 else float("nan")
    return {"mean": mean, "se": se, "ci": [mean - half, mean + half], "n": n, "values": d.tolist()}


def regime_check(
    start: dict[str, Any], phases: list[dict[str, Any]], order: tuple[str, ...], focus: str, threshold: float
) -> dict[str, Any]:
    """Did both starting points learn?  ``start``: schedule -> evaluation ("accuracy": task ->
    exact match); ``phases``: the sequential phases ({"task", "accuracy"} at the end of each).
    Returns {"passed", "threshold", "checks": name -> {"value", "passed"}, "reasons"}."""
    sim, seq = start["simultaneous"]["accuracy"], start["sequential"]["accuracy"]
    own = {p["task"]: p["accuracy"][p["task"]] for p in phases}
    values = {
        "simultaneous_min_task": min(sim.values()),
        f"sequential_last_task ({order[-1]})": seq[order[-1]],
        f"sequential_focus_end_of_phase ({focus})": own.get(focus, float("nan")),
    }
    checks = {k: {"value": v, "passed": bool(v >= threshold)} for k, v in values.items()}
    reasons = [
        f"{k} = {c['value']:.3f} < {threshold}" if math.isfinite(c["value"]) else f"{k} not measured"
        for k, c in checks.items()
        if not c["passed"]
    ]
    return {
        "passed": not reasons,
        "threshold": threshold,
        "checks": checks,
        "reasons": reasons,
        "sequential_own_phase": own,
    }


def verdict(diff: dict[str, Any] | None, reasons: list[str] | None = None) -> str:
    """The rule of :data:`VERDICT_RULE` on the recovery-cost difference; ``reasons`` (failed
    regime or stability checks) make it "cannot be decided"."""
    if reasons:
        return "cannot be decided: " + "; ".join(reasons)
    if diff is None:
        return "cannot be decided: no paired difference"
    lo, hi = diff["ci"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "not shown"
    if hi < 0:
        return "more robust"
    if lo > 0:
        return "opposite"
    return "not shown"


def summarise(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-schedule mean +- SE of every scalar and curve, and the paired differences."""
    flat = {s: [_scalars(rep[s]) for rep in reps] for s in SCHEDULES}
    per = {s: {k: mean_se([x[k] for x in flat[s]]) for k in flat[s][0]} for s in SCHEDULES}
    for s in SCHEDULES:
        per[s]["eval_mix_loss"] = mean_se([rep[s]["eval_mix_loss"] for rep in reps])
        per[s]["share_undone_curve"] = mean_se([rep[s]["share_undone_curve"] for rep in reps])
        per[s]["censored"] = sum(rep[s]["censored"] for rep in reps)
        per[s]["censored_common"] = sum(rep[s]["censored_common"] for rep in reps)
        per[s]["stable_all"] = all(rep[s]["stability"]["stable"] for rep in reps)
        per[s]["monotone_all"] = all(rep[s]["stability"]["monotone"] for rep in reps)
    diff = {
        k: paired([x[k] for x in flat["simultaneous"]], [x[k] for x in flat["sequential"]])
        for k in flat["simultaneous"][0]
    }
    return {"per_schedule": per, "paired": diff}


def refused_rows(reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The (replicate, schedule) arms that are not reported, with their reasons
    (:func:`lab.refusals`); a replicate is left out of every summary and of the paired
    comparison when either of its arms is refused."""
    return [
        {"replicate": rep["replicate"], "schedule": s, "reasons": rep[s]["refused"]}
        for rep in reps
        for s in SCHEDULES
        if rep[s]["refused"]
    ]


def too_few_reasons(n_reported: int, n_all: int) -> list[str]:
    """The "cannot be decided" reason when fewer than 2 replicates are left to pair."""
    if n_reported >= 2:
        return []
    return [f"only {n_reported} of {n_all} replicates reached the forgetting criterion with a converged step size"]


def unstable_reasons(reps: list[dict[str, Any]]) -> list[str]:
    """One line per (schedule, replicate) whose step was not stable (η·λ_max ≥ 2), as the
    verdict's "cannot be decided" reasons name them (the docs generator reuses it)."""
    return [
        f"{s} replicate {rep['replicate']}: eta*lambda_max = {rep[s]['stability']['eta_lambda_forg']:.2f} "
        f"(theta_forg), {rep[s]['stability']['eta_lambda_rec']:.2f} (theta_rec), not < 2"
        for rep in reps
        for s in SCHEDULES
        if not rep[s]["stability"]["stable"]
    ]


def run(config: SchedulesConfig, out_dir: Path) -> Result:
    """Train both schedules (shared by the replicates), then forget and recover from each."""
    t0 = time.perf_counter()
    lab = config.lab
    order = resolve_order(config)
    model, tasks, info_mt = multitask_model(lab)
    theta = {"simultaneous": flat_params(model).float()}
    seq_model, _, info_seq = sequential_model(lab, order, replay=config.replay)
    theta["sequential"] = flat_params(seq_model).float()
    del seq_model
    start = {}
    for s, info in (("simultaneous", info_mt), ("sequential", info_seq)):
        with swapped_params(model, theta[s]):
            start[s] = {
                **_evaluate(model, tasks, lab.eval_n),
                "cached": info["cached"],
                "history": [
                    {k: x[k] for k in ("step", "loss", "metrics") if k in x} for x in info["history"] if "metrics" in x
                ],
            }
    t_train = time.perf_counter() - t0
    common = start["simultaneous"]["mix_loss"] + config.recover_tol
    reps = []
    for r in range(config.seeds):
        rep = {"replicate": r}
        for s in SCHEDULES:
            try:
                rep[s] = _arm(model, tasks, config, theta[s], r, common)
            except FloatingPointError as exc:  # name the arm; the CLI prints one line
                raise FloatingPointError(f"schedules: {s} start, replicate {r}: {exc}") from exc
        reps.append(rep)
    reported = [rep for rep in reps if not any(rep[s]["refused"] for s in SCHEDULES)]
    refused = refused_rows(reps)
    summary = summarise(reported) if len(reported) >= 2 else None
    cost = None if summary is None else summary["paired"]["recovery_cost"]
    regime = regime_check(start, info_seq["phases"], order, lab.focus, config.regime_min)
    unstable = unstable_reasons(reported)
    regime["stable_all"] = not unstable
    reasons = regime["reasons"] + unstable + too_few_reasons(len(reported), len(reps))
    metrics = {
        "tasks": list(TASKS),
        "focus": lab.focus,
        "order": list(order),
        "dim": int(theta["simultaneous"].numel()),
        "seeds": config.seeds,
        "recover_tol": config.recover_tol,
        "common_target": common,
        "recover_steps": lab.recover_steps,
        "recover_eval_every": lab.recover_eval_every,
        "mt_steps": lab.mt_steps,
        "steps_per_task_sequential": lab.mt_steps // len(TASKS),
        "total_steps": {
            "simultaneous": lab.mt_steps,
            "sequential": sum(p["steps"] for p in info_seq["phases"]) if info_seq["phases"] else lab.mt_steps,
        },
        "sequential_phases": info_seq["phases"],
        "regime": regime,
        "eta_lambda": lab.eta_lambda,
        "power_iters": lab.power_iters,
        "check_iters": config.check_iters,
        "eta_draws": config.eta_draws,
        "replay": config.replay,
        "share_steps": list(config.share_steps),
        "capture_k": list(config.capture_k),
        "start": start,
        "replicates": reps,
        "reported_replicates": [rep["replicate"] for rep in reported],
        "refused": refused,
        "summary": summary,
        "verdict": {
            "rule": VERDICT_RULE,
            "metric": "recovery_cost",
            "result": verdict(cost, reasons),
            "difference": cost,
        },
        "seconds_training": t_train,
    }
    record = config_record(
        config,
        order=list(order),
        replicates="shared starting points; replicate r gives both schedules the same fresh "
        "forgetting and recovery batches",
    )
    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={} if summary is None else {"schedules.png": lambda path: figures.schedules_figure(metrics, path)},
    )
