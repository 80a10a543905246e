"""Predicted interference between tasks trained one after another, and a plan against it.

**The table.**  For N task signatures, every pair (A, B) gets four estimates, each with a
standard error calibrated as in :class:`updatescope.sketch.align.Alignment` (block
jackknife over random features in quadrature with the disagreement of the stream halves,
t-multiplier on the Welch–Satterthwaite degrees of freedom, so ``value ± 2·se`` is a ≈95%
interval):

- ``inner`` ⟨F_A, F_B⟩ = E_{a∼A, b∼B}[(g_aᵀ g_b)²] = E_{b∼B}[g_bᵀ F_A g_b]: the average
  second-order (EWC-style) penalty, in squared-loss-gradient units, that one gradient step on
  a B example costs A (times ½η² for step size η).  Its *scale* matters for forgetting: two
  tasks with a large Fisher overlap are damaged more than two whose Fishers point the same
  way but are small.  Unbiased (all cross pairs; no self-pairs are involved).
- ``fisher`` A_F = ⟨F_A, F_B⟩ / (‖F_A‖ ‖F_B‖): the same overlap with the scale divided out.
- ``error`` Scov(Γ_e): the overlap of the two error second moments only (which outputs the
  tasks push on), blind to the inputs.
- ``activation`` Scov(M_a): the overlap of the activation second moments only (where the
  inputs lie), blind to the outputs.

Every entry is symmetric in A and B; the diagonal is undefined (NaN).  ``sq_norm`` holds
each task's unbiased ‖F‖² = E_{a≠a'}[(g_aᵀ g_a')²], the inner product of a task with an
independent copy of itself, to read ``inner`` against.  What the table cannot say:
mean-gradient conflict (GEM / A-GEM: whether the *mean* gradients of A and B point apart,
i.e. whether a B step undoes A's learning to first order) needs each task's mean gradient,
which a signature does not hold — it stores second moments of per-example gradients only.

**The cost of an order.**  Sequential fine-tuning is modelled as overwriting: a stage
trained on B moves the parameters within the directions B's Fisher spans, and what A loses
is its curvature in the directions later stages moved.  Overlaps are not additive — a
direction moved by two later stages costs A once — so, from pairwise statistics alone, A's
predicted forgetting is the largest damage any one later task does to it::

    forgetting(A | order) = max_{B after A} D(A, B)        (0 for the last task)
    cost(order)           = Σ_A forgetting(A | order)

with D(A, B) the chosen score when it is significant (value > 2·se) and 0 otherwise
(negative or noise-level overlaps predict no damage).  An additive cost Σ_{A before B}
D(A, B) would be the same for every order, because D is symmetric: every pair is counted
once whichever comes first, so it could not rank orders.  Under the max cost a task that
overlaps every other (a hub) is best trained *first*: it is then damaged once, by its
worst partner, instead of damaging every task trained before it.

**Search.**  Exact for N ≤ ``EXACT_MAX`` by dynamic programming over the set of tasks
trained last (a suffix's cost depends only on its set, so f(S) = min_{A∈S} f(S∖A) +
max_{B∈S∖A} D(A, B); O(2^N·N²) time, O(2^N·N) memory).  Beyond, a heuristic: the same
recursion restricted to the ``BEAM_WIDTH`` best sets of each size (beam search), then
best-improvement local search over every move of one task to another position (the swaps
of neighbours included), at most 5 passes.  On the seeded random instances of
tests/test_interference.py (40 of 8 tasks, 3 of 14) it found the exact optimum every time.
The worst order is found the same way with the sign of the search flipped (beyond
``EXACT_MAX`` by the beam alone: it is only reported, so it gets no local search).

**Replay.**  At stage k (task T_k) each earlier task A gets a share of T_k's tokens in
proportion to D(A, T_k), the damage T_k is predicted to do to it — the same clipped score
the cost takes its maximum over — and the shares sum to ``replay_budget``.  When no earlier
task has a significant predicted damage from T_k, that stage replays nothing and the budget
is left unused (said in ``Plan.notes``).

All of this rests on a proxy: whether any of these scores predicts measured forgetting on
a real language model has not been measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.signature import KINDS, Signature

__all__ = [
    "EXACT_MAX",
    "QUANTITIES",
    "SCORES",
    "InterferenceTable",
    "Plan",
    "interference_table",
    "order_cost",
    "plan",
    "search_order",
]

QUANTITIES = ("inner", "fisher", "activation", "error")
SCORES = ("inner", "fisher", "error", "activation")
EXACT_MAX = 14  # tasks up to which the order is found by exact search
BEAM_WIDTH = 32  # partial orders kept per step by the heuristic beyond EXACT_MAX
SIGNIFICANCE = 2.0  # a score counts as damage when value > SIGNIFICANCE · se (≈95% one-sided beyond noise)
_Z975 = 1.959963984540054


def _safe(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclass(frozen=True)
class InterferenceTable:
    """Pairwise predicted interference; every matrix is (N, N) float64, symmetric, diagonal NaN.

    ``values[q]`` and ``ses[q]`` for q in :data:`QUANTITIES` (see the module docstring for
    what each means); ``sq_norm`` (N,) is each task's unbiased ‖F‖², the scale of ``inner``.
    """

    names: tuple[str, ...]
    values: dict[str, Tensor]
    ses: dict[str, Tensor]
    sq_norm: Tensor

    def damage(self, score: str = "inner") -> Tensor:
        """D (N, N): the score where it is significant (value > 2·se), else 0; diagonal 0."""
        if score not in SCORES:
            raise InputError(f"unknown score {score!r}; choose one of {', '.join(SCORES)}")
        v, se = self.values[score], self.ses[score]
        ok = torch.isfinite(v) & torch.isfinite(se) & (v > SIGNIFICANCE * se) & (v > 0)
        return torch.where(ok, v, torch.zeros_like(v))

    def as_dict(self) -> dict[str, Any]:
        """Strict-JSON-ready: one row per unordered pair, undefined values as None."""
        n = len(self.names)
        pairs = []
        for i in range(n):
            for j in range(i + 1, n):
                row: dict[str, Any] = {"a": self.names[i], "b": self.names[j]}
                for q in QUANTITIES:
                    row[q] = _safe(float(self.values[q][i, j]))
                    row[f"{q}_se"] = _safe(float(self.ses[q][i, j]))
                pairs.append(row)
        return {
            "names": list(self.names),
            "sq_norm": dict(zip(self.names, (_safe(float(x)) for x in self.sq_norm))),
            "pairs": pairs,
        }


def _t975(nu: Tensor) -> Tensor:
    """Student-t 97.5% quantile for fractional ν ≥ 1 (normal quantile where ν is infinite)."""
    from scipy.special import stdtrit

    x = nu.clamp(min=1.0).numpy()
    finite = np.isfinite(x)
    out = np.full(x.shape, _Z975)
    out[finite] = stdtrit(x[finite], 0.975)
    return torch.from_numpy(out)


def _u_sq(sq: Tensor, diag: Tensor, n: Tensor) -> Tensor:
    """Unbiased squared norm (Σ‖f‖² − self-pairs) / (n(n−1)); NaN where n < 2."""
    den = n * (n - 1)
    return torch.where(n >= 2, (sq - diag) / torch.where(n >= 2, den, torch.ones_like(den)), torch.nan)


def _cos(cross: Tensor, sqa: Tensor, sqb: Tensor) -> Tensor:
    """cross (A, B, k) / (√sqa (A, 1, k) · √sqb (1, B, k)); NaN where a norm is not positive."""
    den = sqa.clamp(min=0).sqrt() * sqb.clamp(min=0).sqrt()
    ok = (sqa > 0) & (sqb > 0) & (den > 0) & torch.isfinite(den)
    return torch.where(ok, cross / torch.where(ok, den, torch.ones_like(den)), torch.nan)


def _pair_values(sa: Tensor, da: Tensor, na: Tensor, sb: Tensor, db: Tensor, nb: Tensor, loo: bool) -> Any:
    """(inner, fisher, activation, error) for every row task a and column task b.

    sa (A, 3, m), da (A, 3, G), na (A,) and likewise for b, all scaled per task and kind.
    Returns full (A, B, 4) and, with ``loo``, the delete-one-block replicates (G, A, B, 4).
    The inner product of a block-deleted sketch is rescaled by G/(G−1): each block holds
    1/G of the random features, whose sum over all m is the unbiased estimate.
    """
    g = da.shape[-1]
    ta, tb, m = sa.shape[0], sb.shape[0], sa.shape[-1]
    xa, xb = sa.reshape(ta, 3, g, m // g), sb.reshape(tb, 3, g, m // g)
    cross_b = torch.einsum("akgi,bkgi->abkg", xa, xb)  # (A, B, 3, G)
    qa, qb = xa.square().sum(-1), xb.square().sum(-1)  # (A, 3, G)
    nab = (na[:, None] * nb[None, :])[..., None]  # (A, B, 1)
    cross = cross_b.sum(-1) / nab
    sqa = _u_sq(qa.sum(-1), da.sum(-1), na[:, None])[:, None, :]  # (A, 1, 3)
    sqb = _u_sq(qb.sum(-1), db.sum(-1), nb[:, None])[None, :, :]
    full = torch.cat((cross[..., :1], _cos(cross, sqa, sqb)), dim=-1)
    if not loo:
        return full, None
    cross_l = (cross_b.sum(-1, keepdim=True) - cross_b) / nab[..., None]  # (A, B, 3, G)
    sqa_l = _u_sq(qa.sum(-1, keepdim=True) - qa, da.sum(-1, keepdim=True) - da, na[:, None, None])
    sqb_l = _u_sq(qb.sum(-1, keepdim=True) - qb, db.sum(-1, keepdim=True) - db, nb[:, None, None])
    cross_l = cross_l.permute(3, 0, 1, 2)  # (G, A, B, 3)
    cos_l = _cos(cross_l, sqa_l.permute(2, 0, 1)[:, :, None, :], sqb_l.permute(2, 0, 1)[:, None, :, :])
    inner_l = cross_l[..., :1] * (g / (g - 1))
    return full, torch.cat((inner_l, cos_l), dim=-1)


def _check_signatures(sigs: Sequence[Signature], names: Sequence[str]) -> None:
    if len(sigs) != len(names):
        raise InputError(f"{len(sigs)} signatures but {len(names)} names")
    if len(set(names)) != len(names):
        raise InputError("task names must be unique")
    for sig, name in zip(sigs, names):
        if not isinstance(sig, Signature):
            raise InputError(f"task {name}: expected a Signature, got {type(sig).__name__}")
    for sig in sigs[1:]:
        sigs[0].config.check_compatible(sig.config)  # IncompatibleSignatureError names the field
    finite = [bool(torch.isfinite(s.sums).all() and torch.isfinite(s.diag).all()) for s in sigs]
    for ok, name in zip(finite, names):
        if not ok:
            raise InputError(f"task {name}: its signature holds NaN or inf state")


def _check_norms(sq: Tensor, counts: list[int], names: Sequence[str]) -> None:
    """InputError naming the first task with a non-positive or undefined squared norm.  sq (T, 3)"""
    for row, n, name in zip(sq.tolist(), counts, names):
        bad = [k for k, v in zip(KINDS, row) if not (math.isfinite(v) and v > 0)]
        if bad:
            raise InputError(
                f"task {name}: non-positive norm estimate ({', '.join(bad)}; {n} samples): "
                "too few tokens or degenerate errors; sketch more tokens or leave the task out"
            )


def interference_table(signatures: Sequence[Signature], names: Sequence[str] | None = None) -> InterferenceTable:
    """The N × N table of predicted interference from N compatible signatures.

    Values and standard errors match :func:`updatescope.sketch.align.alignment` pair by pair
    (``fisher``, ``activation``, ``error``), computed for all pairs at once; ``inner`` is the
    unnormalised ⟨F_A, F_B⟩ with its standard error from the same two noise sources.
    Raises InputError (or IncompatibleSignatureError, naming the field) on signatures of
    different models or bases, NaN/inf state, or a non-positive norm estimate.
    """
    sigs = list(signatures)
    names = tuple(names) if names is not None else tuple(f"task{i}" for i in range(len(sigs)))
    if not sigs:
        raise InputError("interference_table needs at least one signature")
    _check_signatures(sigs, names)
    sums = torch.stack([s.sums.to(torch.float64) for s in sigs])  # (T, 2, 3, m)
    diag = torch.stack([s.diag.to(torch.float64) for s in sigs])  # (T, 2, 3, G)
    counts = torch.stack([s.counts for s in sigs]).to(torch.float64)  # (T, 2)
    # per task and kind scale: every later square stays finite; ratios do not depend on it
    c = torch.maximum(sums.abs().amax(dim=(1, 3)), diag.amax(dim=(1, 3)).sqrt())  # (T, 3)
    c = torch.where((c > 0) & torch.isfinite(c), c, torch.ones_like(c))
    sums, diag = sums / c[:, None, :, None], diag / c[:, None, :, None].square()
    g = diag.shape[-1]
    s_tot, d_tot, n_tot = sums.sum(1), diag.sum(1), counts.sum(1)
    sq = _u_sq(s_tot.square().sum(-1), d_tot.sum(-1), n_tot[:, None])  # (T, 3) unbiased ‖μ‖², scaled
    _check_norms(sq, [s.count for s in sigs], names)
    sq = sq * c.square()
    est, loo = _pair_values(s_tot, d_tot, n_tot, s_tot, d_tot, n_tot, loo=True)
    var_sketch = (g - 1) / g * (loo - loo.mean(0)).square().sum(0)  # (T, T, 4)
    th = {}
    for h in (0, 1):
        for k in (0, 1):
            th[h, k] = _pair_values(sums[:, h], diag[:, h], counts[:, h], sums[:, k], diag[:, k], counts[:, k], False)[
                0
            ]
    half_ok = (counts >= 2).all(1)
    ok2 = (half_ok[:, None] & half_ok[None, :])[..., None]
    d_s = ((th[0, 0] - th[1, 0]) + (th[0, 1] - th[1, 1])) / 2
    d_t = ((th[0, 0] - th[0, 1]) + (th[1, 0] - th[1, 1])) / 2
    var_s = torch.where(ok2, d_s.square() / 4, torch.nan)
    var_t = torch.where(ok2, d_t.square() / 4, torch.nan)
    var = var_sketch + var_s + var_t
    den = var_sketch.square() / max(g - 1, 1) + var_s.square() + var_t.square()
    nu = torch.where(den > 0, var.square() / torch.where(den > 0, den, torch.ones_like(den)), torch.inf)
    se = var.sqrt() * _t975(nu.reshape(-1)).reshape(nu.shape) / _Z975
    scale = c[:, None, 0] * c[None, :, 0]  # the joint kind's scales, back to the original units
    est[..., 0] *= scale
    se[..., 0] *= scale
    eye = torch.eye(len(sigs), dtype=torch.bool)
    values = {q: est[..., i].masked_fill(eye, torch.nan) for i, q in enumerate(QUANTITIES)}
    ses = {q: se[..., i].masked_fill(eye, torch.nan) for i, q in enumerate(QUANTITIES)}
    return InterferenceTable(names, values, ses, sq[:, 0].clone())


# ---------------------------------------------------------------------- order search
def order_cost(damage: Any, order: Sequence[int]) -> float:
    """cost(order) = Σ_i max_{j > i} D[order_i, order_j] (0 for the last task).  D (N, N)."""
    d = np.asarray(damage, dtype=np.float64)
    idx = np.asarray(order)
    p = d[np.ix_(idx, idx)]
    upper = np.triu(p, 1)
    return float(upper.max(1).sum()) if len(idx) > 1 else 0.0


def _batch_costs(d: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Costs of many orders at once, reading only the pairs (i < j).  orders (B, N) -> (B,)"""
    n = orders.shape[1]
    if n < 2:
        return np.zeros(orders.shape[0])
    rows, cols = np.triu_indices(n, 1)  # grouped by row i, rows 0 … n−2 in order
    p = d[orders[:, rows], orders[:, cols]]  # (B, n(n−1)/2)
    starts = np.concatenate(([0], np.cumsum(np.arange(n - 1, 0, -1))[:-1]))
    return np.maximum.reduceat(p, starts, axis=1).sum(1)


