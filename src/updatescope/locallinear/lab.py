"""The synthetic lab: the recovery protocol on :class:`TinyTransformer` + :class:`DigitTasks`.

Shared by the ``recovery`` and ``random-search`` experiments.  Multitask training is the
expensive part, so theta_mt is cached on disk, keyed by everything that determines it
(model shape, data seed, batch size, steps, learning rate, torch version); a cache hit is
bit-identical to retraining on the same machine.

Defaults and why:
- multitask: Adam (betas 0.9, 0.98), lr 3e-3 with 50 warm-up steps and cosine decay to
  3e-4, 16 sequences per task per step (sort is the slowest task to learn);
- forgetting: Adam lr 1e-3 on the focus task ("copy") until the mean exact match of the
  other three tasks falls below half its theta_mt value (checked every 10 steps);
- recovery: plain SGD (no momentum) on the mix, so Delta_GD is a gradient-descent
  displacement as in the Krylov argument.  The step size is chosen in the stable regime:
  by default eta = ``eta_lambda`` / rho, with rho the spectral radius of the mix loss's
  Hessian at theta_forg (HVP power iteration on ``hessian_n`` sequences per task, checked
  for convergence), so eta * |lambda| <= eta_lambda < 2 for every eigenvalue.  (lr 0.1, the
  earlier default, is ~ 10x past that bound here: the loss first rose and tasks collapsed
  before recovering.)  A positive ``recover_lr`` fixes eta instead; eta * rho is recorded
  either way.

Replicates ("seeds" of the experiments) draw fresh forgetting and recovery batch streams:
``replicate`` r shifts every batch index by r * 10^5; an experiment that also varies theta_mt
passes a LabConfig with another ``seed``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.config import LabConfig
from updatescope.locallinear.krylov import make_hvp, spectral_radius, top_eigenvalue
from updatescope.locallinear.params import flat_params, set_flat_params, swapped_params
from updatescope.locallinear.synthetic import TASKS, DigitTasks, TinyTransformer
from updatescope.locallinear.trajectory import (
    PhaseConfig,
    PhaseRecord,
    RecoveryRun,
    record_phase,
    train_phase,
)
from updatescope.paths import cache_dir
from updatescope.records import write_bytes_atomic

__all__ = [
    "LabConfig",
    "task_losses",
    "accuracy_fn",
    "multitask_model",
    "synthetic_recovery",
    "mix_loss_fn",
    "lambda_max",
    "independent_recovery",
    "STREAM",
    "sequential_model",
    "sequential_blocks",
    "forget_and_recover",
    "recovery_stability",
    "forget_facts",
    "radius_draw",
    "refusals",
]

STREAM = 100_000  # batch-index shift between replicates


def task_losses(tasks: DigitTasks) -> dict:
    """Task name -> closure (model, index) -> training loss."""
    return {t: (lambda m, i, t=t: tasks.loss(m, t, i)) for t in TASKS}


def accuracy_fn(tasks: DigitTasks, n: int, with_loss: bool = False):
    """model -> per-task exact match; with ``with_loss`` also "mix_loss" on a fixed eval batch."""
    if not with_loss:
        return lambda m: tasks.accuracy(m, n=n)

    def metrics(m):
        out = tasks.accuracy(m, n=n)
        with torch.no_grad():
            out["mix_loss"] = float(torch.stack([tasks.loss(m, t, 0, "eval", n=n) for t in TASKS]).mean())
        return out

    return metrics


def mix_loss_fn(tasks: DigitTasks, index: int, n: int, split: str = "select"):
    """A closure model -> mix loss on one fixed batch of ``n`` sequences per task."""
    return lambda m: torch.stack([tasks.loss(m, t, index, split, n=n) for t in TASKS]).mean()


def lambda_max(
    model: nn.Module, tasks: DigitTasks, theta: Tensor, n: int, iters: int, seed: int = 0, radius: bool = False
) -> float:
    """Top Hessian eigenvalue of the mix loss (n sequences per task) at theta (power iteration).

    Power iteration finds the eigenvalue of largest magnitude.  Far from a minimum it can be
    negative; then the top eigenvalue is found by a second power iteration on H - lam_neg I,
    whose spectrum is >= 0 with the top eigenvalue shifted by -lam_neg (same seed and iters).
    When that still resolves no positive curvature (every eigenvalue <= 0, or too few
    iterations to separate a small positive top from the shift), the spectral radius |lam_neg|
    is returned: it bounds every eigenvalue, so a step eta = c / |lam_neg| keeps eta * lambda
    <= c for the whole spectrum, and the step size is never negative.
    ``radius``: return max(top, |lam_neg|) in the negative case, never a top eigenvalue below
    the spectral radius -- an unconverged shifted iteration can return a tiny positive top
    (the difference of two large numbers), whose step then diverges.
    """
    with swapped_params(model, theta):
        hvp = make_hvp(mix_loss_fn(tasks, 900 + seed, n), model)
        lam, _ = top_eigenvalue(hvp, theta.numel(), iters, seed)
        if lam < 0:
            shifted, _ = top_eigenvalue(lambda v: hvp(v) - lam * v, theta.numel(), iters, seed)
            top = shifted + lam
            lam = max(top, abs(lam)) if radius else (top if top > 0 else abs(lam))
    return lam


def _key(cfg: LabConfig, **extra) -> str:
    # ``extra`` names another training schedule; without it the key is theta_mt's (unchanged)
    blob = json.dumps(
        {
            "model": asdict(cfg.model),
            "seed": cfg.seed,
            "bs": cfg.batch_size,
            "steps": cfg.mt_steps,
            "lr": cfg.mt_lr,
            "torch": torch.__version__,
            "v": 2,
            **extra,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _own_rng(fn):
    """Run ``fn`` on a fork of torch's global CPU generator: the lab seeds it for bit-identical
    runs (model init, training order), and the caller's random state is left as it was."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return fn(*args, **kwargs)

    return wrapper


