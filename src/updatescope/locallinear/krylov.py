"""Hessian-vector products and Krylov bases {g, Hg, H^2 g, ...}.

For gradient descent on a quadratic, theta_k - theta_0 = -sum_j ((I - eta H)^j) eta g_0,
a polynomial in H applied to g_0, so the first k steps lie in K_k(H, g) =
span{g, Hg, ..., H^{k-1} g}.  Near a minimum of a smooth loss the same holds to first
order; the Krylov basis is how a *moving* subspace is built from local information only.

HVPs use double backward (Pearlmutter 1994): Hv = d/dtheta <grad L, v>.  This works on
any nn.Module whose forward is twice differentiable; it costs about two backward passes
and never forms H.  The basis is built with Arnoldi (each new H q orthogonalised twice
against all previous directions), which spans the same space as the power sequence but
stays numerically independent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.params import flat_grad, swapped_params
from updatescope.locallinear.subspaces import _gs_step

__all__ = [
    "hvp",
    "make_hvp",
    "krylov_basis",
    "krylov_curves",
    "matched_horizon",
    "top_eigenvalue",
    "PowerIteration",
    "spectral_radius",
]


def hvp(loss_fn: Callable[[nn.Module], Tensor], model: nn.Module, v: Tensor) -> Tensor:
    """H v for the Hessian of ``loss_fn(model)`` at the current parameters.  v (D,) -> (D,)."""
    g = flat_grad(loss_fn(model), model, create_graph=True)
    if v.shape != g.shape:
        raise InputError(f"v has shape {tuple(v.shape)}, expected {tuple(g.shape)}")
    params = [p for p in model.parameters() if p.requires_grad]
    hv = torch.autograd.grad(g @ v.to(g.dtype), params, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if h is None else h).reshape(-1) for p, h in zip(params, hv)]).detach()


def make_hvp(loss_fn: Callable[[nn.Module], Tensor], model: nn.Module) -> Callable[[Tensor], Tensor]:
    """A matvec v -> H v bound to ``loss_fn`` and the model's current parameters."""
    return lambda v: hvp(loss_fn, model, v)


def krylov_basis(matvec: Callable[[Tensor], Tensor], g: Tensor, k: int, rtol: float = 1e-10) -> Tensor:
    """Orthonormal basis of K_k(H, g) = span{g, Hg, ..., H^{k-1} g}.  -> (r, D), r <= k.

    ``matvec`` maps (D,) -> (D,).  Stops early if the space becomes invariant (the next
    direction has a residual below ``rtol`` of its norm).  Returns float64 rows, nested:
    the first j rows span K_j.
    """
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}")
    q = torch.empty(k, g.shape[0], dtype=torch.float64)
    u = _gs_step(q[:0], g.double(), rtol)
    if u is None:
        raise InputError("the starting gradient is zero; the Krylov space is empty")
    q[0] = u
    r = 1
    while r < k:
        w = matvec(q[r - 1].to(g.dtype)).double()
        u = _gs_step(q[:r], w, rtol)
        if u is None:
            break
        q[r] = u
        r += 1
    return q[:r].clone()


def krylov_curves(basis: Tensor, steps: Tensor, tag: str = "") -> dict[str, list[float]]:
    """How well a Krylov basis holds a trajectory, at matched horizons k = 1 .. min(len(steps), r).

    ``basis`` (r, D): orthonormal, nested rows (:func:`krylov_basis`); ``steps`` (k, D): the
    updates theta_j - theta_{j-1}.  Returns ``{tag}capture``: the fraction of
    ||theta_k - theta_0||² in K_k (1 for gradient descent on a quadratic), and
    ``{tag}overlap``: the principal-angle overlap of span(u_1..u_k) with K_k (mean cos²;
    1 when the k updates span K_k).
    """
    from updatescope.locallinear.capture import capture_fraction
    from updatescope.locallinear.drift import subspace_overlap
    from updatescope.locallinear.subspaces import orthonormal_basis

    if basis.ndim != 2 or steps.ndim != 2 or basis.shape[1] != steps.shape[1]:
        raise InputError(
            f"basis (r, D) and steps (k, D) must share D, got {tuple(basis.shape)} and {tuple(steps.shape)}"
        )
    cap, ov = [], []
    disp = torch.zeros(steps.shape[1], dtype=torch.float64)
    for k in range(1, min(steps.shape[0], basis.shape[0]) + 1):
        disp += steps[k - 1].double()
        cap.append(capture_fraction(basis[:k], disp))
        ov.append(subspace_overlap(orthonormal_basis(steps[:k]), basis[:k]))
    return {f"{tag}capture": cap, f"{tag}overlap": ov}


