"""``select``'s config: top-k documents of a mixed pool for several targets, judged by LoRA
fine-tuning on each selection.  Torch-free."""

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

#: the mixed pool of the full run: 12 built-in domains (Wikipedia, prose, licences, code, numbers)
SELECT_POOL = (
    "wiki_people",
    "wiki_countries",
    "news_lee",
    "python_docs",
    "licenses",
    "analogies",
    "code_email",
    "code_http",
    "code_tests",
    "code_idlelib",
    "code_asyncio",
    "num_float_vectors",
)
#: the six targets of the full run (each also a pool domain, so its own-domain share is measurable)
SELECT_TARGETS = ("wiki_people", "wiki_countries", "licenses", "code_email", "code_tests", "num_float_vectors")
#: the pool and targets of ``--quick``: 10 domains, 2 targets
QUICK_POOL = (
    "wiki_people",
    "wiki_countries",
    "news_lee",
    "python_docs",
    "licenses",
    "code_email",
    "code_http",
    "code_tests",
    "smiles_wehi_halogen_polar",
    "num_float_vectors",
)
QUICK_TARGETS = ("wiki_people", "code_email")


@dataclass(frozen=True)
class SelectEvidenceConfig:
    """``select``: for each target, top-k documents of one mixed pool by every selector, judged
    by LoRA fine-tuning on the selection (target eval-loss reduction, over seeds).

    A *document* is a consecutive piece of ``doc_chars`` characters of a built-in domain's
    document (a last piece shorter than half of it is dropped), so short documents give a
    large pool.  The pool takes the first ``docs_per_domain`` train-split pieces of each of
    ``pool`` and hides their origin; each target (a pool domain) has ``target_docs`` pieces of
    its sketch split (they define it: signature, mean embedding, mean gradient, DSIR's target
    n-grams), ``eval_docs`` pieces of its eval split (the loss) and, for the oracle, the next
    train-split pieces after those in the pool (its own unused documents).  ``budgets``:
    selection sizes as fractions of the pool (k = round(fraction × pool size)).  Fine-tuning:
    ``lora`` with ``ceil(epochs × k / lora.batch)`` steps (one pass over the selection at
    ``epochs=1``; ``lora.steps`` is not read).  ``warmup_steps``: LoRA steps on pool minibatches
    before the per-example gradients are taken (at init only the B matrices have a gradient);
    ``proj_dim``: width of their random projection; ``dsir_*``: the hashed n-gram DSIR
    (``data-selection``) settings, ``dsir_min_length`` its minimum document length in words
    (shorter documents get no score and go last; the record counts them); ``seeds``:
    fine-tuning seeds (LoRA init, minibatch order, random selection); ``truth_store``: a
    directory keeping each fine-tuning result so a long run resumes across sittings, and so
    several processes running the same config on it split the fine-tunings (each claims one
    before running it and waits at the end for those others claimed)."""

    model: str = "smollm2"
    pool: tuple[str, ...] = SELECT_POOL
    targets: tuple[str, ...] = SELECT_TARGETS
    docs_per_domain: int = 170
    doc_chars: int = 300
    target_docs: int = 40
    eval_docs: int = 80
    budgets: tuple[float, ...] = (0.05, 0.2)
    epochs: float = 1.0
    sketch_dim: int = DEFAULT_SKETCH_DIM
    proj_dim: int = 4096
    warmup_steps: int = 8
    dsir_ngrams: int = 2
    dsir_buckets: int = 10000
    dsir_min_length: int = 1
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=1, batch=8)
    seeds: int = 3
    seed: int = 0
    truth_store: str | None = None
    n_boot: int = 2000
    quick: bool = False

    def __post_init__(self) -> None:
        check_names(self.pool, "pool", 2)
        check_names(self.targets, "targets", 1)
        outside = [t for t in self.targets if t not in self.pool]
        if outside:
            raise InputError(
                f"targets {outside} must be pool domains {list(self.pool)} (their own-domain share is reported)"
            )
        check_positive(
            self,
            "docs_per_domain",
            "doc_chars",
            "target_docs",
            "eval_docs",
            "epochs",
            "proj_dim",
            "dsir_ngrams",
            "dsir_buckets",
            "n_boot",
        )
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        if self.doc_chars < 20:
            raise InputError(f"doc_chars must be at least 20 (a few tokens per document), got {self.doc_chars}")
        if self.warmup_steps < 0:
            raise InputError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.dsir_min_length < 0:
            raise InputError(f"dsir_min_length must be >= 0, got {self.dsir_min_length}")
        if not self.budgets or len(set(self.budgets)) != len(self.budgets):
            raise InputError(f"budgets must be distinct pool fractions, got {list(self.budgets)}")
        for b in self.budgets:
            if not 0.0 < b < 1.0:
                raise InputError(f"each budget is a fraction of the pool in (0, 1), got {b}")
            if self.k(b) < 1:
                raise InputError(f"budget {b} keeps no document of a pool of {self.n_pool}")
        if not 3 <= self.seeds <= 100:
            raise InputError(f"seeds must be in [3, 100] (a paired test over seeds needs 3), got {self.seeds}")
        if self.truth_store is not None and not str(self.truth_store).strip():
            raise InputError("truth_store must name a directory")

    @property
    def n_pool(self) -> int:
        return self.docs_per_domain * len(self.pool)

    def k(self, budget: float) -> int:
        """Documents kept at a budget (a fraction of the pool)."""
        return int(round(budget * self.n_pool))

    def steps(self, k: int) -> int:
        """Fine-tuning steps for a selection of k documents."""
        return max(1, -(-int(round(self.epochs * k)) // self.lora.batch))

    def pieces_needed(self) -> dict[str, dict[str, int]]:
        """Pieces each domain split must have: {domain: {split: count}} (the oracle takes the
        target's train pieces after the pool's, as many as the largest budget keeps)."""
        need: dict[str, dict[str, int]] = {d: {"train": self.docs_per_domain} for d in self.pool}
        k_max = max(self.k(b) for b in self.budgets)
        for t in self.targets:
            need[t] = {"train": self.docs_per_domain + k_max, "sketch": self.target_docs, "eval": self.eval_docs}
        return need

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SelectEvidenceConfig:
        if quick:
            # 2 shared CPU cores: 200 short documents (~50 tokens), 2 targets, top 10%, 3 seeds
            return cls(
                pool=QUICK_POOL,
                targets=QUICK_TARGETS,
                docs_per_domain=20,
                doc_chars=200,
                target_docs=8,
                eval_docs=12,
                budgets=(0.1,),
                sketch_dim=1024,
                proj_dim=1024,
                warmup_steps=2,
                lora=LoRAConfig(lr=1e-3, steps=1, batch=4),
                seeds=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
