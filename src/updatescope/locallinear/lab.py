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
- recovery: plain SGD (no momentum), lr 0.1, on the mix, so Delta_GD is a gradient-descent
  displacement as in the Krylov argument.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from updatescope.paths import cache_dir
from updatescope.locallinear.params import flat_params, set_flat_params
from updatescope.locallinear.synthetic import TASKS, DigitTasks, ModelConfig, TinyTransformer
from updatescope.locallinear.trajectory import (
    PhaseConfig,
    RecoveryConfig,
    RecoveryRun,
    run_recovery,
    train_phase,
)
from updatescope.errors import InputError

__all__ = ["LabConfig", "task_losses", "accuracy_fn", "multitask_model", "synthetic_recovery"]


@dataclass(frozen=True)
class LabConfig:
    seed: int = 0
    model: ModelConfig = ModelConfig()
    batch_size: int = 16  # sequences per task per step
    mt_steps: int = 1500
    mt_lr: float = 3e-3
    focus: str = "copy"
    forget_cap: int = 400
    forget_lr: float = 1e-3
    forget_fraction: float = 0.5
    recover_steps: int = 200
    recover_lr: float = 0.1
    dense_steps: int = 30
    snapshot_every: int = 10
    eval_n: int = 256  # sequences per task for exact-match accuracy

    def __post_init__(self) -> None:
        if self.focus not in TASKS:
            raise InputError(f"focus {self.focus!r} is not one of {TASKS}")


def task_losses(tasks: DigitTasks) -> dict:
    """Task name -> closure (model, index) -> training loss."""
    return {t: (lambda m, i, t=t: tasks.loss(m, t, i)) for t in TASKS}


def accuracy_fn(tasks: DigitTasks, n: int):
    return lambda m: tasks.accuracy(m, n=n)


def _key(cfg: LabConfig) -> str:
    blob = json.dumps(
        {"model": asdict(cfg.model), "seed": cfg.seed, "bs": cfg.batch_size, "steps": cfg.mt_steps,
         "lr": cfg.mt_lr, "torch": torch.__version__, "v": 2},
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
    phase = PhaseConfig(steps=cfg.mt_steps, lr=cfg.mt_lr, warmup=50, schedule="cosine",
                        eval_every=max(1, cfg.mt_steps // 10))
    hist = train_phase(model, mix, phase, phase="multitask", metrics=accuracy_fn(tasks, cfg.eval_n))
    if use_cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(flat_params(model), tmp)
        os.replace(tmp, path)
    return model, tasks, {"cached": False, "accuracy": tasks.accuracy(model, n=cfg.eval_n), "history": hist}


@_own_rng
def synthetic_recovery(cfg: LabConfig, use_cache: bool = True) -> tuple[TinyTransformer, DigitTasks, RecoveryRun, dict]:
    """theta_mt (cached) -> forget on ``cfg.focus`` -> recover with SGD; the full record."""
    model, tasks, info = multitask_model(cfg, use_cache)
    rcfg = RecoveryConfig(
        multitask=PhaseConfig(steps=0, lr=cfg.mt_lr),  # already trained
        forget=PhaseConfig(steps=cfg.forget_cap, lr=cfg.forget_lr, eval_every=10),
        recover=PhaseConfig(steps=cfg.recover_steps, lr=cfg.recover_lr, optimizer="sgd",
                            eval_every=max(1, cfg.recover_steps // 20)),
        forget_fraction=cfg.forget_fraction, dense_steps=cfg.dense_steps, snapshot_every=cfg.snapshot_every,
    )
    torch.manual_seed(cfg.seed + 1)
    run = run_recovery(model, task_losses(tasks), cfg.focus, rcfg, metrics=accuracy_fn(tasks, cfg.eval_n))
    run.history = info["history"] + run.history
    return model, tasks, run, info


def quick(cfg: LabConfig) -> LabConfig:
    """Smaller settings for ``--quick`` runs."""
    return replace(cfg, mt_steps=800, recover_steps=150, eval_n=128)
