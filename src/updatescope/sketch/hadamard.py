"""Fast Walsh-Hadamard transform in pure PyTorch (no compile step)."""
from __future__ import annotations

import torch
from torch import Tensor


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def hadamard_matrix(n: int, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """Unnormalised Sylvester Hadamard matrix H_n (entries ±1), n a power of two.  (n, n)"""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    h = torch.ones(1, 1, dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h


# Radix of the blocked transform: H_N = H_a ⊗ H_b ⊗ ..., each factor applied as one small
# matmul.  A few passes of dense matmul beat log2(N) memory-bound butterfly passes on CPU.
_RADIX = 64


def fwht(x: Tensor) -> Tensor:
    """Unnormalised Walsh-Hadamard transform along the last dim: x @ H_N.  (..., N) -> (..., N)

    N must be a power of two.  H_N is symmetric, so this also equals H_N @ x per row.
    Implemented as a Kronecker product of small Hadamard factors (radix <= 64), each
    applied by one batched matmul along one axis of the reshaped input.
    """
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    rows = x.reshape(-1, n)
    if n == 1:
        return x.clone()
    bits = n.bit_length() - 1
    rb = _RADIX.bit_length() - 1
    factors = []
    while bits > 0:
        b = min(rb, bits)
        factors.append(1 << b)
        bits -= b
    # rows viewed as (r, f0, f1, ..., fk): apply H_fi along axis i+1.  Sylvester ordering
    # makes H_N = H_f0 ⊗ H_f1 ⊗ ... with f0 the most significant index digit.
    y = rows
    r = rows.shape[0]
    rest = n
    for f in factors:
        rest //= f
        h = hadamard_matrix(f, dtype=x.dtype, device=x.device)
        # current axis has length f with stride `rest`; bring it last, multiply, restore.
        y = y.reshape(r, n // (f * rest), f, rest)
        y = torch.matmul(h, y)  # (f, f) @ (r, pre, f, rest): mixes the f-axis
    return y.reshape(*lead, n)
