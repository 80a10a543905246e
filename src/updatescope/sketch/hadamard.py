"""Walsh-Hadamard matrices and transforms in pure PyTorch (no compile step).

Sylvester ordering throughout: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]], so that
H[i, j] = (-1)^popcount(i & j) and H_{pq} = H_p ⊗ H_q for powers of two p, q.
"""

from __future__ import annotations

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.workspace import temp


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


# Radix of the blocked transform: H_N = H_f0 ⊗ H_f1 ⊗ ..., each factor applied as one batched
# matmul on its own index digit, in place in the layout.  Small factors keep the work at
# N·Σf multiply-adds per row (3·16 at N = 4,096, against 2·64 for two 64-point factors)
# while each pass is still one matmul rather than log2(N) memory-bound butterflies.
_RADIX = 16


def radix_digits(n: int) -> list[int]:
    """Radix factors of a power of two n > 1, each ≤ _RADIX, product n: as few passes as the
    radix allows, the bits shared out evenly, smaller factors first: the first pass works on
    the longest contiguous runs, and the last one is a plain (rows, f) @ (f, f) matmul, which
    runs poorly when f is small (as in 16·16·4)."""
    bits, rb = n.bit_length() - 1, _RADIX.bit_length() - 1
    k = -(-bits // rb)
    return [1 << (bits // k + (i >= k - bits % k)) for i in range(k)]


def fwht(x: Tensor, tag: str | None = None) -> Tensor:
    """Unnormalised Walsh-Hadamard transform along the last dim: x @ H_N.  (..., N) -> (..., N)

    N must be a power of two.  H_N is symmetric, so this also equals H_N @ x per row.
    Blocked: with N = f0·f1·…·fk (each f ≤ 16) and the index written as digits
    (d0, d1, …, dk), d_k least significant, pass i multiplies digit d_i by H_fi as one
    batched (fi × fi) @ (fi × post) matmul on the (rows·pre, fi, post) view: the layout
    never changes, so the result is in natural order with no transposes.  With ``tag`` the
    two ping-pong buffers live in the thread's workspace (``workspace.temp``) and the result
    is one of them: valid until the next call with that tag, and not to be passed back in
    with the same tag (the first pass would overwrite its own input).
    """
    n = x.shape[-1]
    if n < 1 or n & (n - 1):
        raise InputError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    if n == 1:
        return x.clone()
    r = x.numel() // n
    y = x.reshape(r, n)
    post = n
    for i, f in enumerate(radix_digits(n)):
        post //= f
        h = _hadamard_cached(f, x.dtype, x.device)
        out = temp(tag, f"fwht{i % 2}", (r, n), x)
        if post == 1:
            torch.mm(y.view(r * n // f, f), h, out=out.view(r * n // f, f))
        else:
            torch.matmul(h, y.view(r * n // (f * post), f, post), out=out.view(r * n // (f * post), f, post))
        y = out
    return y.view(*lead, n) if tag is not None else y.reshape(*lead, n)


_H_CACHE: dict[tuple[int, torch.dtype, str], Tensor] = {}


def _hadamard_cached(n: int, dtype: torch.dtype, device) -> Tensor:
    key = (n, dtype, str(device))
    h = _H_CACHE.get(key)
    if h is None:
        h = _H_CACHE[key] = hadamard_matrix(n, dtype=dtype, device=device)
    return h
