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
computed from the per-request co-moments Σ_t (c_t,a − c̄_a)(c_t,b − c̄_b), kept while the bank
has at most ``PAIRED_LIMIT`` adapters (the (A, A) sums per request grow as A²).  A
:class:`RouteAccumulator` given a larger bank falls back to the unpaired √(se_a² + se_b²),
which is larger when the two adapters' terms are positively correlated (the usual case), so
the flag below fires more often, never less; the ``Router`` uses the large-bank path instead.

Large banks.  Beyond ``PAIRED_LIMIT`` adapters, :class:`CandidateAccumulator` scores a group of
requests at once, as a coarse ranking and an exact re-scoring.  The joint score of every
adapter is the request's mean joint feature times the bank (the same value as the mean of the
per-token terms), one (A, m) × (m, D) product per group in float32 against a float32 copy of
the bank's joint directions (the bank is read once per group, not once per token; the copy and
its kernel, oneDNN's packed inner product on the CPU or BLAS, are a :class:`RankingBank`): a
score off the float64 value by float32 rounding (about 1e-7 of |mean||v_a|) is enough to rank.  Each
request's ``CANDIDATES`` best adapters by that ranking are then scored again in float64 from
the same mean features, re-ordered by those exact scores (bank order among ties), with their
activation and error scores, and get their per-token joint terms: one (n_D, m) × (m, C) product
in float32 (the precision of the features themselves, with the ranking's kernel) against the
candidates' directions rounded to float32 (the ranking copy's values), centred on its
own mean in float64, giving the standard errors and the paired co-moments among the
candidates, so the gap between the best and the runner-up keeps its paired error at any bank
size.  Centred co-moments avoid the cancellation of raw sums of products against n·mean².  A
float32 term is off by about 1e-7 of |f_t||v_a|, far below the sampling error of an error
estimate (about 1/√(2(n_D − 1)) of it); two directions closer than that rounding get a paired
error of the rounding's size, so their gap is flagged (the safe side).  ``score`` holds the
exact values on the candidates and the float32 ranking values elsewhere; outside a request's
candidates, ``se``, ``activation`` and ``error`` are NaN (not computed), and the choice below
is made among the candidates (they are the best by at least float32 rounding).

Choice.  Top adapter: the largest score (first in bank order on a tie), among a large bank's
candidates when top-k is at most their number.  Top-k: the k largest,
with weights proportional to their positive scores (a non-positive score gets weight 0; when
none of the k is positive, equal weights), summing to 1.
Ambiguity: a request is flagged when best − runner-up ≤ ``z``·se(best − runner-up)
(z = 2 by default: a one-sided test at about 2.3 %), or when its scores are undefined.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.select.documents import MIN_TOKENS, target_directions
from updatescope.sketch.signature import Signature
from updatescope.sketch.workspace import scratch

__all__ = [
    "CANDIDATES",
    "PAIRED_LIMIT",
    "CandidateAccumulator",
    "RankingBank",
    "RouteAccumulator",
    "RouteChoice",
    "RouteScores",
    "bank_choice",
    "bank_terms",
    "check_candidates",
    "direction_bank",
    "joint_ranking_bank",
    "route_weights",
]

