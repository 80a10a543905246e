"""Exact full-network decomposition: against materialised Fishers, the identity, the bound."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.network import capture_linear_grads, decompose, exact_block_products, exact_network_alignment


class TokenNet(nn.Module):
    """Position-wise MLP: per-token gradients are each token's own loss gradient."""

    def __init__(self, d: int = 4, h: int = 5, k: int = 3) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


class SeqNet(nn.Module):
    """Weights shared over positions, causal mixing (cumulative mean) between them."""

    def __init__(self, d: int = 3, h: int = 4, k: int = 3) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T, k)
        y = self.fc1(x)
        t = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return self.fc2(torch.tanh(y.cumsum(1) / t))


def per_example_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """Oracle: autograd gradient of each example's summed loss w.r.t. each Linear weight.  [(n, k·d)]"""
    ws = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    rows = [[] for _ in ws]
    for i in range(x.shape[0]):
        z = model(x[i : i + 1])
        loss = nn.functional.cross_entropy(
            z.reshape(-1, z.shape[-1]), y[i : i + 1].reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        for r, g in zip(rows, torch.autograd.grad(loss, ws)):
            r.append(g.reshape(-1))
    return [torch.stack(r) for r in rows]


def materialised_products(gs: list[torch.Tensor], gt: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Oracle: (L, L) Frobenius products of the materialised empirical Fisher blocks, plus the
    U-statistic squared norms n²‖F_bc‖² − Σ_i ‖g_ib‖²‖g_ic‖² over n(n−1)."""

    def fisher(g):
        x = torch.cat(g, 1)
        return x.T @ x / x.shape[0]

    fs, ft = fisher(gs), fisher(gt)
    edges = [0]
    for g in gs:
        edges.append(edges[-1] + g.shape[1])
    L = len(gs)
    cross, sqs, sqt, us = (torch.zeros(L, L, dtype=torch.float64) for _ in range(4))
    n = gs[0].shape[0]
    for b in range(L):
        for c in range(L):
            bs, cs = slice(edges[b], edges[b + 1]), slice(edges[c], edges[c + 1])
            cross[b, c] = (fs[bs, cs] * ft[bs, cs]).sum()
            sqs[b, c] = fs[bs, cs].square().sum()
            sqt[b, c] = ft[bs, cs].square().sum()
            selfp = (gs[b].square().sum(1) * gs[c].square().sum(1)).sum()
            us[b, c] = (n * n * sqs[b, c] - selfp) / (n * (n - 1))
    return cross, sqs, sqt, us, (fs * ft).sum(), fs.square().sum(), ft.square().sum()


def _task(model, n, seed, seq):
    g = torch.Generator().manual_seed(seed)
    if seq:
        x = torch.randn(n, 5, 3, generator=g, dtype=torch.float64)
        y = torch.randint(0, 3, (n, 5), generator=g)
        y[:, 0] = IGNORE_INDEX  # an unlabelled prefix position still carries later losses' gradient
        x[0, 3:] = 0
        y[0, 3:] = IGNORE_INDEX  # a short, padded sequence
    else:
        x = torch.randn(n, 4, generator=g, dtype=torch.float64)
        y = torch.randint(0, 3, (n,), generator=g)
    return x, y


@pytest.mark.parametrize("seq", [False, True])
def test_exact_matches_materialised_fisher(seq):
    torch.manual_seed(0)
    model = (SeqNet() if seq else TokenNet()).double()
    (xs, ys), (xt, yt) = _task(model, 7, 1, seq), _task(model, 6, 2, seq)
    gs, gt = per_example_grads(model, xs, ys), per_example_grads(model, xt, yt)
    cs, ct = capture_linear_grads(model, ["fc*"], xs, ys), capture_linear_grads(model, ["fc*"], xt, yt)
    fac_s = [cs.sequences()[n] if seq else cs.tokens()[n] for n in ("fc1", "fc2")]
    fac_t = [ct.sequences()[n] if seq else ct.tokens()[n] for n in ("fc1", "fc2")]
    cross, sqs, sqt, us, full, fulls, fullt = materialised_products(gs, gt)
    for blocks_s, blocks_t in ((fac_s, fac_t), (gs, gt)):  # factored layers, and dense gradients
        v = exact_block_products(blocks_s, blocks_t, self_pairs=True)
        for got, want in ((v.cross, cross), (v.sq_s, sqs), (v.sq_t, sqt)):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-14)
        for got, want in ((v.full_cross, full), (v.full_sq_s, fulls), (v.full_sq_t, fullt)):
            assert math.isclose(got, float(want), rel_tol=1e-10)
        u = exact_block_products(blocks_s, blocks_t, self_pairs=False)
        torch.testing.assert_close(u.sq_s, us, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(u.cross, cross, rtol=1e-10, atol=1e-14)  # cross terms have no self-pairs
    al = exact_network_alignment(fac_s, fac_t, names=("fc1", "fc2"), self_pairs=True)
    assert math.isclose(al.full, float(full / (fulls * fullt).sqrt()), rel_tol=1e-10)
    bd = cross.diagonal().sum() / (sqs.diagonal().sum() * sqt.diagonal().sum()).sqrt()
    assert math.isclose(al.block_diagonal, float(bd), rel_tol=1e-10)


def _random_blocks(seed: int, n: int = 9):
    """Dense per-sample gradients of 3 blocks with random widths, scales and cross-block coupling."""
    g = torch.Generator().manual_seed(seed)
    widths = torch.randint(1, 5, (3,), generator=g).tolist()
    D = sum(widths)
    mix = torch.eye(D, dtype=torch.float64) + float(torch.rand((), generator=g)) * 2 * torch.randn(
        D, D, generator=g, dtype=torch.float64
    )
    scales = torch.cat([torch.full((w,), 10 ** float(torch.randn((), generator=g))) for w in widths]).double()

    def task(shift):
        x = (torch.randn(n, D, generator=g, dtype=torch.float64) + shift) @ mix * scales
        return list(torch.split(x, widths, dim=1))

    return task(0.0), task(float(torch.randn((), generator=g)))


def test_identity_full_equals_diagonal_plus_offdiagonal():
    for seed in range(10):
        bs, bt = _random_blocks(seed)
        for sp in (True, False):
            v = exact_block_products(bs, bt, self_pairs=sp)
            # full is computed on its own from (Σ_b G_b)²; the block matrix from the G_b G_c
            for full, mat in ((v.full_cross, v.cross), (v.full_sq_s, v.sq_s), (v.full_sq_t, v.sq_t)):
                diag, off = float(mat.diagonal().sum()), float(mat.sum() - mat.diagonal().sum())
                assert abs(full - (diag + off)) <= 1e-12 * max(abs(full), float(mat.abs().sum()))
            al = exact_network_alignment(bs, bt, self_pairs=sp)
            ks = math.sqrt((1 - al.offdiag_share_source) * (1 - al.offdiag_share_target))
            assert al.full == pytest.approx(ks * al.block_diagonal + al.offdiag_term, rel=1e-10, abs=1e-12)
            # A_BD is the w-weighted sum of the per-block profile, Σ w = profile cosine
            ns, nt = (torch.tensor(v, dtype=torch.float64) for v in (al.energy_source, al.energy_target))
            w = ns * nt / (ns.norm() * nt.norm())
            assert float(w.sum()) == pytest.approx(al.profile_cosine, rel=1e-12)
            assert float((w * torch.tensor(al.profile, dtype=torch.float64)).sum()) == pytest.approx(
                al.block_diagonal, rel=1e-10, abs=1e-12
            )


def test_bound_holds_on_random_cases():
    widths = []
    for seed in range(50):
        bs, bt = _random_blocks(100 + seed)
        al = exact_network_alignment(bs, bt, self_pairs=True)
        tol = 1e-12
        assert al.bound_lower - tol <= al.full <= al.bound_upper + tol, (seed, al)
        om = max(al.offdiag_share_source, al.offdiag_share_target)
        assert 0 <= al.offdiag_share_source <= 1 and 0 <= al.offdiag_share_target <= 1
        assert abs(al.offdiag_term) <= math.sqrt(al.offdiag_share_source * al.offdiag_share_target) + tol
        assert abs(al.discrepancy) <= 2 * om + tol
        widths.append(al.bound_upper - al.bound_lower)
    # the bound is informative on some cases, not a vacuous [-1, 1] everywhere
    assert min(widths) < 0.5


def test_block_diagonal_case_has_no_offdiagonal_part_and_bound_is_tight():
    # independent zero-mean blocks: F_bc = 0 for b ≠ c in the population; in a sample of 400
    # the off-diagonal share is small but not zero
    g = torch.Generator().manual_seed(3)
    bs = [torch.randn(400, 2, generator=g, dtype=torch.float64) for _ in range(3)]
    bt = [torch.randn(400, 2, generator=g, dtype=torch.float64) * torch.tensor([1.0, 3.0]).double() for _ in range(3)]
    al = exact_network_alignment(bs, bt, self_pairs=True)
    assert max(al.offdiag_share_source, al.offdiag_share_target) < 0.05
    assert abs(al.full - al.block_diagonal) < 0.05
    # negative control: coupling two blocks (g_2 = g_1) puts energy off the diagonal
    coupled = [bs[0], bs[0].clone(), bs[2]]
    al2 = exact_network_alignment(coupled, bt, self_pairs=True)
    assert al2.offdiag_share_source > 0.2


def test_decompose_rejects_bad_input():
    with pytest.raises(InputError):
        decompose(torch.ones(2), torch.ones(3), torch.ones(2), 1.0, 1.0, 1.0)
    with pytest.raises(InputError):
        exact_block_products([torch.ones(3, 2)], [torch.ones(3, 2), torch.ones(3, 1)])
    with pytest.raises(InputError):
        exact_block_products([torch.ones(3, 2)], [torch.ones(4, 3)])
    with pytest.raises(InputError):
        exact_block_products([(torch.ones(3, 2), torch.ones(4, 2))], [(torch.ones(3, 2), torch.ones(3, 2))])
    with pytest.raises(InputError):
        exact_block_products([torch.full((3, 2), float("nan"))], [torch.ones(3, 2)])
