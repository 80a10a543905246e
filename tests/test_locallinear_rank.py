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
    g = torch.randn(8, 3, generator=torch.Generator().manual_seed(3)) @ torch.randn(3, 4000, generator=torch.Generator().manual_seed(4))
    noise = gaussian_like(g, seed=0)
    torch.testing.assert_close(noise.norm(dim=1), g.norm(dim=1), rtol=1e-5, atol=0)
    assert effective_rank(g).entropy_rank < 3.01
    assert effective_rank(noise).entropy_rank > 7.0  # nearly orthogonal rows in D = 4000
    with pytest.raises(ValueError, match="zero"):
        effective_rank(torch.zeros(3, 10))
