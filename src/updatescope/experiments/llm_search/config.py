"""``llm-search``'s config: Best-of-N random search around SmolLM2's weights.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import (
    check_positive,
    check_seed,
)


@dataclass(frozen=True)
class LLMSearchConfig:
    """``llm-search``: Best-of-N random search around SmolLM2's weights on true/false statements.

    Loss = minus the mean signed answer margin (``data.statements``).  Splits: candidates are
    chosen on the statements' select split, sigma is tuned on one half of the test split's
    subjects ("tune"), gains are reported on the other half ("heldout") with fresh candidate
    seeds; the prefix trajectory trains on the train split.  sigma is absolute, per coordinate
    (as the paper's 1e-4); the record also gives it relative to the searched weights' RMS."""

    model: str = "smollm2"
    task: str = "capitals"  # see updatescope.data.statements.TASKS
    answers: str = "yes_no"
    n_last: int | None = 6  # search the weights of the last n_last decoder blocks; None: every weight
    n_train: int | None = None  # subjects (true/false pairs) per split; None: all of them
    n_select: int | None = None
    n_test: int | None = None  # split by subject into tune and heldout halves
    sigmas: tuple[float, ...] = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
    n_sweep: int = 8  # candidates per sigma in the sweep
    ns: tuple[int, ...] = (1, 2, 4, 8, 16)  # gain vs N: best of the first n of max(ns) candidates
    n_compare: int = 8  # candidates per search in the prefix-vs-isotropic comparison
    prefix_steps: int = 6  # k SGD steps on the train split span the prefix basis
    prefix_batch: int = 8  # statements per SGD step
    prefix_step: float = 2e-3  # first step's norm as a fraction of the searched weights' norm
    seeds: int = 3  # candidate seeds per setting (mean +- SE)
    batch_size: int = 16
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(
            self,
            "n_last",
            "n_train",
            "n_select",
            "n_test",
            "n_sweep",
            "n_compare",
            "prefix_steps",
            "prefix_batch",
            "prefix_step",
            "seeds",
            "batch_size",
        )
        check_seed(self.seed)
        if self.task not in ("capitals", "currencies", "cities", "sentiment"):
            raise InputError(f"task must be capitals, currencies, cities or sentiment, got {self.task!r}")
        if self.answers not in ("yes_no", "true_false"):
            raise InputError(f"answers must be yes_no or true_false, got {self.answers!r}")
        if len(self.sigmas) < 3 or any(not s > 0 for s in self.sigmas) or list(self.sigmas) != sorted(set(self.sigmas)):
            raise InputError(
                f"sigmas must be >= 3 distinct positive values in increasing order, got {list(self.sigmas)}"
            )
        if not self.ns or any(n < 1 for n in self.ns) or list(self.ns) != sorted(set(self.ns)) or self.ns[0] != 1:
            raise InputError(f"ns must be distinct increasing budgets starting at 1, got {list(self.ns)}")
        if self.n_test is not None and self.n_test < 2:
            raise InputError(f"n_test must be >= 2 (its subjects are split into tune and heldout), got {self.n_test}")
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> LLMSearchConfig:
        if quick:
            # 2 shared CPU cores: the last 2 blocks, a 6-point grid, 4 candidates per sweep point
            return cls(
                n_last=2,
                sigmas=(1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
                n_sweep=4,
                n_compare=8,
                prefix_steps=4,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
