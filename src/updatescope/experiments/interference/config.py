"""``interference``'s config: pairs and plans of sequential full fine-tuning on the lab.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import check_positive, check_seed, check_sketch_dim

#: the task families of :mod:`.tasks` (kept here so the config validates without torch)
FAMILY_NAMES = ("copy", "reverse", "sort", "shift", "roll")


@dataclass(frozen=True)
class InterferenceConfig:
    """``interference``: train on task A, then on task B, and measure A's forgetting; then
    sequences of ``seq_len_tasks`` tasks in the planner's, random and predicted-worst orders
    (PREREGISTRATION.md beside this file).

    Model: the lab's :class:`~updatescope.locallinear.synthetic.TinyTransformer` with
    ``n_layer`` blocks of width ``d_model``, digits of length ``digits``, trained from its
    random initialisation (the *base*).  Every stage is ``steps`` Adam steps at ``lr`` on
    ``batch`` sequences with a fresh optimiser (plain sequential fine-tuning).  A counts as
    learned when its eval loss after its stage is at most ``learned_ratio`` times its loss at
    the base; pairs whose A was not learned are refused."""

    families: tuple[str, ...] = FAMILY_NAMES
    digits: int = 4
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    steps: int = 120
    lr: float = 3e-3
    batch: int = 32
    learned_ratio: float = 0.5
    n_eval: int = 256  # eval sequences per task (the same for every seed)
    n_sketch: int = 128  # sketch sequences per task (L answer rows each)
    sketch_dim: int = 1024
    seeds: int = 3
    n_sequences: int = 6  # task sequences of the plan comparison
    seq_len_tasks: int = 4  # tasks per sequence
    n_random_orders: int = 2  # random orders per sequence
    replay_budget: float = 0.25
    n_boot: int = 2000
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_seed(self.seed)
        check_sketch_dim(self.sketch_dim)
        check_positive(
            self, "steps", "lr", "batch", "n_eval", "n_sketch", "n_sequences", "n_random_orders", "n_boot", "d_model"
        )
        unknown = [f for f in self.families if f not in FAMILY_NAMES]
        if unknown:
            raise InputError(f"unknown task families {unknown}; available: {', '.join(FAMILY_NAMES)}")
        if len(set(self.families)) != len(self.families) or len(self.families) < 2:
            raise InputError(f"families must name at least 2 distinct families, got {list(self.families)}")
        if self.d_model % self.n_head:
            raise InputError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")
        if self.digits < 2 or self.n_layer < 1:
            raise InputError(f"digits must be >= 2 and n_layer >= 1, got {self.digits}, {self.n_layer}")
        if not 0 < self.learned_ratio < 1:
            raise InputError(f"learned_ratio must lie in (0, 1), got {self.learned_ratio}")
        if not 0 <= self.replay_budget < 1:
            raise InputError(f"replay_budget must lie in [0, 1), got {self.replay_budget}")
        if not 2 <= self.seq_len_tasks <= 2 * len(self.families):
            raise InputError(f"seq_len_tasks must lie in 2..{2 * len(self.families)}, got {self.seq_len_tasks}")
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @property
    def n_tasks(self) -> int:
        return 2 * len(self.families)

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> InterferenceConfig:
        if not quick:
            return cls(seed=seed)
        # quick: 3 families (6 tasks, 30 ordered pairs), 2 seeds, 2 sequences: not powered
        return cls(
            families=FAMILY_NAMES[:3],
            steps=80,
            n_eval=128,
            n_sketch=64,
            seeds=2,
            n_sequences=2,
            n_random_orders=1,
            n_boot=500,
            seed=seed,
            quick=True,
        )
