"""Hessian-vector products against a dense Hessian; Krylov bases on exact quadratics."""

import pytest
import torch
from torch import nn

from updatescope.locallinear import (
    DigitTasks,
    ModelConfig,
    TinyTransformer,
    capture_fraction,
    flat_params,
    hvp,
    krylov_basis,
    make_hvp,
    orthonormal_basis,
    set_flat_params,
)


def _tiny_mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def _dense_hessian(model, loss_fn):
    """Oracle: the full Hessian by autograd.functional on a function of the flat vector."""
    theta0 = flat_params(model)
    shapes = [p.shape for p in model.parameters()]

    def f(theta):
        params, start = {}, 0
        for (name, p), s in zip(model.named_parameters(), shapes):
            n = p.numel()
            params[name] = theta[start : start + n].view(s)
            start += n
        return loss_fn(lambda x: torch.func.functional_call(model, params, (x,)))

    return torch.autograd.functional.hessian(f, theta0)


def test_hvp_matches_dense_hessian_on_tiny_model():
    model = _tiny_mlp()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 3, generator=g, dtype=torch.float64)
    y = torch.randn(8, 2, generator=g, dtype=torch.float64)
    loss = lambda fwd: ((fwd(x) - y) ** 2).mean()
    h = _dense_hessian(model, loss)  # (D, D), D = 26: the oracle only, never in the library
    for seed in range(3):
        v = torch.randn(h.shape[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        torch.testing.assert_close(hvp(lambda m: loss(m), model, v), h @ v, atol=1e-12, rtol=1e-10)


def test_krylov_basis_of_quadratic_contains_gradient_descent_displacement():
    # L(theta) = 1/2 theta^T A theta - b^T theta, A SPD with distinct eigenvalues
    g = torch.Generator().manual_seed(2)
    d = 40
    m = torch.randn(d, d, generator=g, dtype=torch.float64)
    a = m @ m.T / d + 0.1 * torch.eye(d, dtype=torch.float64)
    b = torch.randn(d, generator=g, dtype=torch.float64)
    theta0 = torch.randn(d, generator=g, dtype=torch.float64)
    grad = lambda th: a @ th - b
    eta = 0.5 / float(torch.linalg.eigvalsh(a)[-1])
    for k in (1, 3, 8):
        th = theta0.clone()
        for _ in range(k):
            th = th - eta * grad(th)
        q = krylov_basis(lambda v: a @ v, grad(theta0), k)
        assert q.shape == (k, d)
        assert capture_fraction(q, th - theta0) == pytest.approx(1.0, abs=1e-10)
        if k <= 3:  # negative control: k+1 steps escape the k-dim basis (for larger k the
            # escaping part is O(eta^k) and falls below rounding)
            th2 = th - eta * grad(th)
            assert capture_fraction(q, th2 - theta0) < 1 - 1e-8  # tolerance for "inside" is 1e-10


def test_krylov_basis_equals_power_sequence_span_on_tiny_model():
    model = _tiny_mlp(3)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 3, generator=g, dtype=torch.float64)
    y = torch.randn(16, 2, generator=g, dtype=torch.float64)
    loss = lambda m: ((m(x) - y) ** 2).mean()
    h = _dense_hessian(model, lambda fwd: ((fwd(x) - y) ** 2).mean())
    from updatescope.locallinear import flat_grad

    grad = flat_grad(loss(model), model).detach()
    q = krylov_basis(make_hvp(loss, model), grad, 4)
    powers = [grad]
    for _ in range(3):
        powers.append(h @ powers[-1])
    ref = orthonormal_basis(torch.stack(powers))
    assert q.shape == ref.shape == (4, grad.numel())
    # same span: each reference direction is fully captured
    for r in ref:
        assert capture_fraction(q, r) == pytest.approx(1.0, abs=1e-8)


def test_hvp_on_tiny_transformer_is_symmetric_and_matches_finite_differences():
    # the synthetic model supports double backward (explicit attention, no fused kernel)
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(n_layer=1, d_model=16, n_head=2, seq_len=3)).double()
    tasks = DigitTasks(seq_len=3, batch_size=4)
    loss = lambda m: tasks.mix_loss(m, 0)
    d = flat_params(model).numel()
    g = torch.Generator().manual_seed(1)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    hv, hw = hvp(loss, model, v), hvp(loss, model, w)
    assert float(w @ hv) == pytest.approx(float(v @ hw), rel=1e-9)
    # central difference of the gradient along v
    from updatescope.locallinear import flat_grad

    theta, eps = flat_params(model), 1e-5
    set_flat_params(model, theta + eps * v)
    gp = flat_grad(loss(model), model).detach()
    set_flat_params(model, theta - eps * v)
    gm = flat_grad(loss(model), model).detach()
    set_flat_params(model, theta)
    fd = (gp - gm) / (2 * eps)
    # central differences err by O(eps^2) per entry; compare in norm
    assert float((hv - fd).norm() / hv.norm()) < 1e-6


