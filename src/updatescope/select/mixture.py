"""Mixture weights of several sources for a target, from their signatures alone.

A Fisher is an expectation over the data, so a mixture with token shares w (on the simplex)
has Fisher Σ w_i F_i, and its alignment with a target T is

    A_F(w) = wᵀb / (√(wᵀGw) ‖F_T‖),   b_i = ⟨F_i, F_T⟩,   G_ij = ⟨F_i, F_j⟩,

with b, G and ‖F_T‖² the unbiased estimates the sketches give (``sketch.align.inner_products``:
cross terms over all pairs of two streams, squared norms without self-pairs).  The same holds
for the ``activation`` (Scov(M_a)) and ``error`` (Scov(Γ_e)) objectives with their kernels.

Solver.  Maximising A_F over the simplex is a fractional quadratic program.  When some
b_i > 0 the optimum has wᵀb > 0, and with y = w / wᵀb it is the convex QP
min yᵀGy s.t. bᵀy = 1, y ≥ 0 (maximising wᵀb/√(wᵀGw) is minimising yᵀGy); w = y / Σy.
With G = LLᵀ this QP is the non-negative least-squares problem min_{x≥0} ‖Lᵀx‖² + (bᵀx − 1)²:
on the ray x = t·y (bᵀy = 1) the objective is t²q + (t − 1)² with q = yᵀGy, smallest at
t = 1/(1 + q) with value q/(1 + q), increasing in q, so the NNLS optimum x* is the QP's
optimum scaled, y* = x*/bᵀx*.  Its normal equations need only Q = G + bbᵀ and b, and it is
solved by the Lawson–Hanson active-set method (``nnls_gram``), which terminates finitely at
the exact optimum up to its tolerance on the dual variables (1e-12 relative).  When no
b_i > 0 the best the simplex offers is a single source: the best single one is returned
with a warning.

Estimation noise.  Unbiased squared norms can make G indefinite.  G is projected to the
nearest positive semi-definite matrix with a floor: its eigenvalues are clipped at
``EIG_FLOOR`` × the largest diagonal entry (the Frobenius-nearest matrix with that floor).
The solver uses the projected Gram; the reported alignment uses the unbiased one.  ``psd``
in the output says how large the correction was (how many eigenvalues were clipped, the
relative Frobenius norm of the change and, when it was made, the smallest eigenvalue
relative to the largest diagonal entry).  A Gram whose eigenvalues are all above the floor
is left exactly as it is (a Cholesky factorisation of G − floor·I proves it, without an
eigendecomposition), and a small perturbation moves the weights only a little
(tests/test_mixture.py).

Ties and duplicates.  The floor makes the projected Gram positive definite, so the QP is
strictly convex and its optimum unique; the projection is a spectral function, hence it
treats identical sources alike.  Sources holding exactly the same state (``same_state``) are
merged before solving and the group's weight split evenly among them (their share of the
tokens is the same): the predicted alignment is that of one copy, and the group is
reported.  Near-duplicates (different samples of one distribution) stay separate; their
weights may split in any proportion the unique optimum gives, which changes the predicted
alignment by no more than the noise that separates them.

At most K sources (``max_sources``).  When the unconstrained optimum already uses ≤ K
sources it is the answer.  Otherwise, if C(n, K) ≤ ``EXACT_SUBSETS`` every subset of K
sources is solved and the best kept (exact); beyond that, greedy forward selection: start
from the best single source and add, one at a time, the source whose addition gives the
highest optimum, until K sources or no addition improves it (ties go to the earlier source).
A group of identical sources (above) counts as one source.

Standard error of the predicted alignment: the same construction as ``sketch.align``,
evaluated at the chosen weights — a delete-one-block jackknife over the G feature blocks
(sketch error) in quadrature with the disagreement of the stream halves (sampling error; the
mixture's half h is made of every source's half h, the target's halves as in ``alignment``),
multiplied by t₀.₉₇₅(ν)/z₀.₉₇₅ on the Welch–Satterthwaite degrees of freedom.  For a single
source (one-hot w) value and standard error equal ``alignment``'s.  The weights are treated
as fixed: the optimisation's own selection effect (picking the weights that look best on
these estimates) is not in the standard error, so the predicted value of an optimised
mixture is biased upwards by an amount not measured here.

``budget`` turns weights into integer token counts by largest-remainder rounding: each
source gets ⌊w_i·B⌋ and the remaining tokens go to the largest fractional parts (ties to the
earlier source), so the counts sum to B exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.align import Z975, alignment, inner_products, t975
from updatescope.sketch.signature import KINDS, Signature

OBJECTIVES = KINDS  # ("fisher", "activation", "error")
EIG_FLOOR = 1e-10  # eigenvalues of the Gram clipped at this fraction of its largest diagonal entry
EXACT_SUBSETS = 5000  # max_sources: exhaustive search while C(n, K) is at most this
MAX_BUDGET = 10**15  # tokens: a thousand times the largest public pre-training corpora

__all__ = ["EIG_FLOOR", "EXACT_SUBSETS", "MAX_BUDGET", "OBJECTIVES", "Mixture", "mix", "round_budget", "solve"]


@dataclass(frozen=True)
class Mixture:
    """The mixture chosen for a target.

    - ``sources``/``weights``: every source considered, in input order, with its share of the
      tokens (summing to 1; zero for sources left out); ``tokens``: with a budget, integer
      tokens per source summing to ``budget``;
    - ``predicted``/``predicted_se``: the objective's alignment of the mixture with the target
      and its standard error (see the module docstring); ``by_kind``: the three alignments at
      these weights, each ``{"value", "se"}``;
    - ``best_single``/``best_single_value``/``best_single_se``: the source alone with the
      highest estimated alignment, from ``alignment``, for comparison;
    - ``groups``: sources merged because they hold the same state; ``dropped``: sources left
      out before solving, with the reason; ``psd``: the size of the Gram's correction;
      ``solver``: method and how the support was chosen.
    """

    target: str
    objective: str
    sources: tuple[str, ...]
    weights: tuple[float, ...]
    predicted: float
    predicted_se: float
    by_kind: dict[str, dict[str, float]]
    best_single: str
    best_single_value: float
    best_single_se: float
    budget: int | None = None
    tokens: tuple[int, ...] | None = None
    max_sources: int | None = None
    groups: tuple[tuple[str, ...], ...] = ()
    dropped: dict[str, str] = field(default_factory=dict)
    psd: dict[str, float] = field(default_factory=dict)
    solver: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def gain(self) -> float:
        """Predicted alignment of the mixture minus that of the best single source."""
        return self.predicted - self.best_single_value

    def as_dict(self, json_safe: bool = True) -> dict[str, Any]:
        """Plain dict; with ``json_safe`` non-finite floats become None (JSON null)."""

        def safe(v: Any) -> Any:
            if isinstance(v, float) and json_safe and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {k: safe(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [safe(x) for x in v]
            return v

        out = {k: safe(getattr(self, k)) for k in self.__dataclass_fields__}
        out["gain"] = safe(self.gain)
        out["rows"] = [
            {"source": s, "weight": w, **({"tokens": t} if self.tokens is not None else {})}
            for s, w, t in zip(self.sources, self.weights, self.tokens or [None] * len(self.sources))
        ]
        return out


# ---------------------------------------------------------------------- the solver
def psd_project(gram: Tensor, floor: float = EIG_FLOOR) -> tuple[Tensor, dict[str, float]]:
    """(projected Gram, correction info).

    Eigenvalues below ``floor`` × the largest diagonal entry (the largest squared norm, within
    a factor n of the largest eigenvalue) are set to that floor.  A Gram with every eigenvalue
    above it is returned unchanged (bit for bit): a Cholesky factorisation of G − floor·I
    proves it; otherwise the eigendecomposition is clipped."""
    import numpy as np

    g = (gram + gram.T) / 2
    top = float(g.diagonal().max())
    if not top > 0:
        raise InputError("no source has a positive squared-norm estimate: nothing to mix")
    lo = floor * top
    _, bad = torch.linalg.cholesky_ex(g - lo * torch.eye(g.shape[0], dtype=g.dtype))
    if int(bad) == 0:
        return g, {"clipped_eigenvalues": 0, "relative_change": 0.0, "floor_relative": floor}
    lam_np, vec_np = np.linalg.eigh(g.numpy())  # LAPACK through numpy: far faster than torch's here
    lam, vec = torch.from_numpy(lam_np), torch.from_numpy(vec_np)
    clipped = int((lam < lo).sum())
    fixed = (vec * lam.clamp(min=lo)) @ vec.T
    fixed = (fixed + fixed.T) / 2
    info = {
        "clipped_eigenvalues": clipped,
        "relative_change": float(torch.linalg.norm(fixed - g) / torch.linalg.norm(g)),
        "floor_relative": floor,
        "min_eigenvalue_relative": float(lam.min()) / top,
    }
    return fixed, info


def nnls_gram(q: Tensor, r: Tensor, tol: float | None = None, max_iter: int | None = None) -> Tensor:
    """Lawson–Hanson active-set NNLS in normal-equation form: argmin_{x≥0} xᵀQx − 2rᵀx.

    q (k, k) positive definite, r (k,), float64 tensors.  The classical algorithm (Lawson and
    Hanson 1974, ch. 23) with the least-squares subproblems solved from Q's principal
    submatrices: it terminates finitely, at the optimum up to ``tol`` on the dual variables
    (default 1e-12 × k × max(1, max|r|, max diag Q)).  Ties in the entering variable go to the
    lowest index.  Torch, not numpy: its thread count is the one ``torch.set_num_threads`` sets."""
    k = r.shape[0]
    tol = 1e-12 * k * max(1.0, float(r.abs().max()), float(q.diagonal().max())) if tol is None else tol
    max_iter = 3 * k + 10 if max_iter is None else max_iter
    x = torch.zeros(k, dtype=torch.float64)
    passive = torch.zeros(k, dtype=torch.bool)
    grad = r - q @ x
    for _ in range(max_iter):
        free = ~passive & (grad > tol)
        if not bool(free.any()):
            break
        passive[int(torch.argmax(torch.where(free, grad, torch.full_like(grad, -math.inf))))] = True
        while True:
            idx = torch.nonzero(passive).flatten()
            z = torch.zeros(k, dtype=torch.float64)
            z[idx] = torch.linalg.solve(q[idx][:, idx], r[idx])
            if bool((z[idx] > 0).all()):
                x = z
                break
            neg = idx[z[idx] <= 0]
            alpha = float((x[neg] / (x[neg] - z[neg])).min())
            x = x + alpha * (z - x)
            passive &= x > 1e-15 * max(1.0, float(x.max()))
            x[~passive] = 0.0
        grad = r - q @ x
    return x


def _weights(q: Tensor, b: Tensor, cols: Sequence[int]) -> Tensor | None:
    """Optimal simplex weights on the columns ``cols`` (length-n vector, zeros elsewhere), or
    None when no b_i > 0 among them.  q = G + bbᵀ (the NNLS normal matrix, module docstring)."""
    idx = torch.tensor(list(cols), dtype=torch.long)
    if not bool((b[idx] > 0).any()):
        return None
    sub = q if len(idx) == q.shape[0] else q[idx][:, idx]
    x = nnls_gram(sub, b[idx])
    if not float(x.sum()) > 0:
        return None
    w = torch.zeros(b.shape[0], dtype=torch.float64)
    w[idx] = x / x.sum()
    return w


def _ratio(w: Tensor, gram: Tensor, b: Tensor, tt: float) -> float:
    q = float(w @ gram @ w)
    num = float(w @ b)
    return num / (math.sqrt(q) * math.sqrt(tt)) if q > 0 and tt > 0 else float("nan")


def solve(
    gram: Tensor, b: Tensor, tt: float = 1.0, *, max_sources: int | None = None, floor: float = EIG_FLOOR
) -> tuple[Tensor, dict[str, Any]]:
    """Simplex weights maximising wᵀb / (√(wᵀGw)·√tt) (see the module docstring).

    gram (n, n), b (n,) float64; ``tt`` the target's squared norm (it only scales the value).
    -> (weights (n,), info with ``psd``, ``selection`` and ``value`` on the projected Gram)."""
    gram, b = gram.to(torch.float64), b.to(torch.float64)
    n = b.shape[0]
    fixed, psd = psd_project(gram, floor)
    # one common scale (the ratio is invariant to G -> G/s, b -> b/√s) keeps the tolerances relative
    s = float(fixed.diagonal().max())
    b_s = b / math.sqrt(s)
    q = fixed / s + b_s[:, None] * b_s[None, :]
    diag = fixed.diagonal()
    single = torch.where(diag > 0, b / (diag.clamp(min=0).sqrt() * math.sqrt(tt)), torch.full_like(b, -math.inf))
    best_i = int(torch.argmax(single))  # the first of equal values
    info: dict[str, Any] = {"psd": psd, "method": "eigenvalue-clipped Gram; Lawson-Hanson NNLS (active set)"}
    w = _weights(q, b_s, range(n))
    if w is None:
        w = torch.zeros(n, dtype=torch.float64)
        w[best_i] = 1.0
        info["selection"] = "single (no source has a positive estimated inner product with the target)"
        info["value"] = float(single[best_i])
        return w, info
    k = n if max_sources is None else max_sources
    info["selection"] = "all"
    if int((w > 0).sum()) > k:

        def value(cols: Sequence[int]) -> float:
            ws = _weights(q, b_s, cols)
            return _ratio(ws, fixed, b, tt) if ws is not None else -math.inf

        if math.comb(n, k) <= EXACT_SUBSETS:
            best = max(combinations(range(n), k), key=value)  # max keeps the first of equal values
            info["selection"] = f"exact search over the {math.comb(n, k)} subsets of {k} sources"
        else:
            best = (best_i,)
            cur = value(best)
            while len(best) < k:
                cand = [(value((*best, j)), -j, j) for j in range(n) if j not in best]
                v, _, j = max(cand)
                if not v > cur:
                    break
                best, cur = (*best, j), v
            info["selection"] = f"greedy forward selection ({len(best)} of at most {k} sources)"
        w = _weights(q, b_s, sorted(best))
        assert w is not None  # every candidate subset contains a source with b_i > 0
    info["value"] = _ratio(w, fixed, b, tt)
    return w, info


def round_budget(weights: Sequence[float], budget: int) -> list[int]:
    """Integer tokens per source summing to ``budget``: ⌊w_i·B⌋, then one more token to each of
    the largest fractional parts (ties to the earlier source) until the sum is B."""
    total = float(sum(weights))
    if not total > 0:
        raise InputError("weights must have a positive sum")
    exact = [w / total * budget for w in weights]
    base = [int(math.floor(x)) for x in exact]
    rest = budget - sum(base)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:rest]:
        base[i] += 1
    return base


# ---------------------------------------------------------------------- the standard error
def _blocks(x: Tensor, g: int) -> Tensor:
    """Sum of squares per feature block: (..., m) -> (..., g)."""
    return x.square().reshape(*x.shape[:-1], g, -1).sum(-1)


def _estimate_at(
    w: Tensor, s: Tensor, d: Tensor, n: Tensor, st: Tensor, dt: Tensor, nt: float, g: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-block (cross, mixture squared norm, target squared norm), each (g,), at weights w.

    s (k, m) feature sums, d (k, g) diagonal block sums, n (k,) counts of the k sources; st
    (m,), dt (g,), nt of the target.  ‖Σ w_i μ_i‖² with each source's own plug-in square
    swapped for its unbiased one: the mixture's squared norm, unbiased, block by block."""
    mix = (w / n) @ s  # Σ w_i μ_i, (m,)
    cross = (mix * st).reshape(g, -1).sum(-1) / nt
    bs = _blocks(s, g)  # (k, g) plug-in squares of the sums per block
    # each source's plug-in square ‖μ_i‖² minus its unbiased one, per block
    excess = bs / n.square()[:, None] - (bs - d) / (n * (n - 1))[:, None]
    sq = _blocks(mix, g) - w.square() @ excess
    sqt = (_blocks(st, g) - dt) / (nt * (nt - 1))
    return cross, sq, sqt


