"""``steering-shadow``'s config: how much of a LoRA fine-tune's activation shadow a few
steering vectors span.  Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from updatescope.errors import InputError
from updatescope.experiments.configs import check_positive, check_seed

DIRECTIONS = ("positive", "negative")
#: the spans, each orthonormalised per layer: CAA alone, and CAA with both one-step shifts
SPANS = ("caa", "caa+shifts")
#: the shadows measured (amendment 1): the contrast FT_pos - FT_neg (primary), then each
#: fine-tune against the base (secondary: they carry the review-text shift both share)
SHADOWS = ("contrast", "positive", "negative")
MIN_DRAWS = 200  # random subspaces per layer: fewer make the 99th percentile a guess


@dataclass(frozen=True)
class SteeringShadowConfig:
    """``steering-shadow``: fine-tune SmolLM2 with LoRA on the positive (negative) polarity
    sentences, push the fine-tune's displacement of the residual stream forward on neutral
    news openings, and measure what share of it lies in the span of CAA (and the one-step
    shifts), against random subspaces of the same dimension (PREREGISTRATION.md beside this file).

    Each polarity class is split by a seeded shuffle into ``n_fit`` sentences (CAA, the
    gradient step, the fine-tune) and ``n_heldout`` (the regime check); the last ``n_val``
    fit sentences choose the fine-tunes' step count and are not trained on (amendment 4)."""

    model: str = "smollm2"
    n_fit: int = 80  # sentences per class that CAA, the one step and the fine-tune learn from
    n_heldout: int = 20  # sentences per class held out for the regime check
    pushforward_sentences: int = 80  # fit sentences the one step's shift is averaged over
    lora_r: int = 8
    lora_alpha: float = 16.0
    lr: float = 1e-3  # Adam, LoRA parameters only
    steps: int = 60  # the most Adam steps; amendment 4 keeps the step chosen on validation
    batch: int = 16  # fit sentences per Adam step
    # amendment 4: the last n_val fit sentences of each class are validation sentences (the
    # fine-tunes do not train on them); every val_every steps the pair is scored on them, and
    # both fine-tunes are restored to the step with the highest mean validation d
    n_val: int = 16
    val_every: int = 4
    n_prompts: int = 200  # neutral news openings the shadow is measured on
    prompt_words: tuple[int, int] = (5, 10)  # opening length range (words), as sentiment-steering
    neutral_tol: float = 0.05  # |VADER compound| of an opening at most this
    random_draws: int = 200  # random k-dimensional subspaces per layer (the null)
    quantile: float = 0.99  # the null's percentile a span must exceed
    verdict_layers: tuple[int, int] = (6, 18)  # inclusive range of layers the verdict reads
    regime_z: float = 2.0  # the pair's regime check passes when mean d - regime_z * SE > 0
    # amendment 2: CAA, the one-step shifts' token mean and every shadow leave out each
    # sequence's first token (SmolLM2's massive activation sits there)
    skip_first_token: bool = True
    batch_size: int = 16  # rows per forward pass
    seed: int = 0
    quick: bool = False

    def __post_init__(self) -> None:
        check_positive(
            self,
            "n_fit",
            "n_heldout",
            "pushforward_sentences",
            "lora_r",
            "steps",
            "batch",
            "n_prompts",
            "batch_size",
            "val_every",
        )
        check_seed(self.seed)
        if self.n_heldout < 2:
            raise InputError(f"n_heldout must be >= 2 (the regime check needs an SE), got {self.n_heldout}")
        if not 2 <= self.n_val < self.n_fit:
            raise InputError(
                f"n_val must be >= 2 and leave the fine-tunes a training sentence (< n_fit = {self.n_fit}), "
                f"got {self.n_val}"
            )
        if self.val_every > self.steps:
            raise InputError(f"val_every must be <= steps ({self.steps}), got {self.val_every}")
        if self.pushforward_sentences > self.n_fit:
            raise InputError(f"pushforward_sentences must be <= n_fit, got {self.pushforward_sentences} > {self.n_fit}")
        if not self.lora_alpha > 0 or not self.lr > 0:
            raise InputError(f"lora_alpha and lr must be > 0, got {self.lora_alpha}, {self.lr}")
        lo, hi = self.prompt_words
        if not 1 <= lo <= hi:
            raise InputError(f"prompt_words must be (lo, hi) with 1 <= lo <= hi, got {list(self.prompt_words)}")
        if not 0.0 <= self.neutral_tol < 1.0:
            raise InputError(f"neutral_tol must be in [0, 1), got {self.neutral_tol}")
        if self.random_draws < MIN_DRAWS:
            raise InputError(f"random_draws must be >= {MIN_DRAWS}, got {self.random_draws}")
        if not 0.5 < self.quantile < 1.0:
            raise InputError(f"quantile must be in (0.5, 1), got {self.quantile}")
        a, b = self.verdict_layers
        if not 0 <= a <= b:
            raise InputError(f"verdict_layers must be (first, last) with 0 <= first <= last, got {[a, b]}")
        if not self.regime_z >= 0:
            raise InputError(f"regime_z must be >= 0, got {self.regime_z}")
        if self.n_prompts < 200 and not self.quick:
            raise InputError(f"n_prompts must be >= 200 for a recorded full run, got {self.n_prompts}")

    @classmethod
    def defaults(cls, quick: bool, seed: int = 0) -> SteeringShadowConfig:
        if quick:
            # 2 shared CPU cores: a shorter fine-tune, fewer prompts, the one step's shift
            # averaged over fewer sentences (forward-mode AD costs a few forward passes)
            return cls(steps=24, n_prompts=40, pushforward_sentences=24, seed=seed, quick=True)
        return cls(seed=seed)
