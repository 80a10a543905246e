"""Walsh-Hadamard matrices and transforms in pure PyTorch (no compile step).

Sylvester ordering throughout: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], so that
H[i, j] = (-1)^popcount(i & j) and H_{pq} = H_p ⊗ H_q for powers of two p, q.
"""
from __future__ import annotations

import torch
from torch import Tensor
from updatescope.errors import InputError


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check_pow2(n: int) -> None:
    if n < 1 or n & (n - 1):
        raise InputError(f"Hadamard size must be a power of two, got {n}")


def hadamard_matrix(n: int, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """Unnormalised Sylvester Hadamard matrix H_n (entries ±1), n a power of two.  (n, n)"""
    _check_pow2(n)
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


def hadamard_entries(rows: Tensor, cols: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """H[rows[..., None], cols] of a Sylvester matrix large enough for all indices.

    rows (...,) int64, cols (c,) int64 -> (..., c) of ±1, without forming the matrix:
    H[i, j] = (-1)^popcount(i & j).
    """
    both = rows.unsqueeze(-1) & cols
    parity = torch.zeros_like(both)
    while bool(both.any()):
        parity ^= both & 1
        both = both >> 1
    return (1 - 2 * parity).to(dtype)


# Radix of the blocked transform: H_N = H_f0 ⊗ H_f1 ⊗ ..., each factor applied as one dense
# matmul on the last axis.  A few passes of matmul beat log2(N) memory-bound butterflies.
_RADIX = 64


def fwht(x: Tensor) -> Tensor:
    """Unnormalised Walsh-Hadamard transform along the last dim: x @ H_N.  (..., N) -> (..., N)

    N must be a power of two.  H_N is symmetric, so this also equals H_N @ x per row.
    Blocked: with N = f0·f1·…·fk (each f ≤ 64), every pass multiplies the last (least
    significant) index digit by H_f as one (rows·N/f, f) @ (f, f) matmul and rotates that
    digit to the front; after k+1 passes the digits are back in their original order.
    """
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise InputError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    if n == 1:
        return x.clone()
    r = x.numel() // n
    bits = n.bit_length() - 1
    rb = _RADIX.bit_length() - 1
    factors = []
    while bits > 0:
        b = min(rb, bits)
        factors.append(1 << b)
        bits -= b
    y = x.reshape(r, n)
    for f in factors:  # the order of factors does not matter (Kronecker factors commute up to the rotation)
        h = hadamard_matrix(f, dtype=x.dtype, device=x.device)
        y = (y.reshape(r, n // f, f) @ h).transpose(1, 2)  # (r, f, n/f): new digit moves to the front
        y = y.reshape(r, n)
    return y.reshape(*lead, n)