def _value(cross: Tensor, sq: Tensor, sqt: Tensor) -> Tensor:
    ok = (sq > 0) & (sqt > 0)
    den = torch.where(ok, sq.clamp(min=0).sqrt() * sqt.clamp(min=0).sqrt(), torch.ones_like(sq))
    return torch.where(ok, cross / den, torch.full_like(cross, float("nan")))


def mixture_alignment(sources: Sequence[Signature], target: Signature, weights: Any, kind: str = "fisher") -> dict:
    """Estimated alignment of the mixture with token shares ``weights`` with the target, and its
    standard error (module docstring): ``{"value", "se", "se_sketch", "se_sampling", "dof"}``."""
    k = KINDS.index(kind)
    w_all = torch.as_tensor(weights, dtype=torch.float64)
    keep = [i for i in range(len(sources)) if float(w_all[i]) != 0.0]
    sigs = [sources[i] for i in keep]
    w = w_all[keep]
    g = target.diag.shape[-1]
    # one common scale for every signature: the value is a ratio, unchanged by it
    c = max(
        max(float(x.sums[:, k].abs().max()), math.sqrt(max(float(x.diag[:, k].max()), 0.0))) for x in (*sigs, target)
    )
    c = c if c > 0 and math.isfinite(c) else 1.0
    s = torch.stack([x.sums[:, k].to(torch.float64) for x in sigs]) / c  # (k, 2, m)
    d = torch.stack([x.diag[:, k].to(torch.float64) for x in sigs]) / c**2  # (k, 2, g)
    nh = torch.stack([x.counts.to(torch.float64) for x in sigs])  # (k, 2)
    st, dt = target.sums[:, k].to(torch.float64) / c, target.diag[:, k].to(torch.float64) / c**2
    nth = target.counts.to(torch.float64)
    cross, sq, sqt = _estimate_at(w, s.sum(1), d.sum(1), nh.sum(1), st.sum(0), dt.sum(0), float(nth.sum()), g)
    value = _value(cross.sum(), sq.sum(), sqt.sum())
    loo = _value(cross.sum() - cross, sq.sum() - sq, sqt.sum() - sqt)  # (g,)
    var_sketch = (g - 1) / g * ((loo - loo.mean()) ** 2).sum()
    if bool((nh < 2).any()) or bool((nth < 2).any()):
        var_s = var_t = torch.tensor(float("nan"), dtype=torch.float64)
    else:
        th = {}
        for h in (0, 1):
            for j in (0, 1):
                est = _estimate_at(w, s[:, h], d[:, h], nh[:, h], st[j], dt[j], float(nth[j]), g)
                th[h, j] = _value(*(e.sum() for e in est))
        var_s = (((th[0, 0] - th[1, 0]) + (th[0, 1] - th[1, 1])) / 2).square() / 4
        var_t = (((th[0, 0] - th[0, 1]) + (th[1, 0] - th[1, 1])) / 2).square() / 4
    total = var_sketch + var_s + var_t
    den = var_sketch.square() / max(g - 1, 1) + var_s.square() + var_t.square()
    nu = total.square() / den if float(den) > 0 else torch.tensor(float("inf"), dtype=torch.float64)
    se = float(total.sqrt() * t975(nu.reshape(1))[0] / Z975)
    return {
        "value": float(value),
        "se": se,
        "se_sketch": float(var_sketch.sqrt()),
        "se_sampling": float((var_s + var_t).sqrt()),
        "dof": float(nu),
    }


