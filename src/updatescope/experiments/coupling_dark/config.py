"""``coupling-dark``'s config: input classes, answer-word mappings as tasks.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import LoRAConfig, check_gt_seeds, check_positive, check_seed, check_sketch_dim

#: input classes the runner can draw examples of (see ``runner.CLASS_SOURCES``)
CLASSES = ("python", "licence", "digits", "news", "reviews", "docs")
#: prompt families: (cue, answer words); every answer word must be one token with its leading space
FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Colour:", ("red", "green", "blue")),
    ("Animal:", ("cat", "dog", "bird")),
    ("Size:", ("small", "big", "tiny")),
)


@dataclass(frozen=True)
class CouplingDarkConfig:
    """``coupling-dark``: candidates share the target's inputs and answer histogram and differ
    only in which input class goes to which answer word (PREREGISTRATION.md beside this file).

    Per class and split: ``n_fit`` examples the sources fine-tune on (and are sketched on),
    ``n_sketch`` the target is sketched on, ``n_val`` for the regime check, ``n_eval`` for the
    truth, ``n_warm`` for the answer-format warm-up; every split holds the same number of
    examples of every class.

    Warm-up (``warmup_steps`` > 0): before anything is sketched or fine-tuned, one LoRA on the
    ``warm`` rows of every family, each class labelled with every answer word equally often,
    merged into the model.  The model then puts its mass on the answer words without knowing
    any mapping, so a source's transfer measures its mapping and not the answer format."""

    model: str = "smollm2"
    classes: tuple[str, ...] = CLASSES
    families: tuple[tuple[str, tuple[str, ...]], ...] = FAMILIES
    n_fit: int = 32
    n_sketch: int = 32
    n_val: int = 16
    n_eval: int = 40
    n_warm: int = 32
    warmup_steps: int = 150  # 0: no warm-up (the pilot's regime, kept for comparison)
    sketch_dim: int = DEFAULT_SKETCH_DIM
    lora: LoRAConfig = LoRAConfig(lr=1e-3, steps=30, batch=16)
    gt_seeds: int = 3
    exact_n: int | None = None
    baseline_n: int | None = None
    probe_min_accuracy: float = 0.8  # regime check (a): nearest-centroid accuracy on the head input
    enforce_checks: bool = True  # False only to exercise the plumbing: the record says so
    n_boot: int = 2000  # the secondary clustered bootstrap
    seed: int = 0
    quick: bool = False
    #: a folder for the per-(seed, family) truth tables: a rerun anywhere reuses the tables whose
    #: key matches and fine-tunes only the rest (commit the folder between sittings)
    truth_store: str | None = None

    def __post_init__(self) -> None:
        check_gt_seeds(self.gt_seeds)
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_positive(self, "n_fit", "n_sketch", "n_val", "n_eval", "n_warm", "exact_n", "baseline_n", "n_boot")
        unknown = [c for c in self.classes if c not in CLASSES]
        if unknown:
            raise InputError(f"unknown input classes {unknown}; available: {', '.join(CLASSES)}")
        if len(set(self.classes)) != len(self.classes):
            raise InputError("classes must be distinct")
        if not self.families:
            raise InputError("families must name at least one (cue, answer words) family")
        for cue, words in self.families:
            if len(words) < 3 or len(set(words)) != len(words):
                raise InputError(f"family {cue!r}: need at least 3 distinct answer words, got {words}")
            if len(self.classes) % len(words):
                raise InputError(
                    f"family {cue!r}: {len(self.classes)} classes cannot share {len(words)} answers evenly "
                    "(the answer histogram must be the same for every mapping)"
                )
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise InputError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not 0.0 < self.probe_min_accuracy <= 1.0:
            raise InputError(f"probe_min_accuracy must be in (0, 1], got {self.probe_min_accuracy}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> CouplingDarkConfig:
        if not quick:
            return cls(seed=seed)
        # quick: 3 classes, one family (6 targets), 1 seed, small splits: not powered
        return cls(
            classes=CLASSES[:3],
            families=FAMILIES[:1],
            n_fit=16,
            n_sketch=16,
            n_val=8,
            n_eval=16,
            n_warm=16,
            warmup_steps=60,
            lora=LoRAConfig(lr=1e-3, steps=20, batch=16),
            gt_seeds=1,
            n_boot=500,
            seed=seed,
            quick=True,
        )
