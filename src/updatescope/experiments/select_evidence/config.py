"""``select``'s config: top-k documents of a mixed pool, judged by LoRA fine-tuning.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    LoRAConfig,
    check_names,
    check_positive,
    check_seed,
    check_sketch_dim,
)

#: the mixed pool of ``select``: two wiki topics (one is the target's), prose, code, SMILES, numbers
SELECT_POOL = (
    "wiki_people",
    "wiki_countries",
    "news_lee",
    "python_docs",
    "code_email",
    "code_text",
    "smiles_nci_tpsa_low",
    "num_stocks",
)


@dataclass(frozen=True)
class SelectEvidenceConfig:
    """``select``: top-k documents of a mixed pool for a target, by every selection method,
    judged by LoRA fine-tuning on the selection (target eval-loss reduction, over seeds).

    The pool takes ``docs_per_domain`` train-split documents of each of ``pool`` (cut to
    ``doc_chars`` characters); the target's signature comes from ``target_docs`` of its
    sketch split and its loss from ``eval_docs`` of its eval split, so the three never share
    a document.  ``warmup_steps``: LoRA steps on the pool before the per-example gradients
    are taken (gradient selection tools warm the adapters up first; at init only the B
    matrices have a gradient).  ``proj_dim``: width of the random projection of the per-example-gradient
    baseline; ``seeds``: fine-tuning seeds (LoRA init, minibatch order, random selection)."""

    model: str = "smollm2"
    pool: tuple[str, ...] = SELECT_POOL
    target: str = "wiki_people"
    docs_per_domain: int = 20
    doc_chars: int = 800
    target_docs: int = 16
    eval_docs: int = 16
    k: int = 20
    sketch_dim: int = DEFAULT_SKETCH_DIM
    proj_dim: int = 4096
    warmup_steps: int = 8  # LoRA steps on pool minibatches before per-example gradients (0: at init)
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=24, batch=4)
    seeds: int = 5
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_names(self.pool, "pool", 2)
        if self.target not in self.pool:
            raise InputError(
                f"target {self.target!r} must be one of the pool domains {list(self.pool)} "
                "(its own-domain share of a selection is reported)"
            )
        check_positive(self, "docs_per_domain", "doc_chars", "target_docs", "eval_docs", "k", "proj_dim")
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        if self.warmup_steps < 0:
            raise InputError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.k >= self.docs_per_domain * len(self.pool):
            raise InputError(
                f"k={self.k} must be smaller than the pool ({self.docs_per_domain} x {len(self.pool)} documents)"
            )
        if not 3 <= self.seeds <= 100:
            raise InputError(f"seeds must be in [3, 100] (a paired CI over seeds needs 3), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SelectEvidenceConfig:
        if quick:
            # 2 shared CPU cores: 48 short documents (~40 tokens), top 6, 5 LoRA steps, 3 seeds
            return cls(
                docs_per_domain=6,
                doc_chars=160,
                target_docs=4,
                eval_docs=6,
                k=6,
                sketch_dim=1024,
                proj_dim=1024,
                warmup_steps=2,
                lora=LoRAConfig(lr=1e-3, steps=5, batch=4),
                seeds=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
