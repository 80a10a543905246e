"""Quadratic random feature maps: x -> q(x) in R^m with E[q_j(x) q_j(x')] = (x·x')² for every j.

The Random Maclaurin construction of the paper uses two independent projections per side,
q_j(x) = (u_j·x)(v_j·x): for independent zero-mean, unit-variance u, v,
E[(u·x)(v·x)(u·x')(v·x')] = E[(u·x)(u·x')] E[(v·x)(v·x')] = (x·x')², so the map is unbiased
coordinate by coordinate, self-pairs included.  Three ways to draw u, v:

- ``dense``: i.i.d. Rademacher matrices (dim, m).  Exact Rademacher features; memory
  2·dim·m floats, so used for narrow sides only.
- ``srht``: rows of H·D, H the Walsh-Hadamard matrix of the padded width N, D random signs,
  m rows sampled in Kronecker blocks (see ``SRHTMap``).  Each row is a ±1 vector whose
  signs are independent over D, so E[(h D x)(h D x')] = x·x' exactly; u and v use
  independent sign vectors and row samples (sharing D would make the product biased).
  Cost O(dim·m/A + m·A) ≈ O(m √dim) per sample as two dense matmuls, memory O(dim).
- ``fold``: a signed fold into F = next_pow2(m) buckets followed by the F-point Hadamard
  transform (see ``FoldMap``): u_j·x = Σ_k H_F[r_j, k mod F] D_k x_k.  Every row is again
  ±1 under independent random signs D, so E[(u_j·x)(u_j·x')] = x·x' exactly.  Cost
  O(dim + m √m) per sample: one streaming pass over x, then two (√m × √m) matmuls.  For
  dim ≤ F it is the SRHT of x zero-padded to F with *all* rows kept (no collisions).
- ``stack``: G = m/N independent SRHTs of x zero-padded to N = next_pow2(dim), stacked
  (see ``StackMap``); the default for sides no wider than next_pow2(m).
- ``spread``: distinct rows at the fold's cost for narrow sides, a wide-block SRHT whose first
  stage reads x in place for wide ones (see ``SpreadMap``); its wide side is the default
  beyond next_pow2(m).
- ``countsketch``: TensorSketch — two independent count sketches C1, C2 (hash to m
  buckets, random signs), q = √m · IFFT(FFT(C1 x) ∘ FFT(C2 x)).  Since each pair (k, l)
  lands in bucket (h1(k)+h2(l)) mod m with probability 1/m, E[q_j(x) q_j(x')] = (x·x')².
  Cost O(dim + m log m) per sample (one scatter-add, one FFT pair).

All random tensors come from one CPU generator drawn in a fixed order, so every device
gets the same basis from the same seed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from updatescope.sketch.hadamard import fwht, hadamard_entries, hadamard_matrix, next_pow2
from updatescope.sketch.workspace import temp

# Rows processed per chunk are chosen so the widest temporary stays near this many floats:
# 2M floats (8 MB) stays in the last-level cache, so the signed copy of x is read back by
# the matmul from cache, and the extra memory is bounded whatever the batch size.
_CHUNK_ELEMS = 1 << 21

# The spread map's wide path reads x in place (no signed copy of it), so its chunks are sized
# by its Hadamard stages instead: 2·m floats per row each, and one stage of a chunk about
# _CHUNK_ELEMS / _STAGE_SHARE floats (1 MB, a core's L2): 32 rows at m = 4,096, where sizing
# by the input's width gave 6–18 rows at K = 49,152 … 151,936 and a slower error map
# (benchmarks/README.md, "Chunk rows of the wide spread map").
_STAGE_SHARE = 8

# A stack map over at most this many input coordinates is applied as its explicit matrix
# (see ``StackMap.factors``).
_STACK_DENSE_DIM = 128


def _block_fold(x: Tensor, r: Tensor, width: int, out: Tensor) -> Tensor:
    """Σ_j R_fj x_j for both factors f: x (n, dim) cut into blocks of ``width`` coordinates
    (the last may be partial), r (2, ⌈dim/width⌉) the block signs -> out (n, 2, width).  One
    batched (2, blocks) @ (n, blocks, width) GEMM reads x in place (for row-contiguous x the
    full blocks are a view even when a partial one follows), then the partial block is added."""
    n, dim = x.shape
    full, rest = dim // width, dim % width
    r = r.to(x.dtype)
    z = torch.matmul(r[:, :full], x[:, : full * width].reshape(n, full, width), out=out)
    if rest:
        z[:, :, :rest] += x[:, full * width :].unsqueeze(1) * r[:, full].view(1, 2, 1)
    return z


def _rademacher(shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    return torch.randint(0, 2, shape, generator=g, dtype=torch.int8).to(torch.float32).mul_(2).sub_(1)


class QuadraticMap:
    """Base: holds the random basis on a device, maps (n, dim) -> (n, m)."""

    kind = "base"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        self.dim, self.m = dim, m

    def to(self, device: torch.device | str) -> QuadraticMap:
        for k, v in list(vars(self).items()):
            if isinstance(v, Tensor):
                setattr(self, k, v.to(device))
        return self

    def __call__(self, x: Tensor, tag: str | None = None) -> Tensor:
        """(n, dim) -> (n, m).  With ``tag``, every temporary and the result live in the
        thread's workspace under that tag (``workspace``): the result is valid until the
        next call with the same tag.  Without it, the result is a tensor of its own."""
        n = x.shape[0]
        out = temp(tag, "out", (n, self.m), x)
        rows = max(1, _CHUNK_ELEMS // max(self._width(), 1))
        for i in range(0, n, rows):
            self._apply(x[i : i + rows], out[i : i + rows], tag)
        return out

    def _width(self) -> int:
        return 2 * self.m

    def _apply(self, x: Tensor, out: Tensor, tag: str | None) -> None:
        """Write q(x) into out, (rows, m)."""
        u, v = self.factors(x, tag)
        torch.mul(u, v, out=out)

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        """The two projections (u_j·x, v_j·x), each (n, m); not defined for countsketch."""
        raise NotImplementedError


class DenseMap(QuadraticMap):
    kind = "dense"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.proj = _rademacher((dim, 2 * m), g)  # [U | V]

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        p = torch.mm(x, self.proj.to(x.dtype), out=temp(tag, "p", (x.shape[0], 2 * self.m), x))
        return p[:, : self.m], p[:, self.m :]


class SRHTMap(QuadraticMap):
    """Rows of H_N·D for a block-structured row sample, applied as two small dense matmuls.

    Write N = Bp·A (A a power of two near √dim, Bp = next power of two of ⌈dim/A⌉) and view
    D·x as a (B, A) matrix X, coordinate k = b·A + a (interleaved: neighbouring token ids
    fall in different columns).  Sylvester ordering gives H_N = H_Bp ⊗ H_A, so
    (H_N D x)[(ob, oa)] = (H_Bp[ob] · X · H_A)[oa].  We keep the rows {(ob, oa): ob ∈ S, all
    oa}, |S| = s = m/A, sampled without replacement (with replacement when s > Bp), which
    costs 2·dim·s + 2·m·A flops per factor instead of N log N, and never pads x by more
    than A − 1 zeros.  Every kept row is still a ±1 Hadamard row under independent random
    signs D, so E[(h D x)(h D x')] = x·x' exactly; u and v use independent D, S, and v's
    outputs are paired with u's through a random permutation (without it, for x supported
    in one column the A features of a group would repeat the same product).
    """

    kind = "srht"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        a = 1 << max(0, round(math.log2(math.sqrt(dim))))
        while m % a:  # A must divide m (m is a multiple of 16)
            a //= 2
        self.a, self.s = a, m // a
        self.b = -(-dim // a)
        self.n_pad = next_pow2(self.b) * a
        bp = self.n_pad // a
        self.signs = _rademacher((2, dim), g)  # D_u, D_v
        if self.s <= bp:
            rows = torch.stack([torch.randperm(bp, generator=g)[: self.s] for _ in range(2)])
        else:
            rows = torch.randint(0, bp, (2, self.s), generator=g)
        self.rows = rows  # (2, s) sampled rows of H_Bp (the ob of each kept row)
        self.pair = torch.randperm(m, generator=g)  # v output paired with u output j
        self.h_b = hadamard_entries(rows, torch.arange(self.b))  # (2, s, B): H_Bp[S], used columns only
        bits = a.bit_length() - 1
        self.h_a1 = hadamard_matrix(1 << (bits // 2))  # H_A = H_A1 ⊗ H_A2, A1 ≤ A2 (derived, no draw)
        self.h_a2 = hadamard_matrix(a >> (bits // 2))

    def _width(self) -> int:
        return 2 * self.b * self.a

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        n = x.shape[0]
        b, a, s = self.b, self.a, self.s
        # Lay D·x out as (2, B, n, A) in the one pass that applies the signs, so that both
        # stages are single large GEMMs instead of n small batched ones.
        signs = self.signs.to(x.dtype)
        full = self.dim // a
        z = temp(tag, "z", (2, b, n, a), x)
        if full == b:  # dim is a multiple of A: signs and layout in one fused op
            torch.mul(x.reshape(n, b, a).transpose(0, 1).unsqueeze(0), signs.view(2, b, 1, a), out=z)
        else:
            torch.mul(
                x[:, : full * a].reshape(n, full, a).transpose(0, 1).unsqueeze(0),
                signs[:, : full * a].view(2, full, 1, a),
                out=z[:, :full],
            )
            rest = self.dim - full * a
            torch.mul(x[:, full * a :].unsqueeze(0), signs[:, full * a :].unsqueeze(1), out=z[:, full, :, :rest])
            z[:, full, :, rest:] = 0
        y = torch.bmm(self.h_b.to(x.dtype), z.view(2, b, n * a), out=temp(tag, "y", (2, s, n * a), x))  # rows ob ∈ S
        # H_A = H_A1 ⊗ H_A2 (Sylvester): with a = a1·A2 + a2, y·H_A is H_A1ᵀ·Y·H_A2 on the (A1, A2)
        # view of each row, two small matmuls (2·m·(A1 + A2) multiply-adds per factor instead of
        # 2·m·A); the second leaves (…, o2, o1), which the layout copy below puts back in order.
        a1, a2 = self.h_a1.shape[0], self.h_a2.shape[0]
        q = torch.mm(y.view(2 * s * n * a1, a2), self.h_a2.to(x.dtype), out=temp(tag, "q", (2 * s * n * a1, a2), x))
        q = torch.matmul(
            q.view(2 * s * n, a1, a2).transpose(1, 2),
            self.h_a1.to(x.dtype),
            out=temp(tag, "q2", (2 * s * n, a2, a1), x),
        )
        # feature j = (ob index)·A + o1·A2 + o2: lay out as (2, n, s, A1, A2)
        f = (
            temp(tag, "f", (2, n, s, a1, a2), x)
            .copy_(q.view(2, s, n, a2, a1).permute(0, 2, 1, 4, 3))
            .view(2, n, self.m)
        )
        return f[0], torch.index_select(f[1], 1, self.pair, out=temp(tag, "v", (n, self.m), x))


class CountSketchMap(QuadraticMap):
    kind = "countsketch"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.buckets = torch.randint(0, m, (2, dim), generator=g)  # h1, h2
        self.signs = _rademacher((2, dim), g)  # σ1, σ2
        self._index = torch.cat((self.buckets[0], self.buckets[1] + m))  # derived, no draw

    def _width(self) -> int:
        return 2 * max(self.dim, self.m)

    def _apply(self, x: Tensor, out: Tensor, tag: str | None) -> None:
        n = x.shape[0]
        # Both count sketches in one scatter: C1 x into buckets [0, m), C2 x into [m, 2m).
        signed = (x.unsqueeze(1) * self.signs.to(x.dtype)).view(n, 2 * self.dim)
        c = x.new_zeros(n, 2 * self.m).index_add_(1, self._index, signed)
        f = torch.fft.rfft(c[:, : self.m], dim=1) * torch.fft.rfft(c[:, self.m :], dim=1)
        torch.mul(torch.fft.irfft(f, n=self.m, dim=1), math.sqrt(self.m), out=out)


class FoldMap(QuadraticMap):
    """Signed fold into F = next_pow2(m) buckets, then the F-point Hadamard transform.

    Coordinate k of D·x is added to bucket k mod F (interleaved: neighbouring token ids
    land in different buckets); the folded vector y ∈ R^F is multiplied by H_F, written as
    H_P ⊗ H_Q (P·Q = F, Q ≈ √F) and applied as two dense matmuls on the (P, Q) view, rows
    beyond the folded width skipped.  Output feature j is a fixed row r_j of H_F, so
    u_j·x = Σ_k H_F[r_j, k mod F] D_k x_k: a ±1 vector whose signs are independent over D,
    hence E[(u_j·x)(u_j·x')] = x·x' exactly.  u and v use independent D; v's rows are a
    random permutation of u's (see ``SRHTMap`` for why the pairing must be random), and
    when m < F (m not a power of two) m of the F rows are kept, sampled without
    replacement.  Coordinates k ≡ k' (mod F) always share a bucket: for them the map is a
    count sketch with a fixed hash (unbiased through D alone), which is what makes the
    cost O(dim) instead of O(dim·m/A) for the block SRHT.

    The signs factor as D_k = R_j·S_f for k = j·F + f (a sign per block of F coordinates
    times a sign per bucket, all independent): E[D_k D_k'] = δ_kk' still holds, which is all
    the kernel's unbiasedness needs, and the fold becomes a weighted sum of the dim/F blocks
    (one batched GEMV that reads x once, no (dim)-sized temporary) followed by S.
    ``signs`` holds the resulting per-coordinate D (for reference and tests).
    """

    kind = "fold"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        f = next_pow2(m)
        bits = f.bit_length() - 1
        self.f, self.q = f, 1 << ((bits + 1) // 2)
        self.p = f // self.q
        self.c = -(-dim // f)  # blocks of F coordinates folded onto each other
        self.pu = -(-min(dim, f) // self.q)  # rows of the (P, Q) view that can be nonzero
        self.s = _rademacher((2, f), g)  # bucket signs S_u, S_v
        self.r = _rademacher((2, self.c), g)  # block signs R_u, R_v
        k = torch.arange(dim)
        self.signs = self.r[:, k // f] * self.s[:, k % f]  # D_u, D_v per coordinate: (2, dim)
        perm = torch.randperm(f, generator=g)
        self.sel = perm[:m] if f > m else None  # rows of H_F kept for u (all when m = F)
        self.pair = torch.randperm(f, generator=g)[:m]  # row of v paired with u's output j
        self._pair_v = self.pair + f  # the same rows in the (n, 2F) layout of both factors (derived)
        self.h_q = hadamard_matrix(self.q)  # (Q, Q)
        self.h_p = hadamard_matrix(self.p)[: self.pu]  # (pu, P): H_P restricted to used rows
        # Row of H_F behind each output, per factor.  The narrow path (c = 1) leaves the
        # transform in the (Q, P) layout, whose position i is row (i mod P)·Q + i div P; the
        # wide path transforms in natural order (``fwht``) and gathers these rows directly,
        # so both compute the same map.
        row_of = (torch.arange(f) % self.p) * self.q + torch.arange(f) // self.p
        self.rows = torch.stack((row_of if self.sel is None else row_of[self.sel], row_of[self.pair]))
        self._rows_v = self.rows[1] + f  # v's rows in the (n, 2F) natural layout (derived)

    def _width(self) -> int:
        # temporaries are (rows, 2, F) whatever dim is: the fold reads x once, in place
        return 2 * self.f if self.c > 1 else 2 * max(self.dim, self.f)

    def _fold(self, x: Tensor, tag: str | None = None) -> Tensor:
        """(n, dim) -> (n, 2, pu·Q): D_u·x and D_v·x folded modulo F (zero beyond dim)."""
        n, dim, f, c = x.shape[0], self.dim, self.f, self.c
        span = self.pu * self.q
        if c == 1:  # no collisions: sign, pad to a multiple of Q
            z = temp(tag, "z", (n, 2, span), x)
            torch.mul(x.unsqueeze(1), self.signs.to(x.dtype).unsqueeze(0), out=z[:, :, :dim])
            z[:, :, dim:] = 0
            return z
        z = _block_fold(x, self.r, f, temp(tag, "z", (n, 2, f), x))  # Σ_j R_j x_j: (n, 2, F)
        return z.mul_(self.s.to(x.dtype))  # times S: (n, 2, F)

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        n = x.shape[0]
        z = self._fold(x, tag)
        if self.c > 1:  # wide: H_F on the whole folded vector, natural order, then the kept rows
            flat = fwht(z.view(n * 2, self.f), tag).view(n, 2 * self.f)
            u = torch.index_select(flat, 1, self.rows[0], out=temp(tag, "u", (n, self.m), x))
            return u, torch.index_select(flat, 1, self._rows_v, out=temp(tag, "v", (n, self.m), x))
        # narrow: only the first pu rows of the (P, Q) view are nonzero.  H_Q on the fast axis
        y = torch.mm(
            z.view(n * 2 * self.pu, self.q), self.h_q.to(x.dtype), out=temp(tag, "y1", (n * 2 * self.pu, self.q), x)
        )
        # H_P on the slow axis; the result is laid out (q, p), a fixed permutation of H_F's rows
        y = torch.matmul(
            y.view(n * 2, self.pu, self.q).transpose(1, 2),
            self.h_p.to(x.dtype),
            out=temp(tag, "y2", (n * 2, self.q, self.p), x),
        ).view(n, 2, self.f)
        # gather from the contiguous (n, 2F) view: index_select copies a strided input first
        flat = y.view(n, 2 * self.f)
        u = y[:, 0] if self.sel is None else torch.index_select(flat, 1, self.sel, out=temp(tag, "u", (n, self.m), x))
        return u, torch.index_select(flat, 1, self._pair_v, out=temp(tag, "v", (n, self.m), x))


class SpreadMap(QuadraticMap):
    """Distinct ±1 rows at the fold map's cost for narrow inputs, the block SRHT's rows
    without its signed copy of x for wide ones.

    dim ≤ F = next_pow2(m) = P·Q (narrow).  The fold pads x with zeros, so only its first
    dim columns of H_F are read, and two rows of H_F that agree on them give the same
    projection: at dim = 576, F = 4,096 the rows fall into 1,024 groups of 4 identical ones,
    at dim = 128 into groups of 32.  Here x is cut into R = ⌈dim/Q⌉ runs of Q coordinates
    and run i goes to row ρ(i) of the (P, Q) view of the transform input (ρ: R distinct
    rows of P, drawn per factor), so coordinate k sits at column ρ(k div Q)·Q + k mod Q.
    Rows (p, q), (p', q') of H_F = H_P ⊗ H_Q agree on these columns only if q = q' and
    p ⊕ p' is orthogonal (mod 2) to every ρ(i): when the ρ(i) span GF(2)^log2(P)
    (R ≳ log2 P random rows; R = 9 of P = 64 at dim = 576) the m projections are all
    distinct, as the dense map's are.  Cost: the fold's (signs, H_Q, H_P on R rows).

    dim > F (wide).  The block SRHT of ``SRHTMap`` (x as a (B, A) matrix X, kept rows
    H_Bp[S]·X·H_A), with wide blocks (A ≈ m/4, s ≈ 4 block rows of H_Bp kept, where the
    block SRHT keeps m/√dim of width √dim) and its random signs factored as
    D_(b,a) = R_b·C_a: still independent pairwise, E[D_k D_k'] = δ_kk', which is all
    unbiasedness needs, and now the row signs fold into H_Bp[S] and the column signs apply
    to the small (s, A) result.  So the first stage reads x in place as (n, B, A), one GEMM
    for both factors, with no signed, transposed copy of x (the block SRHT's costliest pass
    at a 49k vocabulary), and H_A is applied as H_A1 ⊗ H_A2.  Output j = i·A + o2·A1 + o1 of
    a factor is row S[i]·A + o1·A2 + o2 of H_N (written out in ``rows``).

    The wide side is the default (``auto``) beyond next_pow2(m); for narrow sides the default
    is ``StackMap``: distinct rows are not independent ones, and for a fixed column q of a
    narrow side the P outputs here combine only R numbers (benchmarks/default_maps.py).

    Every row is ±1 under independent signs, so E[(u_j·x)(u_j·x')] = x·x' exactly; u and v
    use independent signs and rows, and v's outputs are paired with u's through a random
    permutation.  ``rows`` (2, m) and ``cols`` (2, dim) give, per factor, the row of the
    Sylvester matrix (H_F or H_N) behind each output and the column of each coordinate;
    ``signs`` (2, dim) the sign of each coordinate: u_j·x = Σ_k H[rows[0, j], cols[0, k]]
    signs[0, k] x_k, for reference and tests.
    """

    kind = "spread"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        f = next_pow2(m)
        self.wide = dim > f
        k = torch.arange(dim)
        if not self.wide:
            bits = f.bit_length() - 1
            self.q = 1 << ((bits + 1) // 2)
            self.p = f // self.q
            self.runs = -(-dim // self.q)  # R ≤ P
            rho = torch.stack([torch.randperm(self.p, generator=g)[: self.runs] for _ in range(2)])  # (2, R)
            self.signs = _rademacher((2, dim), g)
            sel = torch.stack([torch.randperm(f, generator=g)[:m] for _ in range(2)])  # kept output index per factor
            self.pair = torch.randperm(m, generator=g)
            self.h_q = hadamard_matrix(self.q)
            self.h_p = hadamard_matrix(self.p)[rho]  # (2, R, P): H_P on each factor's rows ρ
            self.cols = rho[:, k // self.q] * self.q + k % self.q
            self._sel_u, self._sel_v = sel[0], sel[1][self.pair] + f  # in the (n, 2F) output layout
            # output index i of the transform is row (i mod P)·Q + i div P of H_F (see FoldMap)
            row_of = (torch.arange(f) % self.p) * self.q + torch.arange(f) // self.p
            self.rows = torch.stack((row_of[sel[0]], row_of[sel[1][self.pair]]))
            return
        # A ≈ m/4 (a power of two dividing m), so s ≈ 4 kept block rows: the first stage costs
        # 2·s·dim multiply-adds per factor and H_A = H_A1 ⊗ H_A2 about 2·m·2√A, instead of the
        # block SRHT's A ≈ √dim, s = m/A (2·m·√dim + 2·m·A).  s < B always (dim > F ≥ m), so the
        # block rows are drawn without replacement.
        a = 1 << max(0, (m // 4).bit_length() - 1)
        while m % a:
            a //= 2
        self.a, self.s = a, m // a
        self.b = -(-dim // a)
        bp = next_pow2(self.b)
        kept = torch.stack([torch.randperm(bp, generator=g)[: self.s] for _ in range(2)])
        r = _rademacher((2, self.b), g)  # R: a sign per block row b, per factor
        c = _rademacher((2, a), g)  # C: a sign per column a, per factor
        self.pair = torch.randperm(m, generator=g)
        self.signs = r[:, k // a] * c[:, k % a]  # D = R_b C_a per coordinate k = b·A + a
        self.cols = k.expand(2, dim)
        # (2s, B): both factors' kept rows of H_Bp with R folded in
        self.h_b = (hadamard_entries(kept, torch.arange(self.b)) * r.unsqueeze(1)).reshape(2 * self.s, self.b)
        self.col_signs = c
        bits = a.bit_length() - 1
        self.a1, self.a2 = 1 << (bits // 2), a >> (bits // 2)
        self.h_a1, self.h_a2 = hadamard_matrix(self.a1), hadamard_matrix(self.a2)
        # output (ob index i, o2, o1) of the layout below is row S[i]·A + o1·A2 + o2 of H_N
        i = torch.arange(self.s).repeat_interleave(a)
        o2 = (torch.arange(a) // self.a1).repeat(self.s)
        o1 = (torch.arange(a) % self.a1).repeat(self.s)
        rows = kept[:, i] * a + o1 * self.a2 + o2
        self.rows = torch.stack((rows[0], rows[1][self.pair]))
        self._sel_v = self.pair + m  # v's outputs in the (n, 2m) layout

    def _width(self) -> int:
        if self.wide:  # x is read in place; the temporaries are (rows, 2m) Hadamard stages (see _STAGE_SHARE)
            return _STAGE_SHARE * 2 * self.m
        return 4 * self.m + 2 * self.dim

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        n, dim, m = x.shape[0], self.dim, self.m
        if not self.wide:
            q, p, runs = self.q, self.p, self.runs
            z = temp(tag, "z", (n, 2, runs * q), x)
            torch.mul(x.unsqueeze(1), self.signs.to(x.dtype).unsqueeze(0), out=z[:, :, :dim])
            z[:, :, dim:] = 0
            y = torch.mm(z.view(n * 2 * runs, q), self.h_q.to(x.dtype), out=temp(tag, "y1", (n * 2 * runs, q), x))
            # H_P on the slow axis, restricted to each factor's rows ρ: (n, 2, Q, R) @ (2, R, P)
            y = torch.matmul(
                y.view(n, 2, runs, q).transpose(2, 3), self.h_p.to(x.dtype), out=temp(tag, "y2", (n, 2, q, p), x)
            )
            flat = y.view(n, 2 * q * p)
            u = torch.index_select(flat, 1, self._sel_u, out=temp(tag, "u", (n, m), x))
            return u, torch.index_select(flat, 1, self._sel_v, out=temp(tag, "v", (n, m), x))
        return self._wide(x, tag)

    def _wide(self, x: Tensor, tag: str | None) -> tuple[Tensor, Tensor]:
        """Wide path.  x (n, dim), read by both factors, or (n, 2, dim): one input per factor
        (``FoldSpreadMap`` passes its two folded vectors)."""
        n, dim, m = x.shape[0], self.dim, self.m
        a, s, b = self.a, self.s, self.b
        full = dim // a
        hb = self.h_b.to(x.dtype)
        if x.dim() == 2:
            # stage 1, both factors: (2s, B) @ (n, B, A) -> (n, 2s, A), x read in place
            y = torch.matmul(hb[:, :full], x[:, : full * a].reshape(n, full, a), out=temp(tag, "y", (n, 2 * s, a), x))
            if full < b:  # the last, partial block row
                rest = dim - full * a
                y[:, :, :rest] += hb[:, full].view(1, 2 * s, 1) * x[:, full * a :].unsqueeze(1)
        else:
            # stage 1, one input per factor: (2, s, B) @ (n, 2, B, A) -> (n, 2, s, A)
            hb2 = hb.view(2, s, b)
            y = torch.matmul(
                hb2[:, :, :full],
                x[:, :, : full * a].reshape(n, 2, full, a),
                out=temp(tag, "y", (n, 2, s, a), x).view(n, 2, s, a),
            ).view(n, 2 * s, a)
            if full < b:
                rest = dim - full * a
                y.view(n, 2, s, a)[..., :rest] += hb2[:, :, full].view(1, 2, s, 1) * x[:, :, full * a :].unsqueeze(2)
        y.view(n, 2, s, a).mul_(self.col_signs.to(x.dtype).view(1, 2, 1, a))
        # H_A = H_A1 ⊗ H_A2 on the (A1, A2) view of each row (two calls; ``fwht``'s three passes
        # and a gather were not faster at the few rows per chunk of a wide input)
        a1, a2 = self.a1, self.a2
        t = torch.mm(y.view(n * 2 * s * a1, a2), self.h_a2.to(x.dtype), out=temp(tag, "t", (n * 2 * s * a1, a2), x))
        t = torch.matmul(
            t.view(n * 2 * s, a1, a2).transpose(1, 2),
            self.h_a1.to(x.dtype),
            out=temp(tag, "t2", (n * 2 * s, a2, a1), x),
        )
        flat = t.view(n, 2 * m)
        return flat[:, :m], torch.index_select(flat, 1, self._sel_v, out=temp(tag, "v", (n, m), x))


class StackMap(QuadraticMap):
    """G = ⌈m/N⌉ independent SRHTs of x zero-padded to N = next_pow2(dim), stacked.

    Block g of a factor is H_N·D_g·x with its own random signs D_g (G·dim of them per
    factor), and m of the G·N outputs are kept (all of them, in order, for u when G·N = m;
    v's are a random permutation, which pairs v's outputs with u's at random).  Within a
    block the rows are orthogonal; across blocks, and between u and v, the signs are
    independent.  Every row is a ±1 Hadamard row under independent signs, so
    E[(u_j·x)(u_j·x')] = x·x' exactly and q = u ⊙ v is unbiased.

    This is the narrow-side map that the fold and spread maps approximate: at dim = 576,
    m = 4,096 the fold's padded rows repeat (1,024 distinct projections) and the spread's
    P outputs of a column combine only ⌈dim/Q⌉ numbers, while here each block is a full
    orthogonal transform of the signed x.  Cost per factor: G·R·N2·(N2 + N1) multiply-adds
    with H_N = H_N1 ⊗ H_N2 (N1 ≤ N2) applied as two small GEMMs on the (R, N2) view of the
    padded x, R = ⌈dim/N2⌉ the rows that can be nonzero (0.15 M at dim = 576, m = 4,096,
    against the dense map's 2.4 M).  It is defined for any width, but beyond m the G = 1 transform reads
    N log N of work per sample, so wide sides use ``spread`` or ``srht``.

    ``rows`` (2, m): the row of H_N behind each output; ``block`` (2, m): its block g;
    ``signs`` (2, G, dim): D per factor and block, so that
    u_j·x = Σ_k H_N[rows[0, j], k] signs[0, block[0, j], k] x_k (for reference and tests).
    """

    kind = "stack"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        n = next_pow2(dim)
        bits = n.bit_length() - 1
        self.n, self.n1, self.n2 = n, 1 << (bits // 2), n >> (bits // 2)
        self.g = -(-m // n)
        self.r = -(-dim // self.n2)  # rows of the (N1, N2) view that can be nonzero
        self.signs = _rademacher((2, self.g, dim), g)
        total = self.g * n
        keep = torch.stack([torch.randperm(total, generator=g)[:m] for _ in range(2)])  # (2, m)
        if total == m:  # u keeps every output in order; v's permutation pairs them at random
            keep[0] = torch.arange(m)
        self._sel_u = None if total == m else keep[0]
        self._sel_v = keep[1] + total  # in the (n, 2·G·N) layout of both factors
        # output position p of a block is row (p mod N1)·N2 + p div N1 of H_N (see factors)
        pos = keep % n
        self.rows = (pos % self.n1) * self.n2 + pos // self.n1
        self.block = keep // n
        self.h_2 = hadamard_matrix(self.n2)
        self.h_1 = hadamard_matrix(self.n1)[:, : self.r].T.contiguous()  # (R, N1): H_N1 on the used rows

    def _width(self) -> int:
        if self.dim <= _STACK_DENSE_DIM:
            return 2 * self.m
        return 6 * self.g * self.n + 2 * self.m

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        if self.dim <= _STACK_DENSE_DIM:
            # Narrow enough that the explicit (dim, 2m) ±1 matrix of both factors is small
            # (≤ 4 MB at m = 4,096): one well-shaped GEMM beats G·R tiny transforms.
            key = (x.dtype, x.device)
            if getattr(self, "_explicit_key", None) != key:
                u, v = self._transform(torch.eye(self.dim, dtype=x.dtype, device=x.device), None)
                self._explicit, self._explicit_key = torch.cat((u, v), 1), key  # exact: sums of ±1
            p = torch.mm(x, self._explicit, out=temp(tag, "p", (x.shape[0], 2 * self.m), x))
            return p[:, : self.m], p[:, self.m :]
        return self._transform(x, tag)

    def _transform(self, x: Tensor, tag: str | None) -> tuple[Tensor, Tensor]:
        rows, dim, m, g, n2, r = x.shape[0], self.dim, self.m, self.g, self.n2, self.r
        span = r * n2
        # both factors' G signed copies of x, padded to the used (R, N2) rows: (rows, 2G, R·N2)
        z = temp(tag, "z", (rows, 2 * g, span), x)
        torch.mul(x.unsqueeze(1), self.signs.to(x.dtype).view(1, 2 * g, dim), out=z[:, :, :dim])
        z[:, :, dim:] = 0
        # H_N = H_N1 ⊗ H_N2 on the (a1, a2) view: contract a2, then a1 (used rows only);
        # the result is laid out (o2, o1), position o2·N1 + o1 = row o1·N2 + o2 of H_N
        t = torch.mm(z.view(rows * 2 * g * r, n2), self.h_2.to(x.dtype), out=temp(tag, "t", (rows * 2 * g * r, n2), x))
        t = torch.matmul(
            t.view(rows * 2 * g, r, n2).transpose(1, 2),
            self.h_1.to(x.dtype),
            out=temp(tag, "t2", (rows * 2 * g, n2, self.n1), x),
        )
        flat = t.view(rows, 2 * g * self.n)
        u = (
            flat[:, :m]
            if self._sel_u is None
            else torch.index_select(flat, 1, self._sel_u, out=temp(tag, "u", (rows, m), x))
        )
        return u, torch.index_select(flat, 1, self._sel_v, out=temp(tag, "v", (rows, m), x))


class FoldSpreadMap(QuadraticMap):
    """A signed fold of x into W = 4·next_pow2(m) buckets, then the spread map's wide SRHT
    (``SpreadMap``) on each factor's folded vector: the spread's rows for the fold's cost.

    The spread's first stage multiplies every input coordinate by 2·s ≈ 8 kept block rows of
    H_Bp, so at a 128k vocabulary it costs several reads of x however it is laid out.  Here x
    is read once by a 2-row fold: coordinate k = j·W + w goes to bucket w with sign R_j (a
    sign per block of W coordinates, per factor), z_f = Σ_j R_fj x_j, and the spread map of
    width W (drawn after R, its own factored signs R'_b C_a) is applied to z_u for u and to
    z_v for v.  Output j of a factor is therefore Σ_k H_W[rows_j, cols(k mod W)] ·
    R'C(k mod W) · R(k div W) · x_k, a ±1 row whose coordinate signs D_k are independent
    pairwise (coordinates in one bucket differ by R, in different buckets by R'C), so
    E[(u_j·x)(u_j·x')] = x·x' exactly, as for every map here.  Coordinates k ≡ k' (mod W)
    share a column of H_W: a count sketch with a fixed hash into W = 4F buckets, four times
    the fold map's F, before the spread's distinct rows.  For dim ≤ W there is nothing to
    fold and the map is the spread map of width dim.

    ``rows`` (2, m), ``cols`` (2, dim) and ``signs`` (2, dim) follow ``SpreadMap``'s
    convention: u_j·x = Σ_k H[rows[0, j], cols[0, k]] signs[0, k] x_k.
    """

    kind = "foldspread"

    def __init__(self, dim: int, m: int, g: torch.Generator) -> None:
        super().__init__(dim, m, g)
        self.w = 4 * next_pow2(m)
        self.c = -(-dim // self.w)  # blocks of W coordinates folded onto each other
        k = torch.arange(dim)
        if self.c > 1:
            self.r = _rademacher((2, self.c), g)  # block signs R_u, R_v
            self.inner = SpreadMap(self.w, m, g)
            w = k % self.w
            self.rows = self.inner.rows
            self.cols = self.inner.cols[:, w]
            self.signs = self.inner.signs[:, w] * self.r[:, k // self.w]
        else:
            self.r = None
            self.inner = SpreadMap(dim, m, g)
            self.rows, self.cols, self.signs = self.inner.rows, self.inner.cols, self.inner.signs

    def to(self, device: torch.device | str) -> FoldSpreadMap:
        super().to(device)
        self.inner.to(device)
        return self

    def _width(self) -> int:
        if self.c == 1:
            return self.inner._width()
        return 2 * self.w + self.inner._width()  # the folded pair (a copy), then the spread's stages

    def factors(self, x: Tensor, tag: str | None = None) -> tuple[Tensor, Tensor]:
        if self.c == 1:
            return self.inner.factors(x, tag)
        z = _block_fold(x, self.r, self.w, temp(tag, "fz", (x.shape[0], 2, self.w), x))  # (n, 2, W)
        return self.inner._wide(z, tag)


_KINDS = {c.kind: c for c in (DenseMap, SRHTMap, FoldMap, SpreadMap, StackMap, CountSketchMap, FoldSpreadMap)}


def build_maps(
    act_dim: int, out_dim: int, m: int, seed: int, act_kind: str, error_kind: str
) -> tuple[QuadraticMap, QuadraticMap]:
    """The activation and error maps of one basis, drawn in a fixed order from one CPU generator."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    act = _KINDS[act_kind](act_dim, m, g)
    err = _KINDS[error_kind](out_dim, m, g)
    return act, err
