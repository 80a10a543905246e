"""The rules that turn ``steering-shadow``'s numbers into words.  Torch-free, so the docs
generator applies to a record the same rules the runner applied to the run
(PREREGISTRATION.md beside this file states them before any record was made).

- :func:`regime_passes`: a fine-tune counts only when it lowers the held-out loss of its
  own class by more than the other class's (paired over held-out sentences), beyond
  ``z`` standard errors.
- :func:`rule_layers`: the layers a verdict reads.
- :func:`span_word`: "spans more than random" when the span's fraction exceeds the random
  null's percentile at a majority of those layers, "no more than random" otherwise, and
  "not measured" for a fine-tune that failed its regime check.
- :func:`headline_layer`: where the headline fraction is quoted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["regime_passes", "rule_layers", "layers_above", "span_word", "headline_layer", "WORDS"]

WORDS = ("spans more than random", "no more than random", "not measured")


def regime_passes(mean: float, se: float, z: float) -> bool:
    """Rule: the paired own-class minus other-class held-out loss drop has mean - z * SE > 0."""
    return math.isfinite(mean) and math.isfinite(se) and mean - z * se > 0


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
    the fine-tune failed its regime check."""
    if not measured:
        return WORDS[2]
    above = layers_above(fraction, null, layers)
    return WORDS[0] if 2 * len(above) > len(layers) else WORDS[1]


def headline_layer(split_half: Sequence[float], layers: Sequence[int]) -> int:
    """The rule's layer where CAA's split-half cosine is highest (first on ties)."""
    return max(layers, key=lambda x: (split_half[x], -x))
