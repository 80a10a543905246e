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

import torch
from torch import Tensor, nn

from updatescope.locallinear.params import flat_grad
from updatescope.locallinear.subspaces import _gs_step
from updatescope.errors import InputError

__all__ = ["hvp", "make_hvp", "krylov_basis"]


def hvp(loss_fn: Callable[[nn.Module], Tensor], model: nn.Module, v: Tensor) -> Tensor:
    """H v for the Hessian of ``loss_fn(model)`` at the current parameters.  v (D,) -> (D,)."""
    g = flat_grad(loss_fn(model), model, create_graph=True)
    if v.shape != g.shape:
        raise InputError(f"v has shape {tuple(v.shape)}, expected {tuple(g.shape)}")
    params = [p for p in model.parameters() if p.requires_grad]
    hv = torch.autograd.grad(g @ v.to(g.dtype), params, allow_unused=True)
    return torch.cat(
        [(torch.zeros_like(p) if h is None else h).reshape(-1) for p, h in zip(params, hv)]
    ).detach()


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
