"""``verbalizer``'s config: one fixed prompt, answer-word sets as tasks.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    HeadFinetuneConfig,
    LoRAConfig,
    check_budget_grid,
    check_gt_seeds,
    check_positive,
    check_seed,
    check_sketch_dim,
)


@dataclass(frozen=True)
class VerbalizerConfig:
    """``verbalizer``: one fixed prompt, answer-word sets as tasks."""

    model: str = "smollm2"
    prompt: str = "Review: {text}\nQuestion: Is this review positive?\nAnswer:"
    n_sets: int = 10
    train_frac: float = 0.6
    design: Literal["sets", "contrast"] = "sets"  # contrast: flipped / one-shared-word / control sets
    verify_n: int = 48  # prompts captured under every set to check the activations are identical
    max_sentences: int | None = None  # None: every sentence of the polarity sample
    sketch_dim: int = DEFAULT_SKETCH_DIM
    ground_truth: Literal["lora", "head"] = "lora"
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=30, batch=16)
    finetune: HeadFinetuneConfig = HeadFinetuneConfig(lr=1e-4, steps=30, batch=None, extra_rows=512)
    exact_n: int | None = None
    baseline_n: int | None = None
    gt_seeds: int = 3  # fine-tuning seeds averaged into the ground truth (>= 2 gives a noise ceiling)
    # sketch sizes of the resolution curve (sketch vs exact at each, over resolution_seeds bases); None: none
    resolution_dims: tuple[int, ...] | None = None
    resolution_seeds: int | None = None  # None: 3
    # LoRA steps to choose from before the truth is measured: every set is fine-tuned on the
    # first part of its train rows and evaluated on the last ``budget_val_frac`` of the train
    # split (never the eval split); None: lora.steps
    budget_grid: tuple[int, ...] | None = None
    budget_val_frac: float = 0.3
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_gt_seeds(self.gt_seeds)
        check_budget_grid(self.budget_grid, self.ground_truth)
        if not 0.0 < self.budget_val_frac < 1.0:
            raise InputError(f"budget_val_frac must be in (0, 1), got {self.budget_val_frac}")
        if self.resolution_dims is not None:
            if not 1 <= len(self.resolution_dims) <= 8:
                raise InputError(f"resolution_dims takes 1 to 8 sketch sizes, got {len(self.resolution_dims)}")
            for m in self.resolution_dims:
                check_sketch_dim(m)
        if self.resolution_seeds is not None:
            if self.resolution_dims is None:
                raise InputError("resolution_seeds sizes the resolution curve: it needs resolution_dims")
            if not 2 <= self.resolution_seeds <= 20:
                raise InputError(
                    f"resolution_seeds must be in [2, 20] (bases per sketch size), got {self.resolution_seeds}"
                )
        if not 2 <= self.n_sets <= 10:
            raise InputError(f"n_sets must be in [2, 10] (the built-in verbalizer sets), got {self.n_sets}")
        if not 0.0 < self.train_frac < 1.0:
            raise InputError(f"train_frac must be in (0, 1), got {self.train_frac}")
        if "{text}" not in self.prompt:
            raise InputError("prompt must contain {text}")
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_positive(self, "verify_n", "max_sentences", "exact_n", "baseline_n")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> VerbalizerConfig:
        # quick: 6 sets, 5 candidates per target: the paper's chance level of 20%
        return cls(n_sets=6, verify_n=16, seed=seed, quick=True) if quick else cls(seed=seed)
