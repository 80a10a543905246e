"""The recovery-after-forgetting protocol, on any nn.Module with user-supplied task losses.

1. multitask training on the mix of all tasks        -> theta_mt
2. training on one *focus* task until the others degrade -> theta_forg
3. training on the mix again                           -> theta_rec
The target displacement is Delta_GD = theta_rec - theta_forg.  Phase 3 records every
update for the first ``dense_steps`` steps (the trajectory-prefix bases need them) and a
parameter snapshot every ``snapshot_every`` steps (the drift analysis needs them), plus
losses and the user's metrics.  Memory: (dense_steps + steps/snapshot_every) vectors of D.

A task loss is a closure ``(model, index) -> scalar tensor``; ``index`` names the batch,
so runs are reproducible and each phase sees fresh batches (phase p uses indices
p * 10^6 + step).  The mix loss is the equal-weight mean of the task losses.

Default optimisers (synthetic lab, see ``updatescope.experiments.recovery``): Adam for
phases 1-2 (fast to train), plain SGD for phase 3 so that Delta_GD is a gradient-descent
displacement -- the object the Krylov argument is about.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.params import flat_params

__all__ = ["PhaseConfig", "RecoveryConfig", "RecoveryRun", "PhaseRecord", "train_phase", "record_phase", "run_recovery"]

LossFn = Callable[[nn.Module, int], Tensor]
Metrics = Callable[[nn.Module], Mapping[str, float]]


@dataclass(frozen=True)
class PhaseConfig:
    """One training phase: ``steps`` updates of ``optimizer`` ("adam" or "sgd")."""

    steps: int
    lr: float
    optimizer: str = "adam"
    momentum: float = 0.0
    warmup: int = 0  # linear learning-rate warm-up steps
    schedule: str = "constant"  # or "cosine": decay to 10% of lr at the last step
    eval_every: int = 0  # 0: evaluate only at the end of the phase

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine"):
            raise InputError(f"schedule must be 'constant' or 'cosine', got {self.schedule!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise InputError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.steps < 0 or self.lr <= 0:
            raise InputError(f"need steps >= 0 and lr > 0, got steps={self.steps}, lr={self.lr}")


@dataclass(frozen=True)
class RecoveryConfig:
    """The three phases.  ``forget.steps`` is a cap: phase 2 stops as soon as the mean
    metric of the non-focus tasks falls below ``forget_fraction`` of its theta_mt value
    (checked every ``forget.eval_every`` steps; needs a metrics function)."""

    multitask: PhaseConfig
    forget: PhaseConfig
    recover: PhaseConfig
    forget_fraction: float = 0.5
    dense_steps: int = 30
    snapshot_every: int = 10

    def __post_init__(self) -> None:
        if self.dense_steps > self.recover.steps:
            raise InputError(f"dense_steps={self.dense_steps} exceeds recover.steps={self.recover.steps}")
        if self.snapshot_every < 1:
            raise InputError(f"snapshot_every must be >= 1, got {self.snapshot_every}")


@dataclass
class RecoveryRun:
    """Parameters along the protocol (flat, float32) and the logged history."""

    theta_mt: Tensor  # (D,)
    theta_forg: Tensor  # (D,)
    theta_rec: Tensor  # (D,)
    updates: Tensor  # (dense_steps, D): theta_{t+1} - theta_t for the first recovery steps
    snapshots: dict[int, Tensor]  # recovery step -> theta (D,); step 0 is theta_forg
    step_norms: Tensor  # (recover.steps,): ||theta_{t+1} - theta_t|| for every recovery step
    history: list[dict] = field(default_factory=list)
    forget_steps: int = 0

    @property
    def delta_gd(self) -> Tensor:
        """theta_rec - theta_forg, (D,)."""
        return self.theta_rec - self.theta_forg


def _optimizer(cfg: PhaseConfig, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=(0.9, 0.98))
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)


def train_phase(
    model: nn.Module,
    loss_fn: LossFn,
    cfg: PhaseConfig,
    *,
    phase: str = "train",
    index_offset: int = 0,
    metrics: Metrics | None = None,
    stop: Callable[[Mapping[str, float]], bool] | None = None,
    on_step: Callable[[int, nn.Module], None] | None = None,
) -> list[dict]:
    """Run one phase in place; returns its log rows.

    ``on_step(t, model)`` is called after update t (t = 1..steps) -- recording hooks.
    ``stop(metrics)`` ends the phase early; it is checked whenever metrics are computed.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _optimizer(cfg, params)
    log: list[dict] = []
    model.train()
    for t in range(1, cfg.steps + 1):
        lr = cfg.lr * min(1.0, t / cfg.warmup) if cfg.warmup else cfg.lr
        if cfg.schedule == "cosine":
            lr *= 0.1 + 0.45 * (1 + math.cos(math.pi * (t - 1) / max(1, cfg.steps - 1)))
        for group in opt.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, index_offset + t)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{phase}: loss is {float(loss)} at step {t}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if on_step is not None:
            on_step(t, model)
        row: dict = {"phase": phase, "step": t, "loss": float(loss.detach())}
        due = (cfg.eval_every and t % cfg.eval_every == 0) or t == cfg.steps
        if metrics is not None and due:
            row["metrics"] = dict(metrics(model))
            log.append(row)
            if stop is not None and stop(row["metrics"]):
                break
        else:
            log.append(row)
    return log


