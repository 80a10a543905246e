"""``steering``'s config: CAA against the pushforward of one gradient step.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_positive,
    check_seed,
)


@dataclass(frozen=True)
class SteeringConfig:
    """``steering``: CAA vs the pushforward of one gradient step on true/false statements.
    Steering scales are fractions of the mean residual norm at the layer (vectors unit-normed)."""

    model: str = "smollm2"
    task: str = "capitals"  # see updatescope.data.statements.TASKS
    answers: str = "yes_no"
    n_train: int | None = None  # subjects (true/false pairs) per split; None: all of them
    n_select: int | None = None
    n_test: int | None = None
    steer_layers: tuple[int, ...] = (6, 12, 18, 24)
    scales: tuple[float, ...] = (-0.5, -0.25, -0.1, 0.1, 0.25, 0.5)
    positions: str = "last"  # where vectors are added: updatescope.steering.INJECT_POSITIONS
    seeds: int = 3  # random controls: random delta-theta, shuffled labels, halves, random vectors
    # Best-of-N weight perturbations pushed forward (locallinear.search.best_of_n): N candidates
    # per seed and norm; norms are fractions of the one-step delta-theta's norm
    search_n: int = 16
    search_seeds: int = 3
    search_norms: tuple[float, ...] = (0.03, 0.1, 0.3)
    batch_size: int = 16
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(self, "n_train", "n_select", "n_test", "seeds", "search_n", "search_seeds", "batch_size")
        check_seed(self.seed)
        if self.task not in ("capitals", "currencies", "cities", "sentiment"):
            raise InputError(f"task must be capitals, currencies, cities or sentiment, got {self.task!r}")
        if self.answers not in ("yes_no", "true_false"):
            raise InputError(f"answers must be yes_no or true_false, got {self.answers!r}")
        if self.positions not in ("all", "prompt", "last"):
            raise InputError(f"positions must be all, prompt or last, got {self.positions!r}")
        if (
            not self.steer_layers
            or any(x < 0 for x in self.steer_layers)
            or len(set(self.steer_layers)) != len(self.steer_layers)
        ):
            raise InputError(f"steer_layers must be distinct layer indices >= 0, got {list(self.steer_layers)}")
        if not self.scales or any(s == 0 for s in self.scales):
            raise InputError(f"scales must be non-empty and non-zero (0 is the base model), got {list(self.scales)}")
        if self.seeds < 3 and not self.quick:
            raise InputError(f"seeds must be >= 3 for a recorded run, got {self.seeds}")
        if self.search_seeds < 3 and not self.quick:
            raise InputError(f"search_seeds must be >= 3 for a recorded run, got {self.search_seeds}")
        if not self.search_norms or any(not r > 0 for r in self.search_norms):
            raise InputError(
                f"search_norms must be non-empty and positive (fractions of the step norm), "
                f"got {list(self.search_norms)}"
            )

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SteeringConfig:
        if quick:
            # 2 shared CPU cores: one layer (paper: ~80% depth), two signs, few prompts,
            # 4 search candidates at one norm
            return cls(
                n_train=8,
                n_select=8,
                n_test=12,
                steer_layers=(24,),
                scales=(-0.25, 0.25),
                search_n=4,
                search_norms=(0.1,),
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