PAIRED_LIMIT = 256  # banks up to this size keep the per-request (A, A) sums for paired errors
CANDIDATES = 16  # larger banks: per request, the adapters whose errors are computed
GROUP_TOKENS = 4096  # larger banks: counted tokens whose joint features are held before scoring
# larger banks: bytes of candidate directions gathered at once (a group of many short requests is
# re-scored a slice of requests at a time, so this bounds the gathers, not the group)
GATHER_BYTES = 1 << 25
RANK_ROWS = 1024  # larger banks: bank rows per product of the coarse ranking (``bank_choice``, BLAS)
RANK_BATCH = 32  # larger banks: the group size oneDNN's packed ranking copy is laid out for


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
    names); ``cross`` (D, A, A) co-moments Σ_t (c_t,a − c̄_a)(c_t,b − c̄_b) of the joint per-token
    terms (0 for a request with no counted token), or None when
    the bank is larger than ``PAIRED_LIMIT``; ``candidates`` (D, C) int64: for a large bank
    (:class:`CandidateAccumulator`), each request's best C adapters by joint score, best
    first (-1 for a request with no counted token), to which ``cross`` (D, C, C) and the
    defined entries of ``se``, ``activation`` and ``error`` belong; None otherwise."""

    names: tuple[str, ...]
    score: Tensor
    se: Tensor
    activation: Tensor
    error: Tensor
    tokens: Tensor
    short: Tensor
    cross: Tensor | None
    candidates: Tensor | None = None

    def __len__(self) -> int:
        return int(self.score.shape[0])

    def gap_se(self, d: int, a: int, b: int) -> tuple[float, bool]:
        """Standard error of score_a − score_b for request d, and whether it is paired."""
        n = float(self.tokens[d])
        if n < 2:
            return float("nan"), self.cross is not None
        # where a and b sit in cross[d]: the bank's order, or a large bank's candidates
        if self.candidates is not None:
            where = {int(x): i for i, x in enumerate(self.candidates[d].tolist())}
        else:
            where = {} if self.cross is None else {a: a, b: b}
        if a not in where or b not in where:  # unpaired (NaN outside a large bank's candidates)
            return float((self.se[d, a] ** 2 + self.se[d, b] ** 2).sqrt()), False
        c, i, j = self.cross[d], where[a], where[b]
        var = max(float(c[i, i] + c[j, j] - 2 * c[i, j]), 0.0) / (n - 1)  # of c_t,a − c_t,b
        return (var / n) ** 0.5, True

    def _pool(self, d: int, top_k: int) -> Tensor | None:
        """The adapters request d chooses among: a large bank's candidates when there are at least
        max(top_k, 2) of them and the request has counted tokens, else None (the whole row)."""
        if self.candidates is None or self.candidates.shape[1] < max(top_k, 2):
            return None
        cand = self.candidates[d]
        return None if bool((cand < 0).any()) else cand

    def choose(self, top_k: int = 1, z: float = 2.0) -> list[RouteChoice]:
        """Per request: the top adapter or the weighted top-k, and the ambiguity flag."""
        if not z > 0:
            raise InputError(f"z must be positive, got {z!r}")
        out = []
        for d in range(len(self)):
            row = self.score[d]
            pool = self._pool(d, top_k)
            if pool is None:
                idx, weights = route_weights(row, top_k)
            else:  # among a large bank's candidates, whose scores are exact
                sub, weights = route_weights(row[pool], top_k)
                idx = [int(pool[i]) for i in sub]
            if len(self.names) < 2:
                gap, gse, paired, amb = float("nan"), float("nan"), self.cross is not None, False
            else:
                best = route_weights(row if pool is None else row[pool], 2)[0]
                first, second = best if pool is None else (int(pool[best[0]]), int(pool[best[1]]))
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
        cross = None
        if self.cross is not None:  # co-moments: Σ c_a c_b − (Σ c_a)(Σ c_b)/n
            s = self.sums[..., 0]
            cross = self.cross - s[:, :, None] * s[:, None, :] / n.clamp(min=1)
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


def check_candidates(candidates: int) -> int:
    """A large bank's candidates per request: an integer of at least 2 (the best and the
    runner-up), else a one-line ``InputError``."""
    if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 2:
        raise InputError(f"candidates must be an integer of at least 2, got {candidates!r}")
    return candidates


def _best(scores: Tensor, c: int) -> Tensor:
    """Per row, the indices of the c largest finite scores, best first, the first in bank order
    on a tie (as ``argsort(-scores, stable=True)[:, :c]``, without sorting every adapter).
    scores (G, A) -> (G, c) int64."""
    key = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -torch.inf))
    top = torch.topk(key, c, dim=1)
    edge = top.values[:, -1:]  # the c-th largest value per row
    mask = key >= edge
    if bool((mask.sum(1) == c).all()):  # no tie at any row's edge: every row at once
        near = torch.sort(top.indices, dim=1).values  # the same c indices, in bank order
        return near.gather(1, torch.argsort(-key.gather(1, near), dim=1, stable=True))
    out = []
    for row, e in zip(key, edge):
        near = torch.nonzero(row >= e).flatten()  # ascending: bank order among ties
        out.append(near[torch.argsort(-row[near], stable=True)[:c]])
    return torch.stack(out)


def _onednn() -> tuple[Any, Any] | None:
    """oneDNN's float32 inner product and its weight packing, as PyTorch's compiler calls them
    for linear layers on the CPU (``torch.ops.mkldnn``), or None where this build lacks them."""
    if not torch.backends.mkldnn.is_available():
        return None
    ops = getattr(torch.ops, "mkldnn", None)
    try:
        return ops._linear_pointwise.default, ops._reorder_linear_weight.default  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return None


KERNELS = ("auto", "onednn", "blas")


class RankingBank:
    """A large bank's joint directions in float32, (A, m): what the coarse ranking reads (a
    sixth of the float64 bank's bytes), made once per bank.

    kernel ``"onednn"``: the copy is held in oneDNN's packed layout and read by its float32
    inner-product kernel (CPU only); ``"blas"``: a contiguous tensor read ``RANK_ROWS`` rows at a
    time by ``torch.mm``; ``"auto"``: oneDNN on a CPU whose PyTorch has it, else BLAS.  Either
    way each score is one float32 dot product, in the kernel's own order of accumulation, so the
    two agree within float32 rounding (about 1e-7 of |mean||v_a|); the oneDNN kernel is the
    faster on the benchmark's host (benchmarks/README.md, "Routing among adapters")."""

    def __init__(self, joint: Tensor, kernel: str = "auto") -> None:
        if kernel not in KERNELS:
            raise InputError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
        if joint.dim() != 2:
            raise InputError(f"the ranking directions must be (A, m), got shape {tuple(joint.shape)}")
        onednn = _onednn() if joint.device.type == "cpu" else None
        if kernel == "onednn" and onednn is None:
            raise InputError("the oneDNN ranking kernel needs a CPU bank and a PyTorch built with oneDNN")
        self.shape, self.device = joint.shape, joint.device
        plain = joint.to(torch.float32).contiguous()
        self.kernel = "blas" if onednn is None or kernel == "blas" else "onednn"
        if self.kernel == "onednn":
            self._linear, pack = onednn  # type: ignore[misc]
            self._packed = pack(plain, RANK_BATCH)
            self._plain = None
        else:
            self._plain = plain

    def __len__(self) -> int:
        return int(self.shape[0])

    def scores(self, mean_joint: Tensor) -> Tensor:
        """(G, m) -> every adapter's float32 ranking score, (G, A) (a transposed view under BLAS)."""
        q = mean_joint.to(self.device, torch.float32)
        if self._plain is None:
            return self._linear(q.contiguous(), self._packed, None, "none", [], "")
        # bank-major: with a few requests the (A, m) × (m, G) product reads the bank once, here
        # ``RANK_ROWS`` bank rows at a time into one (A, G) buffer (one product over all A rows
        # ran slower on the benchmark's host)
        qt = q.T.contiguous()  # (m, G)
        out = torch.empty(self.shape[0], qt.shape[1], dtype=torch.float32, device=self.device)
        for lo in range(0, self.shape[0], RANK_ROWS):
            torch.mm(self._plain[lo : lo + RANK_ROWS], qt, out=out[lo : lo + RANK_ROWS])
        return out.T

    def products(self, feats: Tensor, dirs: Tensor) -> Tensor:
        """Per-token float32 terms of a block of requests against their own candidates, with
        this bank's kernel: feats (g, n, m), dirs (g, C, m) float32 -> (g, n, C)."""
        feats = feats.to(torch.float32)
        if self._plain is not None:
            return torch.bmm(feats, dirs.transpose(1, 2))
        out = torch.empty(feats.shape[0], feats.shape[1], dirs.shape[1], dtype=torch.float32, device=feats.device)
        for i in range(feats.shape[0]):  # oneDNN's inner product takes one request at a time
            out[i] = self._linear(feats[i].contiguous(), dirs[i], None, "none", [], "")
        return out


