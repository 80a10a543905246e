"""Principal angles against scipy.linalg.subspace_angles, overlap edge cases."""

import numpy as np
import pytest
import scipy.linalg
import torch

from updatescope.locallinear import orthonormal_basis, principal_angles, subspace_overlap


@pytest.mark.parametrize("p,q,seed", [(3, 3, 0), (2, 5, 1), (6, 4, 2), (1, 1, 3)])
def test_principal_angles_match_scipy_on_random_subspaces(p, q, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(p, 40, generator=g, dtype=torch.float64)
    b = torch.randn(q, 40, generator=g, dtype=torch.float64)
    ours = principal_angles(orthonormal_basis(a), orthonormal_basis(b))
    ref = np.sort(scipy.linalg.subspace_angles(a.T.numpy(), b.T.numpy()))
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-12)


def test_tiny_angles_are_accurate():
    # nearly identical planes: arccos of the cosine would lose half the digits here
    g = torch.Generator().manual_seed(4)
    a = torch.randn(3, 30, generator=g, dtype=torch.float64)
    b = a + 1e-9 * torch.randn(3, 30, generator=g, dtype=torch.float64)
    ours = principal_angles(orthonormal_basis(a), orthonormal_basis(b))
    ref = np.sort(scipy.linalg.subspace_angles(a.T.numpy(), b.T.numpy()))
    np.testing.assert_allclose(ours.numpy(), ref, rtol=1e-5, atol=1e-15)
    assert ours.max() > 0  # not flushed to zero by the cosine route


def test_overlap_identity_orthogonal_and_nested():
    g = torch.Generator().manual_seed(5)
    q = orthonormal_basis(torch.randn(4, 50, generator=g, dtype=torch.float64))
    assert subspace_overlap(q, q) == pytest.approx(1.0, abs=1e-12)
    assert subspace_overlap(q[:2], q[2:]) == pytest.approx(0.0, abs=1e-12)
    assert subspace_overlap(q[:2], q) == pytest.approx(1.0, abs=1e-12)  # nested
    # overlap = mean cos^2 of the principal angles
    r = orthonormal_basis(torch.randn(3, 50, generator=g, dtype=torch.float64))
    ang = principal_angles(q, r)
    assert subspace_overlap(q, r) == pytest.approx(float(torch.cos(ang).pow(2).mean()), abs=1e-12)
