"""The share of an activation shadow that a subspace spans, its random null and its ceiling.
Pure tensors in, tensors out, float64.

A shadow at one layer is D (n, d): one row per token, the fine-tuned model's residual minus
the base model's.  For an orthonormal basis Q (d, k) of a span,

    per-token fraction = ||D Q||_F^2 / ||D||_F^2 = tr(Q^T G Q) / tr(G),   G = D^T D,
    mean-shadow fraction = ||Q^T m||^2 / ||m||^2,                          m = mean of D's rows.

Both read D only through G and m, so the runner keeps (d, d) and (d,) per layer, not D.
For Q uniform over k-dimensional subspaces (the QR of a Gaussian (d, k) matrix) both
fractions have expectation exactly k/d (E[Q Q^T] = (k/d) I).  The best any k-dimensional
span can do for the per-token fraction is the sum of G's k largest eigenvalues over its
trace (Eckart-Young: the top-k right singular vectors of D).

Amendment 3 measures everything again without one coordinate c (the model's massive
activation): :func:`drop_coordinates` restricts rows, vectors and shadows to the other d - 1
coordinates, and the functions above, given the restricted tensors, give the restricted
fractions, null (drawn in d - 1 dimensions) and ceiling.  :func:`coordinate_share` is c's
own share of the shadow."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from updatescope.errors import InputError

__all__ = [
    "orthonormal",
    "token_fraction",
    "mean_fraction",
    "top_k_fraction",
    "random_null",
    "drop_coordinates",
    "coordinate_share",
]


def orthonormal(vectors: Tensor) -> Tensor:
    """An orthonormal basis of the rows' span, by QR in float64.  (k, d) -> (d, k).
    The rows must be linearly independent (a steering vector set of k << d always is)."""
    q, _ = torch.linalg.qr(vectors.double().T)
    return q


def token_fraction(gram: Tensor, q: Tensor) -> float:
    """||D Q||_F^2 / ||D||_F^2 from G = D^T D (d, d) and Q (d, k) orthonormal."""
    g = gram.double()
    return float(torch.einsum("dk,de,ek->", q, g, q) / torch.trace(g))


def mean_fraction(mean: Tensor, q: Tensor) -> float:
    """||Q^T m||^2 / ||m||^2.  m (d,), Q (d, k) orthonormal."""
    m = mean.double()
    return float((q.T @ m).pow(2).sum() / m.pow(2).sum())


def top_k_fraction(gram: Tensor, k: int) -> float:
    """The largest per-token fraction any k-dimensional span reaches: the k largest
    eigenvalues of G over its trace.  G (d, d)."""
    ev = torch.linalg.eigvalsh(gram.double())  # ascending, >= 0 up to rounding
    return float(ev[-k:].clamp(min=0).sum() / ev.clamp(min=0).sum())


def random_null(gram: Tensor, mean: Tensor, k: int, draws: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Per-token and mean-shadow fractions of ``draws`` random k-dimensional subspaces (QR
    of Gaussian (d, k) matrices drawn from ``generator`` on the CPU, in one fixed order).
    G (d, d), m (d,) -> ((draws,), (draws,)) float64."""
    d = gram.shape[0]
    z = torch.randn(draws, d, k, generator=generator, dtype=torch.float64)
    q, _ = torch.linalg.qr(z)  # (draws, d, k), orthonormal columns, uniform subspace
    g, m = gram.double(), mean.double()
    tok = torch.einsum("bdk,de,bek->b", q, g, q) / torch.trace(g)
    mf = (q.transpose(1, 2) @ m).pow(2).sum(1) / m.pow(2).sum()
    return tok, mf


def drop_coordinates(x: Tensor, coords: Sequence[int]) -> Tensor:
    """Layer l of ``x`` without its coordinate ``coords[l]``.  x (Lyr, ..., d) -> (Lyr, ..., d - 1),
    same dtype; the other coordinates keep their order."""
    d = x.shape[-1]
    if len(coords) != x.shape[0] or not all(0 <= c < d for c in coords):
        raise InputError(f"need one coordinate in [0, {d}) per layer ({x.shape[0]}), got {list(coords)}")
    keep = torch.ones(x.shape[0], d, dtype=torch.bool)
    keep[torch.arange(x.shape[0]), torch.as_tensor(list(coords))] = False
    return torch.stack([x[i][..., keep[i]] for i in range(x.shape[0])])


def coordinate_share(gram: Tensor, mean: Tensor, c: int) -> tuple[float, float]:
    """Coordinate c's share of the shadow: per token ||D[:, c]||^2 / ||D||_F^2 = G[c, c] / tr(G),
    and of the mean shadow m[c]^2 / ||m||^2.  G (d, d), m (d,) -> (token share, mean share)."""
    g, m = gram.double(), mean.double()
    return float(g[c, c] / torch.trace(g)), float(m[c] ** 2 / m.pow(2).sum())
