"""exact_alignment against a materialised Fisher built from autograd per-example gradients."""

import pytest
import torch

import updatescope as us


def per_example_grads(acts, logits_w, labels):
    """vec(∂ CE(W a_i, y_i) / ∂W) for each i, by autograd.  (n, K*d) float64"""
    w = logits_w.clone().requires_grad_(True)
    grads = []
    for a, y in zip(acts, labels):
        loss = torch.nn.functional.cross_entropy((w @ a).unsqueeze(0), y.unsqueeze(0))
        (g,) = torch.autograd.grad(loss, w)
        grads.append(g.reshape(-1))
    return torch.stack(grads)


def task(n, d, k, seed, label_shift=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64) + 0.3 * seed
    y = (torch.randint(0, k // 2, (n,), generator=g) + label_shift) % k
    return a, y


@pytest.fixture
def head():
    return torch.randn(5, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64)


def errors_of(w, a):
    return torch.softmax(a @ w.T, 1)


def oracle(gs, gt, self_pairs):
    fs, ft = gs.T @ gs / len(gs), gt.T @ gt / len(gt)  # materialised (dK, dK) Fishers
    cross = (fs * ft).sum()

    def sq(f, g):
        n = len(g)
        if self_pairs:
            return (f * f).sum()
        diag = ((g * g).sum(1) ** 2).sum() / n**2  # self-pair terms of ‖F‖²
        return ((f * f).sum() - diag) * n / (n - 1)

    return cross / (sq(fs, gs) * sq(ft, gt)).sqrt()


@pytest.mark.parametrize("self_pairs", [True, False])
def test_exact_matches_materialised_fisher(head, self_pairs):
    a_s, y_s = task(9, 3, 5, 1)
    a_t, y_t = task(7, 3, 5, 2, label_shift=2)
    gs, gt = per_example_grads(a_s, head, y_s), per_example_grads(a_t, head, y_t)
    e_s, _ = us.error_vectors(a_s @ head.T, y_s)
    e_t, _ = us.error_vectors(a_t @ head.T, y_t)
    ex = us.exact_alignment(a_s, e_s, a_t, e_t, self_pairs=self_pairs)
    assert ex.fisher == pytest.approx(float(oracle(gs, gt, self_pairs)), rel=1e-10, abs=1e-12)

    # the marginals are Frobenius cosines of M_a = E[a aᵀ] and Γ_e = E[e eᵀ]
    def cos(x, y):
        mx, my = x.T @ x / len(x), y.T @ y / len(y)
        return float((mx * my).sum() / (mx.norm() * my.norm()))

    if self_pairs:
        assert ex.activation == pytest.approx(cos(a_s, a_t), rel=1e-10)
        assert ex.error == pytest.approx(cos(e_s, e_t), rel=1e-10)
    assert ex.coupling == pytest.approx(ex.fisher / (ex.activation * ex.error), rel=1e-12)


def test_gradient_identity_is_kron(head):
    """The per-example head gradient is vec(e aᵀ): the identity everything rests on."""
    a, y = task(4, 3, 5, 3)
    g = per_example_grads(a, head, y)
    e, _ = us.error_vectors(a @ head.T, y)
    assert torch.allclose(g, torch.einsum("nk,nd->nkd", e, a).reshape(4, -1), atol=1e-13)


def test_exact_blocked_equals_unblocked(monkeypatch):
    import updatescope.sketch.align as al

    a_s, y_s = task(50, 4, 6, 1)
    a_t, y_t = task(40, 4, 6, 2)
    w = torch.randn(6, 4, dtype=torch.float64)
    e_s, _ = us.error_vectors(a_s @ w.T, y_s)
    e_t, _ = us.error_vectors(a_t @ w.T, y_t)
    full = us.exact_alignment(a_s, e_s, a_t, e_t)
    monkeypatch.setattr(al, "_BLOCK_ELEMS", 30)  # 3-row blocks
    blocked = us.exact_alignment(a_s, e_s, a_t, e_t)
    for k in ("fisher", "activation", "error", "coupling"):
        assert getattr(blocked, k) == pytest.approx(getattr(full, k), rel=1e-12)


def test_exact_rejects_bad_input():
    a = torch.randn(5, 3)
    e = torch.randn(5, 4)
    with pytest.raises(us.InputError, match="widths differ"):
        us.exact_alignment(a, e, torch.randn(5, 2), e)
    bad = e.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(us.InputError, match="NaN"):
        us.exact_alignment(a, bad, a, e)
    with pytest.raises(us.InputError, match="equal n"):
        us.exact_alignment(a, e[:3], a, e)


def test_matrix_forms_equal_pairwise():
    w = torch.randn(6, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    tasks = []
    for s in range(3):
        a, y = task(20 + s, 4, 6, s)
        tasks.append((a, us.error_vectors(a @ w.T, y)[0]))
    mat = us.exact_alignment_matrix(tasks)
    ex = us.exact_alignment(*tasks[0], *tasks[2])
    assert float(mat["fisher"][0, 2]) == pytest.approx(ex.fisher, rel=1e-12)
    assert float(mat["coupling"][2, 0]) == pytest.approx(ex.coupling, rel=1e-12)
    sigs = [us.FisherSketch(4, 6, sketch_dim=64, seed=0).update(a, e).signature() for a, e in tasks]
    est = us.alignment_matrix(sigs)
    pair = us.alignment(sigs[1], sigs[0])
    assert float(est["error"][1, 0]) == pytest.approx(pair.error, rel=1e-10)
    assert torch.isnan(est["fisher"].diagonal()).all()
