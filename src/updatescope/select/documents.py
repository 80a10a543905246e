"""Document-level selection: score every document of a pool against a target signature.

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
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import Signature

__all__ = ["DocumentScores", "MIN_TOKENS", "target_directions", "score_features", "score_documents", "score_streams"]

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
    """Per-sample terms c_t = f(x_t)·v_T per kind.  (n, 3, m), (3, m) -> (n, 3) float64."""
    return torch.einsum("nkm,km->nk", feats.to(torch.float64), directions.to(feats.device, torch.float64))


def _finish(sums: Tensor, sq: Tensor, counts: Tensor, min_tokens: int) -> DocumentScores:
    """Means and standard errors from per-document sums (D, 3), sums of squares (D, 3), counts (D,)."""
    n = counts.to(torch.float64)[:, None]
    mean = sums / n  # NaN for documents with no counted token
    var = (sq - n * mean.square()).clamp(min=0) / (n - 1)
    se = torch.where(n > 1, (var / n).sqrt(), torch.full_like(mean, float("nan")))
    return DocumentScores(mean[:, 0], se[:, 0], mean[:, 1], mean[:, 2], counts.clone(), counts < min_tokens)


def score_documents(
    model: Any,
    tokenizer: Any,
    docs: Sequence[Any],
    target: Signature,
    *,
    token_budget: int = 1024,
    dtype: Any = None,
    min_tokens: int = MIN_TOKENS,
    fingerprint: str | None = None,
    progress: bool = True,
    positions: Sequence[Any] | None = None,
) -> DocumentScores:
    """Score every document of ``docs`` (strings or token-id lists) against ``target``.

    ``positions``: per document, the counted target indices or a boolean mask, as in
    ``capture_causal_lm`` (e.g. only a completion's tokens, or only assistant turns); a
    document with none counts no token and gets an undefined score.  Default: every
    next-token target.

    The model's head, the target's sketch_dim/seed/maps and the model fingerprint define the
    basis; a target of another model or config raises IncompatibleSignatureError naming the
    field, before any forward pass.  One forward pass per batch of ``token_budget`` tokens.
    """
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.capture.chunks import target_mask, tokenize
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint
    from updatescope.sketch.fishersketch import features
    from updatescope.sketch.inputs import softmax_minus_onehot

    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
        raise InputError(f"min_tokens must be a positive integer, got {min_tokens!r}")
    head = find_output_linear(model)
    k, d = head.weight.shape
    tc = target.config
    fp = fingerprint if fingerprint is not None else head_fingerprint(model, tokenizer)
    cfg = SketchConfig(d, k, tc.sketch_dim, tc.seed, tc.act_map, tc.error_map, fp, head.bias is not None)
    tc.check_compatible(cfg)
    directions = target_directions(target)
    if positions is not None and len(positions) != len(docs):
        raise InputError(f"positions has {len(positions)} entries for {len(docs)} documents")
    # Tokenise once; the capture then counts each document's targets (len − 1 by default, 0
    # below 2 tokens) in document order, so record r belongs to the document owning
    # position r of the stream.
    ids = [tokenize(tokenizer, t, True, i) for i, t in enumerate(docs)]
    counted = [
        sum(target_mask(len(x), None if positions is None else positions[i], i)) if len(x) >= 2 else 0
        for i, x in enumerate(ids)
    ]
    counts = torch.tensor(counted, dtype=torch.int64)
    keep = [i for i, c in enumerate(counted) if c > 0]
    owner = torch.repeat_interleave(torch.arange(len(ids)), counts)
    sums = torch.zeros(len(ids), 3, dtype=torch.float64)
    sq = torch.zeros(len(ids), 3, dtype=torch.float64)
    done = 0
    with torch.inference_mode():
        for acts, logits, labels in capture_causal_lm(
            model,
            [ids[i] for i in keep],
            tokenizer,
            positions=None if positions is None else [positions[i] for i in keep],
            token_budget=token_budget,
            dtype=dtype,
            progress=progress,
            desc="score documents",
        ):
            n = labels.shape[0]
            errors = softmax_minus_onehot(logits, labels)
            c = score_features(features(cfg, acts.to(errors.dtype), errors), directions).cpu()  # (n, 3)
            who = owner[done : done + n]
            sums.index_add_(0, who, c)
            sq.index_add_(0, who, c.square())
            done += n
    if done != int(counts.sum()):  # the capture's counting rule changed: refuse to misattribute scores
        raise RuntimeError(f"captured {done} records for {int(counts.sum())} counted tokens")
    return _finish(sums, sq, counts, min_tokens)


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
    return _finish(sums, sq, counts, min_tokens)
