"""Shared pieces of the mapping benchmarks (``coupling-dark``): class -> answer mappings,
the checks that must pass before anything is scored, the methods ``scoring.score_methods``
does not have, and the pre-registered verdict block.

A *mapping* is a tuple: entry c is the index of the answer word that input class c maps to.
With every class equally often in a split, two mappings have the same answer histogram
exactly when they use every answer the same number of times.  Torch is imported only by the
functions that need it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from updatescope.errors import InputError

__all__ = [
    "mappings_for",
    "agreement",
    "candidate_kind",
    "answer_histogram",
    "nearest_centroid_accuracy",
    "product_scores",
    "overlap_scores",
    "per_target_spearman",
    "clustered_bootstrap",
    "COMPARISONS",
    "coupling_verdicts",
]

#: the four pre-registered comparisons: (name, first method, second method)
COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("A_F - Scov(Gamma_e)", "fisher", "error"),
    ("A_F - product of marginals", "fisher", "product"),
    ("A_F - mean-gradient cosine", "fisher", "grad_cos"),
    ("A_F - CKA", "fisher", "cka"),
)
#: the same four on the exact (Gram identity) values: a secondary family
EXACT_COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("exact A_F - exact Scov(Gamma_e)", "exact_fisher", "exact_error"),
    ("exact A_F - exact product of marginals", "exact_fisher", "exact_product"),
    ("exact A_F - mean-gradient cosine", "exact_fisher", "grad_cos"),
    ("exact A_F - CKA", "exact_fisher", "cka"),
)
REFUTED = "the coupling claim is refuted at this scale"
SUPPORTED = "A_F beats Scov(Gamma_e): the coupling adds signal at this scale"
NOT_SCORED = "not scored: no target passed the regime checks"


def mappings_for(n_classes: int, n_answers: int) -> list[tuple[int, ...]]:
    """The mappings of one family: every relabelling of the answers of the base mapping
    c -> c mod n_answers and, when every answer has at least two classes, of the base with the
    answers of classes 0 and 1 exchanged (so that agreements of 2/3 and 1/3 occur besides 0
    and 1).  Every mapping uses each answer n_classes / n_answers times."""
    if n_answers < 2 or n_classes % n_answers:
        raise InputError(f"{n_classes} classes cannot share {n_answers} answers evenly")
    base = tuple(c % n_answers for c in range(n_classes))
    bases = [base]
    if n_classes >= 2 * n_answers:
        bases.append((base[1], base[0], *base[2:]))
    out = {tuple(p[b] for b in bm) for bm in bases for p in itertools.permutations(range(n_answers))}
    return sorted(out)


def agreement(a: Sequence[int], b: Sequence[int]) -> float:
    """The share of input classes the two mappings send to the same answer."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def candidate_kind(target: Sequence[int], source: Sequence[int]) -> str:
    """ "same", "flip" (the target with two answer words exchanged: the sign-flip-style
    control), "none" (no class in agreement) or "partial"."""
    if tuple(target) == tuple(source):
        return "same"
    pairs = {(t, s) for t, s in zip(target, source, strict=True) if t != s}
    if len(pairs) == 2 and all((s, t) in pairs for t, s in pairs):
        return "flip"
    return "none" if agreement(target, source) == 0 else "partial"


def answer_histogram(mapping: Sequence[int], classes_per_row: Sequence[int], n_answers: int) -> list[int]:
    """How often each answer is the label of the rows whose classes are ``classes_per_row``."""
    h = [0] * n_answers
    for c in classes_per_row:
        h[mapping[c]] += 1
    return h


def nearest_centroid_accuracy(train_x: Any, train_y: Any, test_x: Any, test_y: Any) -> float:
    """Regime check (a): accuracy of the nearest (Euclidean) class centroid of ``train_x`` on
    ``test_x`` (rows are head inputs; float64)."""
    import torch

    tx, ty = torch.as_tensor(train_x).double(), torch.as_tensor(train_y)
    ex, ey = torch.as_tensor(test_x).double(), torch.as_tensor(test_y)
    labels = sorted(set(ty.tolist()))
    cent = torch.stack([tx[ty == c].mean(0) for c in labels])
    pred = torch.tensor(labels)[torch.cdist(ex, cent).argmin(1)]
    return float((pred == ey).double().mean())


def product_scores(first: Mapping[str, Mapping[str, float]], second: Mapping[str, Mapping[str, float]]) -> dict:
    """The coupling-free prediction: per pair the product of the two marginal cosines."""
    return {t: {s: float(v) * float(second[t][s]) for s, v in row.items()} for t, row in first.items()}