def bank_choice(mean_joint: Tensor, joint: Tensor | RankingBank, c: int) -> tuple[Tensor, Tensor]:
    """Every adapter's joint score for a group of requests, and each request's c best adapters:
    the part of large-bank routing whose cost grows with the bank.

    mean_joint (G, m), the requests' mean joint features; joint: the bank's joint directions,
    a :class:`RankingBank` or a float32 (A, m) tensor (the coarse ranking, BLAS), or a float64
    (A, m) tensor (exact) -> scores (G, A) float64, computed in joint's dtype; candidates
    (G, c) best first."""
    if isinstance(joint, Tensor) and joint.dtype == torch.float64:
        scores = mean_joint.to(torch.float64) @ joint.T
        return scores, _best(scores, c)
    rank = joint if isinstance(joint, RankingBank) else RankingBank(joint, kernel="blas")
    scores = rank.scores(mean_joint)
    # the candidates are picked before widening (widening keeps every order and tie)
    return scores.to(torch.float64), _best(scores, c)


def joint_ranking_bank(bank: Tensor, kernel: str = "auto") -> RankingBank:
    """The float32 ranking copy of a bank's joint directions (``RankingBank``): bank (A, 3, m)."""
    return RankingBank(bank[:, 0], kernel)


def _blocks(feats: Sequence[Tensor], most: int) -> Iterator[tuple[int, int, Tensor]]:
    """Consecutive requests' (n_d, m) features as batched blocks ``(lo, hi, (hi − lo, n, m))``:
    a run of requests of one length n that lie back to back in one buffer (as ``update`` holds
    them) is one strided view of at most ``most`` requests, every other request a block of one.
    In order, covering all."""
    lo = 0
    while lo < len(feats):
        f = feats[lo]
        n, hi = f.shape[0], lo + 1
        step = f.numel() * f.element_size()
        if f.is_contiguous():
            while (
                hi < len(feats)
                and hi - lo < most
                and feats[hi].shape == f.shape
                and feats[hi].is_contiguous()
                and feats[hi].untyped_storage().data_ptr() == f.untyped_storage().data_ptr()
                and feats[hi].data_ptr() == f.data_ptr() + (hi - lo) * step
            ):
                hi += 1
        yield lo, hi, f[None] if hi == lo + 1 else f.as_strided((hi - lo, n, f.shape[1]), (f.numel(), f.shape[1], 1))
        lo = hi


