"""``estimator``'s config: sketch against exact alignments, SmolLM2 streams and EfficientNet tasks.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import InputError
from updatescope.experiments.configs import (
    FULL_DOMAINS,
    QUICK_DOMAINS,
    TokenSplits,
    check_maps,
    check_names,
    check_positive,
    check_seed,
    check_sketch_dim,
)


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
    sketch_dim: int = DEFAULT_SKETCH_DIM
    act_map: str = "auto"
    error_map: str = "auto"
    seeds: tuple[int, ...] = (0, 1, 2)
    speed_n: int = 2000
    repeats: int = 3
    exact_repeats: int = 3

    def __post_init__(self) -> None:
        check_positive(self, "per_photo", "tasks", "n", "size", "batch", "speed_n", "repeats", "exact_repeats")
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_maps(self.act_map, self.error_map)
        check_names(self.photos, "photos", 1)
        if (
            isinstance(self.spanning, bool)
            or not isinstance(self.spanning, int)
            or self.spanning < 0
            or self.spanning == 1
        ):
            raise InputError(f"vision.spanning must be 0 or at least 2, got {self.spanning!r}")
        if not self.seeds:
            raise InputError("seeds must list at least one sketch seed")


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
    sketch_dim: int = DEFAULT_SKETCH_DIM
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
        check_names(self.domains, "domains", 3)
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        check_maps(self.act_map, self.error_map)
        check_positive(self, "speed_n", "repeats", "exact_repeats")
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
