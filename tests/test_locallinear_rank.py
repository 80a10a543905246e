"""Effective rank against numpy SVD and on stacks of known rank."""

import numpy as np
import pytest
import torch

from updatescope.locallinear import effective_rank, gaussian_like, orthonormal_basis, singular_values


def test_singular_values_match_numpy():
    g = torch.randn(6, 80, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    np.testing.assert_allclose(singular_values(g).numpy(), np.linalg.svd(g.numpy(), compute_uv=False), rtol=1e-10)


def test_rank_one_and_orthogonal_equal_norm_stacks():
    v = torch.randn(50, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    one = torch.stack([c * v for c in (1.0, -2.0, 0.5, 3.0)])
    st = effective_rank(one)
    assert st.entropy_rank == pytest.approx(1.0, abs=1e-6)
    assert st.stable_rank == pytest.approx(1.0, abs=1e-10)
    q = orthonormal_basis(torch.randn(5, 50, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    st = effective_rank(3 * q)
    assert st.entropy_rank == pytest.approx(5.0, abs=1e-9)
    assert st.stable_rank == pytest.approx(5.0, abs=1e-9)


def test_gaussian_baseline_keeps_row_norms_and_is_near_full_rank():
    g = torch.randn(8, 3, generator=torch.Generator().manual_seed(3)) @ torch.randn(
        3, 4000, generator=torch.Generator().manual_seed(4)
    )
    noise = gaussian_like(g, seed=0)
    torch.testing.assert_close(noise.norm(dim=1), g.norm(dim=1), rtol=1e-5, atol=0)
    assert effective_rank(g).entropy_rank < 3.01
    assert effective_rank(noise).entropy_rank > 7.0  # nearly orthogonal rows in D = 4000
    with pytest.raises(ValueError, match="zero"):
        effective_rank(torch.zeros(3, 10))


def test_chunked_gram_and_the_unit_rows_from_one_gram():
    from updatescope.locallinear import effective_ranks, gram

    g = torch.randn(6, 1000, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    g[2] *= 40.0  # one long row: the unit rows must not see it
    torch.testing.assert_close(gram(g, chunk=7), g @ g.T, rtol=1e-12, atol=1e-9)
    raw, unit = effective_ranks(g.float())
    want = effective_rank(g.float())
    assert raw.entropy_rank == pytest.approx(want.entropy_rank, rel=1e-9)
    assert raw.stable_rank == pytest.approx(want.stable_rank, rel=1e-9)
    u = g / g.norm(dim=1, keepdim=True)
    assert unit.stable_rank == pytest.approx(effective_rank(u).stable_rank, rel=1e-6)
    assert unit.entropy_rank == pytest.approx(effective_rank(u).entropy_rank, rel=1e-6)
    # a zero row stays zero among unit rows
    g[4] = 0.0
    _, unit0 = effective_ranks(g)
    assert unit0.n == 6 and unit0.entropy_rank < unit.entropy_rank