def _exact(d: np.ndarray, sign: float) -> list[int]:
    """Order minimising (sign = 1) or maximising (sign = −1) the cost, by DP over suffix sets.

    f(S) = best over A ∈ S of f(S∖A) + max_{B ∈ S∖A} D(A, B), where S is the set of tasks
    trained last and A the first of them.  Ties go to the lower input index.
    """
    n = d.shape[0]
    full = 1 << n
    # mx[a, S] = max_{b ∈ S} D[a, b] (0 for the empty set: D ≥ 0), built one bit at a time
    mx = np.zeros((n, full))
    for b in range(n):
        lo = 1 << b
        mx[:, lo : 2 * lo] = np.maximum(mx[:, :lo], d[:, b : b + 1])
    f = np.zeros(full)
    first = np.zeros(full, dtype=np.int64)
    sets = np.arange(full)
    pop = sum((sets >> b) & 1 for b in range(n))  # set sizes
    for size in range(1, n + 1):
        layer = sets[pop == size]
        best = np.full(layer.shape, np.inf)
        arg = np.zeros(layer.shape, dtype=np.int64)
        for a in range(n):
            has = (layer >> a) & 1 == 1
            rest = layer[has] ^ (1 << a)
            val = sign * (f[rest] + mx[a, rest])
            cur = best[has]
            finite = np.isfinite(cur)
            tol = 1e-12 * np.maximum(1.0, np.abs(np.where(finite, cur, 0.0)))
            better = np.where(finite, val < cur - tol, True)
            idx = np.flatnonzero(has)[better]
            best[idx] = val[better]
            arg[idx] = a
        f[layer] = sign * best
        first[layer] = arg
    order, s = [], full - 1
    while s:
        a = int(first[s])
        order.append(a)
        s ^= 1 << a
    return order