@_own_rng
def multitask_model(cfg: LabConfig, use_cache: bool = True) -> tuple[TinyTransformer, DigitTasks, dict]:
    """A model trained on the mix (theta_mt), from the cache when possible.

    Returns (model, tasks, info) with info = {"cached", "accuracy", "history"}.
    """
    torch.manual_seed(cfg.seed)
    model = TinyTransformer(cfg.model)
    tasks = DigitTasks(seq_len=cfg.model.seq_len, batch_size=cfg.batch_size, seed=cfg.seed)
    path = cache_dir("locallinear") / f"theta_mt_{_key(cfg)}.pt"
    if use_cache and path.exists():
        set_flat_params(model, torch.load(path, weights_only=True))
        return model, tasks, {"cached": True, "accuracy": tasks.accuracy(model, n=cfg.eval_n), "history": []}
    losses = task_losses(tasks)
    mix = lambda m, i: torch.stack([losses[t](m, i) for t in TASKS]).mean()
    hist = train_phase(model, mix, _train_phase_config(cfg), phase="multitask", metrics=accuracy_fn(tasks, cfg.eval_n))
    if use_cache:
        _save_theta(model, path)
    return model, tasks, {"cached": False, "accuracy": tasks.accuracy(model, n=cfg.eval_n), "history": hist}


