"""``random-search``'s config: Best-of-N in subspaces of the synthetic lab.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from updatescope.experiments.configs import (
    check_positive,
    check_seed,
    default_lab,
)


@dataclass(frozen=True)
class RandomSearchConfig:
    """``random-search``: Best-of-N in subspaces of the synthetic lab (``lab`` as in recovery)."""

    lab: Any = field(default_factory=lambda: default_lab(False, 0))
    n_eval: int = 64  # sequences per task in each split
    n_sweep: int = 32
    n_curve: int = 128
    reps: int = 4  # candidate seeds per budget N in the gain-vs-N curve
    # candidate seeds of the pre-registered comparisons (PREREGISTRATION.md): every space gets the
    # same seeds, so the comparisons are paired by seed
    compare_reps: int = 10
    r_sub: int = 10
    eta_draws: int = 3  # the lab's recovery step from the largest lambda_max of this many Hessian batches
    eta_iters: int = 150  # (as in recovery: at most this many matvecs, stopped by the convergence checks)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(self, "n_eval", "n_sweep", "n_curve", "reps", "compare_reps", "r_sub", "eta_draws", "eta_iters")
        check_seed(self.seed)

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> RandomSearchConfig:
        if quick:
            return cls(
                lab=default_lab(True, seed),
                n_eval=32,
                n_sweep=16,
                n_curve=64,
                reps=2,
                compare_reps=6,
                seed=seed,
                quick=True,
            )
        return cls(lab=default_lab(False, seed), seed=seed)
