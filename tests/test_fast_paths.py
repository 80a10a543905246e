"""Fast paths against their plain definitions: fwht vs the dense Hadamard matrix, the
blocked SRHT and the fold map vs explicit rows of H·D, the one-scatter count sketch vs a
loop, chunked update_logits vs update with explicit errors, and the unbiasedness
E[q_j(x) q_j(x')] = (x·x')² of every map, averaged over seeds."""

import math

import pytest
import torch

import updatescope as us
from updatescope.sketch.hadamard import fwht, hadamard_entries, hadamard_matrix, next_pow2
from updatescope.sketch.maps import (
    CountSketchMap,
    DenseMap,
    FoldMap,
    FoldSpreadMap,
    SpreadMap,
    SRHTMap,
    StackMap,
    build_maps,
)


@pytest.mark.parametrize("n", [1, 2, 8, 64, 128, 4096, 8192])
def test_fwht_equals_dense_hadamard(n):
    x = torch.randn(3, 2, n, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    h = hadamard_matrix(n, torch.float64)
    assert torch.allclose(fwht(x), x @ h, rtol=0, atol=1e-9 * math.sqrt(n))


def test_hadamard_entries_match_matrix():
    h = hadamard_matrix(512)
    rows = torch.tensor([[0, 5, 511], [3, 100, 256]])
    cols = torch.arange(300)
    assert torch.equal(hadamard_entries(rows, cols), h[rows][..., :300])


def test_hadamard_is_kronecker_of_factors():
    assert torch.equal(hadamard_matrix(32), torch.kron(hadamard_matrix(4), hadamard_matrix(8)))


@pytest.mark.parametrize("dim,m", [(10, 64), (300, 256), (4096, 256), (1000, 4096)])
def test_srht_factors_equal_explicit_rows_of_HD(dim, m):
    """u_j = h_{r_j}·(D_u x) with r_j = (ob_j, oa_j) rows of the padded Sylvester H_N."""
    g = torch.Generator().manual_seed(7)
    mp = SRHTMap(dim, m, g)
    x = torch.randn(5, dim, dtype=torch.float64, generator=g)
    u, v = mp.factors(x)
    n_pad = next_pow2(mp.b) * mp.a
    assert n_pad >= dim and mp.a * mp.s == m
    oa = torch.arange(mp.a).repeat(mp.s)  # output j = (ob index, oa) with oa fastest
    ob = mp.rows.repeat_interleave(mp.a, dim=1)  # (2, m)
    rows = ob * mp.a + oa  # row index of H_N = H_Bp ⊗ H_A
    hn = hadamard_entries(rows, torch.arange(dim), torch.float64)  # (2, m, dim)
    u_ref = (x * mp.signs[0].double()) @ hn[0].T
    v_ref = ((x * mp.signs[1].double()) @ hn[1].T)[:, mp.pair]
    assert torch.allclose(u, u_ref, atol=1e-10) and torch.allclose(v, v_ref, atol=1e-10)


@pytest.mark.parametrize("dim,m", [(10, 64), (300, 256), (5000, 256), (4096, 64), (1000, 4096), (700, 48)])
def test_fold_factors_equal_explicit_rows_of_HD(dim, m):
    """u_j = Σ_k H_F[r_j, k mod F] D_k x_k, built as an explicit (m, dim) ±1 matrix."""
    g = torch.Generator().manual_seed(8)
    mp = FoldMap(dim, m, g)
    x = torch.randn(5, dim, dtype=torch.float64, generator=g)
    u, v = mp.factors(x)
    f = mp.f
    # feature i of the (Q, P) output layout is row p·Q + q of H_F = H_P ⊗ H_Q
    order = torch.arange(f).view(mp.p, mp.q).T.reshape(-1)
    rows_u = order if mp.sel is None else order[mp.sel]
    rows_v = order[mp.pair]
    # the wide path gathers these rows from a natural-order transform: the same map
    assert torch.equal(mp.rows[0], rows_u) and torch.equal(mp.rows[1], rows_v)
    cols = torch.arange(dim) % f
    for q, rows, sign in ((u, rows_u, mp.signs[0]), (v, rows_v, mp.signs[1])):
        explicit = hadamard_entries(rows, cols, torch.float64) * sign.double()  # (m, dim)
        assert explicit.shape == (m, dim) and bool((explicit.abs() == 1).all())
        assert torch.allclose(q, x @ explicit.T, atol=1e-10)
    if f > m:
        assert len(set(mp.sel.tolist())) == m  # rows without replacement


def _spread_rows(mp: SpreadMap, which: int) -> torch.Tensor:
    """The (m, dim) ±1 matrix of one factor of a spread map from its documented definition:
    output j reads row rows[which, j] of the Sylvester matrix at every coordinate's column,
    times the coordinate's sign."""
    h = hadamard_entries(mp.rows[which], mp.cols[which], torch.float64)
    return h * mp.signs[which].double()


def _check_rows(mp, distinct: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Both factors equal x @ (their explicit ±1 rows).T; with ``distinct``, all m rows differ.
    Returns x and u."""
    x = torch.randn(3, mp.dim, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    u, v = mp.factors(x)
    for q, which in ((u, 0), (v, 1)):
        explicit = _spread_rows(mp, which)
        assert bool((explicit.abs() == 1).all())
        assert torch.allclose(q, x @ explicit.T, atol=1e-9)
        if distinct:
            assert torch.unique(explicit, dim=0).shape[0] == mp.m
    return x, u


@pytest.mark.parametrize(
    "dim,m",
    [
        (10, 64),
        (300, 256),
        (5000, 256),
        (4096, 64),
        (1000, 4096),
        (700, 48),
        (577, 1024),
        (4097, 4096),
        (12345, 512),
        (49152, 4096),
    ],
)
def test_spread_factors_equal_explicit_rows(dim, m):
    """Narrow inputs: rows of H_F on runs placed at random rows of the (P, Q) view, all m
    distinct (the fold's zero padding repeats rows); wide: kept rows of H_N with factored
    signs D_(b,a) = R_b C_a, rows without repeats where enough block rows exist."""
    mp = SpreadMap(dim, m, torch.Generator().manual_seed(8))
    # (narrow) enough runs for ρ to span: no repeated projection
    _check_rows(mp, distinct=mp.wide or mp.runs >= 2 * (mp.p.bit_length() - 1))
    if dim == 1000 and m == 4096:  # what the spread fixes: the fold's padded rows repeat
        fold = FoldMap(dim, m, torch.Generator().manual_seed(8))
        cols = torch.arange(dim) % fold.f
        order = torch.arange(fold.f).view(fold.p, fold.q).T.reshape(-1)
        assert torch.unique(hadamard_entries(order, cols), dim=0).shape[0] == 1024


@pytest.mark.parametrize("dim,m", [(5000, 256), (4096, 64), (20000, 512), (1000, 64), (49152, 4096), (300, 256)])
def test_foldspread_factors_equal_explicit_rows(dim, m):
    """Folded into W = 4·next_pow2(m) buckets with a sign per block, then the spread map's wide
    rows of H_W: the documented (rows, cols, signs) give every output, all m rows distinct;
    without anything to fold (dim ≤ W) it is the spread map of width dim."""
    mp = FoldSpreadMap(dim, m, torch.Generator().manual_seed(8))
    assert mp.w == 4 * next_pow2(m) and mp.c == -(-dim // mp.w)
    x, u = _check_rows(mp, distinct=True)
    if mp.c > 1:  # coordinates one bucket apart (k ≡ k' mod W) share a column of H_W
        assert torch.equal(mp.cols[:, 0], mp.cols[:, mp.w])
    else:
        sp = SpreadMap(dim, m, torch.Generator().manual_seed(8))
        assert torch.equal(u, sp.factors(x)[0])


@pytest.mark.parametrize(
    "dim,m", [(576, 4096), (10, 64), (300, 256), (1000, 4096), (700, 48), (64, 64), (577, 1024), (5000, 256)]
)
def test_stack_factors_equal_explicit_rows(dim, m):
    """Output j of a factor is row rows[j] of H_N (N = next_pow2(dim)) times block[j]'s
    signs; all m rows distinct, u keeps every block in order when G·N = m and v pairs with
    it through a permutation, rows drawn without replacement otherwise."""
    mp = StackMap(dim, m, torch.Generator().manual_seed(8))
    x = torch.randn(3, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    u, v = mp.factors(x)
    assert mp.signs.shape == (2, mp.g, dim) and mp.g == -(-m // mp.n)
    for q, which in ((u, 0), (v, 1)):
        explicit = (
            hadamard_entries(mp.rows[which], torch.arange(dim), torch.float64)
            * mp.signs[which][mp.block[which]].double()
        )
        assert torch.allclose(q, x @ explicit.T, atol=1e-9)
        assert (
            torch.unique(torch.stack((mp.block[which], mp.rows[which])), dim=1).shape[1] == m
        )  # no (block, row) twice
        assert torch.unique(explicit, dim=0).shape[0] == m
    if mp.g * mp.n == m:
        assert torch.equal(mp.block[0] * mp.n + torch.arange(m) % mp.n, torch.arange(m)) or mp.g == 1
        assert not torch.equal(mp.rows[1], mp.rows[0])  # v is paired with u at random


def test_stack_blocks_are_orthogonal_transforms():
    """Within a block the rows are orthogonal: Σ over a block's N outputs of (u·x)(u·x')
    is N·(x·x') exactly, for every x (what makes the stacked map at least as good as i.i.d. rows)."""
    dim, m = 576, 4096
    mp = StackMap(dim, m, torch.Generator().manual_seed(1))
    x = torch.randn(5, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    u, _ = mp.factors(x)
    for b in range(mp.g):
        ub = u[:, mp.block[0] == b]
        assert ub.shape[1] == mp.n
        assert torch.allclose(ub @ ub.T, mp.n * (x @ x.T), rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("ignored", [[0, 4, 5, 17], [2, 30], []])  # gathered chunks; runs as slices; all kept
def test_update_logits_chunks_equal_update_with_errors(monkeypatch, ignored):
    """Chunked softmax (ignored rows skipped per chunk) == update() with explicit errors."""
    import updatescope.sketch.fishersketch as fs

    g = torch.Generator().manual_seed(12)
    a = torch.randn(43, 5, dtype=torch.float64, generator=g)
    z = 3 * torch.randn(43, 40, dtype=torch.float64, generator=g)
    y = torch.randint(0, 40, (43,), generator=g)
    y[ignored] = -100
    keep = y != -100
    e = torch.softmax(z[keep], 1) - torch.nn.functional.one_hot(y[keep], 40)
    k3 = int(keep[:4].sum())
    for kind in ("dense", "fold", "spread", "stack", "foldspread"):
        kw = dict(act_dim=5, out_dim=40, sketch_dim=32, seed=4, act_map=kind, error_map=kind)
        ref = us.FisherSketch(**kw).update(a[keep][:k3], e[:k3]).update(a[keep][k3:], e[k3:])
        monkeypatch.setattr(fs, "_LOGIT_ELEMS", 3 * 40)  # 3 rows per softmax step
        sk = us.FisherSketch(**kw).update_logits(a[:4], z[:4], y[:4]).update_logits(a[4:], z[4:], y[4:])
        monkeypatch.setattr(fs, "_LOGIT_ELEMS", 1 << 22)
        assert sk.count == ref.count == 43 - len(ignored)
        assert torch.allclose(sk._sums, ref._sums, rtol=1e-12, atol=1e-12), kind
        assert torch.allclose(sk._diag, ref._diag, rtol=1e-12, atol=1e-12), kind
        assert torch.equal(sk._counts, ref._counts)
        # float32 logits: same chunking, float32 projections, float64 sums
        s32 = us.FisherSketch(**kw).update_logits(a.float(), z.float(), y)
        assert s32._sums.dtype == torch.float64
        assert torch.allclose(s32._sums, sk._sums, rtol=1e-4, atol=1e-4 * float(sk._sums.abs().max())), kind


def test_countsketch_equals_loop_definition():
    g = torch.Generator().manual_seed(3)
    dim, m = 50, 32
    mp = CountSketchMap(dim, m, g)
    x = torch.randn(4, dim, dtype=torch.float64, generator=g)
    c = torch.zeros(2, 4, m, dtype=torch.float64)
    for i in range(2):
        for k in range(dim):
            c[i, :, mp.buckets[i, k]] += mp.signs[i, k] * x[:, k]
    ref = torch.zeros(4, m, dtype=torch.float64)
    for j in range(m):  # circular convolution, the definition behind the FFT
        for t in range(m):
            ref[:, j] += c[0, :, t] * c[1, :, (j - t) % m]
    assert torch.allclose(mp(x), ref * math.sqrt(m), atol=1e-10)


def test_chunked_call_equals_single_call(monkeypatch):
    import updatescope.sketch.maps as maps

    g = torch.Generator().manual_seed(1)
    x = torch.randn(37, 700, dtype=torch.float64)
    for cls in (DenseMap, SRHTMap, FoldMap, SpreadMap, StackMap, CountSketchMap, FoldSpreadMap):
        mp = cls(700, 128, torch.Generator().manual_seed(2))
        whole = mp(x)
        monkeypatch.setattr(maps, "_CHUNK_ELEMS", 3000)  # forces chunks of a few rows
        assert torch.allclose(mp(x), whole, rtol=1e-12, atol=1e-12), cls.kind
        monkeypatch.setattr(maps, "_CHUNK_ELEMS", 1 << 21)
    del g


def test_float32_path_close_to_float64():
    x = torch.randn(6, 3000, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for cls in (DenseMap, SRHTMap, FoldMap, SpreadMap, StackMap, CountSketchMap, FoldSpreadMap):
        mp = cls(3000, 256, torch.Generator().manual_seed(5))
        q64, q32 = mp(x), mp(x.float()).double()
        assert torch.allclose(q32, q64, rtol=1e-4, atol=1e-4 * float(q64.abs().max())), cls.kind


def test_basis_is_a_function_of_the_seed():
    a1, e1 = build_maps(20, 5000, 512, 11, "srht", "srht")
    a2, e2 = build_maps(20, 5000, 512, 11, "srht", "srht")
    a3, _ = build_maps(20, 5000, 512, 12, "srht", "srht")
    x = torch.randn(3, 5000)
    assert torch.equal(e1(x), e2(x))
    assert not torch.equal(a1(x[:, :20]), a3(x[:, :20]))


@pytest.mark.parametrize(
    "cls,dim",
    [
        (DenseMap, 12),
        (SRHTMap, 12),
        (SRHTMap, 300),
        (FoldMap, 12),
        (FoldMap, 300),
        (SpreadMap, 12),
        (SpreadMap, 300),
        (StackMap, 12),
        (StackMap, 300),
        (CountSketchMap, 12),
        (FoldSpreadMap, 300),
    ],
)
def test_map_unbiased_over_seeds(cls, dim):
    """mean over seeds and coordinates of q_j(x) q_j(x') equals (x·x')².

    The kernel value is tested per pair; the tolerance is 4 standard errors of the seed
    average, the SE measured from the same draws (coordinates of one seed are correlated,
    so each seed contributes one number: its coordinate mean).
    """
    gx = torch.Generator().manual_seed(99)
    x = torch.randn(4, dim, dtype=torch.float64, generator=gx)
    x[3] = 0
    x[3, :3] = torch.tensor([2.0, -1.0, 0.5])  # a sparse vector, like a next-token error
    truth = (x @ x.T) ** 2
    draws = []
    for seed in range(300):
        q = cls(dim, 64, torch.Generator().manual_seed(seed))(x)
        draws.append((q @ q.T) / q.shape[1])
    draws = torch.stack(draws)
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(len(draws))
    z = ((mean - truth) / se.clamp_min(1e-12)).abs()
    assert float(z.max()) < 4.0, f"max |z| = {float(z.max()):.2f}"
    # self-pairs with a single nonzero coordinate are exact for every ±1 map
    if cls is not CountSketchMap:
        e = torch.zeros(1, dim, dtype=torch.float64)
        e[0, 1] = 3.0
        q = cls(dim, 64, torch.Generator().manual_seed(0))(e)
        assert torch.allclose(q.abs(), torch.full_like(q, 9.0))
