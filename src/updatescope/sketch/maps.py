"""Quadratic random feature maps: x -> q(x) in R^m with E[q_j(x) q_j(x')] = (x·x')² for every j.

The Random Maclaurin construction of the paper uses two independent projections per side,
q_j(x) = (u_j·x)(v_j·x): for independent zero-mean, unit-variance u, v,
E[(u·x)(v·x)(u·x')(v·x')] = E[(u·x)(u·x')] E[(v·x)(v·x')] = (x·x')², so the map is unbiased
coordinate by coordinate, self-pairs included.  Three ways to draw u, v:

- ``dense``: i.i.d. Rademacher matrices (dim, m).  Exact Rademacher features; memory
  2·dim·m floats, so used for narrow sides only.
- ``srht``: rows of H·D, H the Walsh-Hadamard matrix of the padded width N, D random signs,
  m rows sampled without replacement (with replacement when m > N).  Each row is a ±1
  vector whose signs are independent over D, so E[(h D x)(h D x')] = x·x' exactly; u and v
  use independent sign vectors and row samples (sharing D would make the product biased).
  Cost O(N log N) per sample, memory O(N).
- ``countsketch``: TensorSketch — two independent count sketches C1, C2 (hash to m
  buckets, random signs), q = √m · IFFT(FFT(C1 x) ∘ FFT(C2 x)).  Since each pair (k, l)
  lands in bucket (h1(k)+h2(l)) mod m with probability 1/m, E[q_j(x) q_j(x')] = (x·x')².
  Cost O(dim + m log m) per sample.

All random tensors come from one CPU generator drawn in a fixed order, so every device
gets the same basis from the same seed.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from updatescope.sketch.hadamard import fwht, next_pow2

# Rows processed per chunk are chosen so the widest temporary stays near this many floats.
_CHUNK_ELEMS = 1 << 23


def _rademacher(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    return torch.randint(0, 2, shape, generator=g, dtype=torch.int8).to(torch.float32).mul_(2).sub_(1)


class QuadraticMap:
    """Base: holds the random basis on a device, maps (n, dim) -> (n, m)."""

    kind = "base"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        self.dim, self.m = dim, m

    def to(self, device: torch.device | str) -> "QuadraticMap":
        for k, v in list(vars(self).items()):
            if isinstance(v, Tensor):
                setattr(self, k, v.to(device))
        return self

    def __call__(self, x: Tensor) -> Tensor:
        rows = max(1, _CHUNK_ELEMS // max(self._width(), 1))
        if x.shape[0] <= rows:
            return self._apply(x)
        return torch.cat([self._apply(x[i : i + rows]) for i in range(0, x.shape[0], rows)])

    def _width(self) -> int:
        return 2 * self.m

    def _apply(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def factors(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The two projections (u_j·x, v_j·x), each (n, m); not defined for countsketch."""
        raise NotImplementedError


class DenseMap(QuadraticMap):
    kind = "dense"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.proj = _rademacher((dim, 2 * m), g)  # [U | V]

    def factors(self, x: Tensor) -> tuple[Tensor, Tensor]:
        p = x @ self.proj.to(x.dtype)
        return p[:, : self.m], p[:, self.m :]

    def _apply(self, x: Tensor) -> Tensor:
        u, v = self.factors(x)
        return u * v


class SRHTMap(QuadraticMap):
    kind = "srht"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.n_pad = next_pow2(dim)
        self.signs = _rademacher((2, dim), g)  # D_u, D_v
        if m <= self.n_pad:
            rows_u = torch.randperm(self.n_pad, generator=g)[:m]
            rows_v = torch.randperm(self.n_pad, generator=g)[:m]
        else:
            rows_u = torch.randint(0, self.n_pad, (m,), generator=g)
            rows_v = torch.randint(0, self.n_pad, (m,), generator=g)
        self.rows = torch.stack((rows_u, rows_v))  # (2, m) int64

    def _width(self) -> int:
        return 2 * self.n_pad

    def factors(self, x: Tensor) -> tuple[Tensor, Tensor]:
        n = x.shape[0]
        z = torch.zeros(n, 2, self.n_pad, dtype=x.dtype, device=x.device)
        z[:, :, : self.dim] = x.unsqueeze(1) * self.signs.to(x.dtype)
        h = fwht(z)  # (n, 2, N)
        return h[:, 0, self.rows[0]], h[:, 1, self.rows[1]]

    def _apply(self, x: Tensor) -> Tensor:
        u, v = self.factors(x)
        return u * v


class CountSketchMap(QuadraticMap):
    kind = "countsketch"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.buckets = torch.randint(0, m, (2, dim), generator=g)  # h1, h2
        self.signs = _rademacher((2, dim), g)  # σ1, σ2

    def _width(self) -> int:
        return max(self.dim, 2 * self.m)

    def _count_sketch(self, x: Tensor, i: int) -> Tensor:
        out = torch.zeros(x.shape[0], self.m, dtype=x.dtype, device=x.device)
        return out.index_add_(1, self.buckets[i], x * self.signs[i].to(x.dtype))

    def _apply(self, x: Tensor) -> Tensor:
        c1, c2 = self._count_sketch(x, 0), self._count_sketch(x, 1)
        f = torch.fft.rfft(c1, dim=1) * torch.fft.rfft(c2, dim=1)
        return torch.fft.irfft(f, n=self.m, dim=1) * math.sqrt(self.m)


_KINDS = {c.kind: c for c in (DenseMap, SRHTMap, CountSketchMap)}


def build_maps(act_dim: int, out_dim: int, m: int, seed: int, act_kind: str, error_kind: str
               ) -> tuple[QuadraticMap, QuadraticMap]:
    """The activation and error maps of one basis, drawn in a fixed order from one CPU generator."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    act = _KINDS[act_kind](act_dim, m, g)
    err = _KINDS[error_kind](out_dim, m, g)
    return act, err
