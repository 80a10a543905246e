"""``sentiment-steering``'s config: steer neutral prompts toward positive or negative text.
Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import check_positive, check_seed, check_store_folder

#: the pre-specified paired comparisons (first − second, per test prompt), one Holm family
#: per judge over both directions
COMPARISONS = (
    ("caa", "random"),
    ("pushforward", "random"),
    ("caa", "prompting"),
    ("pushforward", "caa"),
)
#: the search-derived vector's comparisons, added before its first full run: a family of
#: their own per judge (Holm within it), so the family above keeps its size and its words
SEARCH_COMPARISONS = (
    ("search", "random"),
    ("search", "pushforward"),
)
DIRECTIONS = ("positive", "negative")


@dataclass(frozen=True)
class SentimentSteeringConfig:
    """``sentiment-steering``: CAA, the pushforward of one gradient step, a search-derived
    vector (Best-of-N weight perturbations pushed forward), a prompting baseline and a
    same-norm random vector steer continuations of neutral news openings
    toward positive (and, separately, negative) sentiment.

    Steering scales are fractions of the mean residual norm at the layer (vectors
    unit-normed); the vector is added at every position of the prompt and of each generated
    token (``positions``).  (layer, scale) is chosen per method and direction on the select
    prompts: the best mean VADER score among settings whose mean log-perplexity is at most
    ``log(max_ppl_ratio)`` above the base model's; the choice is reported on the test prompts."""

    model: str = "smollm2"
    n_select: int = 80  # neutral prompts that choose (layer, scale)
    n_test: int = 200  # neutral prompts the comparisons are reported on
    prompt_words: tuple[int, int] = (5, 10)  # opening length range (words) of a news sentence
    neutral_tol: float = 0.05  # |VADER compound| of a prompt at most this
    new_tokens: int = 20  # greedy continuation length
    steer_layers: tuple[int, ...] = (6, 10, 14, 18)
    scales: tuple[float, ...] = (0.125, 0.25, 0.5, 1.0)
    positions: str = "all"  # updatescope.steering.INJECT_POSITIONS
    # fluency constraint: perplexity at most this times the base's (greedy text has a low perplexity,
    # ~4-5 here; 3x that still reads as sentences, 15x and more is repetition or word salad)
    max_ppl_ratio: float = 3.0
    step_sentences: int = 64  # polarity sentences of one class in the one gradient step
    pushforward_sentences: int = 32  # sentences the step's shift is averaged over
    # search-derived vectors (Best-of-N weight perturbations pushed forward, see .search): N
    # candidates per seed and norm, norms as fractions of the step's, seeds averaged into one
    # vector, held-out sentences per class scoring the candidates (twice: choose, report)
    search_n: int = 8
    search_norms: tuple[float, ...] = (0.1, 0.3)
    search_seeds: int = 3
    search_sentences: int = 16
    judge_layer: int = 20  # residual layer the trained judge reads (mean over tokens)
    judge_folds: int = 5  # cross-validation folds of the trained judge
    judge_l2: float = 0.01  # ridge penalty of the trained judge's logistic regression
    min_judge_accuracy: float = 0.7  # below this held-out accuracy the trained judge is refused
    min_split_half: float = 0.5  # CAA split-half cosine needed before anything is compared with it
    prompt_prefix: str = "Write a {direction} continuation: "  # the prompting baseline
    alpha: float = 0.05
    batch_size: int = 32
    seed: int = 0
    quick: bool = False
    #: a folder where each generation pass (prompts x vector x layer x scale) is kept as soon as
    #: it is judged, and read back by a rerun with the same inputs (None: nothing kept), so a run
    #: of many hours resumes across sittings and machines
    run_store: str | None = None

    def __post_init__(self) -> None:
        check_positive(
            self,
            "n_select",
            "n_test",
            "new_tokens",
            "step_sentences",
            "pushforward_sentences",
            "search_n",
            "search_seeds",
            "search_sentences",
            "judge_folds",
            "batch_size",
        )
        check_seed(self.seed)
        lo, hi = self.prompt_words
        if not 1 <= lo <= hi:
            raise InputError(f"prompt_words must be (lo, hi) with 1 <= lo <= hi, got {list(self.prompt_words)}")
        if self.positions not in ("all", "prompt", "generated", "last"):
            raise InputError(f"positions must be all, prompt, generated or last, got {self.positions!r}")
        if (
            not self.steer_layers
            or any(x < 0 for x in self.steer_layers)
            or len(set(self.steer_layers)) != len(self.steer_layers)
        ):
            raise InputError(f"steer_layers must be distinct layer indices >= 0, got {list(self.steer_layers)}")
        if not self.scales or any(not s > 0 for s in self.scales):
            raise InputError(
                f"scales must be non-empty and positive (the direction sets the sign), got {list(self.scales)}"
            )
        if not self.search_norms or any(not r > 0 for r in self.search_norms):
            raise InputError(f"search_norms must be non-empty and positive, got {list(self.search_norms)}")
        if not self.max_ppl_ratio >= 1.0:
            raise InputError(f"max_ppl_ratio must be >= 1, got {self.max_ppl_ratio}")
        if not 0.0 <= self.neutral_tol < 1.0:
            raise InputError(f"neutral_tol must be in [0, 1), got {self.neutral_tol}")
        if self.judge_folds < 2:
            raise InputError(f"judge_folds must be >= 2, got {self.judge_folds}")
        if self.judge_layer < 0 or not self.judge_l2 > 0:
            raise InputError(f"judge_layer must be >= 0 and judge_l2 > 0, got {self.judge_layer}, {self.judge_l2}")
        for name in ("min_judge_accuracy", "min_split_half", "alpha"):
            if not 0.0 < getattr(self, name) < 1.0:
                raise InputError(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if "{direction}" not in self.prompt_prefix:
            raise InputError(f"prompt_prefix must contain {{direction}}, got {self.prompt_prefix!r}")
        check_store_folder(self.run_store, "run_store")
        if self.n_test < 200 and not self.quick:
            raise InputError(f"n_test must be >= 200 for a recorded full run, got {self.n_test}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SentimentSteeringConfig:
        if quick:
            # 2 shared CPU cores: one layer, two scales, few prompts, a small gradient step; each
            # split fits one batch (a decoding step costs about the same for 1 or 40 rows on CPU)
            return cls(
                n_select=24,
                n_test=40,
                new_tokens=12,
                steer_layers=(10,),
                scales=(0.25, 0.5),
                step_sentences=24,
                pushforward_sentences=12,
                search_n=2,
                search_norms=(0.1,),
                search_seeds=1,
                search_sentences=6,
                batch_size=40,
                seed=seed,
                quick=True,
            )
        return cls(seed=seed)
