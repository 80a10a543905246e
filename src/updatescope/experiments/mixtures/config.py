"""``mixtures``'s config: the source pool, the targets, the token budget.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    LoRAConfig,
    check_gt_seeds,
    check_names,
    check_positive,
    check_seed,
    check_sketch_dim,
    check_store_folder,
)

#: the candidate sources every target mixes from
POOL = (
    "code_asyncio",
    "code_email",
    "code_xml",
    "wiki_countries",
    "wiki_people",
    "wiki_life_science",
    "news_lee",
    # "reviews" was dropped before the full run (PREREGISTRATION.md, amendment 1): its train
    # split offers 28 rows, not the 32 every source must give
    "licenses",
    "python_docs",
)
#: targets: domains outside the pool, several near a pool domain's family
TARGETS = (
    "code_http",
    "code_unittest",
    "code_tkinter",
    "code_importlib",
    "code_text",
    "code_concurrency",
    "code_numbers",
    "code_idlelib",
    "wiki_regions",
    "wiki_physical_science",
    "wiki_space",
    "wiki_society",
    "wiki_us_history_law",
    "wiki_arts",
    "wiki_tech_math",
    "analogies",
)


@dataclass(frozen=True)
class MixturesConfig:
    """``mixtures``: for each target, LoRA fine-tuning at a fixed token budget on mixtures of
    the ``pool`` sources chosen by each arm (PREREGISTRATION.md beside this file).

    Every source contributes rows of ``lora.seq_len`` tokens from its ``train`` split (up to
    ``budget_rows`` rows); a mixture with token shares w trains on round(w_i · budget_rows)
    rows of source i (largest remainders), so every arm sees the same number of tokens.
    Sources are sketched on the same rows' documents; targets on their ``sketch`` split and
    judged on ``eval_rows`` rows of their ``eval`` split.  ``run_store``: a folder that keeps
    each finished fine-tuning's evaluation losses (a small gzip JSON, keyed by everything that
    determines them), so a long run resumes on another machine; None keeps them only in the
    local cache."""

    model: str = "smollm2"
    pool: tuple[str, ...] = POOL
    targets: tuple[str, ...] = TARGETS
    budget_rows: int = 32
    target_sketch_tokens: int = 2048
    eval_rows: int = 40
    sketch_dim: int = DEFAULT_SKETCH_DIM
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=32, batch=8)
    gt_seeds: int = 3
    top: int = 3  # the "uniform over the top k by FisherSketch" arm
    n_boot: int = 2000
    seed: int = 0
    quick: bool = False
    run_store: str | None = None

    def __post_init__(self) -> None:
        check_store_folder(self.run_store, "run_store")
        check_gt_seeds(self.gt_seeds)
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_positive(self, "budget_rows", "target_sketch_tokens", "eval_rows", "top", "n_boot")
        check_names(self.pool, "pool", 2)
        check_names(self.targets, "targets", 1)
        both = set(self.pool) & set(self.targets)
        if both:
            raise InputError(f"domains both in the pool and among the targets: {sorted(both)}")
        if not self.top <= len(self.pool):
            raise InputError(f"top ({self.top}) exceeds the pool ({len(self.pool)} sources)")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> MixturesConfig:
        if not quick:
            return cls(seed=seed)
        # quick: 6 sources, 4 targets, 1 seed, a small budget: not powered
        return cls(
            pool=("code_asyncio", "code_email", "wiki_people", "wiki_life_science", "news_lee", "licenses"),
            targets=("code_http", "wiki_space", "wiki_arts", "code_text"),
            budget_rows=16,
            eval_rows=16,
            lora=LoRAConfig(lr=1e-3, steps=16, batch=8),
            gt_seeds=1,
            n_boot=500,
            seed=seed,
            quick=True,
        )
