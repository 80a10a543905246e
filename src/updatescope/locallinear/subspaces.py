"""Subspaces of parameter space as orthonormal bases.

A subspace of dimension r in R^D is stored as a tensor ``Q`` of shape (r, D) with
orthonormal rows (Q Q^T = I_r).  Only k x D bases and k x k Gram matrices are ever formed;
nothing here builds a D x D matrix, so memory is O(kD).

Builders:
- :func:`orthonormal_basis` -- the span of given vectors, in order (Gram-Schmidt, twice).
- :func:`top_directions`    -- leading right singular vectors of a stack of vectors
  (e.g. per-task or per-batch gradients: the *local task plane*).
- :func:`random_basis`      -- a uniformly random r-dimensional subspace (the null).
- :func:`gradient_stack` / :func:`gradient_plane` -- gradients of loss closures at the
  model's current parameters, and their top directions.
Krylov bases live in :mod:`.krylov`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.params import flat_grad

__all__ = [
    "orthonormal_basis",
    "top_directions",
    "random_basis",
    "gradient_stack",
    "gradient_plane",
    "restrict",
]


def _check_stack(vectors: Tensor) -> Tensor:
    if vectors.ndim != 2:
        raise InputError(f"expected a stack of vectors (k, D), got shape {tuple(vectors.shape)}")
    if not torch.isfinite(vectors).all():
        raise InputError("vectors contain NaN or inf")
    return vectors


def orthonormal_basis(vectors: Tensor, rtol: float = 1e-8, dtype: torch.dtype = torch.float64) -> Tensor:
    """Orthonormal basis of span(vectors), built in order.  (k, D) -> (r, D), r <= k.

    Classical Gram-Schmidt applied twice per vector ("twice is enough", Giraud et al.),
    which keeps orthogonality at machine precision.  A vector whose residual is below
    ``rtol`` times its own norm adds nothing and is dropped, so the first j rows span the
    first j input vectors whenever those are independent -- nested bases for prefix curves.
    """
    v = _check_stack(vectors).to(dtype)
    q = v.new_empty(v.shape)
    r = 0
    for x in v:
        u = _gs_step(q[:r], x, rtol)
        if u is not None:
            q[r] = u
            r += 1
    return q[:r].clone()


def _gs_step(q: Tensor, x: Tensor, rtol: float = 1e-8) -> Tensor | None:
    """The unit component of x orthogonal to the rows of q (r, D), or None if negligible."""
    nx = torch.linalg.vector_norm(x)
    if nx == 0:
        return None
    res = x.to(q.dtype).clone()
    if q.shape[0]:
        for _ in range(2):
            res -= q.T @ (q @ res)
    nr = torch.linalg.vector_norm(res)
    return res / nr if nr > rtol * nx else None


def top_directions(vectors: Tensor, r: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """Top-r right singular vectors of a stack.  (n, D) -> (min(r, rank), D).

    Through the n x n Gram matrix G G^T = U S^2 U^T: V = S^-1 U^T G.  Cost O(n^2 D), memory
    O(nD); never a D x D matrix.  Directions with singular value below 1e-10 of the largest
    are dropped.  The result is re-orthonormalised to remove the Gram route's rounding.
    """
    g = _check_stack(vectors).to(dtype)
    if r < 1:
        raise InputError(f"r must be >= 1, got {r}")
    evals, evecs = torch.linalg.eigh(g @ g.T)
    order = torch.argsort(evals, descending=True)
    evals, evecs = evals[order].clamp_min(0), evecs[:, order]
    s = evals.sqrt()
    keep = int((s > 1e-10 * s[0]).sum()) if s[0] > 0 else 0
    keep = min(keep, r)
    v = (evecs[:, :keep].T @ g) / s[:keep, None]
    return orthonormal_basis(v, dtype=dtype)


def random_basis(dim: int, r: int, seed: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """A uniformly distributed r-dimensional subspace of R^dim.  -> (r, dim).

    Gaussian rows from a CPU generator seeded with ``seed`` (same basis on any device),
    orthonormalised.
    """
    if not 0 < r <= dim:
        raise InputError(f"need 0 < r <= dim, got r={r}, dim={dim}")
    g = torch.Generator().manual_seed(seed)
    return orthonormal_basis(torch.randn(r, dim, generator=g, dtype=dtype), dtype=dtype)


def gradient_stack(model: nn.Module, losses: Sequence[Callable[[nn.Module], Tensor]]) -> Tensor:
    """Gradients of each loss closure at the model's current parameters.  -> (n, D) float32.

    Typical use: one closure per (task, batch) pair -- per-task gradients when there is one
    batch per task, per-example gradients when each batch holds one example.
    """
    rows = []
    for fn in losses:
        rows.append(flat_grad(fn(model), model).detach())
    if not rows:
        raise InputError("no loss closures given")
    return torch.stack(rows)


def gradient_plane(model: nn.Module, losses: Sequence[Callable[[nn.Module], Tensor]], r: int) -> Tensor:
    """Local task plane: top-r directions of the gradients of ``losses``.  -> (r', D) float64."""
    return top_directions(gradient_stack(model, losses), r)


def restrict(vectors: Tensor, index: slice | Sequence[slice]) -> Tensor:
    """Coordinates of (k, D) or (D,) vectors on one parameter group (per-layer analyses).

    ``index`` is a slice or a list of slices of the flat vector (see ``ParamLayout.groups``).
    """
    parts = [index] if isinstance(index, slice) else list(index)
    return torch.cat([vectors[..., sl] for sl in parts], dim=-1)