def matched_horizon(
    model: nn.Module,
    loss_fn: Callable[[nn.Module], Tensor],
    theta: Tensor,
    eta: float,
    k: int,
    sgd_steps: Tensor,
    sgd_start: Tensor | None = None,
) -> dict[str, Any]:
    """Krylov at a matched horizon from ``theta``: K_k(H, g_0) of the fixed ``loss_fn`` against
    deterministic full-batch GD on it at step ``eta`` (``gd_`` curves, exact on a quadratic)
    and against ``sgd_steps`` (the first k real updates, ``sgd_`` curves), by
    :func:`krylov_curves`.  ``sgd_start`` (D,): also K_k(H, sgd_start) against the real steps
    (``sgd_g0_`` curves, "dim_g0"), e.g. the first real update, so the null contains the initial
    gradient direction.  -> {"dim", "gd_loss" (before, after the k GD steps), curves}.
    The model's parameters are left as they were."""
    from updatescope.locallinear.trajectory import PhaseConfig, record_phase

    with swapped_params(model, theta):
        loss0 = loss_fn(model)
        g0 = flat_grad(loss0, model).detach()
        loss0 = float(loss0.detach())
        basis = krylov_basis(make_hvp(loss_fn, model), g0, k)
        extra: dict[str, Any] = {}
        if sgd_start is not None:
            b0 = krylov_basis(make_hvp(loss_fn, model), sgd_start.to(g0.dtype), k)
            extra = {"dim_g0": int(b0.shape[0]), **krylov_curves(b0, sgd_steps[:k], "sgd_g0_")}
        gd = record_phase(
            model,
            lambda m, i: loss_fn(m),
            PhaseConfig(steps=k, lr=eta, optimizer="sgd"),
            dense_steps=k,
            snapshot_every=k,
            phase="full-batch GD",
        )
    with swapped_params(model, gd.end), torch.no_grad():
        loss_gd = float(loss_fn(model))
    return {
        "dim": int(basis.shape[0]),
        "gd_loss": [loss0, loss_gd],
        **krylov_curves(basis, gd.updates, "gd_"),
        **krylov_curves(basis, sgd_steps[:k], "sgd_"),
        **extra,
    }


def top_eigenvalue(
    matvec: Callable[[Tensor], Tensor],
    dim: int,
    iters: int = 30,
    seed: int = 0,
    rtol: float = 1e-3,
    dtype: torch.dtype = torch.float32,
) -> tuple[float, Tensor]:
    """Largest-magnitude eigenvalue of a symmetric operator by power iteration.  -> (lambda, v (D,)).

    ``matvec`` maps (D,) -> (D,) (e.g. :func:`make_hvp`).  The start vector is Gaussian from
    a local generator seeded by ``seed``; the Rayleigh quotient v^T H v of the unit iterate
    is returned once it changes by less than ``rtol`` (relative) or after ``iters`` steps.
    It converges to the eigenvalue of largest |lambda| (a lower bound on it while not
    converged), which is what the GD stability bound eta * lambda_max < 2 needs near a
    minimum, where the top of the spectrum is positive.
    """
    if iters < 1 or dim < 1:
        raise InputError(f"need iters >= 1 and dim >= 1, got iters={iters}, dim={dim}")
    v = torch.randn(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    v /= v.norm()
    lam = float("nan")
    for _ in range(iters):
        hv = matvec(v.to(dtype)).double()
        new = float(v @ hv)
        norm = float(hv.norm())
        if norm == 0.0:
            return 0.0, v
        v = hv / norm
        if lam == lam and abs(new - lam) <= rtol * abs(new):
            lam = new
            break
        lam = new
    return lam, v


@dataclass(frozen=True)
class PowerIteration:
    """One power iteration for the spectral radius rho(H) = max |lambda_i|, with its checks."""

    radius: float  # |v^T H v| of the last unit iterate v (a lower bound on rho while not converged)
    rayleigh: float  # v^T H v, signed
    iters: int  # matvecs used
    rel_change: float  # |rq_t - rq_{t-1}| / |rq_t| at the last step
    residual: float  # ||H v - rq v|| / |rq|: 0 for an eigenvector
    converged: bool  # rel_change <= rtol and residual <= residual_tol

    def as_dict(self) -> dict:
        return asdict(self)


def spectral_radius(
    matvec: Callable[[Tensor], Tensor],
    dim: int,
    iters: int = 100,
    seed: int = 0,
    rtol: float = 1e-3,
    residual_tol: float = 0.05,
    dtype: torch.dtype = torch.float32,
) -> PowerIteration:
    """Spectral radius of a symmetric operator by power iteration, with a convergence check.

    ``matvec`` maps (D,) -> (D,).  From a Gaussian start (local generator seeded by ``seed``)
    the unit iterate v_t = H v_{t-1} / ||H v_{t-1}|| tends to an eigenvector of the eigenvalue
    of largest |lambda| whenever that one is separated from the rest; its Rayleigh quotient
    rq = v^T H v then tends to +-rho.  The iteration stops once both checks hold: the relative
    change of rq is at most ``rtol`` and the eigenvector residual ||H v - rq v|| / |rq| is at
    most ``residual_tol``; after ``iters`` matvecs without both it is returned with
    ``converged=False``.  A small relative change alone is not enough: when two eigenvalues of
    opposite sign have nearly the same magnitude, rq moves slowly while v is still a mixture,
    and |rq| can be far below rho; the residual catches that case.
    """
    if iters < 1 or dim < 1:
        raise InputError(f"need iters >= 1 and dim >= 1, got iters={iters}, dim={dim}")
    if not (rtol > 0 and residual_tol > 0):
        raise InputError(f"rtol and residual_tol must be > 0, got {rtol}, {residual_tol}")
    v = torch.randn(dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    v /= v.norm()
    rq_prev, rel, res, rq = float("nan"), float("inf"), float("inf"), 0.0
    for t in range(1, iters + 1):
        hv = matvec(v.to(dtype)).double()
        rq = float(v @ hv)
        norm = float(hv.norm())
        if norm == 0.0:  # H v = 0: v is an eigenvector of eigenvalue 0 (rho = 0 from this start)
            return PowerIteration(0.0, 0.0, t, 0.0, 0.0, True)
        res = float((hv - rq * v).norm()) / abs(rq) if rq != 0.0 else float("inf")
        rel = abs(rq - rq_prev) / abs(rq) if rq_prev == rq_prev and rq != 0.0 else float("inf")
        if rel <= rtol and res <= residual_tol:
            return PowerIteration(abs(rq), rq, t, rel, res, True)
        rq_prev = rq
        v = hv / norm
    return PowerIteration(abs(rq), rq, iters, rel, res, False)
