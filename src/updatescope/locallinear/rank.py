"""Effective rank of a stack of gradients, with noise baselines.

For G (n, D) with singular values s_1 >= ... >= s_n (through the n x n Gram; no D x D):
- entropy effective rank exp(H(p)), p_i = s_i / sum_j s_j (Roy & Vetterli 2007);
  1 for a rank-one stack, n for n orthogonal rows of equal norm;
- stable rank ||G||_F^2 / ||G||_2^2 = sum s_i^2 / s_1^2, a smooth lower bound on rank.
Low values mean the rows share a few directions.  Baselines of the same shape tell what
"low" means: a Gaussian stack with the same row norms (no shared directions at all) and
gradients of the same model under shuffled labels (the model's own anisotropy, no task).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from updatescope.errors import InputError

__all__ = ["RankStats", "gram", "singular_values", "effective_rank", "effective_ranks", "gaussian_like"]


@dataclass(frozen=True)
class RankStats:
    entropy_rank: float
    stable_rank: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def gram(g: Tensor, chunk: int = 1 << 16) -> Tensor:
    """The n x n Gram g g^T in float64, accumulated over column chunks of ``chunk`` so that
    a wide float32 stack is never copied whole to float64.  (n, D) -> (n, n)."""
    if g.ndim != 2 or g.shape[0] == 0:
        raise InputError(f"need a non-empty (n, D) stack, got shape {tuple(g.shape)}")
    out = torch.zeros(g.shape[0], g.shape[0], dtype=torch.float64)
    for j in range(0, g.shape[1], chunk):
        c = g[:, j : j + chunk].double()
        out += c @ c.T
    return out


def _singular_from_gram(gm: Tensor) -> Tensor:
    return torch.linalg.eigvalsh(gm).flip(0).clamp_min(0.0).sqrt()


def singular_values(g: Tensor) -> Tensor:
    """Singular values of (n, D), descending, float64, via the n x n Gram."""
    return _singular_from_gram(gram(g))


def _stats(s: Tensor, n: int) -> RankStats:
    if float(s[0]) == 0.0:
        raise InputError("all vectors are zero; the effective rank is undefined")
    p = s / s.sum()
    p = p[p > 0]
    ent = float(torch.exp(-(p * p.log()).sum()))
    stable = float((s**2).sum() / s[0] ** 2)
    return RankStats(entropy_rank=ent, stable_rank=stable, n=n)


def effective_ranks(g: Tensor) -> tuple[RankStats, RankStats]:
    """Effective rank of the rows of g and of the same rows scaled to unit norm (zero rows
    stay zero), from one Gram: the unit rows' Gram is G_ij / (|g_i| |g_j|)."""
    gm = gram(g)
    norms = gm.diagonal().clamp_min(0.0).sqrt()
    inv = torch.where(norms > 0, 1.0 / norms, torch.zeros_like(norms))
    return (
        _stats(_singular_from_gram(gm), g.shape[0]),
        _stats(_singular_from_gram(gm * inv[:, None] * inv[None, :]), g.shape[0]),
    )


def effective_rank(g: Tensor) -> RankStats:
    """Entropy and stable rank of a stack of vectors.  (n, D) -> RankStats."""
    return _stats(singular_values(g), int(g.shape[0]))


def gaussian_like(g: Tensor, seed: int) -> Tensor:
    """Isotropic Gaussian rows with the same norms as the rows of g.  (n, D) -> (n, D)."""
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(g.shape, generator=gen, dtype=torch.float32)
    norms = torch.linalg.vector_norm(g.float(), dim=1, keepdim=True)
    return z / torch.linalg.vector_norm(z, dim=1, keepdim=True) * norms