def test_top_eigenvalue_matches_dense_hessian():
    from updatescope.locallinear import top_eigenvalue

    model = _tiny_mlp()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 3, generator=g, dtype=torch.float64)
    y = torch.randn(16, 2, generator=g, dtype=torch.float64)
    loss = lambda fwd: ((fwd(x) - y) ** 2).mean()
    h = _dense_hessian(model, loss)  # oracle (26 x 26)
    ev = torch.linalg.eigvalsh(h)
    top = ev[ev.abs().argmax()]
    lam, v = top_eigenvalue(
        make_hvp(lambda m: loss(m), model), h.shape[0], iters=2000, seed=0, rtol=1e-12, dtype=torch.float64
    )
    assert lam == pytest.approx(float(top), rel=1e-6)
    torch.testing.assert_close(h @ v, lam * v, atol=1e-5, rtol=1e-4)
    # a few iterations give a lower bound on |lambda_max|, never more
    lam3, _ = top_eigenvalue(make_hvp(lambda m: loss(m), model), h.shape[0], iters=3, seed=1, dtype=torch.float64)
    assert abs(lam3) <= abs(float(top)) * (1 + 1e-9)


def test_top_eigenvalue_refuses_bad_settings():
    from updatescope.errors import InputError
    from updatescope.locallinear import top_eigenvalue

    with pytest.raises(InputError):
        top_eigenvalue(lambda v: v, 3, iters=0)


def test_spectral_radius_converges_on_a_separated_spectrum_against_the_dense_oracle():
    from updatescope.locallinear import spectral_radius

    model = _tiny_mlp()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(16, 3, generator=g, dtype=torch.float64)
    y = torch.randn(16, 2, generator=g, dtype=torch.float64)
    loss = lambda fwd: ((fwd(x) - y) ** 2).mean()
    h = _dense_hessian(model, loss)  # oracle
    rho = float(torch.linalg.eigvalsh(h).abs().max())
    res = spectral_radius(
        make_hvp(lambda m: loss(m), model), h.shape[0], iters=5000, rtol=1e-10, residual_tol=1e-4, dtype=torch.float64
    )
    assert res.converged and res.residual <= 1e-4 and res.rel_change <= 1e-10
    assert res.radius == pytest.approx(rho, rel=1e-6)


def test_spectral_radius_flags_a_power_iteration_that_did_not_converge():
    """Eigenvalues +5 and -5 of equal magnitude: the iterate stays a mixture of both
    eigenvectors, so its residual never falls and the draw is flagged, whatever the budget;
    a slow but separated spectrum with too few iterations is flagged too."""
    from updatescope.locallinear import spectral_radius

    pair = torch.diag(torch.tensor([5.0, -5.0, 1.0, 0.5], dtype=torch.float64))
    res = spectral_radius(lambda v: pair @ v, 4, iters=500, dtype=torch.float64)
    assert not res.converged and res.iters == 500 and res.residual > 0.05
    assert res.radius <= 5.0 + 1e-9  # |v^T H v| never exceeds rho
    slow = torch.diag(torch.tensor([5.0, 4.99, 1.0], dtype=torch.float64))
    few = spectral_radius(lambda v: slow @ v, 3, iters=3, dtype=torch.float64)
    assert not few.converged and few.iters == 3
    sep = torch.diag(torch.tensor([5.0, -1.0, 0.5], dtype=torch.float64))
    ok = spectral_radius(lambda v: sep @ v, 3, iters=500, dtype=torch.float64)
    assert ok.converged and ok.radius == pytest.approx(5.0, rel=1e-3)