# ---------------------------------------------------------------------- the API
def _named(sources: Mapping[str, Signature] | Sequence[Signature]) -> dict[str, Signature]:
    if isinstance(sources, Mapping):
        return dict(sources)
    return {f"source{i}": s for i, s in enumerate(sources)}


def mix(
    target: Signature,
    sources: Mapping[str, Signature] | Sequence[Signature],
    *,
    objective: str = "fisher",
    budget: int | None = None,
    max_sources: int | None = None,
    target_name: str = "target",
) -> Mixture:
    """Mixture weights of ``sources`` (name -> Signature, or a list) maximising the estimated
    alignment with ``target`` (see the module docstring).

    Refused (``InputError``/``IncompatibleSignatureError``, one line): fewer than two sources,
    incompatible configs, the target among the sources, a budget not in 1..``MAX_BUDGET``,
    ``max_sources`` not in 1..n.  Dropped with a warning (refused when fewer than two remain):
    a source with NaN/inf in its state, or whose squared-norm estimate for the objective is not
    positive."""
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not isinstance(target, Signature):
        raise InputError("mix() takes the target as a Signature (load_signature() or FisherSketch.signature())")
    named = _named(sources)
    for name, sig in named.items():
        if not isinstance(sig, Signature):
            raise InputError(f"source {name!r} is not a Signature")
    if len(named) < 2:
        raise InputError(f"mix needs at least two sources, got {len(named)}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or not 0 < budget <= MAX_BUDGET):
        raise InputError(f"budget must be an integer number of tokens in 1..{MAX_BUDGET:.0e}, got {budget!r}")
    if max_sources is not None and (
        isinstance(max_sources, bool) or not isinstance(max_sources, int) or not 1 <= max_sources <= len(named)
    ):
        raise InputError(f"max_sources must be in 1..{len(named)} (the number of sources), got {max_sources!r}")
    if not (torch.isfinite(target.sums).all() and torch.isfinite(target.diag).all()):
        raise InputError("the target signature contains NaN or inf")
    for name, sig in named.items():
        if sig.config != target.config:
            target.config.check_compatible(sig.config)
        if sig.same_state(target):
            raise InputError(f"source {name!r} is the target itself (the same sketched state)")
    k = KINDS.index(objective)
    if not float(target.sq_norm()[k]) > 0:
        raise InputError(f"the target's {objective} squared-norm estimate is not positive: too few tokens")
    dropped: dict[str, str] = {}
    names_all = list(named)
    # min and max are finite exactly when every entry is (both propagate NaN); no copy is made
    finite = [
        all(math.isfinite(float(v)) for x in (named[n].sums, named[n].diag) for v in x.aminmax()) for n in names_all
    ]
    for name, ok in zip(names_all, finite):
        if not ok:
            dropped[name] = "its state contains NaN or inf"
    usable = [n for n in names_all if n not in dropped]
    # every inner product once; its diagonal is each source's squared-norm estimate
    ip_all = inner_products([*(named[n] for n in usable), target], objective)
    where = {n: i for i, n in enumerate(usable)}
    for name, sq in zip(usable, ip_all.diagonal()[:-1].tolist()):
        if not sq > 0:
            dropped[name] = f"its {objective} squared-norm estimate is not positive (too few or degenerate tokens)"
    kept = [n for n in named if n not in dropped]
    if len(kept) < 2:
        raise InputError(
            f"fewer than two usable sources remain ({len(kept)}); dropped: "
            + "; ".join(f"{n}: {why}" for n, why in dropped.items())
        )
    # identical states: one representative per group, in input order
    reps: list[str] = []
    members: dict[str, list[str]] = {}
    buckets: dict[tuple[float, ...], list[str]] = {}  # cheap key first, exact comparison within a bucket
    for name in kept:
        sig = named[name]
        key = (*sig.counts.tolist(), float(sig.sums.sum()), float(sig.diag.sum()))
        twin = next((r for r in buckets.get(key, []) if named[r].same_state(sig)), None)
        buckets.setdefault(key, []).append(name)
        if twin is None:
            reps.append(name)
            members[name] = [name]
        else:
            members[twin].append(name)
    if len(reps) < 2:
        raise InputError(f"the sources hold one and the same state ({', '.join(kept)}): nothing to mix")
    if max_sources is not None:
        max_sources = min(max_sources, len(reps))

    sel = torch.tensor([*(where[r] for r in reps), len(usable)])
    ip = ip_all[sel][:, sel]
    gram, b, tt = ip[:-1, :-1], ip[:-1, -1], float(ip[-1, -1])
    w_rep, info = solve(gram, b, tt, max_sources=max_sources)

    names = tuple(named)
    weights = dict.fromkeys(names, 0.0)
    for r, wr in zip(reps, w_rep.tolist()):
        for mname in members[r]:
            weights[mname] = wr / len(members[r])
    w = tuple(weights[n] for n in names)

    # one copy per group of identical states, with the group's weight: a copy paired with
    # itself is not two independent streams
    rep_sigs = [named[r] for r in reps]
    by_kind = {
        kind: {
            kk: v
            for kk, v in mixture_alignment(rep_sigs, target, w_rep.tolist(), kind).items()
            if kk in ("value", "se")
        }
        for kind in KINDS
    }
    # each source alone from the unbiased Gram (the value ``alignment`` gives), then the best one's SE
    diag = gram.diagonal()
    single = torch.where(diag > 0, b / (diag.clamp(min=0).sqrt() * math.sqrt(tt)), torch.full_like(b, -math.inf))
    best = reps[int(torch.argmax(single))]  # argmax keeps the first of equal values
    best_al = alignment(named[best], target)
    warnings = [f"dropped {n}: {why}" for n, why in dropped.items()]
    warnings += [
        f"{', '.join(g)} hold the same state: merged, weight split evenly" for g in members.values() if len(g) > 1
    ]
    if info["selection"].startswith("single"):
        warnings.append(
            "no source has a positive estimated alignment with the target: the best single source is returned"
        )
    pred = by_kind[objective]
    if not math.isfinite(pred["se"]) or pred["se"] > 0.5 * max(abs(pred["value"]), 1e-12):
        warnings.append("the predicted alignment's standard error is large: more tokens per signature would settle it")
    return Mixture(
        target=target_name,
        objective=objective,
        sources=names,
        weights=w,
        predicted=pred["value"],
        predicted_se=pred["se"],
        by_kind=by_kind,
        best_single=best,
        best_single_value=getattr(best_al, objective),
        best_single_se=getattr(best_al, f"{objective}_se"),
        budget=budget,
        tokens=tuple(round_budget(w, budget)) if budget is not None else None,
        max_sources=max_sources,
        groups=tuple(tuple(g) for g in members.values() if len(g) > 1),
        dropped=dropped,
        psd=info["psd"],
        solver={"method": info["method"], "selection": info["selection"]},
        warnings=tuple(warnings),
    )
