"""Subspace bases and capture fractions against exact constructions (float64)."""

import numpy as np
import pytest
import torch

from updatescope.locallinear import (
    capture_fraction,
    orthonormal_basis,
    prefix_capture_curve,
    random_basis,
    random_subspace_null,
    random_walk_prefix_null,
    rest_capture_curve,
    top_directions,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_orthonormal_basis_is_orthonormal_and_drops_dependent_vectors():
    v = torch.randn(5, 200, generator=_gen(), dtype=torch.float64)
    stack = torch.cat([v[:3], (v[0] + 2 * v[1])[None], v[3:]])  # 6 vectors, rank 5
    q = orthonormal_basis(stack)
    assert q.shape == (5, 200)
    torch.testing.assert_close(q @ q.T, torch.eye(5, dtype=torch.float64), atol=1e-12, rtol=0)
    # same span as the independent vectors: every input is captured exactly
    for x in stack:
        assert capture_fraction(q, x) == pytest.approx(1.0, abs=1e-12)


def test_capture_inside_is_one_and_orthogonal_is_zero():
    q = orthonormal_basis(torch.randn(4, 100, generator=_gen(1), dtype=torch.float64))
    c = torch.randn(4, generator=_gen(2), dtype=torch.float64)
    inside = c @ q
    outside = torch.randn(100, generator=_gen(3), dtype=torch.float64)
    outside = outside - q.T @ (q @ outside)
    assert capture_fraction(q, inside) == pytest.approx(1.0, abs=1e-12)
    assert capture_fraction(q, outside) == pytest.approx(0.0, abs=1e-12)
    # a mix: exactly the squared-norm share of the inside part
    mix = inside / inside.norm() + outside / outside.norm()
    assert capture_fraction(q, mix) == pytest.approx(0.5, abs=1e-12)


def test_capture_rejects_zero_delta_and_bad_shapes():
    q = random_basis(10, 2, seed=0)
    with pytest.raises(ValueError, match="zero vector"):
        capture_fraction(q, torch.zeros(10))
    with pytest.raises(ValueError, match="basis"):
        capture_fraction(q, torch.ones(11))


def test_prefix_curve_equals_capture_of_each_prefix_basis():
    v = torch.randn(7, 60, generator=_gen(4), dtype=torch.float64)
    v[3] = v[0] - v[1]  # a dependent step must leave the curve flat
    delta = torch.randn(60, generator=_gen(5), dtype=torch.float64)
    curve = prefix_capture_curve(v, delta)
    for j in range(1, 8):
        assert float(curve[j - 1]) == pytest.approx(capture_fraction(orthonormal_basis(v[:j]), delta), abs=1e-12)
    assert curve[3] == pytest.approx(float(curve[2]), abs=1e-12)


def test_rest_capture_of_a_straight_line_is_one_and_of_a_turn_is_zero():
    e = torch.eye(6, dtype=torch.float64)
    line = torch.stack([e[0], e[0], e[0]])
    assert rest_capture_curve(line, 5 * e[0]).tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-12)
    turn = torch.stack([e[0], e[0]])
    rest = rest_capture_curve(turn, 2 * e[0] + 3 * e[1])
    assert float(rest[1]) == pytest.approx(0.0, abs=1e-12)  # remaining 3 e_1 is orthogonal
    assert float(rest[0]) == pytest.approx(1 / 10, abs=1e-12)  # rest e_0 + 3 e_1


def test_top_directions_match_numpy_svd():
    # a stack with a clear 3-dimensional signal plus small noise
    g = _gen(6)
    basis = torch.randn(3, 300, generator=g, dtype=torch.float64)
    stack = torch.randn(20, 3, generator=g, dtype=torch.float64) @ basis
    stack += 1e-3 * torch.randn(20, 300, generator=g, dtype=torch.float64)
    q = top_directions(stack, 3)
    _, _, vt = np.linalg.svd(stack.numpy(), full_matrices=False)
    ref = torch.from_numpy(vt[:3])
    # same subspace: projection matrices agree (3 x 300 comparisons, no D x D)
    torch.testing.assert_close(
        (q @ ref.T).abs().pow(2).sum(), torch.tensor(3.0, dtype=torch.float64), atol=1e-9, rtol=0
    )


def test_random_basis_is_seeded_and_null_matches_r_over_d():
    assert torch.equal(random_basis(50, 3, seed=7), random_basis(50, 3, seed=7))
    assert not torch.equal(random_basis(50, 3, seed=7), random_basis(50, 3, seed=8))
    delta = torch.randn(200, generator=_gen(9), dtype=torch.float64)
    null = random_subspace_null(200, 10, delta, seeds=range(200))
    # E = r/D exactly; 5 measured standard errors of the 200-draw mean as tolerance
    assert abs(null["mean"] - null["expected"]) < 5 * null["se"]


def test_random_walk_prefix_null_is_k_over_t_for_equal_steps():
    # equal step norms in high dimension: E[capture] ~ k/T (steps nearly orthogonal);
    # finite-D fluctuation of each term is O(1/sqrt(D)), so 0.05 is generous at D = 20k
    out = random_walk_prefix_null(torch.ones(40), [4, 10, 20], dim=20_000, seed=0)
    for k, val in out.items():
        assert val["total"] == pytest.approx(k / 40, abs=0.05)
        assert val["rest"] == pytest.approx(0.0, abs=0.01)  # k/D-sized
    again = random_walk_prefix_null(torch.ones(40), [4, 10, 20], dim=20_000, seed=0)
    assert again == out


def test_rest_capture_with_other_steps():
    from updatescope.locallinear import rest_capture_curve

    g = torch.Generator().manual_seed(5)
    steps = torch.randn(4, 30, generator=g, dtype=torch.float64)
    delta = steps.sum(0) + torch.randn(30, generator=g, dtype=torch.float64)
    # default: the vectors are the steps
    torch.testing.assert_close(rest_capture_curve(steps, delta), rest_capture_curve(steps, delta, steps=steps))
    # a basis containing what is left after j steps captures all of it
    other = torch.randn(4, 30, generator=g, dtype=torch.float64)
    rest1 = delta - steps[0]
    other[0] = rest1
    assert float(rest_capture_curve(other, delta, steps=steps)[0]) == pytest.approx(1.0, abs=1e-12)
    assert float(rest_capture_curve(steps, delta)[0]) < 0.99  # the real first step does not
