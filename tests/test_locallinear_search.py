"""Best-of-N random search: theory on a linear toy, seeds, per-tensor independence."""

import math

import numpy as np
import pytest
import torch

from updatescope.locallinear import (
    best_of_n,
    candidate_direction,
    capture_fraction,
    expected_max_normal,
    orthonormal_basis,
)


def test_expected_max_normal_exact_values_and_monte_carlo():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-8)
    z = np.random.default_rng(0).standard_normal((20_000, 16)).max(axis=1)
    se = z.std(ddof=1) / math.sqrt(len(z))
    assert abs(z.mean() - expected_max_normal(16)) < 5 * se  # 5 measured SEs
    assert expected_max_normal(16) < math.sqrt(2 * math.log(16))  # the asymptote overshoots


def _linear_gain_samples(dim, n, sigma, reps, gnorm=1.0):
    """Held-out gains of best-of-n on f(theta) = g.theta (select and held-out identical)."""
    g = torch.randn(dim, generator=torch.Generator().manual_seed(dim), dtype=torch.float64)
    g = g / g.norm() * gnorm
    f = lambda th: float(g @ th)
    theta = torch.zeros(dim, dtype=torch.float64)
    return np.array([best_of_n(theta, f, f, sigma, n, seed=r).gain_heldout for r in range(reps)])


@pytest.mark.parametrize("dim", [20, 2000])
def test_best_of_n_gain_on_linear_toy_matches_theory_independent_of_dimension(dim):
    # gain = sigma * ||g|| * max_i N(0,1): expectation sigma ||g|| E[max_N], for any D.
    n, sigma, reps = 8, 0.1, 300
    gains = _linear_gain_samples(dim, n, sigma, reps)
    se = gains.std(ddof=1) / math.sqrt(reps)
    expected = sigma * expected_max_normal(n)
    assert abs(gains.mean() - expected) < 4 * se  # 4 measured standard errors


def test_candidates_reproduce_from_seed_and_differ_across_tensors_and_candidates():
    numels = [50, 50, 7]
    a = candidate_direction(numels, seed=3, candidate=5)
    assert torch.equal(a, candidate_direction(numels, seed=3, candidate=5))
    assert not torch.equal(a, candidate_direction(numels, seed=3, candidate=6))
    assert not torch.equal(a, candidate_direction(numels, seed=4, candidate=5))
    # equal-sized tensors get independent streams, not the same noise twice
    first, second = a[:50], a[50:100]
    assert not torch.equal(first, second)
    assert abs(float(first @ second)) < 4 * 50**0.5  # |N(0, 50)| under 4 sd


def test_search_records_match_regenerated_candidates():
    theta = torch.zeros(30, dtype=torch.float64)
    w = torch.arange(30, dtype=torch.float64)
    f = lambda th: float((th - w).pow(2).sum())
    res = best_of_n(theta, f, f, sigma=0.5, n=12, seed=9, numels=[10, 20])
    for i in (0, res.best, 11):
        cand = theta + 0.5 * candidate_direction([10, 20], 9, i).double()
        assert res.select[i] == pytest.approx(f(cand), rel=1e-6)
    again = best_of_n(theta, f, f, sigma=0.5, n=12, seed=9, numels=[10, 20])
    assert again.select == res.select and again.best == res.best
    sel, held = res.best_of(12)
    assert sel == pytest.approx(res.gain_select) and held == pytest.approx(res.gain_heldout)


def test_subspace_candidates_stay_in_the_subspace():
    q = orthonormal_basis(torch.randn(3, 40, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    for i in range(5):
        z = candidate_direction([40], seed=1, candidate=i, basis=q)
        assert capture_fraction(q, z.double()) == pytest.approx(1.0, abs=1e-6)  # float32 rows


def test_aligned_small_subspace_beats_larger_one_at_equal_step_norm():
    # signal density: g lies in a 2-dim subspace U; V = U + 48 random directions.
    # At equal expected step norm the per-direction signal in V is diluted by sqrt(50/2).
    rng = torch.Generator().manual_seed(1)
    dim = 500
    u = orthonormal_basis(torch.randn(2, dim, generator=rng, dtype=torch.float64))
    v = orthonormal_basis(torch.cat([u, torch.randn(48, dim, generator=rng, dtype=torch.float64)]))
    g = u[0] + u[1]
    f = lambda th: float(g @ th)
    theta = torch.zeros(dim, dtype=torch.float64)
    radius = 1.0
    gu = [best_of_n(theta, f, f, radius / math.sqrt(2), 8, seed=s, basis=u).gain_heldout for s in range(100)]
    gv = [best_of_n(theta, f, f, radius / math.sqrt(50), 8, seed=s, basis=v).gain_heldout for s in range(100)]
    # theory: ratio sqrt(50/2) = 5; require a clear win (> 5 combined SEs)
    diff = np.mean(gu) - np.mean(gv)
    se = math.sqrt(np.var(gu, ddof=1) / 100 + np.var(gv, ddof=1) / 100)
    assert diff > 5 * se


def test_best_over_norms_chooses_the_norm_on_selection_and_returns_its_perturbation():
    from updatescope.locallinear.search import best_over_norms, candidate_direction

    g = torch.Generator().manual_seed(3)
    target = torch.randn(40, generator=g)

    def loss(u):
        return float(((u - target) ** 2).sum())

    origin = torch.zeros(40)
    j, runs, u = best_over_norms(origin, loss, loss, [0.01, 0.5, 3.0], 2.0, 6, 11, [10, 30])
    assert len(runs) == 3 and j == max(range(3), key=lambda i: runs[i].gain_select)
    for rho, r in zip([0.01, 0.5, 3.0], runs):
        assert r.sigma == pytest.approx(rho * 2.0 / 40**0.5)
    best = runs[j]
    assert torch.equal(u, best.sigma * candidate_direction([10, 30], 11, best.best))
    assert loss(u) == pytest.approx(min(best.select))
