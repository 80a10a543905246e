"""The config pieces several experiments share.  Torch-free.

Each experiment's own config dataclass lives in its folder (``<experiment>/config.py``); it
has ``defaults(quick, seed)`` (the recorded ``--quick`` and full settings) and is changed only
through :func:`updatescope.experiments.settings.apply_settings` (``--set KEY=VALUE``), so every
value is checked by the validators below, before any model or data loads.  The result record
stores ``dataclasses.asdict`` of the config the run actually used.

Here: the per-concern configs (:class:`TokenSplits`, :class:`LoRAConfig`,
:class:`HeadFinetuneConfig`), :class:`SelectionConfig` (``source-selection``'s config, which
``smiles`` extends), the domain lists, the synthetic lab's defaults and the validators.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from updatescope import constants
from updatescope.constants import DEFAULT_SKETCH_DIM, MAP_CHOICES, check_sketch_dim
from updatescope.errors import InputError

__all__ = [
    "TokenSplits",
    "LoRAConfig",
    "HeadFinetuneConfig",
    "SelectionConfig",
    "QUICK_DOMAINS",
    "FULL_DOMAINS",
    "LORA_TARGETS",
    "check_positive",
    "check_sketch_dim",
    "check_seed",
    "check_gt_seeds",
    "check_names",
    "check_budget_grid",
    "check_budget_domains",
    "check_maps",
    "default_lab",
]

#: the source-selection domains (``updatescope domains`` lists them all)
QUICK_DOMAINS = (
    "code_email",
    "code_asyncio",
    "code_text",
    "wiki_people",
    "wiki_life_science",
    "news_lee",
    "python_docs",
    "smiles_nci_tpsa_low",
    "smiles_wehi_halogen_polar",
    "num_stocks",
)
FULL_DOMAINS = (
    "code_asyncio",
    "code_email",
    "code_xml",
    "code_http",
    "code_unittest",
    "code_tkinter",
    "code_text",
    "wiki_countries",
    "wiki_people",
    "wiki_life_science",
    "wiki_physical_science",
    "wiki_tech_math",
    "news_lee",
    "reviews",
    "python_docs",
    "licenses",
    "smiles_nci_tpsa_low",
    "smiles_nci_tpsa_high",
    "smiles_wehi_halogen_polar",
    "num_stocks",
)
#: LoRA adapts every attention and MLP projection of a Llama-style block
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def check_positive(cfg: Any, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if v is not None and not v > 0:
            raise InputError(f"{type(cfg).__name__}.{name} must be positive, got {v!r}")


def check_seed(value: int) -> None:
    """The seed range of every experiment (``constants.EXPERIMENT_SEED_LIMIT``)."""
    constants.check_seed(value, "seed", constants.EXPERIMENT_SEED_LIMIT)


def check_gt_seeds(value: int) -> None:
    if not 1 <= value <= 100:
        raise InputError(f"gt_seeds must be in [1, 100] (fine-tuning seeds per transfer value), got {value}")


def check_store_folder(value: str | None, name: str) -> None:
    """A store option (a folder a long run keeps its finished pieces in, to resume elsewhere):
    None, or a non-blank path that is not an existing non-folder, else one line naming it."""
    from pathlib import Path

    if value is None:
        return
    if not isinstance(value, str) or not value.strip() or (Path(value).exists() and not Path(value).is_dir()):
        raise InputError(f"{name} {value!r}: must name a folder")


def check_names(values: tuple[str, ...] | None, what: str, minimum: int) -> None:
    if values is None:
        return
    if len(values) < minimum:
        raise InputError(f"{what} needs at least {minimum} entries, got {len(values)}")
    if len(set(values)) != len(values):
        raise InputError(f"{what} has duplicates: {list(values)}")


@dataclass(frozen=True)
class TokenSplits:
    """Tokens captured per domain and split (None: the split is not used)."""

    sketch: int
    train: int | None = None
    eval: int | None = None

    def __post_init__(self) -> None:
        check_positive(self, "sketch", "train", "eval")

    def used(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class LoRAConfig:
    """LoRA ground truth (``peft``): adapters on the last ``n_last`` decoder blocks, head frozen,
    trained by Adam for ``steps`` minibatches of ``batch`` sequences of ``seq_len`` tokens."""

    n_last: int = 2
    r: int = 8
    alpha: float = 16
    targets: tuple[str, ...] = LORA_TARGETS
    lr: float = 3e-4
    steps: int = 20
    batch: int = 4
    seq_len: int = 128

    def __post_init__(self) -> None:
        check_positive(self, "n_last", "r", "alpha", "lr", "steps", "batch")
        if self.seq_len < 2:
            raise InputError(f"LoRAConfig.seq_len must be at least 2, got {self.seq_len}")
        if not self.targets:
            raise InputError("LoRAConfig.targets must name at least one projection")


@dataclass(frozen=True)
class HeadFinetuneConfig:
    """Head-only ground truth: Adam on the output head for ``steps`` minibatches of ``batch``
    rows (None: full batch); ``extra_rows`` high-probability rows are trainable besides the
    label rows (None: the whole head)."""

    lr: float = 3e-5
    steps: int = 60
    batch: int | None = 128
    extra_rows: int | None = 2048

    def __post_init__(self) -> None:
        check_positive(self, "lr", "steps", "batch")
        if self.extra_rows is not None and self.extra_rows < 0:
            raise InputError(f"HeadFinetuneConfig.extra_rows must be >= 0, got {self.extra_rows}")


def check_budget_grid(grid: tuple[int, ...] | None, ground_truth: str) -> None:
    """A budget grid: 2 to 8 distinct LoRA step counts, for a LoRA ground truth."""
    if grid is None:
        return
    if (
        not 2 <= len(grid) <= 8
        or len(set(grid)) != len(grid)
        or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100_000 for v in grid)
    ):
        raise InputError(f"budget_grid must be 2 to 8 distinct step counts in [1, 100000], got {list(grid)}")
    if ground_truth != "lora":
        raise InputError("budget_grid chooses the LoRA steps: it needs ground_truth=lora")


def check_budget_domains(k: int | None, n_domains: int) -> None:
    """The budget probe's domain count: 3 to all ``n_domains`` of the run (None: the default).
    Called by the config when the domain list is known there, else by the runner once it is."""
    if k is not None and not 3 <= k <= n_domains:
        raise InputError(f"budget_domains must be in [3, {n_domains}] (the number of domains), got {k}")


@dataclass(frozen=True)
class SelectionConfig:
    """``source-selection``: rank every other domain as a source for each target domain."""

    model: str = "smollm2"
    domains: tuple[str, ...] | Literal["all"] = FULL_DOMAINS  # "all": every built-in domain
    candidates: int | None = None  # sources per target, a seeded random subset of the others (None: all)
    tokens: TokenSplits = TokenSplits(1500, 4000, 1000)
    sketch_dim: int = DEFAULT_SKETCH_DIM
    ground_truth: Literal["lora", "head"] = "lora"
    lora: LoRAConfig = LoRAConfig()
    finetune: HeadFinetuneConfig = HeadFinetuneConfig()
    max_cached_logits: int = 2**29  # base logits of all splits are cached below this many floats
    exact_n: int | None = 500  # rows per task for the exact Gram identity (None: all)
    baseline_n: int | None = 500  # rows per task for the baselines (None: all)
    gt_seeds: int = 3  # fine-tuning seeds averaged into the ground truth (>= 2 gives a noise ceiling)
    # LoRA steps to choose from on the validation split (selection.choose_budget); None: lora.steps
    budget_grid: tuple[int, ...] | None = None
    budget_domains: int | None = None  # domains of the budget probe, spread over the domain list (None: 6)
    # stop after the budget probe: record its choice and measure no ground truth (to check the
    # budget of a run recorded without one, or to choose it before a long run)
    budget_only: bool = False
    # a directory holding the LoRA ground truth one (source, fine-tuning seed) file at a time
    # (groundtruth.store): read where present, written as each fine-tuning finishes, so a long
    # run can be finished in several sittings on other machines (None: machine-local cache only)
    truth_store: str | None = None
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_budget_grid(self.budget_grid, self.ground_truth)
        if self.truth_store is not None and (self.ground_truth != "lora" or not self.truth_store.strip()):
            raise InputError(
                f"truth_store keeps LoRA ground truth: it needs ground_truth=lora and a directory, "
                f"got {self.truth_store!r} with ground_truth={self.ground_truth}"
            )
        if self.budget_only and self.budget_grid is None:
            raise InputError("budget_only records the budget probe alone: it needs budget_grid")
        if self.domains == "all":
            from updatescope.data.domains import list_domains

            object.__setattr__(self, "domains", tuple(d.name for d in list_domains()))
        check_names(self.domains, "domains", 3)
        if self.budget_domains is not None:
            if self.budget_grid is None:
                raise InputError("budget_domains sizes the budget probe: it needs budget_grid")
            if self.domains is not None:
                check_budget_domains(self.budget_domains, len(self.domains))
        if self.candidates is not None:
            n = len(self.domains) if self.domains is not None else None
            if self.candidates < 2 or (n is not None and self.candidates > n - 1):
                raise InputError(
                    f"candidates must be in [2, {n - 1 if n else 'domains - 1'}] (sources per "
                    f"target among the other domains), got {self.candidates}"
                )
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_positive(self, "max_cached_logits", "exact_n", "baseline_n")
        check_gt_seeds(self.gt_seeds)
        if self.ground_truth != "head" and (self.tokens.train is None or self.tokens.eval is None):
            raise InputError("tokens.train and tokens.eval are needed for a fine-tuning ground truth")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SelectionConfig:
        if not quick:
            return cls(seed=seed)
        # about 2.5 passes over the train split at 512 tokens per step
        return cls(
            domains=QUICK_DOMAINS,
            tokens=TokenSplits(300, 1600, 400),
            lora=LoRAConfig(steps=8),
            exact_n=300,
            baseline_n=300,
            seed=seed,
            quick=True,
        )


def check_maps(act_map: str, error_map: str) -> None:
    for side, kind in (("act_map", act_map), ("error_map", error_map)):
        if kind not in MAP_CHOICES:
            raise InputError(f"{side} must be one of {', '.join(MAP_CHOICES)}; got {kind!r}")


def default_lab(quick: bool, seed: int) -> Any:
    from updatescope.locallinear.config import LabConfig  # torch-free
    from updatescope.locallinear.config import quick as quick_lab

    lab = LabConfig(seed=seed)
    return quick_lab(lab) if quick else lab
