"""One frozen, validated config dataclass per concern of the experiments.  Torch-free.

Each experiment's config has ``defaults(quick, seed)`` (the recorded ``--quick`` and full
settings) and is changed only through :func:`updatescope.experiments.settings.apply_settings`
(``--set KEY=VALUE``), so every value is checked here, before any model or data loads.
The result record stores ``dataclasses.asdict`` of the config the run actually used.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from updatescope.constants import MAP_CHOICES, check_sketch_dim
from updatescope.errors import InputError

__all__ = [
    "TokenSplits",
    "LoRAConfig",
    "HeadFinetuneConfig",
    "SelectionConfig",
    "SmilesConfig",
    "VerbalizerConfig",
    "VisionEstimatorConfig",
    "EstimatorConfig",
    "RecoveryConfig",
    "RandomSearchConfig",
    "SteeringConfig",
    "NetworkExperimentConfig",
    "SelectEvidenceConfig",
    "LoRARecoveryConfig",
    "NetworkSelectionConfig",
    "LLMSearchConfig",
    "SchedulesConfig",
    "QUICK_DOMAINS",
    "FULL_DOMAINS",
    "LORA_TARGETS",
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


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        v = getattr(cfg, name)
        if v is not None and not v > 0:
            raise InputError(f"{type(cfg).__name__}.{name} must be positive, got {v!r}")


def _sketch_dim(value: int) -> None:
    check_sketch_dim(value)


def _seed(value: int) -> None:
    if not 0 <= value < 2**63:
        raise InputError(f"seed must be in [0, 2^63), got {value}")


def _gt_seeds(value: int) -> None:
    if not 1 <= value <= 100:
        raise InputError(f"gt_seeds must be in [1, 100] (fine-tuning seeds per transfer value), got {value}")


def _names(values: tuple[str, ...] | None, what: str, minimum: int) -> None:
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
        _positive(self, "sketch", "train", "eval")

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
        _positive(self, "n_last", "r", "alpha", "lr", "steps", "batch")
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
        _positive(self, "lr", "steps", "batch")
        if self.extra_rows is not None and self.extra_rows < 0:
            raise InputError(f"HeadFinetuneConfig.extra_rows must be >= 0, got {self.extra_rows}")


def _budget_grid(grid: tuple[int, ...] | None, ground_truth: str) -> None:
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
    sketch_dim: int = 4096
    ground_truth: Literal["lora", "head"] = "lora"
    lora: LoRAConfig = LoRAConfig()
    finetune: HeadFinetuneConfig = HeadFinetuneConfig()
    max_cached_logits: int = 2**29  # base logits of all splits are cached below this many floats
    exact_n: int | None = 500  # rows per task for the exact Gram identity (None: all)
    baseline_n: int | None = 500  # rows per task for the baselines (None: all)
    gt_seeds: int = 3  # fine-tuning seeds averaged into the ground truth (>= 2 gives a noise ceiling)
    # LoRA steps to choose from on the validation split (source_selection.choose_budget); None: lora.steps
    budget_grid: tuple[int, ...] | None = None
    budget_domains: int | None = None  # domains of the budget probe, spread over the domain list (None: 6)
    # stop after the budget probe: record its choice and measure no ground truth (to check the
    # budget of a run recorded without one, or to choose it before a long run)
    budget_only: bool = False
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _budget_grid(self.budget_grid, self.ground_truth)
        if self.budget_only and self.budget_grid is None:
            raise InputError("budget_only records the budget probe alone: it needs budget_grid")
        if self.domains == "all":
            from updatescope.data.domains import list_domains

            object.__setattr__(self, "domains", tuple(d.name for d in list_domains()))
        _names(self.domains, "domains", 3)
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
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        _positive(self, "max_cached_logits", "exact_n", "baseline_n")
        _gt_seeds(self.gt_seeds)
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


@dataclass(frozen=True)
class SmilesConfig(SelectionConfig):
    """``smiles``: the SMILES domains (None: all of them), correlation with perplexity reduction.

    ``budget_grid`` / ``budget_domains`` / ``budget_only``: the LoRA steps chosen on the
    validation (sketch) split before the truth is measured, as in ``source-selection``.

    ``collection``: None (default, the recorded experiment): the 9 ``smiles`` domains from two
    collections (NCI, WEHI).  "nci": the 12 ``smiles_nci`` property bins of one collection
    (9 with ``--quick``), so the same-collection indicator is constant and only the sketch
    geometry (or the property-family label, easiness, size) can rank sources."""

    domains: tuple[str, ...] | None = None  # type: ignore[assignment]
    n_perm: int = 5000  # permutations of the Mantel-style test
    collection: Literal["nci"] | None = None  # within one collection (see above)

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive(self, "n_perm")
        # the pooled correlation and its Mantel test need every pair: refuse a candidate subset
        # rather than ignore it
        if self.candidates is not None:
            raise InputError(
                "candidates is not a smiles setting: the pooled correlation and its Mantel test use every pair of bins"
            )
        if self.collection not in (None, "nci"):
            raise InputError(
                f"collection must be None or 'nci' (the one collection with >= 9 bins), got {self.collection!r}"
            )

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SmilesConfig:
        base = SelectionConfig.defaults(quick, seed)
        # quick sizes equal source-selection's, so the SMILES domains it uses are cache hits
        return cls(**{**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, "domains": None})


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
    sketch_dim: int = 4096
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
        _gt_seeds(self.gt_seeds)
        _budget_grid(self.budget_grid, self.ground_truth)
        if not 0.0 < self.budget_val_frac < 1.0:
            raise InputError(f"budget_val_frac must be in (0, 1), got {self.budget_val_frac}")
        if self.resolution_dims is not None:
            if not 1 <= len(self.resolution_dims) <= 8:
                raise InputError(f"resolution_dims takes 1 to 8 sketch sizes, got {len(self.resolution_dims)}")
            for m in self.resolution_dims:
                _sketch_dim(m)
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
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        _positive(self, "verify_n", "max_sentences", "exact_n", "baseline_n")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> VerbalizerConfig:
        # quick: 6 sets, 5 candidates per target: the paper's chance level of 20%
        return cls(n_sets=6, verify_n=16, seed=seed, quick=True) if quick else cls(seed=seed)


@dataclass(frozen=True)
class VisionEstimatorConfig:
    """EfficientNet-lite0 part of ``estimator``: ``tasks`` tasks of ``n`` views from a pool of
    ``photos`` (None: every shipped photograph) × ``per_photo`` augmented views."""

    photos: tuple[str, ...] | None = None
    per_photo: int = 200
    tasks: int = 24
    spanning: int = 6  # extra "mix" tasks interpolating top-1 and per-photo labels (0: none)
    n: int = 1000
    size: int = 224
    batch: int = 32
    seed: int = 0
    sketch_dim: int = 4096
    act_map: str = "auto"
    error_map: str = "auto"
    seeds: tuple[int, ...] = (0, 1, 2)
    speed_n: int = 2000
    repeats: int = 3
    exact_repeats: int = 3

    def __post_init__(self) -> None:
        _positive(self, "per_photo", "tasks", "n", "size", "batch", "speed_n", "repeats", "exact_repeats")
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        _maps(self.act_map, self.error_map)
        _names(self.photos, "photos", 1)
        if (
            isinstance(self.spanning, bool)
            or not isinstance(self.spanning, int)
            or self.spanning < 0
            or self.spanning == 1
        ):
            raise InputError(f"vision.spanning must be 0 or at least 2, got {self.spanning!r}")
        if not self.seeds:
            raise InputError("seeds must list at least one sketch seed")


def _maps(act_map: str, error_map: str) -> None:
    for side, kind in (("act_map", act_map), ("error_map", error_map)):
        if kind not in MAP_CHOICES:
            raise InputError(f"{side} must be one of {', '.join(MAP_CHOICES)}; got {kind!r}")


@dataclass(frozen=True)
class EstimatorConfig:
    """``estimator``: sketch against exact alignments on SmolLM2 streams and EfficientNet tasks."""

    parts: tuple[Literal["smollm2", "vision"], ...] = ("smollm2", "vision")
    model: str = "smollm2"
    domains: tuple[str, ...] = FULL_DOMAINS
    # full: the sketch split only, 1,000 tokens per domain: the exact 20-task matrix at
    # K = 49,152 costs O(T² n² (d + K)); quick: source-selection's sizes (cache hits), and
    # the speed streams pool all three splits
    tokens: TokenSplits = TokenSplits(1000)
    sketch_dim: int = 4096
    seeds: tuple[int, ...] = (0, 1, 2)
    act_map: str = "auto"
    error_map: str = "auto"
    speed_n: int = 2000
    repeats: int = 3
    exact_repeats: int = 3
    vision: VisionEstimatorConfig = VisionEstimatorConfig()
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.parts or len(set(self.parts)) != len(self.parts):
            raise InputError(f"parts must list smollm2 and/or vision once each; got {list(self.parts)}")
        _names(self.domains, "domains", 3)
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        _maps(self.act_map, self.error_map)
        _positive(self, "speed_n", "repeats", "exact_repeats")
        if not self.seeds:
            raise InputError("seeds must list at least one sketch seed")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> EstimatorConfig:
        seeds = (seed, seed + 1, seed + 2)
        if not quick:
            return cls(seeds=seeds, vision=VisionEstimatorConfig(seed=seed, seeds=seeds), seed=seed)
        return cls(
            domains=QUICK_DOMAINS,
            tokens=TokenSplits(300, 400, 300),
            seeds=seeds,
            exact_repeats=1,
            vision=VisionEstimatorConfig(per_photo=64, tasks=8, spanning=5, n=300, seed=seed, seeds=seeds),
            seed=seed,
            quick=True,
        )


def _lab(quick: bool, seed: int) -> Any:
    from updatescope.locallinear.config import LabConfig  # torch-free
    from updatescope.locallinear.config import quick as quick_lab

    lab = LabConfig(seed=seed)
    return quick_lab(lab) if quick else lab


@dataclass(frozen=True)
class RecoveryConfig:
    """``recovery``: the synthetic lab's recovery protocol and its analyses.  ``lab`` is a
    :class:`updatescope.locallinear.config.LabConfig` (set its fields as ``lab.recover_lr=...``)."""

    lab: Any = field(default_factory=lambda: _lab(False, 0))
    seeds: int = 3  # replicates (fresh forgetting/recovery batches); every number is mean +- SE
    batches_per_task: int = 8  # gradients per task in the static planes (width 4 x this)
    plane_n: int = 256  # sequences per task gradient (planes, drift, resample floor)
    rank_n: int = 100  # per-example gradients per task for the effective rank
    krylov_k: int = 30  # matched horizon: k = 1..krylov_k steps and Krylov dimensions
    drift_steps: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 150, 200)
    # eta = lab.eta_lambda / the largest lambda_max of eta_draws Hessian batches at theta_forg (eta_iters
    # power iterations each), then re-measured on another batch: one draw with 20 iterations set a step
    # whose full-lab recovery diverged (loss NaN at step 4)
    eta_draws: int = 3
    eta_iters: int = 40
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _positive(self, "seeds", "batches_per_task", "plane_n", "rank_n", "krylov_k", "eta_draws", "eta_iters")
        _seed(self.seed)
        if self.rank_n < 2:
            raise InputError(f"rank_n must be >= 2, got {self.rank_n}")
        if not self.drift_steps or any(k < 1 for k in self.drift_steps):
            raise InputError(f"drift_steps must be positive recovery steps, got {list(self.drift_steps)}")
        if self.krylov_k > self.lab.dense_steps:
            raise InputError(f"krylov_k={self.krylov_k} exceeds lab.dense_steps={self.lab.dense_steps}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> RecoveryConfig:
        if quick:
            return cls(
                lab=_lab(True, seed),
                seeds=3,
                batches_per_task=2,
                krylov_k=10,
                drift_steps=(1, 5, 10, 50, 100, 150),
                seed=seed,
                quick=True,
            )
        return cls(lab=_lab(False, seed), seed=seed)


@dataclass(frozen=True)
class RandomSearchConfig:
    """``random-search``: Best-of-N in subspaces of the synthetic lab (``lab`` as in recovery)."""

    lab: Any = field(default_factory=lambda: _lab(False, 0))
    n_eval: int = 64  # sequences per task in each split
    n_sweep: int = 32
    n_curve: int = 128
    reps: int = 4
    r_sub: int = 10
    eta_draws: int = 3  # the lab's recovery step from the largest lambda_max of this many Hessian batches
    eta_iters: int = 40  # (as in recovery: one 20-iteration draw diverged in the full lab)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _positive(self, "n_eval", "n_sweep", "n_curve", "reps", "r_sub", "eta_draws", "eta_iters")
        _seed(self.seed)

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> RandomSearchConfig:
        if quick:
            return cls(lab=_lab(True, seed), n_eval=32, n_sweep=16, n_curve=64, reps=2, seed=seed, quick=True)
        return cls(lab=_lab(False, seed), seed=seed)


@dataclass(frozen=True)
class NetworkExperimentConfig:
    """``network``: do head / block-diagonal / last-k-blocks Fisher alignments track the exact
    full-network alignment?  Tiny models (the synthetic transformer, a random Llama), briefly
    pre-trained; one target task and sources whose label map agrees with the target's on a
    fraction ``label_agreement`` of tokens and whose inputs come from the target's token pool
    for a fraction ``input_overlap`` of sequences (the rest from a disjoint pool)."""

    models: tuple[str, ...] = ("synthetic", "llama")
    width: int = 32  # hidden size of both models
    n_layer: int = 4  # transformer blocks
    vocab: int = 64  # Llama vocabulary (the synthetic transformer has its own 15 tokens)
    seq_len: int = 12  # Llama tokens per sequence (synthetic: its context, 11)
    n_seq: int = 64  # sequences per task (samples of the exact and sketched Fishers)
    label_agreement: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    input_overlap: tuple[float, ...] = (0.0, 0.5, 1.0)
    last_k: int = 1  # transformer blocks (plus the head) in the last-k sketch
    pretrain_steps: int = 60  # Adam steps on the task mixture before measuring
    sketch_dim: int = 4096
    cost_repeats: int = 7  # timed repeats per cost measurement (median reported)
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _positive(self, "width", "n_layer", "vocab", "seq_len", "n_seq", "last_k", "cost_repeats")
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        _names(self.models, "models", 1)
        bad = [m for m in self.models if m not in ("synthetic", "llama")]
        if bad:
            raise InputError(f"models must be 'synthetic' or 'llama', got {bad}")
        if self.width % 4:
            raise InputError(f"width must be a multiple of 4 (4 attention heads), got {self.width}")
        if self.vocab < 8 or self.seq_len < 4 or self.n_seq < 4:
            raise InputError(
                f"need vocab >= 8, seq_len >= 4, n_seq >= 4; got {self.vocab}, {self.seq_len}, {self.n_seq}"
            )
        if self.last_k > self.n_layer:
            raise InputError(f"last_k={self.last_k} exceeds n_layer={self.n_layer}")
        if self.pretrain_steps < 0:
            raise InputError(f"pretrain_steps must be >= 0, got {self.pretrain_steps}")
        for name in ("label_agreement", "input_overlap"):
            v = getattr(self, name)
            _names(v, name, 1)
            if any(not 0.0 <= x <= 1.0 for x in v):
                raise InputError(f"{name} values must be in [0, 1], got {list(v)}")
        if len(self.label_agreement) * len(self.input_overlap) < 4:
            raise InputError("need at least 4 source tasks (label_agreement x input_overlap) for a Spearman")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> NetworkExperimentConfig:
        if quick:
            return cls(
                n_seq=24,
                label_agreement=(0.0, 1 / 3, 2 / 3, 1.0),
                pretrain_steps=30,
                sketch_dim=1024,
                cost_repeats=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)


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
        _positive(self, "n_train", "n_select", "n_test", "seeds", "search_n", "search_seeds", "batch_size")
        _seed(self.seed)
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
    sketch_dim: int = 4096
    proj_dim: int = 4096
    warmup_steps: int = 8  # LoRA steps on pool minibatches before per-example gradients (0: at init)
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=24, batch=4)
    seeds: int = 5
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _names(self.pool, "pool", 2)
        if self.target not in self.pool:
            raise InputError(
                f"target {self.target!r} must be one of the pool domains {list(self.pool)} "
                "(its own-domain share of a selection is reported)"
            )
        _positive(self, "docs_per_domain", "doc_chars", "target_docs", "eval_docs", "k", "proj_dim")
        _sketch_dim(self.sketch_dim)
        _seed(self.seed)
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


@dataclass(frozen=True)
class NetworkSelectionConfig:
    """``network-selection``: does a sketch of the LoRA-targeted layers predict LoRA transfer
    better than the head sketch?  Reads the ground truth of a ``source-selection`` record
    (``ground_truth_record``; nothing is retrained), re-creates its sketch-split token streams
    and ranks sources by the head sketch, the network sketch of the LoRA-targeted layers
    (record's ``lora.targets`` × last ``lora.n_last`` blocks) and, with ``all_layers``, the
    network sketch of every linear layer of those blocks plus the head.

    ``sketch_tokens`` / ``sketch_dim``: None takes the record's values (the same streams and
    basis size its head sketch used); fewer tokens take a prefix of the same streams.
    ``mode``: the network sketch's sample unit ("token", the library default, or "sequence").
    ``profile_pairs``: domain pairs whose per-block profile is reported (highest, median,
    lowest mean transfer first)."""

    ground_truth_record: str = "docs/results/source_selection_full.json"
    sketch_tokens: int | None = None
    sketch_dim: int | None = None
    mode: str = "token"
    all_layers: bool = True
    profile_pairs: int = 3
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _positive(self, "sketch_tokens")
        if self.sketch_dim is not None:
            _sketch_dim(self.sketch_dim)
        _seed(self.seed)
        if not str(self.ground_truth_record).endswith(".json"):
            raise InputError(
                f"ground_truth_record must be a source-selection record (.json), got {self.ground_truth_record!r}"
            )
        if self.mode not in ("token", "sequence"):
            raise InputError(f"mode must be 'token' or 'sequence', got {self.mode!r}")
        if not 0 <= self.profile_pairs <= 20:
            raise InputError(f"profile_pairs must be in [0, 20], got {self.profile_pairs}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> NetworkSelectionConfig:
        if quick:
            return cls(ground_truth_record="docs/results/source_selection_quick.json", seed=seed, quick=True)
        return cls(seed=seed)


#: the tasks of ``lora-recovery``: code, prose, an encyclopedia topic, molecules
LORA_RECOVERY_TASKS = ("code_email", "news_lee", "wiki_people", "smiles_nci_tpsa_low")


@dataclass(frozen=True)
class LoRARecoveryConfig:
    """``lora-recovery``: paper B's recovery after forgetting with LoRA on the packaged model.

    LoRA (``lora``: rank, scaling, targets -- the tail's attention projections -- and the
    multitask phase: Adam at ``lora.lr`` for ``lora.steps`` steps of ``lora.batch`` sequences of
    ``lora.seq_len`` tokens per task) on the last ``lora.n_last`` blocks, run on cached block
    inputs.  Each task keeps ``train_tokens`` counted targets of its train split for training
    and measurement batches and ``eval_tokens`` of its eval split for the eval loss.
    Forgetting: Adam at ``forget_lr`` on ``focus`` until the other tasks' mean eval loss has
    risen by ``forget_rise`` nats over theta_mt (checked every ``forget_eval_every`` steps, at
    most ``forget_cap`` steps).  Recovery: SGD on the mix at eta = ``eta_lambda`` / lambda_max
    (HVP power iteration, ``power_iters`` steps, ``hessian_batch`` sequences per task) for
    ``recover_steps`` steps, the first ``dense_steps`` of them kept for the prefix bases.
    ``seeds`` replicates share theta_mt and draw fresh forgetting, recovery and measurement
    minibatches."""

    model: str = "smollm2"
    tasks: tuple[str, ...] = LORA_RECOVERY_TASKS
    focus: str = "smiles_nci_tpsa_low"
    lora: LoRAConfig = LoRAConfig(
        n_last=2,
        r=8,
        alpha=16,
        targets=("q_proj", "k_proj", "v_proj", "o_proj"),
        lr=2e-3,
        steps=120,
        batch=4,
        seq_len=64,
    )
    train_tokens: int = 32768  # >= 2 x plane_batch sequences of 64 tokens, where the split has them
    eval_tokens: int = 512
    forget_lr: float = 3e-3
    forget_cap: int = 200
    forget_rise: float = 0.3
    forget_eval_every: int = 5
    recover_steps: int = 100
    dense_steps: int = 30
    eta_lambda: float = 1.0
    hessian_batch: int = 4
    power_iters: int = 20
    recover_eval_every: int = 5
    # task plane, resample floor and drift: gradients of plane_batch sequences per task (two
    # draws at each point, disjoint while the task has 2 x plane_batch sequences, else sampled
    # with replacement and recorded so); each draw is accumulated over batches_per_task / 2
    # micro-batches, whose gradients span the static planes (width tasks x batches_per_task)
    batches_per_task: int = 8
    plane_batch: int = 256
    rank_n: int = 100  # per-sequence gradients per task for the effective rank
    drift_steps: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
    seeds: int = 3
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        _names(self.tasks, "tasks", 2)
        if self.focus not in self.tasks:
            raise InputError(f"focus {self.focus!r} must be one of the tasks {list(self.tasks)}")
        _positive(
            self,
            "train_tokens",
            "eval_tokens",
            "forget_lr",
            "forget_cap",
            "forget_rise",
            "forget_eval_every",
            "recover_steps",
            "dense_steps",
            "hessian_batch",
            "power_iters",
            "recover_eval_every",
            "batches_per_task",
            "plane_batch",
            "seeds",
        )
        _seed(self.seed)
        if not 0 < self.eta_lambda < 2:
            raise InputError(f"eta_lambda must lie in (0, 2) for stable gradient descent, got {self.eta_lambda}")
        if self.dense_steps > self.recover_steps:
            raise InputError(f"dense_steps={self.dense_steps} exceeds recover_steps={self.recover_steps}")
        if self.rank_n < 2:
            raise InputError(f"rank_n must be >= 2, got {self.rank_n}")
        if self.batches_per_task % 2 or self.batches_per_task // 2 > self.plane_batch:
            raise InputError(
                f"batches_per_task must be even (half per draw) and at most 2 x plane_batch="
                f"{2 * self.plane_batch}, got {self.batches_per_task}"
            )
        if not self.drift_steps or any(not 1 <= k <= self.recover_steps for k in self.drift_steps):
            raise InputError(
                f"drift_steps must lie in 1..recover_steps={self.recover_steps}, got {list(self.drift_steps)}"
            )
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> LoRARecoveryConfig:
        if quick:
            # 2 shared CPU cores (under 10 minutes): sequences of 8 tokens so that gradients of 256
            # sequences stay affordable (the LM head over the whole vocabulary dominates), >= 512
            # sequences per task, short phases, 3 replicates, drift at the steps the docs use
            return cls(
                lora=LoRAConfig(
                    n_last=2,
                    r=4,
                    alpha=8,
                    targets=("q_proj", "k_proj", "v_proj", "o_proj"),
                    lr=3e-3,
                    steps=40,
                    batch=8,
                    seq_len=8,
                ),
                train_tokens=4096,
                eval_tokens=128,
                forget_cap=40,
                forget_rise=0.2,
                recover_steps=30,
                dense_steps=20,
                power_iters=6,
                hessian_batch=8,
                batches_per_task=8,
                plane_batch=256,
                rank_n=100,
                drift_steps=(1, 10, 30),
                seeds=3,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)


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
        _positive(
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
        _seed(self.seed)
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


@dataclass(frozen=True)
class SchedulesConfig:
    """``schedules``: simultaneous multitask training vs sequential specialisation, each
    followed by the lab's forgetting on ``lab.focus`` and its stable recovery.  ``lab`` as in
    recovery (both schedules use its step budget ``lab.mt_steps`` and optimiser settings)."""

    # eta_lambda 0.5: a margin for power iterations that underestimate lambda_max (an earlier
    # run at 1.0 with 8 iterations diverged); checked at theta_forg and theta_rec
    lab: Any = field(default_factory=lambda: dataclasses.replace(_lab(False, 0), eta_lambda=0.5))
    # sequential task order; () = the focus task first (its specialisation is the oldest),
    # then the other tasks in the lab's order
    order: tuple[str, ...] = ()
    recover_tol: float = 0.05  # nats: recovered once the eval mix loss is within this of its pre-forgetting value
    share_steps: tuple[int, ...] = (10, 50, 100, 200)  # recovery steps k for "share of the rise undone"
    capture_k: tuple[int, ...] = (10, 20)  # prefix widths for the capture of Delta_GD
    seeds: int = 3  # replicates (fresh forgetting/recovery batches, shared by both schedules)
    regime_min: float = 0.9  # exact match both starts must reach (regime check) before they are compared
    check_iters: int = 40  # power iterations of the independent lambda_max check at theta_forg
    # eta = lab.eta_lambda / the largest lambda_max of this many Hessian batches at theta_forg (check_iters
    # iterations each); the check above then uses yet another batch.  One draw with lab.power_iters
    # set a step that another batch measured at eta*lambda_max = 2.7 in an earlier run
    eta_draws: int = 3
    # sequential with replay: each later phase keeps this share of its step on the earlier tasks
    # (lab.sequential_model); 0 is pure sequential specialisation, whose start keeps only the last task
    replay: float = 0.0
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        from updatescope.locallinear.config import TASKS  # torch-free

        _positive(self, "recover_tol", "seeds", "check_iters", "eta_draws")
        if isinstance(self.replay, bool) or not isinstance(self.replay, (int, float)) or not 0 <= self.replay < 1:
            raise InputError(f"replay must lie in [0, 1), got {self.replay!r}")
        if not 0 < self.regime_min <= 1:
            raise InputError(f"regime_min must lie in (0, 1], got {self.regime_min}")
        _seed(self.seed)
        if self.order and sorted(self.order) != sorted(TASKS):
            raise InputError(f"order must list every task once, got {list(self.order)}; tasks: {list(TASKS)}")
        lab = self.lab
        if lab.mt_steps < len(TASKS):
            raise InputError(f"lab.mt_steps={lab.mt_steps} is fewer than one step per task ({len(TASKS)})")
        if not self.share_steps or not self.capture_k:
            raise InputError("share_steps and capture_k must not be empty")
        every = lab.recover_eval_every
        for k in self.share_steps:
            if not 1 <= k <= lab.recover_steps or (k % every and k != lab.recover_steps):
                raise InputError(
                    f"share_steps must be evaluated recovery steps (multiples of lab.recover_eval_every="
                    f"{every} up to lab.recover_steps={lab.recover_steps}), got {k}"
                )
        for k in self.capture_k:
            if not 1 <= k <= lab.dense_steps:
                raise InputError(f"capture_k must lie in 1..lab.dense_steps={lab.dense_steps}, got {k}")
        if self.seeds < 2 or (self.seeds < 3 and not self.quick):
            raise InputError(f"seeds must be >= 3 for a recorded run (>= 2 with quick), got {self.seeds}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SchedulesConfig:
        if quick:
            # quick's 8 power iterations underestimated lambda_max; 20 as in the full lab
            lab = dataclasses.replace(_lab(True, seed), eta_lambda=0.5, power_iters=20)
            return cls(lab=lab, share_steps=(10, 50, 100, 150), seed=seed, quick=True)
        return cls(lab=dataclasses.replace(_lab(False, seed), eta_lambda=0.5), seed=seed)