@dataclass
class PhaseRecord:
    """One recorded phase: the first updates, snapshots, every step norm, the log."""

    updates: Tensor  # (dense_steps, D) float32: theta_{t+1} - theta_t
    snapshots: dict[int, Tensor]  # step -> theta (D,); step 0 is the start
    step_norms: Tensor  # (steps,) float64
    history: list[dict]

    @property
    def end(self) -> Tensor:
        """The last parameters (D,)."""
        return self.snapshots[max(self.snapshots)]


def record_phase(
    model: nn.Module,
    loss_fn: LossFn,
    cfg: PhaseConfig,
    *,
    dense_steps: int,
    snapshot_every: int,
    phase: str = "recover",
    index_offset: int = 2_000_000,
    metrics: Metrics | None = None,
) -> PhaseRecord:
    """Run one phase from the model's current parameters and record its trajectory.

    Keeps every update of the first ``dense_steps`` steps, a snapshot every
    ``snapshot_every`` steps (and the last one), and the norm of every step.  Use it for a
    second, independent recovery from the same start (another ``index_offset``) or for
    full-batch GD (a ``loss_fn`` that ignores the index).
    """
    if dense_steps > cfg.steps or snapshot_every < 1:
        raise InputError(
            f"need dense_steps <= steps and snapshot_every >= 1, got dense_steps={dense_steps}, "
            f"steps={cfg.steps}, snapshot_every={snapshot_every}"
        )
    start = flat_params(model).float()
    dense = torch.empty(dense_steps, start.numel(), dtype=torch.float32)
    snapshots = {0: start.clone()}
    norms = torch.zeros(cfg.steps, dtype=torch.float64)
    prev = [start]

    def record(t: int, m: nn.Module) -> None:
        now = flat_params(m).float()
        step = now - prev[0]
        norms[t - 1] = float(step.norm())
        if t <= dense_steps:
            dense[t - 1] = step
        if t % snapshot_every == 0 or t == cfg.steps:
            snapshots[t] = now
        prev[0] = now

    log = train_phase(model, loss_fn, cfg, phase=phase, index_offset=index_offset, metrics=metrics, on_step=record)
    return PhaseRecord(updates=dense, snapshots=snapshots, step_norms=norms, history=log)


def run_recovery(
    model: nn.Module,
    task_losses: Mapping[str, LossFn],
    focus: str,
    cfg: RecoveryConfig,
    metrics: Metrics | None = None,
    stream: int = 0,
) -> RecoveryRun:
    """Run the three phases on ``model`` (in place) and record the recovery trajectory.

    ``task_losses`` maps task name -> loss closure; ``metrics(model)`` returns per-task
    scores (higher is better, e.g. exact-match accuracy) keyed by the same names (extra
    keys are logged and ignored by the stopping rule).  ``stream`` shifts the batch
    indices of phases 2-3 (an independent replicate from the same theta_mt).
    """
    if focus not in task_losses:
        raise InputError(f"focus task {focus!r} is not among the tasks {sorted(task_losses)}")
    names = list(task_losses)

    def mix(m: nn.Module, i: int) -> Tensor:
        return torch.stack([task_losses[n](m, i) for n in names]).mean()

    history = train_phase(model, mix, cfg.multitask, phase="multitask", index_offset=0, metrics=metrics)
    theta_mt = flat_params(model).float()

    stop = None
    if metrics is not None:
        base = dict(metrics(model))
        others = [n for n in names if n != focus]
        ref = sum(base[n] for n in others) / len(others)
        stop = lambda m: sum(m[n] for n in others) / len(others) < cfg.forget_fraction * ref
    forget_log = train_phase(
        model,
        lambda m, i: task_losses[focus](m, i),
        cfg.forget,
        phase="forget",
        index_offset=1_000_000 + stream,
        metrics=metrics,
        stop=stop,
    )
    history += forget_log
    theta_forg = flat_params(model).float()

    rec = record_phase(
        model,
        mix,
        cfg.recover,
        dense_steps=cfg.dense_steps,
        snapshot_every=cfg.snapshot_every,
        phase="recover",
        index_offset=2_000_000 + stream,
        metrics=metrics,
    )
    history += rec.history
    return RecoveryRun(
        theta_mt=theta_mt,
        theta_forg=theta_forg,
        theta_rec=flat_params(model).float(),
        updates=rec.updates,
        snapshots=rec.snapshots,
        step_norms=rec.step_norms,
        history=history,
        forget_steps=len(forget_log),
    )
