"""The rules that turn ``sentiment-steering``'s numbers into words.  Torch-free, so the docs
generator applies the same rules to a record that the runner applied to the run.

- :func:`judge_usable`: the trained judge is used only when its held-out accuracy reaches
  the configured floor.
- :func:`caa_gate`: anything is compared with CAA only when CAA reproduces across disjoint
  halves of its sentences (split-half cosine at its chosen layer >= the floor) *and* moves
  the judge beyond a same-norm random vector at the same place (the Holm-corrected paired
  verdict "better").
- :func:`comparison_word`: the paired verdict's word, replaced by "refused" for a
  comparison against CAA whose gate is shut, and by "not tested" where a method had no
  setting within the fluency bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["judge_usable", "paired_word", "caa_gate", "comparison_word", "admissible_best", "AGAINST_CAA"]

#: comparisons that read CAA as a reference and so wait for its gate
AGAINST_CAA = ("caa - prompting", "pushforward - caa")


def judge_usable(accuracy: float, floor: float) -> bool:
    """Rule: the trained judge counts when its cross-validated accuracy is >= ``floor``."""
    return math.isfinite(accuracy) and accuracy >= floor


def paired_word(mean: float, p_holm: float, alpha: float) -> str:
    """Rule (as ``select.metrics.paired_verdicts``): "better" / "worse" when the Holm-adjusted
    p is below ``alpha`` and the mean difference is positive / negative, else "no difference"."""
    if math.isfinite(mean) and p_holm < alpha:
        return "better" if mean > 0 else "worse" if mean < 0 else "no difference"
    return "no difference"


def caa_gate(split_half: float, caa_vs_random: Mapping[str, Any] | None, floor: float, alpha: float) -> dict[str, Any]:
    """Whether CAA may be compared with, in one direction.  ``split_half``: the mean
    split-half cosine of CAA at its chosen layer; ``caa_vs_random``: the recorded paired
    comparison (mean, p_holm) on the primary judge, None when CAA had no admissible setting.
    -> {"open": bool, "reproducible": bool, "beats_random": bool, "reason": str}."""
    reproducible = math.isfinite(split_half) and split_half >= floor
    beats = caa_vs_random is not None and paired_word(caa_vs_random["mean"], caa_vs_random["p_holm"], alpha) == "better"
    reasons = []
    if not reproducible:
        reasons.append(f"split-half cosine {split_half:.2f} < {floor:g}")
    if not beats:
        reasons.append(
            "CAA does not beat the same-norm random vector" if caa_vs_random else "CAA has no admissible setting"
        )
    return {
        "open": reproducible and beats,
        "reproducible": reproducible,
        "beats_random": beats,
        "reason": "; ".join(reasons) or "passed",
    }


def comparison_word(name: str, verdict: Mapping[str, Any] | None, gate_open: bool, alpha: float) -> str:
    """The word printed for comparison ``name`` ("first - second"): "not tested" without a
    verdict (a method had no admissible setting), "refused" when it reads CAA and CAA's gate
    is shut, else the paired verdict's word."""
    if verdict is None:
        return "not tested"
    if name in AGAINST_CAA and not gate_open:
        return "refused"
    return paired_word(verdict["mean"], verdict["p_holm"], alpha)


def admissible_best(
    scores: Sequence[Sequence[float]], logppl: Sequence[Sequence[float]], limit: float
) -> tuple[int, int] | None:
    """The (layer index, scale index) with the highest mean judge score among cells whose mean
    log-perplexity is <= ``limit`` (first on ties, layer-then-scale order); None when no
    cell is within the bound."""
    best: tuple[int, int] | None = None
    for i, (row_s, row_p) in enumerate(zip(scores, logppl)):
        for j, (s, p) in enumerate(zip(row_s, row_p)):
            if p <= limit and (best is None or s > scores[best[0]][best[1]]):
                best = (i, j)
    return best
