"""How much of a displacement a subspace captures, and the matching null models.

capture(U, delta) = ||P_U delta||^2 / ||delta||^2 = ||Q delta||^2 / ||delta||^2 for an
orthonormal basis Q (r, D) of U.  It is 1 for delta in U and 0 for delta orthogonal to U.

Nulls:
- a uniformly random r-dimensional subspace captures r/D in expectation
  (:func:`random_subspace_null` measures it by drawing, and reports r/D alongside);
- a *random-walk prefix*: a walk with the same step norms as the real trajectory but
  isotropic independent directions.  Its first k steps capture about (sum of the first k
  squared norms)/(sum of all) of its end-point -- the capture a prefix gets merely by
  being part of the displacement it is scored on (:func:`random_walk_prefix_null`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.locallinear.subspaces import _gs_step, random_basis

__all__ = [
    "capture_fraction",
    "prefix_capture_curve",
    "random_subspace_null",
    "random_walk_prefix_null",
    "rest_capture_curve",
]


def capture_fraction(basis: Tensor, delta: Tensor) -> float:
    """||Q delta||^2 / ||delta||^2 for orthonormal rows Q.  basis (r, D), delta (D,) -> float."""
    if basis.ndim != 2 or delta.ndim != 1 or basis.shape[1] != delta.shape[0]:
        raise InputError(f"need basis (r, D) and delta (D,), got {tuple(basis.shape)} and {tuple(delta.shape)}")
    d = delta.to(torch.float64)
    nd = float(d @ d)
    if nd == 0.0:
        raise InputError("delta is the zero vector; its capture fraction is undefined")
    if basis.shape[0] == 0:
        return 0.0
    c = basis.to(torch.float64) @ d
    return float(c @ c) / nd


def prefix_capture_curve(vectors: Tensor, delta: Tensor) -> Tensor:
    """Capture of ``delta`` by span(vectors[:j]) for j = 1..k.  (k, D), (D,) -> (k,) float64.

    One ordered Gram-Schmidt pass: the j-th value adds the squared coefficient of the
    j-th new direction, so the whole curve costs one basis.  A vector that adds no new
    direction leaves the curve flat.
    """
    k = vectors.shape[0]
    out = torch.zeros(k, dtype=torch.float64)
    d = delta.to(torch.float64)
    nd = float(d @ d)
    if nd == 0.0:
        raise InputError("delta is the zero vector; its capture fraction is undefined")
    q = torch.empty(k, d.shape[0], dtype=torch.float64)
    r, total = 0, 0.0
    for j in range(k):
        u = _gs_step(q[:r], vectors[j].to(torch.float64))
        if u is not None:
            q[r] = u
            r += 1
            total += float(u @ d) ** 2
        out[j] = total / nd
    return out


def random_subspace_null(dim: int, r: int, delta: Tensor, seeds: Sequence[int]) -> dict[str, float]:
    """Capture of ``delta`` by random r-dimensional subspaces, one per seed.

    Returns the mean, the standard error over draws, and the exact expectation r/D.
    """
    vals = torch.tensor([capture_fraction(random_basis(dim, r, s), delta) for s in seeds], dtype=torch.float64)
    se = float(vals.std(unbiased=True) / len(vals) ** 0.5) if len(vals) > 1 else float("nan")
    return {"mean": float(vals.mean()), "se": se, "expected": r / dim, "n_draws": len(seeds)}


def rest_capture_curve(vectors: Tensor, delta: Tensor, steps: Tensor | None = None) -> Tensor:
    """Capture, by span(vectors[:j]), of what remains of ``delta`` after j steps.

    rest_j = delta - sum(steps[:j]) with ``steps`` = ``vectors`` by default; returns
    capture(span(vectors[:j]), rest_j) for j = 1..k, (k,) float64.  This is the honest
    version of the prefix score: the prefix is not credited for the displacement it *is*,
    only for predicting the rest.  Passing other ``vectors`` (an independent run's prefix,
    a static plane's directions) with the real ``steps`` gives the matching nulls.
    """
    k = vectors.shape[0]
    steps = vectors if steps is None else steps
    if steps.shape[0] < k:
        raise InputError(f"steps has {steps.shape[0]} rows, fewer than the {k} vectors")
    d = delta.to(torch.float64)
    q = torch.empty(k, d.shape[0], dtype=torch.float64)
    out = torch.zeros(k, dtype=torch.float64)
    rest, r = d.clone(), 0
    for j in range(k):
        v = vectors[j].to(torch.float64)
        rest -= steps[j].to(torch.float64)
        u = _gs_step(q[:r], v)
        if u is not None:
            q[r] = u
            r += 1
        nrest = float(rest @ rest)
        c = q[:r] @ rest
        out[j] = float(c @ c) / nrest if nrest > 0 else float("nan")
    return out


def random_walk_prefix_null(
    step_norms: Tensor, ks: Sequence[int], dim: int, seed: int, chunk: int = 16
) -> dict[int, dict[str, float]]:
    """Capture of a random walk's end-point by the span of its first k steps.

    step_norms (T,) are the norms of the real updates; the walk takes steps of exactly
    those norms in independent uniformly random directions of R^dim.  Steps are drawn in
    chunks and only the first max(ks) steps plus a running sum are kept: memory
    O(max(ks) * dim).  Returns {k: {"total": capture of the end-point, "rest": capture of
    the end-point minus the first k steps}} -- the nulls for :func:`prefix_capture_curve`
    and :func:`rest_capture_curve`.
    """
    ks = sorted(set(int(k) for k in ks))
    t = step_norms.shape[0]
    if not ks or ks[0] < 1 or ks[-1] > t:
        raise InputError(f"every k must lie in [1, {t}], got {ks}")
    g = torch.Generator().manual_seed(seed)
    kmax = ks[-1]
    prefix = torch.empty(kmax, dim, dtype=torch.float32)
    end = torch.zeros(dim, dtype=torch.float64)
    for start in range(0, t, chunk):
        stop = min(t, start + chunk)
        z = torch.randn(stop - start, dim, generator=g)
        z = z / torch.linalg.vector_norm(z, dim=1, keepdim=True) * step_norms[start:stop, None].float()
        end += z.double().sum(0)
        if start < kmax:
            prefix[start : min(stop, kmax)] = z[: min(stop, kmax) - start]
    total = prefix_capture_curve(prefix, end)
    rest = rest_capture_curve(prefix, end)
    return {k: {"total": float(total[k - 1]), "rest": float(rest[k - 1])} for k in ks}