def _move_sources(n: int) -> np.ndarray:
    """For every move of the task at position i to position j (i ≠ j): the source position of
    each slot of the new order.  (n(n−1), n)"""
    rows = []
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            src = list(range(n))
            del src[i]
            src.insert(j, i)
            rows.append(src)
    return np.array(rows, dtype=np.int64)


def _local_search(d: np.ndarray, order: list[int], sign: float, max_passes: int = 5) -> list[int]:
    """Best-improvement moves of one task to another position (the swaps of neighbours
    included) until none improves, at most ``max_passes`` times."""
    cur = np.asarray(order)
    cost = sign * _batch_costs(d, cur[None])[0]
    src = _move_sources(len(order))
    for _ in range(max_passes):
        cand = cur[src]
        costs = np.concatenate([sign * _batch_costs(d, c) for c in np.array_split(cand, max(1, len(cand) // 512))])
        r = int(np.argmin(costs))
        if not costs[r] < cost - 1e-12 * max(1.0, abs(cost)):
            break
        cur, cost = cand[r], costs[r]
    return cur.tolist()


def _beam(d: np.ndarray, sign: float, width: int) -> list[int]:
    """The suffix DP restricted to the ``width`` best sets of each size (beam search).

    Tasks are prepended one at a time to partial suffixes; a candidate's cost grows by
    max_{B in suffix} D(A, B); among candidates with the same set only the best is kept
    (as the DP would), then the ``width`` best sets survive.  Exact when ``width`` is at
    least the largest number of sets of one size, C(N, N/2).
    """
    n = d.shape[0]
    masks = np.zeros((1, n), dtype=bool)
    f = np.zeros(1)
    orders: list[list[int]] = [[]]
    for _ in range(n):
        inc = (masks[:, None, :] * d[None, :, :]).max(-1)  # (W, N): cost of prepending A
        val = sign * (f[:, None] + inc)
        val[masks] = np.inf
        flat = np.argsort(val, axis=None, kind="stable")
        keep, seen = [], set()
        for idx in flat:
            w, a = divmod(int(idx), n)
            if not np.isfinite(val[w, a]):
                break
            new = masks[w].copy()
            new[a] = True
            key = np.packbits(new).tobytes()  # the new set
            if key in seen:
                continue
            seen.add(key)
            keep.append((w, a))
            if len(keep) == width:
                break
        masks = np.stack([masks[w] for w, _ in keep])
        masks[np.arange(len(keep)), [a for _, a in keep]] = True
        f = np.array([f[w] + inc[w, a] for w, a in keep])
        orders = [[a, *orders[w]] for w, a in keep]
    return orders[0]


def _heuristic(d: np.ndarray, sign: float, width: int = BEAM_WIDTH) -> list[int]:
    """Beam search over suffix sets, then (for the best order) local search over moves of one task."""
    order = _beam(d, sign, width)
    return _local_search(d, order, sign) if sign > 0 else order


def search_order(damage: Any, *, worst: bool = False, method: str = "auto") -> tuple[list[int], str]:
    """(order, method used) minimising — or with ``worst`` maximising — :func:`order_cost`.

    damage (N, N), non-negative.  method: "exact" (DP, N ≤ 20 allowed), "heuristic", or
    "auto" (exact for N ≤ :data:`EXACT_MAX`).
    """
    d = np.asarray(damage, dtype=np.float64).copy()
    n = d.shape[0]
    if d.ndim != 2 or d.shape[1] != n:
        raise InputError(f"damage must be a square matrix, got shape {d.shape}")
    if not np.isfinite(d).all() or (d < 0).any():
        raise InputError("damage must be finite and non-negative")
    np.fill_diagonal(d, 0.0)
    if method == "auto":
        method = "exact" if n <= EXACT_MAX else "heuristic"
    if method == "exact" and n > 20:
        raise InputError(f"exact search over {n} tasks needs 2^{n} states; use method='heuristic'")
    if method not in ("exact", "heuristic"):
        raise InputError(f"unknown search method {method!r}")
    sign = -1.0 if worst else 1.0
    if n <= 1:
        return list(range(n)), method
    return (_exact(d, sign) if method == "exact" else _heuristic(d, sign)), method


# ---------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Plan:
    """A training order and replay shares, with what they buy under the proxy.

    ``order``: task names, first trained first.  ``replay[k]``: for stage k, the share of
    that stage's tokens to draw from each earlier task (summing to ``replay_budget``, or to
    0 where no earlier task is predicted to be damaged).  ``forgetting``: each task's
    predicted forgetting under the plan (max over later tasks of the damage score).
    ``cost_plan``, ``cost_worst``, ``cost_input``: the total predicted forgetting of the
    plan, of the worst order found (``worst_order``) and of the order given.
    """

    names: tuple[str, ...]
    order: tuple[str, ...]
    score: str
    replay_budget: float
    replay: tuple[dict[str, float], ...]
    forgetting: dict[str, float]
    cost_plan: float
    cost_worst: float
    cost_input: float
    worst_order: tuple[str, ...]
    search: str
    table: InterferenceTable
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (undefined numbers as None)."""
        return {
            "order": list(self.order),
            "score": self.score,
            "replay_budget": self.replay_budget,
            "stages": [
                {
                    "stage": k + 1,
                    "task": t,
                    "predicted_forgetting": self.forgetting[t],
                    "replay": dict(self.replay[k]),
                }
                for k, t in enumerate(self.order)
            ],
            "cost_plan": self.cost_plan,
            "cost_worst": self.cost_worst,
            "cost_input": self.cost_input,
            "worst_order": list(self.worst_order),
            "input_order": list(self.names),
            "search": self.search,
            "notes": list(self.notes),
            "table": self.table.as_dict(),
        }


def replay_shares(damage: Any, order: Sequence[int], budget: float) -> list[dict[int, float]]:
    """Per stage k: {earlier task index: budget · D[A, T_k] / Σ_{A' earlier} D[A', T_k]}; {} where Σ = 0."""
    d = np.asarray(damage, dtype=np.float64)
    out: list[dict[int, float]] = []
    for k, t in enumerate(order):
        earlier = list(order[:k])
        w = np.array([d[a, t] for a in earlier])
        total = float(w.sum()) if len(w) else 0.0
        out.append({a: budget * float(x) / total for a, x in zip(earlier, w)} if total > 0 and budget > 0 else {})
    return out


def _check_budget(replay_budget: Any) -> float:
    try:
        b = float(replay_budget)
    except (TypeError, ValueError):
        raise InputError(f"replay budget must be a number in [0, 1), got {replay_budget!r}") from None
    if not math.isfinite(b) or not 0.0 <= b < 1.0:
        raise InputError(f"replay budget must be a finite fraction in [0, 1), got {replay_budget!r}")
    return b


def plan(
    signatures: Sequence[Signature],
    names: Sequence[str] | None = None,
    *,
    replay_budget: float = 0.0,
    score: str = "inner",
) -> Plan:
    """Training order and per-stage replay shares minimising total predicted forgetting.

    signatures: N ≥ 2 compatible task signatures (one model, one basis); names: one per
    signature (default task0, task1, ...).  replay_budget: fraction of each stage's tokens
    spent on replay, in [0, 1).  score: which table entry is the damage D(A, B) — "inner"
    (⟨F_A, F_B⟩, default: scale matters for forgetting), "fisher", "error" or "activation".
    The cost, the search and the replay rule are stated in the module docstring.  The plan
    rests on an unvalidated proxy: no measurement yet shows that these scores predict
    forgetting on a real language model.
    """
    budget = _check_budget(replay_budget)
    if score not in SCORES:
        raise InputError(f"unknown score {score!r}; choose one of {', '.join(SCORES)}")
    sigs = list(signatures)
    if len(sigs) < 2:
        raise InputError(f"a plan needs at least two tasks, got {len(sigs)}")
    names = tuple(names) if names is not None else tuple(f"task{i}" for i in range(len(sigs)))
    for i, s in enumerate(sigs):
        for j in range(i):
            if isinstance(s, Signature) and s.same_state(sigs[j]):
                raise InputError(f"tasks {names[j]} and {names[i]} hold the same signature state (a duplicate)")
    table = interference_table(sigs, names)
    d = table.damage(score).numpy()
    best, method = search_order(d)
    worst, _ = search_order(d, worst=True)
    n = len(sigs)
    forgetting = {names[a]: (float(d[a, best[i + 1 :]].max()) if i + 1 < n else 0.0) for i, a in enumerate(best)}
    shares = replay_shares(d, best, budget)
    notes = []
    if not d.any():
        notes.append(f"no pair has a significant predicted interference under '{score}': every order costs 0")
    idle = [names[t] for k, t in enumerate(best) if k > 0 and not shares[k]]
    if budget > 0 and idle:
        notes.append(
            "no replay at the stage(s) of " + ", ".join(idle) + ": no earlier task is predicted to be damaged there"
        )
    if method == "heuristic":
        notes.append(f"{n} tasks: order found by beam and local search, not proven optimal")
    return Plan(
        names=names,
        order=tuple(names[a] for a in best),
        score=score,
        replay_budget=budget,
        replay=tuple({names[a]: v for a, v in s.items()} for s in shares),
        forgetting=forgetting,
        cost_plan=order_cost(d, best),
        cost_worst=order_cost(d, worst),
        cost_input=order_cost(d, list(range(n))),
        worst_order=tuple(names[a] for a in worst),
        search=method,
        table=table,
        notes=tuple(notes),
    )
