"""The pre-registered verdicts of ``select`` (PREREGISTRATION.md beside this file): four
paired comparisons of FisherSketch's selection against the baselines users have, tested over
(target, budget, seed) units and Holm-corrected, with a bootstrap clustered by target that a
"better"/"worse" must survive.  Pure: numbers in, JSON rows out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["COMPARISONS", "FAMILY", "unit_name", "selection_verdicts", "final_word"]

#: (name, first selector, second selector), in the pre-registered order
COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("FisherSketch - random", "fisher", "random"),
    ("FisherSketch - DSIR", "fisher", "dsir"),
    ("FisherSketch - embedding", "fisher", "embedding"),
    ("FisherSketch - per-example gradient", "fisher", "per_example_gradient"),
)
FAMILY = "select: FisherSketch - {random, DSIR, embedding, per-example gradient}"


def unit_name(target: str, budget: float, seed: int) -> str:
    return f"{target}|{budget:g}|{seed}"


def final_word(word: str, boot_ci: Sequence[float] | None) -> str:
    """The verdict: the Holm-corrected sign-flip word, kept only when the 95% bootstrap CI
    clustered by target lies on the same side of 0; a "better"/"worse" it does not back
    becomes "no difference" (so does any word when there is a single target: no CI)."""
    if word == "better" and boot_ci is not None and boot_ci[0] > 0:
        return "better"
    if word == "worse" and boot_ci is not None and boot_ci[1] < 0:
        return "worse"
    return "no difference"


def selection_verdicts(
    reduction: Mapping[str, Mapping[str, Mapping[float, Sequence[float]]]],
    seeds: Sequence[int],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """``reduction[target][selector][budget]``: target eval-loss reduction per fine-tuning seed
    (in ``seeds`` order).  Each comparison's unit difference is first − second on one (target,
    budget, seed); :func:`updatescope.experiments.mappings.verdict_rows` gives the exact (or
    Monte-Carlo) sign-flip p over the units, Holm over the four, and the bootstrap clustered
    by target; each row gets its ``verdict`` by :func:`final_word`."""
    from updatescope.experiments.mappings import verdict_rows

    diffs: dict[str, dict[str, float]] = {}
    clusters: dict[str, str] = {}
    for name, a, b in COMPARISONS:
        diffs[name] = {}
        for t, by_sel in reduction.items():
            if a not in by_sel or b not in by_sel:
                continue
            for budget, va in by_sel[a].items():
                vb = by_sel[b][budget]
                for s, x, y in zip(seeds, va, vb, strict=True):
                    d = float(x) - float(y)
                    if math.isfinite(d):
                        u = unit_name(t, budget, s)
                        diffs[name][u] = d
                        clusters[u] = t
    rows = verdict_rows(
        diffs,
        clusters,
        family=FAMILY,
        n_key="n_units",
        mean_key="mean_loss_reduction_difference",
        n_boot=n_boot,
        seed=seed,
    )
    for r in rows:
        r["verdict"] = final_word(r["word"], r["clustered_bootstrap"]["ci95"])
        r["n_targets"] = r["clustered_bootstrap"]["n_clusters"]
    return {
        "family": FAMILY,
        "unit": "(target, budget, fine-tuning seed)",
        "rule": "verdict = Holm-corrected sign-flip word over units, kept only if the bootstrap CI "
        "clustered by target is on the same side of 0, else 'no difference'",
        "comparisons": rows,
    }
