"""``interference``'s config: pairs and plans of sequential full fine-tuning on the lab.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import LoRAConfig, check_names, check_positive, check_seed, check_sketch_dim
from updatescope.experiments.mapping_tasks import CLASSES as MAPPING_CLASSES

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


#: the SmolLM2 arm's built-in domains (two families, so the family label can say something)
LM_DOMAINS = ("code_email", "code_asyncio", "code_xml", "wiki_people", "wiki_life_science", "wiki_space")
#: input classes of the mapping tasks (``experiments.mapping_tasks.CLASSES``)
LM_CLASSES = ("python", "licence", "digits")


@dataclass(frozen=True)
class InterferenceLMConfig:
    """``interference-smollm2``: the pairs and plans of ``interference`` on SmolLM2 with the
    LoRA recipe of the selection experiments (amendment 1 of PREREGISTRATION.md).

    Tasks: the built-in ``domains`` (next-token loss on ``train_rows`` / ``eval_rows`` rows of
    ``lora.seq_len`` tokens, sketched on ``sketch_tokens`` tokens of their sketch split) and
    ``mapping_tasks`` mappings of one coupling-dark family (``"{text}\\n{cue}"`` -> one answer
    word per input class ``classes``): every mapping task sees the same inputs and answers them
    differently.  Pairs are ordered within each group (domain then domain, mapping then mapping).

    Before any mapping stage (amendments 2 and 3), one LoRA of ``warmup_steps`` steps on
    ``warm_rows`` warm-up examples per input class of their own, every input class labelled with
    every answer word equally often, is merged into the tail: this answer-format warm-up is the
    base of the mapping tasks; the domain tasks (and the plans) start from the packaged model.
    A stage is one LoRA fine-tuning (``lora``) of the last ``lora.n_last`` blocks, merged into
    them before the next stage: a domain stage on its first ``train_rows`` rows, a mapping
    stage on all of its ``class_rows[0]`` train examples per class.  A counts as learned when
    its eval loss after its stage is below its loss at the base by more than ``min_gain`` nats
    and by more than twice the bootstrap SE of that gain over its eval rows, in every seed.
    Exact predictors run on the first ``exact_n`` rows of each sketch stream (None: all).  ``truth_store``: a
    folder where every (seed, pair) result is written as soon as it is measured and read back
    by a rerun with the same configuration."""

    model: str = "smollm2"
    domains: tuple[str, ...] = LM_DOMAINS
    classes: tuple[str, ...] = LM_CLASSES
    cue: str = "Colour:"
    words: tuple[str, ...] = ("red", "green", "blue")
    mapping_tasks: int = 3
    train_rows: int = 128  # domain stage rows (amendment 3; was 32)
    eval_rows: int = 24
    sketch_tokens: int = 512
    class_rows: tuple[int, int, int] = (32, 16, 24)  # examples per class: train, sketch, eval
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=48, batch=8, seq_len=64)
    warmup_steps: int = 60  # the answer-format warm-up (needed when there are mapping tasks)
    warm_rows: int = 48  # the warm-up's own examples per input class (amendment 3)
    min_gain: float = 0.02
    sketch_dim: int = 1024
    exact_n: int | None = 128
    seeds: int = 3
    n_sequences: int = 2
    seq_len_tasks: int = 4
    n_random_orders: int = 2
    replay_budget: float = 0.25
    n_boot: int = 2000
    seed: int = 0
    quick: bool = False
    truth_store: str | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)
        check_sketch_dim(self.sketch_dim)
        check_positive(
            self, "train_rows", "eval_rows", "sketch_tokens", "exact_n", "n_sequences", "n_random_orders", "n_boot"
        )
        check_names(self.domains, "domains", 3)
        check_names(self.classes, "classes", 2)
        check_names(self.words, "words", 2)
        unknown = [c for c in self.classes if c not in MAPPING_CLASSES]
        if unknown:
            raise InputError(f"unknown input classes {unknown}; available: {', '.join(MAPPING_CLASSES)}")
        if len(self.classes) % len(self.words):
            raise InputError(f"{len(self.classes)} classes cannot share {len(self.words)} answer words evenly")
        if not 0 <= self.mapping_tasks or self.mapping_tasks == 1:
            raise InputError(f"mapping_tasks must be 0 or at least 2, got {self.mapping_tasks}")
        if len(self.class_rows) != 3 or min(self.class_rows) < 1:
            raise InputError(f"class_rows must be 3 positive counts (train, sketch, eval), got {self.class_rows}")
        if self.min_gain < 0:
            raise InputError(f"min_gain must be >= 0, got {self.min_gain}")
        w = self.warmup_steps
        if isinstance(w, bool) or not isinstance(w, int) or w < 0 or (w == 0 and self.mapping_tasks):
            raise InputError(f"warmup_steps must be an integer >= 1 (>= 0 without mapping tasks), got {w!r}")
        r = self.warm_rows
        if isinstance(r, bool) or not isinstance(r, int) or r < 0 or (self.mapping_tasks and r < len(self.words)):
            raise InputError(
                f"warm_rows (the warm-up's examples per input class) must be an integer >= {len(self.words)} "
                f"(one per answer word), got {r!r}"
            )
        if not 0 <= self.replay_budget < 1:
            raise InputError(f"replay_budget must lie in [0, 1), got {self.replay_budget}")
        if not 2 <= self.seq_len_tasks <= len(self.domains):
            raise InputError(
                f"seq_len_tasks must lie in 2..{len(self.domains)} (the domains), got {self.seq_len_tasks}"
            )
        if self.seeds < 1 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 1 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> InterferenceLMConfig:
        if not quick:
            return cls(seed=seed)
        # quick: 4 domains + 1 mapping pair (14 ordered pairs), 1 seed, one sequence: not powered
        return cls(
            domains=("code_email", "code_asyncio", "wiki_people", "wiki_life_science"),
            mapping_tasks=2,
            train_rows=64,
            eval_rows=16,
            sketch_tokens=256,
            class_rows=(16, 8, 16),
            lora=LoRAConfig(lr=1e-3, steps=24, batch=8, seq_len=64),
            warmup_steps=30,
            warm_rows=24,
            exact_n=64,
            seeds=1,
            n_sequences=1,
            n_random_orders=1,
            n_boot=500,
            seed=seed,
            quick=True,
        )
