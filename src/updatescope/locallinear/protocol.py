"""Paper B's recovery protocol and its measures on any ``nn.Module``, in one call.

:func:`run_protocol` trains the model in place through the three phases of
:mod:`.trajectory` (multitask on the mix -> theta_mt; Adam on the focus task -> theta_forg;
plain SGD on the mix -> theta_rec) and measures, as the ``recovery`` and ``lora-recovery``
experiments do, with the same library pieces:

- stability: lambda_max of the mix loss at theta_forg and theta_rec (HVP power iteration)
  and eta * lambda_max (gradient descent is stable below 2); the eval mix loss along the
  recovery;
- capture of Delta_GD = theta_rec - theta_forg by the span of the first k updates, and of
  the displacement *remaining* after k steps, with three nulls: a random walk with the real
  step norms, an independent recovery from theta_forg (other batches), a static local plane
  of the same width;
- planes and drift: the n_tasks-dim plane of per-task gradients at theta_forg, its capture
  of Delta_GD, its overlap with the same plane along the recovery, divided by the
  same-point resample floor (the plane from other batches at theta_forg);
- effective rank of per-batch gradients of each task at theta_forg against Gaussian rows
  of the same norms;
- for a peft LoRA model, the capture curves again in weight space, Delta W = s B A
  (:mod:`.lora`);
- with ``krylov_k`` > 0, Krylov at a matched horizon: K_k(H, g_0) of the fixed loss at
  theta_forg against theta_k - theta_0 of deterministic GD on that loss at the same eta
  (capture and principal-angle overlap, k = 1..krylov_k), then against the recovery's own
  SGD steps.

The contract is the lab's: a task loss is ``loss_fn(model, index) -> scalar tensor`` and
``index`` (an int >= 0) names the batch.  Each phase and each measurement reads its own
range of indices (:data:`INDEX_OFFSETS`), so nothing is measured on a training batch and a
run is reproducible; a loss that ignores the index is full-batch.  ``replicate`` r shifts
every range but ``eval`` by r * 10^5: an independent replicate from the same theta_mt.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.capture import (
    capture_fraction,
    prefix_capture_curve,
    random_walk_prefix_null,
    rest_capture_curve,
)
from updatescope.locallinear.drift import subspace_overlap
from updatescope.locallinear.krylov import make_hvp, matched_horizon, top_eigenvalue
from updatescope.locallinear.lora import ba_increments, ba_pairs, push_w
from updatescope.locallinear.params import flat_params, swapped_params
from updatescope.locallinear.rank import effective_rank, gaussian_like
from updatescope.locallinear.subspaces import gradient_stack, top_directions
from updatescope.locallinear.trajectory import PhaseConfig, record_phase, train_phase

__all__ = ["INDEX_OFFSETS", "ProtocolConfig", "ProtocolRecord", "run_protocol", "unit_rows"]

LossFn = Callable[[nn.Module, int], Tensor]

#: first batch index of each phase / measurement; a range holds at most STREAM indices
INDEX_OFFSETS = {
    "multitask": 0,
    "forget": 1_000_000,
    "recover": 2_000_000,
    "independent": 3_000_000,
    "plane": 4_000_000,
    "rank": 5_000_000,
    "hessian": 6_000_000,
    "eval": 7_000_000,
}
STREAM = 100_000  # index shift between replicates


@dataclass(frozen=True)
class ProtocolConfig:
    """Step counts, step sizes and measurement sizes of :func:`run_protocol`."""

    multitask_steps: int = 200  # Adam on the mix; 0: the model already is theta_mt
    multitask_lr: float = 1e-3
    forget_steps: int = 100  # Adam on the focus task; a cap when forget_rise is set
    forget_lr: float = 1e-3
    forget_rise: float | None = None  # stop once the other tasks' mean eval loss rose this much (nats)
    recover_steps: int = 50  # plain SGD on the mix
    recover_lr: float | None = None  # eta; None: eta = eta_lambda / lambda_max(theta_forg)
    eta_lambda: float = 1.0  # eta * lambda_max at theta_forg when recover_lr is None
    dense_steps: int = 20  # k: curves for k = 1..dense_steps
    eval_every: int = 5  # eval losses every this many steps (forgetting and recovery)
    eval_batches: int = 1  # eval batches per task (fixed indices, shared by replicates)
    hessian_batches: int = 1  # batches per task of the loss lambda_max is measured on
    power_iters: int = 20
    plane_batches: int = 2  # gradients per task in the static local plane
    drift_every: int = 5  # drift of the task plane every this many recovery steps
    rank_n: int = 8  # per-batch gradients per task for the effective rank; 0 skips it
    krylov_k: int = 0  # Krylov at a matched horizon, k = 1..krylov_k (full-batch GD vs the SGD steps); 0 skips it
    replicate: int = 0
    seed: int = 0  # random-walk null, power-iteration start, Gaussian rows

    def __post_init__(self) -> None:
        if self.multitask_steps < 0 or self.forget_steps < 1 or self.recover_steps < 1:
            raise InputError(
                f"need multitask_steps >= 0, forget_steps >= 1 and recover_steps >= 1, got "
                f"{self.multitask_steps}, {self.forget_steps}, {self.recover_steps}"
            )
        if max(self.multitask_steps, self.forget_steps, self.recover_steps) >= STREAM:
            raise InputError(f"each phase must have fewer than {STREAM} steps")
        for name in ("multitask_lr", "forget_lr", "recover_lr", "eta_lambda", "forget_rise"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise InputError(f"{name} must be > 0, got {v}")
        if not 1 <= self.dense_steps <= self.recover_steps:
            raise InputError(f"dense_steps must lie in [1, recover_steps={self.recover_steps}], got {self.dense_steps}")
        for name in ("eval_every", "eval_batches", "hessian_batches", "power_iters", "plane_batches", "drift_every"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.krylov_k <= self.dense_steps:
            raise InputError(
                f"krylov_k must lie in [0, dense_steps={self.dense_steps}] (the SGD steps it is "
                f"compared with are the first dense_steps updates), got {self.krylov_k}"
            )
        if self.rank_n == 1 or self.rank_n < 0:
            raise InputError(f"rank_n must be 0 (skip) or >= 2, got {self.rank_n}")
        if not 0 <= self.replicate < 10:
            raise InputError(f"replicate must lie in [0, 9], got {self.replicate}")


@dataclass
class ProtocolRecord:
    """Everything :func:`run_protocol` measured.  ``to_dict()`` is JSON-serialisable (no
    tensors, NaN as None); the tensors stay on the record for further analysis."""

    config: ProtocolConfig
    tasks: list[str]
    focus: str
    params: list[str]  # the moved tensors, in flat-vector order
    dim: int  # D
    forget_steps: int  # steps phase 2 took (< forget_steps when forget_rise stopped it)
    trajectory: dict[str, float]  # norms of theta_mt and of the displacements, cos(Delta_GD, theta_mt - theta_forg)
    step_norms: list[float]  # ||theta_{t+1} - theta_t|| of every recovery step
    losses: dict[str, list[float]]  # phase -> training loss of every step
    eval_losses: dict[str, Any]  # eval losses per task at theta_mt / theta_forg / theta_rec and along the recovery
    stability: dict[str, Any]  # eta, lambda_max, eta * lambda_max at theta_forg and theta_rec, monotone
    curves: dict[str, list[float]]  # capture curves and their nulls, k = 1..dense_steps
    task_plane: dict[str, float]  # capture by the task plane at theta_forg / theta_mt, resample floor
    drift: dict[str, list]  # steps, overlap with the theta_forg plane, overlap / floor
    rank: dict[str, dict]  # task -> {task, task_unit, gaussian, gaussian_unit} effective ranks
    weight_space: dict[str, Any] | None  # LoRA models: dim P, ||Delta W||, the curves in weight space
    krylov: dict[str, Any] | None  # krylov_k > 0: K_k(H, g_0) of the fixed loss at theta_forg against GD and SGD
    theta_mt: Tensor = field(repr=False)  # (D,) float32
    theta_forg: Tensor = field(repr=False)
    theta_rec: Tensor = field(repr=False)
    updates: Tensor = field(repr=False)  # (dense_steps, D): the first recovery updates

    @property
    def delta_gd(self) -> Tensor:
        """theta_rec - theta_forg, (D,)."""
        return self.theta_rec - self.theta_forg

    def to_dict(self) -> dict[str, Any]:
        out = {
            k: getattr(self, k)
            for k in (
                "tasks",
                "focus",
                "params",
                "dim",
                "forget_steps",
                "trajectory",
                "step_norms",
                "losses",
                "eval_losses",
                "stability",
                "curves",
                "task_plane",
                "drift",
                "rank",
                "weight_space",
                "krylov",
            )
        }
        out["config"] = asdict(self.config)
        return _jsonable(out)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def unit_rows(g: Tensor) -> Tensor:
    """Each row divided by its norm (zero rows stay zero): direction-only stacks.  (n, D) -> (n, D)."""
    return g / g.norm(dim=1, keepdim=True).clamp_min(1e-30)


@contextlib.contextmanager
def _moving(model: nn.Module, params: Sequence[str | nn.Parameter] | None) -> Iterator[list[str]]:
    """Make exactly ``params`` trainable for the duration (None: keep requires_grad as is);
    restores every flag on exit.  Yields the names of the moved tensors."""
    named = list(model.named_parameters())
    saved = [p.requires_grad for _, p in named]
    if params is not None:
        by_name = dict(named)
        ids = set()
        for p in params:
            if isinstance(p, str):
                if p not in by_name:
                    raise InputError(f"model has no parameter named {p!r}")
                p = by_name[p]
            ids.add(id(p))
        if len(ids) < len(params):
            raise InputError("params lists a tensor twice")
        if not ids <= {id(p) for _, p in named}:
            raise InputError("params holds a tensor that is not a parameter of the model")
    try:
        if params is not None:
            for _, p in named:
                p.requires_grad_(id(p) in ids)
        names = [n for n, p in named if p.requires_grad]
        if not names:
            raise InputError("no parameters to move: none has requires_grad=True (pass params=...)")
        yield names
    finally:
        for (_, p), flag in zip(named, saved):
            p.requires_grad_(flag)


def run_protocol(
    model: nn.Module,
    task_losses: Mapping[str, LossFn],
    focus: str,
    config: ProtocolConfig = ProtocolConfig(),
    *,
    params: Sequence[str | nn.Parameter] | None = None,
) -> ProtocolRecord:
    """Multitask train -> forget on ``focus`` -> recover on the mix, and measure.

    ``task_losses`` maps >= 2 task names to ``loss_fn(model, index) -> scalar tensor``;
    the mix is their equal-weight mean.  ``params`` names the tensors to move (names from
    ``model.named_parameters()`` or the parameters themselves); default: every parameter
    with ``requires_grad`` -- for a peft model, its LoRA tensors.  The model is trained in
    place and left at theta_rec; requires_grad flags are restored.  Hessian-vector
    products need a twice-differentiable forward (for transformers models: eager attention).
    Memory: about (dense_steps + recover_steps / drift_every) vectors of D; every recovery
    step for a LoRA model (weight-space increments need them).
    """
    if focus not in task_losses:
        raise InputError(f"focus task {focus!r} is not among the tasks {sorted(task_losses)}")
    if len(task_losses) < 2:
        raise InputError(f"need at least 2 tasks (the focus and one to forget), got {sorted(task_losses)}")
    with _moving(model, params) as names:
        return _run(model, dict(task_losses), focus, config, names)


def _run(
    model: nn.Module, losses: dict[str, LossFn], focus: str, cfg: ProtocolConfig, names: list[str]
) -> ProtocolRecord:
    tasks = list(losses)
    others = [t for t in tasks if t != focus]
    off = {k: v + (0 if k == "eval" else cfg.replicate * STREAM) for k, v in INDEX_OFFSETS.items()}

    def mix(m: nn.Module, i: int) -> Tensor:
        return torch.stack([losses[t](m, i) for t in tasks]).mean()

    def evaluate(m: nn.Module) -> dict[str, float]:
        with torch.no_grad():
            out = {
                t: sum(float(losses[t](m, off["eval"] + j)) for j in range(cfg.eval_batches)) / cfg.eval_batches
                for t in tasks
            }
        out["mix_loss"] = sum(out[t] for t in tasks) / len(tasks)
        return out

    # ---- the three phases -------------------------------------------------------------------
    mt_log = []
    if cfg.multitask_steps:
        mt_log = train_phase(
            model,
            mix,
            PhaseConfig(steps=cfg.multitask_steps, lr=cfg.multitask_lr),
            phase="multitask",
            index_offset=off["multitask"],
        )
    theta_mt = flat_params(model).float()
    eval_mt = evaluate(model)
    stop, mets = None, None
    if cfg.forget_rise is not None:
        mets = evaluate
        stop = lambda m: sum(m[t] - eval_mt[t] for t in others) / len(others) >= cfg.forget_rise
    flog = train_phase(
        model,
        losses[focus],
        PhaseConfig(steps=cfg.forget_steps, lr=cfg.forget_lr, eval_every=cfg.eval_every),
        phase="forget",
        index_offset=off["forget"],
        metrics=mets,
        stop=stop,
    )
    theta_forg = flat_params(model).float()
    eval_forg = evaluate(model)
    d = theta_forg.numel()

    def full(m: nn.Module) -> Tensor:  # the fixed loss lambda_max is measured on
        return torch.stack([losses[t](m, off["hessian"] + j) for t in tasks for j in range(cfg.hessian_batches)]).mean()

    def lam_at(theta: Tensor) -> float:
        with swapped_params(model, theta):
            return top_eigenvalue(make_hvp(full, model), d, cfg.power_iters, seed=cfg.seed)[0]

    lam_forg = lam_at(theta_forg)
    eta = cfg.recover_lr if cfg.recover_lr is not None else cfg.eta_lambda / max(abs(lam_forg), 1e-12)
    pairs = ba_pairs(model)
    k, steps = cfg.dense_steps, cfg.recover_steps
    rec = record_phase(
        model,
        mix,
        PhaseConfig(steps=steps, lr=eta, optimizer="sgd", eval_every=cfg.eval_every),
        dense_steps=k,
        snapshot_every=1 if pairs else cfg.drift_every,
        phase="recover",
        index_offset=off["recover"],
        metrics=evaluate,
    )
    theta_rec = rec.end
    lam_rec = lam_at(theta_rec)
    rows = [x for x in rec.history if "metrics" in x]
    evl = [eval_forg["mix_loss"]] + [x["metrics"]["mix_loss"] for x in rows]
    rises = [b - a for a, b in zip(evl, evl[1:])]
    stability = {
        "recover_lr": eta,
        "lambda_max_forg": lam_forg,
        "lambda_max_rec": lam_rec,
        "eta_lambda_forg": eta * lam_forg,
        "eta_lambda_rec": eta * lam_rec,
        "stable": eta * lam_forg < 2 and eta * lam_rec < 2,
        "monotone": all(x <= 0 for x in rises),
        "max_rise": max([0.0] + rises),
    }
    delta = (theta_rec - theta_forg).double()
    undo = (theta_mt - theta_forg).double()
    trajectory = {
        "theta_mt_norm": float(theta_mt.norm()),
        "forget_norm": float(undo.norm()),
        "delta_gd_norm": float(delta.norm()),
        "rec_to_mt_norm": float((theta_rec - theta_mt).norm()),
        "path_length": float(rec.step_norms.sum()),
        "cos_delta_gd_undo_forget": float(delta @ undo / (delta.norm() * undo.norm()).clamp_min(1e-30)),
    }

    # ---- capture and its nulls ----------------------------------------------------------------
    upd, ks = rec.updates, list(range(1, k + 1))
    c: dict[str, list[float]] = {
        "prefix": prefix_capture_curve(upd, delta).tolist(),
        "prefix_rest": rest_capture_curve(upd, delta).tolist(),
    }
    walk = random_walk_prefix_null(rec.step_norms, ks, d, seed=cfg.seed + 1000)
    c["walk"], c["walk_rest"] = [walk[j]["total"] for j in ks], [walk[j]["rest"] for j in ks]
    with swapped_params(model, theta_forg):
        indep = record_phase(
            model,
            mix,
            PhaseConfig(steps=k, lr=eta, optimizer="sgd"),
            dense_steps=k,
            snapshot_every=k,
            phase="independent",
            index_offset=off["independent"],
        )
    c["independent"] = prefix_capture_curve(indep.updates, delta).tolist()
    c["independent_rest"] = rest_capture_curve(indep.updates, delta, steps=upd).tolist()

    def grads(theta: Tensor, index0: int, m: int) -> Tensor:  # task-major (len(tasks) * m, D)
        with swapped_params(model, theta):
            return gradient_stack(
                model, [(lambda mod, t=t, j=j: losses[t](mod, index0 + j)) for t in tasks for j in range(m)]
            )

    width = len(tasks) * cfg.plane_batches
    local = top_directions(grads(theta_forg, off["plane"], cfg.plane_batches), width)
    pre = top_directions(grads(theta_mt, off["plane"], cfg.plane_batches), width)
    c["local_plane"] = prefix_capture_curve(local, delta).tolist()
    c["pre_interference_plane"] = prefix_capture_curve(pre, delta).tolist()
    w = min(k, local.shape[0])
    c["static_rest"] = rest_capture_curve(local[:w], delta, steps=upd[:w]).tolist()

    # ---- the task plane: capture, resample floor, drift -------------------------------------
    plane = lambda theta, index0: top_directions(grads(theta, index0, 1), len(tasks))
    first, second = off["plane"] + STREAM // 2, off["plane"] + STREAM // 2 + 1
    ref = plane(theta_forg, first)
    floor = subspace_overlap(ref, plane(theta_forg, second))
    task_plane = {
        "capture_forg": capture_fraction(ref, delta),
        "capture_mt": capture_fraction(plane(theta_mt, first), delta),
        "resample_floor": floor,
        "random_overlap": len(tasks) / d,
    }
    drift_steps = sorted({t for t in rec.snapshots if t > 0 and (t % cfg.drift_every == 0 or t == steps)})
    overlap = [subspace_overlap(ref, plane(rec.snapshots[t], first)) for t in drift_steps]
    drift = {
        "steps": drift_steps,
        "overlap": overlap,
        "normalised": [v / floor if floor > 0 else float("nan") for v in overlap],
    }

    # ---- effective rank of per-batch gradients --------------------------------------------------
    rank: dict[str, dict] = {}
    if cfg.rank_n:
        with swapped_params(model, theta_forg):
            for i, t in enumerate(tasks):
                g = gradient_stack(
                    model, [(lambda mod, j=j: losses[t](mod, off["rank"] + j)) for j in range(cfg.rank_n)]
                )
                gauss = gaussian_like(g, 31 * cfg.seed + i)
                rank[t] = {
                    "task": effective_rank(g).as_dict(),
                    "task_unit": effective_rank(unit_rows(g)).as_dict(),
                    "gaussian": effective_rank(gauss).as_dict(),
                    "gaussian_unit": effective_rank(unit_rows(gauss)).as_dict(),
                }

    # ---- Krylov at a matched horizon ------------------------------------------------------------
    # For GD on a quadratic, theta_k - theta_0 lies in K_k(H, g_0).  Here H and g_0 are those of
    # the fixed loss lambda_max is measured on, at theta_forg; deterministic GD on that loss at
    # the recovery's eta is the case the statement is about, the recovery's own (minibatch)
    # SGD steps are where it may break.
    krylov = None
    if cfg.krylov_k:
        krylov = {"k": cfg.krylov_k, **matched_horizon(model, full, theta_forg, eta, cfg.krylov_k, upd)}

    # ---- weight space (LoRA) --------------------------------------------------------------------
    weight_space = None
    if pairs:
        snaps = [rec.snapshots[t] for t in range(1, steps + 1)]
        incr, w_norms, target = ba_increments(snaps, theta_forg, pairs, k)  # (k, P), (T,), (P,)
        p_dim = target.numel()
        wc = {
            "prefix": prefix_capture_curve(incr, target).tolist(),
            "prefix_rest": rest_capture_curve(incr, target).tolist(),
        }
        wwalk = random_walk_prefix_null(w_norms, ks, p_dim, seed=cfg.seed + 2000)
        wc["walk"], wc["walk_rest"] = [wwalk[j]["total"] for j in ks], [wwalk[j]["rest"] for j in ks]
        ind_w = ba_increments(list(theta_forg + indep.updates.cumsum(0)), theta_forg, pairs, k)[0]
        wc["independent"] = prefix_capture_curve(ind_w, target).tolist()
        wc["independent_rest"] = rest_capture_curve(ind_w, target, steps=incr).tolist()
        mapped = torch.stack([push_w(v.float(), theta_forg, pairs) for v in local])
        wc["static"] = prefix_capture_curve(mapped, target).tolist()
        wc["static_rest"] = rest_capture_curve(mapped[:w], target, steps=incr[:w]).tolist()
        weight_space = {
            "dim": p_dim,
            "modules": len(pairs),
            "delta_norm": float(target.norm()),
            "step_norms": w_norms.tolist(),
            "curves": wc,
        }

    return ProtocolRecord(
        config=cfg,
        tasks=tasks,
        focus=focus,
        params=names,
        dim=d,
        forget_steps=len(flog),
        trajectory=trajectory,
        step_norms=rec.step_norms.tolist(),
        losses={
            "multitask": [x["loss"] for x in mt_log],
            "forget": [x["loss"] for x in flog],
            "recover": [x["loss"] for x in rec.history],
        },
        eval_losses={
            "mt": eval_mt,
            "forg": eval_forg,
            "rec": rows[-1]["metrics"],
            "recover_steps": [0] + [x["step"] for x in rows],
            "recover_mix_loss": evl,
        },
        stability=stability,
        curves=c,
        task_plane=task_plane,
        drift=drift,
        rank=rank,
        weight_space=weight_space,
        krylov=krylov,
        theta_mt=theta_mt,
        theta_forg=theta_forg,
        theta_rec=theta_rec,
        updates=upd,
    )
