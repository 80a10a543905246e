"""The rules that turn ``steering-shadow``'s numbers into words.  Torch-free, so the docs
generator applies to a record the same rules the runner applied to the run
(PREREGISTRATION.md beside this file states them before any record was made).

- :func:`pair_regime`: the pair of fine-tunes counts only when, per held-out sentence of
  either class, the other class's fine-tune gives it a higher loss than its own class's
  fine-tune, on average beyond ``z`` standard errors (amendment 1; :func:`regime_passes`
  is the rule on the mean and SE).
- :func:`rule_layers`: the layers a verdict reads.
- :func:`span_word`: "spans more than random" when the span's fraction exceeds the random
  null's percentile at a majority of those layers, "no more than random" otherwise, and
  "not measured" when the pair failed its regime check.
- :func:`headline_layer`: where the headline fraction is quoted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["regime_passes", "pair_regime", "rule_layers", "layers_above", "span_word", "headline_layer", "WORDS"]

WORDS = ("spans more than random", "no more than random", "not measured")


def regime_passes(mean: float, se: float, z: float) -> bool:
    """Rule: the paired difference has mean - z * SE > 0."""
    return math.isfinite(mean) and math.isfinite(se) and mean - z * se > 0


def pair_regime(d_positive: Sequence[float], d_negative: Sequence[float], z: float) -> dict[str, Any]:
    """The pair's regime check.  ``d_c`` holds, per held-out sentence x of class c,
    d(x) = loss under the other class's fine-tune - loss under class c's fine-tune.  Both
    classes pooled: mean d, its SE (sample std / sqrt(n), over sentences) and the per-class
    means.  -> {"mean", "se", "n", "mean_positive", "mean_negative", "passes"}."""
    d = [float(x) for x in (*d_positive, *d_negative)]
    if len(d) < 2 or not d_positive or not d_negative:
        return {"mean": math.nan, "se": math.nan, "n": len(d), "passes": False,
                "mean_positive": math.nan, "mean_negative": math.nan}  # fmt: skip
    mean = statistics.fmean(d)
    se = statistics.stdev(d) / math.sqrt(len(d))
    return {
        "mean": mean,
        "se": se,
        "n": len(d),
        "mean_positive": statistics.fmean(d_positive),
        "mean_negative": statistics.fmean(d_negative),
        "passes": regime_passes(mean, se, z),
    }


def rule_layers(n_layers: int, span: Sequence[int]) -> list[int]:
    """The layers ``span[0]..span[1]`` (inclusive) that the model has; all of its layers when
    it has none of them (a small test model)."""
    got = [x for x in range(span[0], span[1] + 1) if x < n_layers]
    return got or list(range(n_layers))


def layers_above(fraction: Sequence[float], null: Sequence[float], layers: Sequence[int]) -> list[int]:
    """The layers among ``layers`` where ``fraction[l]`` exceeds ``null[l]`` (the null's percentile)."""
    return [x for x in layers if fraction[x] > null[x]]


def span_word(fraction: Sequence[float], null: Sequence[float], layers: Sequence[int], measured: bool) -> str:
    """Rule: "spans more than random" when the fraction exceeds the random null's percentile
    at more than half of the rule's layers, else "no more than random"; "not measured" when
    the pair of fine-tunes failed its regime check."""
    if not measured:
        return WORDS[2]
    above = layers_above(fraction, null, layers)
    return WORDS[0] if 2 * len(above) > len(layers) else WORDS[1]


def headline_layer(split_half: Sequence[float], layers: Sequence[int]) -> int:
    """The rule's layer where CAA's split-half cosine is highest (first on ties)."""
    return max(layers, key=lambda x: (split_half[x], -x))
