"""Document-level selection: the scores of documents against a target signature, from their
features (the model-side loop is ``updatescope.pipeline.score_documents``).

Definition.  Let the target T be a signature with joint feature sums s_T (the sum of φ over
its n_T samples, both halves) and unbiased squared norm ‖μ_T‖² (``Signature.sq_norm``), so
its mean embedding is μ_T = s_T / n_T and the direction used here is v_T = μ_T / ‖μ_T‖²
(``T.vector() / ‖μ_T‖``).  A document D of
the pool contributes n_D next-token samples x_t = (a_t, e_t) with joint features φ(x_t)
(``sketch.fishersketch.features``, the same basis as T).  Its score is

    score(D) = (1/n_D) Σ_{t∈D} φ(x_t) · v_T
             ≈ (1/n_D) Σ_{t∈D} mean_{j∈T} (a_t·a_j)² (e_t·e_j)² / ‖F_T‖²
             = < F_D , F_T > / ‖F_T‖²,

the projection of the document's empirical head Fisher F_D = mean_t (a_t a_tᵀ)⊗(e_t e_tᵀ)
onto the target's Fisher, in units of the target's own: 1 means "as aligned with the
target as the target's own tokens on average" (the target's samples score 1 plus their
self-pair term), 0 means orthogonal.  Dividing by ‖F_T‖² instead of ‖F_T‖ only fixes
the unit, so scores of different targets are on one scale; the ranking is unchanged.  Unbiased
over the random basis for the numerator (each φ·φ' is unbiased for the kernel); the target norm is the unbiased
estimate of ‖F_T‖², so the ratio is consistent, not unbiased.  Normalisation: dividing by
n_D makes documents of different lengths comparable (a per-token mean); n_D · score(D),
summed over the pool and divided by the pool's size, is exactly the pool's cross term
with the target divided by ‖μ_T‖², i.e. each document's share of the pool's Fisher
alignment numerator.
``activation`` and ``error`` are the same with ψ and χ (the marginal kernels) and their own
target embeddings.

Uncertainty: ``se`` = sd_t(c_t) / √n_D of the per-token terms c_t = φ(x_t)·v_T, which treats
a document's tokens as independent draws (neighbouring tokens are correlated, so it is a
lower bound) and includes the random-feature noise of each c_t.  NaN for n_D < 2.
Documents with fewer than ``min_tokens`` counted tokens are flagged ``short``.

Cost: one forward pass per batch plus the feature maps on the captured rows, the same work
as sketching the pool; nothing is stored per document beyond three sums and a count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import Signature

__all__ = [
    "DocumentScores",
    "MIN_TOKENS",
    "target_directions",
    "score_features",
    "scores_from_sums",
    "score_streams",
]

MIN_TOKENS = 16  # documents with fewer counted tokens than this are flagged short


@dataclass(frozen=True)
class DocumentScores:
    """Per-document scores, each (D,): ``score`` (fisher), ``se``, ``activation``, ``error``,
    ``tokens`` (counted next-token samples, int64) and ``short`` (bool)."""

    score: Tensor
    se: Tensor
    activation: Tensor
    error: Tensor
    tokens: Tensor
    short: Tensor

    def order(self) -> Tensor:
        """Document indices by descending score, undefined (NaN) scores last.  (D,)"""
        key = torch.where(torch.isfinite(self.score), -self.score, torch.full_like(self.score, float("inf")))
        return torch.argsort(key, stable=True)


def target_directions(target: Signature) -> Tensor:
    """v_T per kind: s_T,k / (n_T ‖μ_T,k‖²), float64.  -> (3, m); a row is NaN when that
    kind's norm estimate is not positive (the score is then undefined)."""
    if not isinstance(target, Signature):
        raise InputError(f"the target must be a Signature, got {type(target).__name__}")
    sq = target.sq_norm()  # (3,) unbiased ‖μ‖²
    s, _ = target.total()
    sq = torch.where(sq > 0, sq, torch.full_like(sq, float("nan")))
    return s.to(torch.float64) / (float(target.count) * sq[:, None])


def score_features(feats: Tensor, directions: Tensor) -> Tensor:
    """Per-sample terms c_t = f(x_t)·v_T per kind.  (n, 3, m), (3, m) -> (n, 3) float64.

    One float64 matrix-vector product per kind, each reading that kind's (n, m) slice widened:
    the batched form (an einsum over the strided (n, 3, m) block) costs several times more."""
    d = directions.to(feats.device, torch.float64)
    out = torch.empty(feats.shape[0], 3, dtype=torch.float64, device=feats.device)
    for k in range(3):
        torch.mv(feats[:, k].to(torch.float64), d[k], out=out[:, k])
    return out


def scores_from_sums(sums: Tensor, sq: Tensor, counts: Tensor, min_tokens: int) -> DocumentScores:
    """Means and standard errors from per-document sums (D, 3), sums of squares (D, 3), counts (D,)."""
    n = counts.to(torch.float64)[:, None]
    mean = sums / n  # NaN for documents with no counted token
    var = (sq - n * mean.square()).clamp(min=0) / (n - 1)
    se = torch.where(n > 1, (var / n).sqrt(), torch.full_like(mean, float("nan")))
    return DocumentScores(mean[:, 0], se[:, 0], mean[:, 1], mean[:, 2], counts.clone(), counts < min_tokens)


def score_streams(
    cfg: SketchConfig, streams: Sequence[tuple[Tensor, Tensor]], target: Signature, min_tokens: int = MIN_TOKENS
) -> DocumentScores:
    """The same scores from captured streams: per document (acts (n_D, d), errors (n_D, K)).

    For classifiers, synthetic tasks and tests; ``cfg`` must match the target's config.
    """
    target.config.check_compatible(cfg)
    from updatescope.sketch.fishersketch import features

    directions = target_directions(target)
    sums = torch.zeros(len(streams), 3, dtype=torch.float64)
    sq = torch.zeros(len(streams), 3, dtype=torch.float64)
    counts = torch.zeros(len(streams), dtype=torch.int64)
    for i, (a, e) in enumerate(streams):
        if a.shape[0]:
            c = score_features(features(cfg, a, e), directions)
            sums[i], sq[i], counts[i] = c.sum(0), c.square().sum(0), a.shape[0]
    return scores_from_sums(sums, sq, counts, min_tokens)
