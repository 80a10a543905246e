"""``recovery``'s config: the synthetic lab's recovery protocol and its analyses.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_positive,
    check_seed,
    default_lab,
)


@dataclass(frozen=True)
class RecoveryExperimentConfig:
    """``recovery``: the synthetic lab's recovery protocol and its analyses.  ``lab`` is a
    :class:`updatescope.locallinear.config.LabConfig` (set its fields as ``lab.recover_lr=...``).

    Not :class:`updatescope.locallinear.RecoveryConfig`: that one holds the three training
    phases of the protocol for any model; this one the experiment's replicates and analyses."""

    lab: Any = field(default_factory=lambda: default_lab(False, 0))
    seeds: int = 5  # replicates (fresh forgetting/recovery batches); every number is mean +- SE
    # replicate r trains its own theta_mt from lab.seed + r (the multitask pre-training seed), so
    # the replicates' spread covers pre-training too; False shares lab.seed's theta_mt
    vary_theta_mt: bool = True
    batches_per_task: int = 8  # gradients per task in the static planes (width 4 x this)
    plane_n: int = 256  # sequences per task gradient (planes, drift, resample floor)
    rank_n: int = 100  # per-example gradients per task for the effective rank
    krylov_k: int = 30  # matched horizon: k = 1..krylov_k steps and Krylov dimensions
    drift_steps: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 150, 200)
    # eta = lab.eta_lambda / the largest spectral radius rho of eta_draws Hessian batches at theta_forg
    # (power iteration, at most eta_iters matvecs each, stopped by its convergence checks), then
    # re-measured on another batch; every draw is recorded with whether it converged
    eta_draws: int = 3
    eta_iters: int = 150
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(self, "seeds", "batches_per_task", "plane_n", "rank_n", "krylov_k", "eta_draws", "eta_iters")
        check_seed(self.seed)
        if self.rank_n < 2:
            raise InputError(f"rank_n must be >= 2, got {self.rank_n}")
        if not self.drift_steps or any(k < 1 for k in self.drift_steps):
            raise InputError(f"drift_steps must be positive recovery steps, got {list(self.drift_steps)}")
        if self.krylov_k > self.lab.dense_steps:
            raise InputError(f"krylov_k={self.krylov_k} exceeds lab.dense_steps={self.lab.dense_steps}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> RecoveryExperimentConfig:
        if quick:
            return cls(
                lab=default_lab(True, seed),
                seeds=3,
                batches_per_task=2,
                krylov_k=10,
                drift_steps=(1, 5, 10, 50, 100, 150),
                seed=seed,
                quick=True,
            )
        return cls(lab=default_lab(False, seed), seed=seed)
