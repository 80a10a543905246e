"""Exact full-network Fisher inner products by the Gram identity, float64, in row blocks.

A task is a list of L parameter blocks over the same n samples.  Each block is given as

- a dense tensor (n, D_b): the per-sample gradients g_ib, flattened; or
- a factored pair (acts, grads) for a linear layer y = W a:
    per token:    acts (n, d), grads (n, k)          g_ib = vec(grads_i ⊗ acts_i)  (rank one)
    per sequence: acts (n, T, d), grads (n, T, k)    g_ib = Σ_t grads_it ⊗ acts_it (a weight
                  shared across positions; pad short sequences with zero rows).

Per block the sample Gram is G_b[i, j] = g_ib·g_jb, i.e. (a_i·a_j)(e_i·e_j) per token and
Σ_{t,s} (a_it·a_js)(e_it·e_js) per sequence: no D×D object, no d·k gradient is formed.  Then

    <F_S,bc, F_T,bc> = mean_{i∈S, j∈T} G_b^{ST}[i, j] G_c^{ST}[i, j]            (L, L)
    <F_S, F_T>       = mean_{i, j} (Σ_b G_b^{ST}[i, j])²   (computed on its own, so that
                       full = Σ_b diag + Σ_{b≠c} off-diagonal is a checkable identity)

A task's own squared norms exclude the self-pairs i = j (U-statistic, the target of the
sketch, unbiased for the population Fisher) unless ``self_pairs=True`` (the plug-in value:
exactly the Frobenius products of the materialised empirical Fishers F = (1/n) Σ_i g_i g_iᵀ).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.network.decompose import NetworkAlignment, decompose
from updatescope.sketch.inputs import as_tensor, check_finite

__all__ = ["BlockProducts", "exact_block_products", "exact_network_alignment"]

Block = Tensor | tuple[Any, Any]
_BLOCK_ELEMS = 1 << 22  # float64 elements per temporary (32 MiB)


@dataclass(frozen=True)
class BlockProducts:
    """Exact block inner products (float64).  cross, sq_s, sq_t: (L, L) matrices with entry
    [b, c] = <F_S,bc, F_T,bc>, ‖F_S,bc‖², ‖F_T,bc‖²;  full_*: the same for the whole Fisher."""

    cross: Tensor
    sq_s: Tensor
    sq_t: Tensor
    full_cross: float
    full_sq_s: float
    full_sq_t: float


def _prep_block(block: Block, where: str) -> tuple[Tensor, ...]:
    """-> (x,) dense (n, D) or (a, e) factored (n, T, d), (n, T, k), float64."""
    if isinstance(block, (tuple, list)):
        if len(block) != 2:
            raise InputError(f"{where}: a factored block is a pair (acts, grads), got {len(block)} items")
        a, e = as_tensor(block[0], f"{where} acts").double(), as_tensor(block[1], f"{where} grads").double()
        if a.ndim == 2 and e.ndim == 2:
            a, e = a.unsqueeze(1), e.unsqueeze(1)
        if a.ndim != 3 or e.ndim != 3 or a.shape[:2] != e.shape[:2]:
            raise InputError(
                f"{where}: acts and grads must be (n, d), (n, k) or (n, T, d), (n, T, k) with equal "
                f"n and T, got {tuple(a.shape)} and {tuple(e.shape)}"
            )
        check_finite(a.reshape(a.shape[0], -1), f"{where} acts", 0)
        check_finite(e.reshape(e.shape[0], -1), f"{where} grads", 0)
        return a, e
    x = as_tensor(block, f"{where} gradients").double()
    if x.ndim != 2:
        raise InputError(f"{where}: dense per-sample gradients must be (n, D), got {tuple(x.shape)}")
    check_finite(x, f"{where} gradients", 0)
    return (x,)


def _prep_task(blocks: Sequence[Block], side: str) -> list[tuple[Tensor, ...]]:
    if not isinstance(blocks, (list, tuple)) or len(blocks) == 0:
        raise InputError(f"{side}: expected a non-empty list of blocks")
    out = [_prep_block(b, f"{side} block {i}") for i, b in enumerate(blocks)]
    ns = {p[0].shape[0] for p in out}
    if len(ns) != 1:
        raise InputError(f"{side}: blocks have different numbers of samples: {sorted(ns)}")
    if 0 in ns:
        raise InputError(f"{side}: no samples")
    return out


def _gram(p: tuple[Tensor, ...], q: tuple[Tensor, ...], i: slice, j: slice) -> Tensor:
    """G[i, j] = g_i·g_j for rows i of p and j of q.  -> (|i|, |j|)"""
    if len(p) == 1:
        return p[0][i] @ q[0][j].T
    (a1, e1), (a2, e2) = p, q
    a1, e1, a2, e2 = a1[i], e1[i], a2[j], e2[j]
    (n1, t1, _), (n2, t2, _) = a1.shape, a2.shape
    if t1 == 1 and t2 == 1:
        return (a1[:, 0] @ a2[:, 0].T) * (e1[:, 0] @ e2[:, 0].T)
    ga = a1.reshape(n1 * t1, -1) @ a2.reshape(n2 * t2, -1).T
    ge = e1.reshape(n1 * t1, -1) @ e2.reshape(n2 * t2, -1).T
    return (ga * ge).view(n1, t1, n2, t2).sum((1, 3))


def _self_gram(p: tuple[Tensor, ...]) -> Tensor:
    """G[i, i] = ‖g_i‖².  -> (n,)"""
    if len(p) == 1:
        return p[0].square().sum(1)
    a, e = p
    return (torch.einsum("itd,isd->its", a, a) * torch.einsum("itk,isk->its", e, e)).sum((1, 2))


def _rows(task: list[tuple[Tensor, ...]]) -> int:
    """Rows per Gram block so that the temporaries, (rows·T)² per sequence Gram and
    L·rows² for the stacked block Grams, stay near _BLOCK_ELEMS."""
    t = max(p[0].shape[1] if len(p) == 2 else 1 for p in task)
    return max(1, int((_BLOCK_ELEMS / (t * t + len(task))) ** 0.5))


def _products(
    p: list[tuple[Tensor, ...]], q: list[tuple[Tensor, ...]], same: bool, self_pairs: bool
) -> tuple[Tensor, float]:
    """(L, L) matrix of mean_{i,j} G_b G_c and the full mean_{i,j} (Σ_b G_b)² for tasks p, q."""
    n1, n2, nb = p[0][0].shape[0], q[0][0].shape[0], len(p)
    r1, r2 = _rows(p), _rows(q)
    mat = torch.zeros(nb, nb, dtype=torch.float64)
    full = torch.zeros((), dtype=torch.float64)
    for i0 in range(0, n1, r1):
        i = slice(i0, min(i0 + r1, n1))
        for j0 in range(0, n2, r2):
            j = slice(j0, min(j0 + r2, n2))
            g = torch.stack([_gram(pb, qb, i, j) for pb, qb in zip(p, q)])  # (L, |i|, |j|)
            mat += torch.einsum("bij,cij->bc", g, g)
            full += g.sum(0).square().sum()
    if same and not self_pairs:
        if n1 < 2:
            nan = float("nan")
            return torch.full((nb, nb), nan, dtype=torch.float64), nan
        d = torch.stack([_self_gram(pb) for pb in p])  # (L, n)
        mat -= d @ d.T
        full -= d.sum(0).square().sum()
        return mat / (n1 * (n1 - 1)), float(full) / (n1 * (n1 - 1))
    return mat / (n1 * n2), float(full) / (n1 * n2)


def exact_block_products(
    blocks_s: Sequence[Block], blocks_t: Sequence[Block], *, self_pairs: bool = False
) -> BlockProducts:
    """All block inner products of two tasks' Fishers, exactly (see module).

    blocks_s, blocks_t: L blocks each (dense (n, D_b) or factored pairs), block b of the same
    shape kind and width in both tasks.  Cost O(L n_S n_T T² (d + k)), memory O(rows² L).
    """
    p, q = _prep_task(blocks_s, "source"), _prep_task(blocks_t, "target")
    if len(p) != len(q):
        raise InputError(f"source has {len(p)} blocks, target {len(q)}")
    for b, (pb, qb) in enumerate(zip(p, q)):
        if len(pb) != len(qb) or any(x.shape[-1] != y.shape[-1] for x, y in zip(pb, qb)):
            raise InputError(
                f"block {b}: source and target widths differ: "
                f"{[x.shape[-1] for x in pb]} vs {[y.shape[-1] for y in qb]}"
            )
    cross, full_cross = _products(p, q, False, True)
    sq_s, full_s = _products(p, p, True, self_pairs)
    sq_t, full_t = _products(q, q, True, self_pairs)
    return BlockProducts(cross, sq_s, sq_t, full_cross, full_s, full_t)


def exact_network_alignment(
    blocks_s: Sequence[Block], blocks_t: Sequence[Block], *, names: Sequence[str] = (), self_pairs: bool = False
) -> NetworkAlignment:
    """Exact A_F, A_BD, per-block profile, profile cosine, off-diagonal shares and bound.

    See ``exact_block_products`` for the inputs and ``decompose`` for the definitions.
    """
    bp = exact_block_products(blocks_s, blocks_t, self_pairs=self_pairs)
    return decompose(
        bp.cross.diagonal(),
        bp.sq_s.diagonal(),
        bp.sq_t.diagonal(),
        bp.full_cross,
        bp.full_sq_s,
        bp.full_sq_t,
        blocks=tuple(names),
        exact=True,
    )
