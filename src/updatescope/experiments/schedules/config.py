"""``schedules``'s config: simultaneous multitask against sequential specialisation.  Torch-free."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_positive,
    check_seed,
    default_lab,
)


@dataclass(frozen=True)
class SchedulesConfig:
    """``schedules``: simultaneous multitask training vs sequential specialisation, each
    followed by the lab's forgetting on ``lab.focus`` and its stable recovery.  ``lab`` as in
    recovery (both schedules use its step budget ``lab.mt_steps`` and optimiser settings)."""

    # eta_lambda 0.5: a margin for power iterations that underestimate lambda_max (an earlier
    # run at 1.0 with 8 iterations diverged); checked at theta_forg and theta_rec
    lab: Any = field(default_factory=lambda: dataclasses.replace(default_lab(False, 0), eta_lambda=0.5))
    # sequential task order; () = the focus task first (its specialisation is the oldest),
    # then the other tasks in the lab's order
    order: tuple[str, ...] = ()
    recover_tol: float = 0.05  # nats: recovered once the eval mix loss is within this of its pre-forgetting value
    share_steps: tuple[int, ...] = (10, 50, 100, 200)  # recovery steps k for "share of the rise undone"
    capture_k: tuple[int, ...] = (10, 20)  # prefix widths for the capture of Delta_GD
    seeds: int = 3  # replicates (fresh forgetting/recovery batches, shared by both schedules)
    regime_min: float = 0.9  # exact match both starts must reach (regime check) before they are compared
    check_iters: int = 150  # at most this many matvecs per power iteration (stopped by its convergence checks)
    # eta = lab.eta_lambda / the largest lambda_max of this many Hessian batches at theta_forg (check_iters
    # iterations each); the check above then uses yet another batch.  One draw with lab.power_iters
    # set a step that another batch measured at eta*lambda_max = 2.7 in an earlier run
    eta_draws: int = 3
    # sequential with replay: each later phase keeps this share of its step on the earlier tasks
    # (lab.sequential_model); 0 is pure sequential specialisation, whose start keeps only the last task
    replay: float = 0.0
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        from updatescope.locallinear.config import TASKS  # torch-free

        check_positive(self, "recover_tol", "seeds", "check_iters", "eta_draws")
        if isinstance(self.replay, bool) or not isinstance(self.replay, (int, float)) or not 0 <= self.replay < 1:
            raise InputError(f"replay must lie in [0, 1), got {self.replay!r}")
        if not 0 < self.regime_min <= 1:
            raise InputError(f"regime_min must lie in (0, 1], got {self.regime_min}")
        check_seed(self.seed)
        if self.order and sorted(self.order) != sorted(TASKS):
            raise InputError(f"order must list every task once, got {list(self.order)}; tasks: {list(TASKS)}")
        lab = self.lab
        if lab.mt_steps < len(TASKS):
            raise InputError(f"lab.mt_steps={lab.mt_steps} is fewer than one step per task ({len(TASKS)})")
        if not self.share_steps or not self.capture_k:
            raise InputError("share_steps and capture_k must not be empty")
        every = lab.recover_eval_every
        for k in self.share_steps:
            if not 1 <= k <= lab.recover_steps or (k % every and k != lab.recover_steps):
                raise InputError(
                    f"share_steps must be evaluated recovery steps (multiples of lab.recover_eval_every="
                    f"{every} up to lab.recover_steps={lab.recover_steps}), got {k}"
                )
        for k in self.capture_k:
            if not 1 <= k <= lab.dense_steps:
                raise InputError(f"capture_k must lie in 1..lab.dense_steps={lab.dense_steps}, got {k}")
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SchedulesConfig:
        if quick:
            # quick's 8 power iterations underestimated lambda_max; 20 as in the full lab
            lab = dataclasses.replace(default_lab(True, seed), eta_lambda=0.5, power_iters=20)
            return cls(lab=lab, share_steps=(10, 50, 100, 150), seed=seed, quick=True)
        return cls(lab=dataclasses.replace(default_lab(False, seed), eta_lambda=0.5), seed=seed)
