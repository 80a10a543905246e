"""Routing requests among adapters: every request scored against a bank of adapter signatures
at once (the model-side loop is ``updatescope.pipeline.route.Router``).

Score.  The score of request D against adapter a is the document score of
:mod:`updatescope.select.documents` with the adapter's training-data signature as the target:
score_a(D) = (1/n_D) Σ_t φ(x_t)·v_a, the projection of the request's head Fisher onto the
adapter's, in units of the adapter's own.  Stacking the directions v_a into a bank
V (A, 3, m) turns A document scores into one (n, m) × (m, A) product per kind.

Standard errors.  ``se`` is sd_t(c_t,a)/√n_D per adapter, as for documents (tokens treated
as independent: a lower bound).  Two adapters are compared on the same tokens, so the
difference of their scores has the paired error se(a−b) = sd_t(c_t,a − c_t,b)/√n_D; it is
computed from the per-request sums of products Σ_t c_t,a c_t,b, kept while the bank has at
most ``PAIRED_LIMIT`` adapters (the (A, A) sums per request grow as A²).  Beyond that the
unpaired √(se_a² + se_b²) is used, which is larger when the two adapters' terms are positively
correlated (the usual case), so the flag below fires more often, never less.

Choice.  Top adapter: the largest score (first in bank order on a tie).  Top-k: the k largest,
with weights proportional to their positive scores (a non-positive score gets weight 0; when
none of the k is positive, equal weights), summing to 1.
Ambiguity: a request is flagged when best − runner-up ≤ ``z``·se(best − runner-up)
(z = 2 by default: a one-sided test at about 2.3 %), or when its scores are undefined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.select.documents import MIN_TOKENS, target_directions
from updatescope.sketch.signature import Signature

__all__ = [
    "PAIRED_LIMIT",
    "RouteAccumulator",
    "RouteChoice",
    "RouteScores",
    "bank_terms",
    "direction_bank",
    "route_weights",
]

PAIRED_LIMIT = 256  # banks up to this size keep the per-request (A, A) sums for paired errors


def direction_bank(targets: Sequence[Signature]) -> Tensor:
    """The adapters' directions v_a stacked.  -> (A, 3, m) float64.

    Every signature must share one config (model fingerprint, sketch size, seed, maps):
    ``IncompatibleSignatureError`` names the first field that differs."""
    targets = list(targets)
    if not targets:
        raise InputError("no adapter signatures: the bank is empty")
    for t in targets:
        if not isinstance(t, Signature):
            raise InputError(f"an adapter signature must be a Signature, got {type(t).__name__}")
        targets[0].config.check_compatible(t.config)
    return torch.stack([target_directions(t) for t in targets])


def bank_terms(feats: Tensor, bank: Tensor) -> Tensor:
    """Per-token terms c_t,a = f(x_t)·v_a for every adapter and kind: one product per kind.

    feats (n, 3, m), bank (A, 3, m) -> (n, A, 3) float64."""
    f = feats.to(torch.float64)
    v = bank.to(f.device, torch.float64)
    return torch.einsum("nkm,akm->nak", f, v)


def route_weights(scores: Tensor, top_k: int) -> tuple[list[int], list[float]]:
    """The top-k adapters of one request and their weights (rule in the module docstring).

    scores (A,) -> (indices best first, weights summing to 1)."""
    a = scores.shape[0]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= a:
        raise InputError(f"top_k must be an integer from 1 to the number of adapters ({a}), got {top_k!r}")
    key = torch.where(torch.isfinite(scores), -scores, torch.full_like(scores, float("inf")))
    idx = torch.argsort(key, stable=True)[:top_k].tolist()
    pos = [max(float(scores[i]), 0.0) if torch.isfinite(scores[i]) else 0.0 for i in idx]
    total = sum(pos)
    weights = [p / total for p in pos] if total > 0 else [1.0 / top_k] * top_k
    return idx, weights


@dataclass(frozen=True)
class RouteChoice:
    """One request's route: ``adapters`` (names, best first), ``weights`` (sum 1), the gap
    between the best and the runner-up with its standard error (NaN with one adapter), whether
    that error was paired, and the ``ambiguous`` flag."""

    adapters: tuple[str, ...]
    weights: tuple[float, ...]
    gap: float
    gap_se: float
    paired: bool
    ambiguous: bool


@dataclass(frozen=True)
class RouteScores:
    """Scores of D requests against A adapters: ``score``, ``se``, ``activation``, ``error``,
    each (D, A) float64; ``tokens`` (D,) int64; ``short`` (D,) bool; ``names`` (A adapter
    names); ``cross`` (D, A, A) sums of products of the joint per-token terms, or None when
    the bank is larger than ``PAIRED_LIMIT``."""

    names: tuple[str, ...]
    score: Tensor
    se: Tensor
    activation: Tensor
    error: Tensor
    tokens: Tensor
    short: Tensor
    cross: Tensor | None

    def __len__(self) -> int:
        return int(self.score.shape[0])

    def gap_se(self, d: int, a: int, b: int) -> tuple[float, bool]:
        """Standard error of score_a − score_b for request d, and whether it is paired."""
        n = float(self.tokens[d])
        if n < 2:
            return float("nan"), self.cross is not None
        if self.cross is None:
            return float((self.se[d, a] ** 2 + self.se[d, b] ** 2).sqrt()), False
        s = self.score[d] * n  # sums of the joint terms
        c = self.cross[d]
        sum_sq = c[a, a] + c[b, b] - 2 * c[a, b]
        mean = (s[a] - s[b]) / n
        var = max(float(sum_sq - n * mean**2), 0.0) / (n - 1)
        return (var / n) ** 0.5, True

    def choose(self, top_k: int = 1, z: float = 2.0) -> list[RouteChoice]:
        """Per request: the top adapter or the weighted top-k, and the ambiguity flag."""
        if not z > 0:
            raise InputError(f"z must be positive, got {z!r}")
        out = []
        for d in range(len(self)):
            row = self.score[d]
            idx, weights = route_weights(row, top_k)
            if len(self.names) < 2:
                gap, gse, paired, amb = float("nan"), float("nan"), self.cross is not None, False
            else:
                first, second = route_weights(row, 2)[0]
                gap = float(row[first] - row[second])
                gse, paired = self.gap_se(d, first, second)
                # undefined scores or error: nothing tells the adapters apart
                amb = not (gap == gap and gse == gse) or gap <= z * gse
            names = tuple(self.names[i] for i in idx)
            out.append(RouteChoice(names, tuple(weights), gap, gse, paired, bool(amb)))
        return out


class RouteAccumulator:
    """Per-request sums of the terms c_t,a (and their squares and joint products), fed one
    captured batch at a time; ``compute()`` gives ``RouteScores``.

    counts: counted tokens per request (D,); the terms of a batch arrive in stream order, so
    the r-th term overall belongs to the request owning position r."""

    def __init__(self, names: Sequence[str], counts: Sequence[int], *, min_tokens: int = MIN_TOKENS) -> None:
        self.names = tuple(names)
        self.counts = torch.tensor(list(counts), dtype=torch.int64)
        self.min_tokens = min_tokens
        d, a = len(self.counts), len(self.names)
        self.owner = torch.repeat_interleave(torch.arange(d), self.counts)
        self.sums = torch.zeros(d, a, 3, dtype=torch.float64)
        self.sq = torch.zeros(d, a, 3, dtype=torch.float64)
        self.cross = torch.zeros(d, a, a, dtype=torch.float64) if a <= PAIRED_LIMIT else None
        self.done = 0

    def update(self, terms: Tensor) -> RouteAccumulator:
        """terms (n, A, 3): the next n counted tokens of the stream.  In place; returns self."""
        n = terms.shape[0]
        if self.done + n > len(self.owner):
            raise RuntimeError(f"got {self.done + n} terms for {len(self.owner)} counted tokens")
        terms = terms.to("cpu", torch.float64)
        who = self.owner[self.done : self.done + n]
        self.sums.index_add_(0, who, terms)
        self.sq.index_add_(0, who, terms.square())
        if self.cross is not None:
            # the stream is in request order, so each request's tokens are one contiguous run
            ids, runs = torch.unique_consecutive(who, return_counts=True)
            start = 0
            for d, r in zip(ids.tolist(), runs.tolist()):
                c = terms[start : start + r, :, 0]
                self.cross[d] += c.T @ c
                start += r
        self.done += n
        return self

    def compute(self) -> RouteScores:
        if self.done != len(self.owner):
            raise RuntimeError(f"captured {self.done} records for {len(self.owner)} counted tokens")
        n = self.counts.to(torch.float64)[:, None, None]
        mean = self.sums / n  # NaN for requests with no counted token
        var = (self.sq - n * mean.square()).clamp(min=0) / (n - 1)
        se = torch.where(n > 1, (var / n).sqrt(), torch.full_like(mean, float("nan")))
        cross = None if self.cross is None else self.cross.clone()
        return RouteScores(
            self.names,
            mean[..., 0],
            se[..., 0],
            mean[..., 1],
            mean[..., 2],
            self.counts.clone(),
            self.counts < self.min_tokens,
            cross,
        )