def _exact_orders(exact: Tensor, cand: Tensor) -> Tensor:
    """Per row, the positions that sort the candidates by their exact scores with ``_best``'s
    rule (best first, bank order among ties, undefined scores last).  exact (G, C) float64,
    cand (G, C) bank indices -> (G, C) int64."""
    by_bank = torch.argsort(cand, dim=1)
    return by_bank.gather(1, _best(exact.gather(1, by_bank), cand.shape[1]))


class CandidateAccumulator:
    """Scores of requests against a large bank, fed the per-token features ``(n, 3, m)`` one
    captured batch at a time (the rule is in the module docstring); ``compute()`` gives
    ``RouteScores`` with ``candidates`` set.

    counts: counted tokens per request (D,), in stream order; bank: (A, 3, m) float64; joint:
    the bank's :class:`RankingBank` for the coarse ranking (made from the bank when not given: a
    caller scoring many groups against one bank, as the Router, keeps one copy).  ``kernel``:
    the ranking kernel of a copy made here (``RankingBank``).  The joint features of at most
    about ``group_tokens`` counted tokens are held at once (a request is never split: a longer
    one is held whole), plus the rest of the captured batch an unfinished request arrived in
    (each batch's joint rows are one copy)."""

    def __init__(
        self,
        names: Sequence[str],
        counts: Sequence[int],
        bank: Tensor,
        *,
        min_tokens: int = MIN_TOKENS,
        candidates: int = CANDIDATES,
        group_tokens: int = GROUP_TOKENS,
        joint: RankingBank | Tensor | None = None,
        kernel: str = "auto",
    ) -> None:
        check_candidates(candidates)
        self.names = tuple(names)
        self.counts = torch.tensor(list(counts), dtype=torch.int64)
        self.bank = bank.to(torch.float64)
        if joint is None:
            joint = joint_ranking_bank(self.bank, kernel)
        elif isinstance(joint, Tensor):  # a float32 (A, m) copy the caller made
            joint = RankingBank(joint, kernel)
        self.joint = joint
        self.min_tokens, self.group_tokens = min_tokens, group_tokens
        d, a = len(self.counts), len(self.names)
        if self.bank.shape[0] != a:
            raise InputError(f"the bank has {self.bank.shape[0]} directions for {a} adapter names")
        if tuple(self.joint.shape) != (a, self.bank.shape[-1]):
            raise InputError(f"the ranking copy has shape {tuple(self.joint.shape)}, not the bank's ({a}, m)")
        self.c = min(candidates, a)
        nan = float("nan")
        self.score = torch.full((d, a), nan, dtype=torch.float64)
        self.se = torch.full((d, a), nan, dtype=torch.float64)
        self.activation = torch.full((d, a), nan, dtype=torch.float64)
        self.error = torch.full((d, a), nan, dtype=torch.float64)
        self.cand = torch.full((d, self.c), -1, dtype=torch.int64)
        self.cross = torch.zeros(d, self.c, self.c, dtype=torch.float64)
        self.owner = torch.repeat_interleave(torch.arange(d), self.counts)
        self.ends = torch.cumsum(self.counts, 0)  # a request is complete once the stream passes its end
        self.done = 0
        self.sums = torch.zeros(d, 3, self.bank.shape[-1], dtype=torch.float64)
        self.held: dict[int, list[Tensor]] = {}  # request -> its joint features so far
        self.held_tokens = 0

    def update(self, feats: Tensor) -> CandidateAccumulator:
        """feats (n, 3, m): the next n counted tokens of the stream.  In place; returns self."""
        n = feats.shape[0]
        if self.done + n > len(self.owner):
            raise RuntimeError(f"got {self.done + n} feature rows for {len(self.owner)} counted tokens")
        feats = feats.to("cpu")
        who = self.owner[self.done : self.done + n]
        ids, runs = torch.unique_consecutive(who, return_counts=True)
        # held as they come (float32 from the capture, the dtype of the float32 product that gives
        # each request's per-token terms): one copy of the batch's joint rows, and views of it per
        # request, so consecutive requests of one length are one strided block (see ``_blocks``)
        joint = feats[:, 0].clone()
        start = 0
        for d, r in zip(ids.tolist(), runs.tolist()):
            # each request's run summed in float64 as it is read (no float64 copy of the batch)
            self.sums[d] += feats[start : start + r].sum(0, dtype=torch.float64)
            self.held.setdefault(d, []).append(joint[start : start + r])
            start += r
        self.done += n
        self.held_tokens += n
        if self.held_tokens >= self.group_tokens:
            self._flush()
        return self

    def _flush(self) -> None:
        """Score the held requests whose tokens have all arrived: the coarse ranking of the whole
        bank in one product, then every request's candidates exactly (rule in the module
        docstring), all requests of the group at once but for the per-token terms."""
        ready = [d for d in self.held if int(self.ends[d]) <= self.done]
        if not ready:
            return
        idx = torch.tensor(ready)
        n = self.counts[idx].to(torch.float64)
        means = self.sums[idx] / n[:, None, None]  # (G, 3, m) float64
        approx, order = bank_choice(means[:, 0], self.joint, self.c)  # (G, A), (G, C)
        self.score[idx] = approx
        exact = self._exact(order, means)  # (G, C, 3): joint, activation and error scores
        pos = _exact_orders(exact[..., 0], order)
        cand = order.gather(1, pos)
        exact = exact.gather(1, pos[..., None].expand_as(exact))
        rows = idx[:, None].expand_as(cand)
        self.score[rows, cand], self.activation[rows, cand], self.error[rows, cand] = exact.unbind(-1)
        self.cand[idx] = cand
        cross = torch.empty(len(ready), self.c, self.c, dtype=torch.float64)
        feats = []
        for d in ready:
            parts = self.held.pop(d)
            feats.append(parts[0] if len(parts) == 1 else torch.cat(parts))  # (n_d, m)
            self.held_tokens -= feats[-1].shape[0]
        for lo, hi, block in _blocks(feats, self._slice(4)):
            # the block's candidates' joint directions in the exact order, one gather, rounded
            # to float32 (the ranking copy's values)
            dirs = self.bank[:, 0].index_select(0, cand[lo:hi].reshape(-1)).to(torch.float32)
            # (g, n_d, C) per-token joint terms of the candidates, float32, centred in float64
            # (the scores stay the mean features': identical directions keep identical scores)
            terms = self.joint.products(block, dirs.view(hi - lo, self.c, -1)).to(torch.float64)
            terms -= terms.mean(1, keepdim=True)
            torch.bmm(terms.transpose(1, 2), terms, out=cross[lo:hi])
        self.cross[idx] = cross
        nd = n[:, None]
        var = torch.diagonal(cross, dim1=1, dim2=2) / (nd - 1)  # NaN or inf for one token: masked
        self.se[rows, cand] = torch.where(nd > 1, (var / nd).sqrt(), torch.full_like(var, float("nan")))

    def _exact(self, order: Tensor, means: Tensor) -> Tensor:
        """The exact float64 scores of each request's candidates, every kind: (G, C, 3).  One
        kind at a time, the candidates' directions are gathered into the thread's reused
        workspace (a fresh (G·C, m) float64 block per kind and call costs more in page faults
        than the products: ``updatescope.sketch.workspace``)."""
        g, c = order.shape
        m = self.bank.shape[-1]
        out = torch.empty(g, c, 3, dtype=torch.float64)
        per = self._slice(8)
        for lo in range(0, g, per):  # a slice of the group's requests at a time (``GATHER_BYTES``)
            hi = min(lo + per, g)
            rows = scratch("route.candidates", ((hi - lo) * c, m), torch.float64, self.bank.device)
            flat = order[lo:hi].reshape(-1)
            for k in range(3):
                torch.index_select(self.bank[:, k], 0, flat, out=rows)
                out[lo:hi, :, k] = rows.view(hi - lo, c, m).mul_(means[lo:hi, k, None, :]).sum(-1)
        return out

    def _slice(self, item_bytes: int) -> int:
        """Requests whose candidates' directions (C × m numbers of ``item_bytes``) fit in
        ``GATHER_BYTES`` (at least one)."""
        return max(1, GATHER_BYTES // (self.c * self.bank.shape[-1] * item_bytes))

    def compute(self) -> RouteScores:
        if self.done != len(self.owner):
            raise RuntimeError(f"captured {self.done} records for {len(self.owner)} counted tokens")
        self._flush()
        # every token has arrived, so nothing writes to these tables again: handed over, not
        # copied (four (D, A) float64 copies are a tenth of this call's time at A = 10,000)
        return RouteScores(
            self.names,
            self.score,
            self.se,
            self.activation,
            self.error,
            self.counts.clone(),
            self.counts < self.min_tokens,
            self.cross,
            self.cand,
        )