def overlap_scores(
    words: Mapping[str, Sequence[str]], candidates: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Answer-word overlap: the share of the target's answer labels (as a multiset of words,
    one entry per class) that the source also uses, whatever class they come from."""
    out: dict[str, dict[str, float]] = {}
    for t, cands in candidates.items():
        out[t] = {}
        for s in cands:
            left = list(words[s])
            hit = 0
            for w in words[t]:
                if w in left:
                    left.remove(w)
                    hit += 1
            out[t][s] = hit / len(words[t])
    return out


def per_target_spearman(by_method: Mapping[str, Any], method: str) -> dict[str, float] | None:
    """Per-target Spearman of ``method`` from ``scoring.evaluate_methods``; a target whose
    scores are constant counts as 0 (its expected Spearman under random tie-breaking)."""
    m = by_method.get(method)
    if m is None or "error" in m or m.get("spearman") is None:
        return None
    block = m["spearman"]
    out = dict(block["per_target"])
    out.update({t: 0.0 for t, why in block.get("excluded", {}).items() if why == "constant scores"})
    return out


def clustered_bootstrap(
    diffs: Mapping[str, float], clusters: Mapping[str, Any], n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Secondary test: resample clusters (targets sharing their sources) with replacement;
    -> {"n_clusters", "mean", "ci95", "p"} with p the two-sided bootstrap share of resampled
    means on the far side of 0 (1 when there is a single cluster: nothing to resample)."""
    groups: dict[Any, list[float]] = {}
    for u, v in diffs.items():
        groups.setdefault(clusters[u], []).append(float(v))
    keys = sorted(groups, key=str)
    if not keys:
        return {"n_clusters": 0, "mean": None, "ci95": None, "p": 1.0}
    mean = float(np.mean([v for k in keys for v in groups[k]]))
    if len(keys) == 1:
        return {"n_clusters": 1, "mean": mean, "ci95": None, "p": 1.0}
    rng = np.random.default_rng(seed)
    sums = np.array([sum(groups[k]) for k in keys])
    counts = np.array([len(groups[k]) for k in keys])
    idx = rng.integers(0, len(keys), size=(n_boot, len(keys)))
    boot = sums[idx].sum(1) / counts[idx].sum(1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    p = min(1.0, 2.0 * min(float((boot <= 0).mean()), float((boot >= 0).mean())))
    return {"n_clusters": len(keys), "mean": mean, "ci95": [float(lo), float(hi)], "p": p}


def verdict_rows(
    diffs: Mapping[str, Mapping[str, float]],
    clusters: Mapping[str, Any],
    *,
    family: str,
    n_key: str,
    mean_key: str,
    n_boot: int,
    seed: int,
) -> list[dict[str, Any]]:
    """The pre-specified comparisons of a record: ``select.metrics.paired_verdicts`` over
    ``diffs`` (comparison -> unit -> difference; Holm across them) and, per comparison, a
    bootstrap clustered over ``clusters`` (unit -> cluster); one JSON row per comparison, with
    the unit count under ``n_key`` and the mean difference under ``mean_key``."""
    from updatescope.select.metrics import paired_verdicts

    return [
        {
            "comparison": v.comparison,
            n_key: v.n,
            mean_key: v.mean if math.isfinite(v.mean) else None,
            "p": v.p,
            "p_holm": v.p_holm,
            "test": v.test,
            "family": v.family,
            "family_size": v.family_size,
            "alpha": v.alpha,
            "word": v.word,
            "clustered_bootstrap": clustered_bootstrap(diffs[v.comparison], clusters, n_boot, seed),
        }
        for v in paired_verdicts(diffs, family=family, seed=seed)
    ]


def _family_block(
    spearman: Mapping[str, Mapping[str, float] | None],
    comparisons: Sequence[tuple[str, str, str]],
    family: str,
    clusters: Mapping[str, Any],
    n_boot: int,
    seed: int,
) -> list[dict[str, Any]]:
    diffs: dict[str, dict[str, float]] = {}
    for name, a, b in comparisons:
        sa, sb = spearman.get(a) or {}, spearman.get(b) or {}
        diffs[name] = {t: sa[t] - sb[t] for t in sa if t in sb and math.isfinite(sa[t] - sb[t])}
    return verdict_rows(
        diffs,
        clusters,
        family=family,
        n_key="n_targets",
        mean_key="mean_spearman_difference",
        n_boot=n_boot,
        seed=seed,
    )


def coupling_verdicts(
    spearman: Mapping[str, Mapping[str, float] | None],
    clusters: Mapping[str, Any],
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The pre-registered verdict block from per-target Spearman values by method (targets
    that failed a regime check must already be left out).  Primary family: the four
    :data:`COMPARISONS` on the sketch values, exact sign-flip over targets, Holm across the
    four; secondary: the same on the exact values, and a bootstrap clustered over ``clusters``
    for each.  The statement is computed: :data:`SUPPORTED` when A_F − Scov(Γ_e) is "better",
    else :data:`REFUTED` (:data:`NOT_SCORED` when no target is left)."""
    fisher = spearman.get("fisher") or {}
    if not fisher:
        return {"n_targets": 0, "primary": [], "exact": [], "statement": NOT_SCORED}
    primary = _family_block(spearman, COMPARISONS, "coupling-dark primary (sketch)", clusters, n_boot, seed)
    exact = _family_block(spearman, EXACT_COMPARISONS, "coupling-dark secondary (exact)", clusters, n_boot, seed)
    first = primary[0]
    statement = SUPPORTED if first["word"] == "better" else REFUTED
    return {
        "n_targets": len(fisher),
        "primary": primary,
        "exact": exact,
        "rule": "SUPPORTED iff 'A_F - Scov(Gamma_e)' is 'better' (Holm-adjusted sign-flip p < alpha, mean > 0)",
        "statement": statement,
    }