def _train_phase_config(cfg: LabConfig) -> PhaseConfig:
    """The training schedule of theta_mt (Adam, warm-up, cosine decay), shared by every schedule."""
    return PhaseConfig(
        steps=cfg.mt_steps, lr=cfg.mt_lr, warmup=50, schedule="cosine", eval_every=max(1, cfg.mt_steps // 10)
    )


def _save_theta(model: nn.Module, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    torch.save(flat_params(model), buf)
    write_bytes_atomic(buf.getvalue(), path)  # concurrent runs never see half a file


def sequential_blocks(steps: int, order: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """The sequential schedule's phases: (task, first step, last step), 1-based and inclusive;
    task j owns steps ``j * steps // n + 1 .. (j + 1) * steps // n`` (n = len(order))."""
    n = len(order)
    return [(t, j * steps // n + 1, (j + 1) * steps // n) for j, t in enumerate(order)]


@_own_rng
def sequential_model(
    cfg: LabConfig, order: tuple[str, ...], use_cache: bool = True, replay: float = 0.0
) -> tuple[TinyTransformer, DigitTasks, dict]:
    """The sequential-specialisation counterpart of :func:`multitask_model`.

    Same initialisation (``torch.manual_seed(cfg.seed)``) and the same total step budget
    ``cfg.mt_steps``, but the tasks come one after another in ``order`` (phases from
    :func:`sequential_blocks`), each step on ``4 * batch_size`` sequences of its one task, so
    every step sees as many sequences as a multitask step and each task is seen as often in
    both schedules.  Each phase is a fresh fine-tuning run: a new Adam at ``cfg.mt_lr`` with
    its own warm-up (min(50, steps / 4)) and cosine decay.  (One Adam run with one cosine
    decay over the whole budget, the earlier rule, left the later tasks only the decayed
    rate and a stale second moment: in the quick lab sort and mod-add were never learned
    and the start scored 0 on every task.)  Cached like theta_mt.

    ``replay`` in [0, 1): each step of a phase after the first also replays the earlier
    tasks: its loss is (1 - replay) x the phase task's loss on (1 - replay) of the step's
    sequences plus replay x the mean loss of the earlier tasks on the rest, from their own
    batch streams.  0 (default) is pure sequential specialisation, whose start keeps only the
    last task; replay keeps several, so forgetting and recovery from it are comparable with
    the multitask start.

    Returns (model, tasks, info) with info = {"cached", "accuracy", "history", "order",
    "phases"}; "phases" lists per phase {"task", "steps", "accuracy" (every task, at the end
    of that phase)}, kept next to the cached parameters; "history" is empty on a cache hit.
    """
    if sorted(order) != sorted(TASKS):
        raise InputError(f"order must list every task once, got {list(order)}; tasks: {list(TASKS)}")
    if not 0.0 <= replay < 1.0:
        raise InputError(f"replay must lie in [0, 1), got {replay}")
    torch.manual_seed(cfg.seed)
    model = TinyTransformer(cfg.model)
    tasks = DigitTasks(seq_len=cfg.model.seq_len, batch_size=cfg.batch_size, seed=cfg.seed)
    extra = {} if replay == 0 else {"replay": replay}  # replay 0 keeps the earlier cache key
    path = (
        cache_dir("locallinear")
        / f"theta_seq_{_key(cfg, schedule='sequential', order=list(order), phases='restart', **extra)}.pt"
    )
    info: dict = {"order": list(order), "replay": replay}
    side = path.with_suffix(".json")  # the per-phase accuracies of the cached run
    cached = use_cache and path.exists() and side.exists()
    phases: list[dict] = []
    hist: list[dict] = []
    if cached:
        set_flat_params(model, torch.load(path, weights_only=True))
        phases = json.loads(side.read_text())["phases"]
    else:
        n = len(TASKS) * cfg.batch_size
        metrics = accuracy_fn(tasks, cfg.eval_n)
        seen: list[str] = []
        for task, first, last in sequential_blocks(cfg.mt_steps, order):
            steps = last - first + 1
            if steps < 1:
                continue
            phase = PhaseConfig(
                steps=steps,
                lr=cfg.mt_lr,
                warmup=min(50, max(1, steps // 4)),
                schedule="cosine",
                eval_every=max(1, cfg.mt_steps // 10),
            )
            prev = list(seen)
            if replay and prev:
                n_rep = max(1, round(n * replay / len(prev)))
                n_own = max(1, n - n_rep * len(prev))

                def loss(m, i, task=task, prev=prev, n_own=n_own, n_rep=n_rep):
                    # replayed batches come from a stream of their own (offset), never the phase's
                    rep = torch.stack([tasks.loss(m, t, 500_000 + i, n=n_rep) for t in prev]).mean()
                    return (1 - replay) * tasks.loss(m, task, i, n=n_own) + replay * rep
            else:
                loss = lambda m, i, task=task: tasks.loss(m, task, i, n=n)  # noqa: E731
            # index_offset + t is the global step, so the batches are those of the one-run rule
            rows = train_phase(model, loss, phase, phase=f"sequential:{task}", index_offset=first - 1, metrics=metrics)
            seen.append(task)
            for r in rows:
                r["step"] += first - 1
            hist += rows
            phases.append({"task": task, "steps": steps, "accuracy": rows[-1]["metrics"]})
        if use_cache:
            _save_theta(model, path)
            write_bytes_atomic(json.dumps({"phases": phases}).encode(), side)
    return (
        model,
        tasks,
        {"cached": cached, "accuracy": tasks.accuracy(model, n=cfg.eval_n), "history": hist, "phases": phases, **info},
    )


def _recover_phase(cfg: LabConfig, lr: float, steps: int) -> PhaseConfig:
    return PhaseConfig(steps=steps, lr=lr, optimizer="sgd", eval_every=cfg.recover_eval_every)


@_own_rng
def synthetic_recovery(
    cfg: LabConfig,
    use_cache: bool = True,
    replicate: int = 0,
    lam_draws: int = 1,
    lam_iters: int | None = None,
) -> tuple[TinyTransformer, DigitTasks, RecoveryRun, dict]:
    """theta_mt (cached) -> forget on ``cfg.focus`` -> recover with SGD at a stable step.

    Returns (model, tasks, run, info); info adds "lambda_max_forg", "recover_lr",
    "eta_lambda" (eta * lambda_max at theta_forg) and "replicate" to multitask_model's.
    ``lam_draws``, ``lam_iters``: as in :func:`forget_and_recover`.
    """
    model, tasks, info = multitask_model(cfg, use_cache)
    run, extra = forget_and_recover(
        model, tasks, cfg, replicate, history=info["history"], lam_draws=lam_draws, lam_iters=lam_iters
    )
    return model, tasks, run, {**info, **extra}


def forget_facts(history: list[dict], base: dict, focus: str, fraction: float, cap: int) -> dict:
    """Did forgetting reach its criterion?  ``history``: the forgetting phase's log rows (those
    with "metrics" are the checks); ``base``: the metrics at the start.  The criterion: the mean
    exact match of the tasks other than ``focus`` falls below ``fraction`` of its start value.
    -> {"steps", "cap", "start_value", "target", "value" (at the last check), "reached"}."""
    others = [t for t in TASKS if t != focus]
    ref = sum(base[t] for t in others) / len(others)
    checks = [r["metrics"] for r in history if "metrics" in r]
    last = checks[-1] if checks else base
    value = sum(last[t] for t in others) / len(others)
    return {
        "steps": len(history),
        "cap": cap,
        "start_value": ref,
        "target": fraction * ref,
        "value": value,
        "reached": bool(value < fraction * ref),
    }


def radius_draw(
    model: nn.Module,
    tasks: DigitTasks,
    theta: Tensor,
    n: int,
    iters: int,
    seed: int,
    rtol: float,
    residual_tol: float,
) -> dict:
    """Spectral radius of the mix-loss Hessian (n sequences per task, batch ``900 + seed``) at
    theta by power iteration with its convergence checks (:func:`krylov.spectral_radius`).
    -> :meth:`PowerIteration.as_dict` plus "seed"."""
    with swapped_params(model, theta):
        hvp = make_hvp(mix_loss_fn(tasks, 900 + seed, n), model)
        res = spectral_radius(hvp, theta.numel(), iters, seed, rtol=rtol, residual_tol=residual_tol)
    return {**res.as_dict(), "seed": seed}


def refusals(info: dict) -> list[str]:
    """Why a :func:`forget_and_recover` run must not be reported (empty when it may): forgetting
    stopped at its cap before the criterion, or the spectral radius that set eta did not converge."""
    out = []
    f = info["forget"]
    if not f["reached"]:
        out.append(
            f"forgetting stopped at the cap ({f['steps']} steps) with the other tasks' mean exact match "
            f"{f['value']:.3f}, not below the target {f['target']:.3f}"
        )
    if not info["radius_converged"]:
        out.append("the power iteration that set eta did not converge")
    return out


@_own_rng
def forget_and_recover(
    model: TinyTransformer,
    tasks: DigitTasks,
    cfg: LabConfig,
    replicate: int = 0,
    history: list | None = None,
    lam_draws: int = 1,
    lam_iters: int | None = None,
) -> tuple[RecoveryRun, dict]:
    """Forgetting and stable recovery from the model's *current* parameters (any start).

    The rules of :func:`synthetic_recovery`: Adam at ``cfg.forget_lr`` on ``cfg.focus``
    until the mean exact match of the other tasks falls below ``cfg.forget_fraction`` of its
    value at the start (checked every 10 steps, ``cfg.forget_cap`` at most; whether it got
    there is recorded in info["forget"], :func:`forget_facts`), then SGD on the mix at
    eta = ``cfg.eta_lambda`` / rho(theta_forg) (or ``cfg.recover_lr``), rho the spectral
    radius of the mix-loss Hessian.  The batch streams depend only on ``replicate``, so two
    starts with the same replicate see the same batches.  The model ends at theta_rec;
    ``run.theta_mt`` is the start.  ``history`` is prepended to the run's log.
    ``lam_draws``: rho(theta_forg) is the largest of this many power iterations on independent
    Hessian batches (seeds replicate + 1000·j), each of at most ``lam_iters`` matvecs (default
    ``cfg.power_iters``) and stopped by the checks of :func:`krylov.spectral_radius`; every
    draw is recorded with whether it converged, and eta counts as set from a converged radius
    only when the draw that gives the largest value converged ("radius_converged").

    Returns (run, info) with info = {"lambda_max_forg" (rho), "lambda_max_forg_draws",
    "radius_draws", "radius_converged", "recover_lr", "eta_lambda", "replicate", "forget",
    "metrics_mt" (at the start), "metrics_forg"}.
    """
    if lam_draws < 1:
        raise InputError(f"lam_draws must be >= 1, got {lam_draws}")
    theta_mt = flat_params(model).float()
    losses = task_losses(tasks)
    mets = accuracy_fn(tasks, cfg.eval_n, with_loss=True)
    base = mets(model)
    others = [t for t in TASKS if t != cfg.focus]
    ref = sum(base[t] for t in others) / len(others)
    stop = lambda m: sum(m[t] for t in others) / len(others) < cfg.forget_fraction * ref
    torch.manual_seed(cfg.seed + 1 + replicate)
    forget = PhaseConfig(steps=cfg.forget_cap, lr=cfg.forget_lr, eval_every=10)
    # the checks measure exact match only (the mix loss at theta_forg is measured once, after):
    # at 10-step intervals the evaluation costs more than the training it checks
    rows = train_phase(
        model,
        lambda m, i: losses[cfg.focus](m, i),
        forget,
        phase="forget",
        index_offset=1_000_000 + replicate * STREAM,
        metrics=accuracy_fn(tasks, cfg.eval_n),
        stop=stop,
    )
    history = list(history or []) + rows
    facts = forget_facts(rows, base, cfg.focus, cfg.forget_fraction, cfg.forget_cap)
    theta_forg = flat_params(model).float()
    metrics_forg = mets(model)
    draws = [
        radius_draw(
            model,
            tasks,
            theta_forg,
            cfg.hessian_n,
            lam_iters or cfg.power_iters,
            replicate + 1000 * j,
            cfg.power_rtol,
            cfg.power_residual_tol,
        )
        for j in range(lam_draws)
    ]
    top = max(draws, key=lambda x: x["radius"])
    lam = top["radius"]
    if not lam > 0:
        raise FloatingPointError(f"the Hessian's spectral radius at theta_forg is {lam}; eta cannot be set from it")
    lr = cfg.recover_lr if cfg.recover_lr > 0 else cfg.eta_lambda / lam
    mix = lambda m, i: torch.stack([losses[t](m, i) for t in TASKS]).mean()
    rec = record_phase(
        model,
        mix,
        _recover_phase(cfg, lr, cfg.recover_steps),
        dense_steps=cfg.dense_steps,
        snapshot_every=cfg.snapshot_every,
        index_offset=2_000_000 + replicate * STREAM,
        metrics=mets,
    )
    run = RecoveryRun(
        theta_mt=theta_mt,
        theta_forg=theta_forg,
        theta_rec=flat_params(model).float(),
        updates=rec.updates,
        snapshots=rec.snapshots,
        step_norms=rec.step_norms,
        history=history + rec.history,
        forget_steps=facts["steps"],
    )
    info = {
        "lambda_max_forg": lam,
        "lambda_max_forg_draws": [x["radius"] for x in draws],
        "radius_draws": draws,
        "radius_converged": bool(top["converged"]),
        "recover_lr": lr,
        "eta_lambda": lr * lam,
        "replicate": replicate,
        "forget": facts,
        "metrics_mt": base,
        "metrics_forg": metrics_forg,
    }
    return run, info


def recovery_stability(
    model: nn.Module,
    tasks: DigitTasks,
    cfg: LabConfig,
    run: RecoveryRun,
    info: dict,
    check_iters: int,
) -> dict:
    """eta * rho of a :func:`forget_and_recover` run, measured where eta was not set from.

    eta * rho_forg is eta_lambda by construction for the draw eta came from, so rho is
    re-measured on another Hessian batch (seed 500 + replicate) and the larger value counts;
    at theta_rec on batch ``replicate``; both with at most ``check_iters`` matvecs and the
    checks of :func:`radius_draw` (recorded).  -> {"recover_lr", "lambda_max_forg",
    "lambda_max_forg_draws", "radius_draws", "radius_converged", "lambda_max_forg_check",
    "radius_check", "lambda_max_rec", "radius_rec", "eta_lambda_set", "eta_lambda_forg",
    "eta_lambda_rec"}.
    """
    r, eta = info["replicate"], info["recover_lr"]
    tol = (cfg.power_rtol, cfg.power_residual_tol)
    rec = radius_draw(model, tasks, run.theta_rec, cfg.hessian_n, check_iters, r, *tol)
    check = radius_draw(model, tasks, run.theta_forg, cfg.hessian_n, check_iters, 500 + r, *tol)
    return {
        "recover_lr": eta,
        "lambda_max_forg": info["lambda_max_forg"],
        "lambda_max_forg_draws": info["lambda_max_forg_draws"],
        "radius_draws": info["radius_draws"],
        "radius_converged": info["radius_converged"],
        "lambda_max_forg_check": check["radius"],
        "radius_check": check,
        "lambda_max_rec": rec["radius"],
        "radius_rec": rec,
        "eta_lambda_set": info["eta_lambda"],
        "eta_lambda_forg": eta * max(info["lambda_max_forg"], check["radius"]),
        "eta_lambda_rec": eta * rec["radius"],
    }


@_own_rng
def independent_recovery(
    model: nn.Module, tasks: DigitTasks, cfg: LabConfig, theta_forg: Tensor, lr: float, stream: int, steps: int
) -> PhaseRecord:
    """A second recovery from the same theta_forg on other batches (``stream``): a null for
    the prefix basis.  Leaves the model's parameters as they were."""
    losses = task_losses(tasks)
    mix = lambda m, i: torch.stack([losses[t](m, i) for t in TASKS]).mean()
    with swapped_params(model, theta_forg):
        return record_phase(
            model,
            mix,
            PhaseConfig(steps=steps, lr=lr, optimizer="sgd"),
            dense_steps=steps,
            snapshot_every=steps,
            phase="independent",
            index_offset=3_000_000 + stream * STREAM,
        )
