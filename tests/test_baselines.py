"""Baselines against independent float64 oracles built the obvious way (numpy, loops,
autograd, brute-force optimisation), plus invariances, the non-identifiability witness and
degenerate-input errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from updatescope.errors import InputError
from updatescope.select.baselines import (
    BASELINES,
    TaskStream,
    hscore,
    leep,
    linear_cka,
    logme,
    mean_gradient_cosine,
    random_scores,
    rsa,
    source_label_probs,
    source_projection,
    svcca,
)


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _acts(n: int, d: int, seed: int, mix: bool = True) -> np.ndarray:
    """Anisotropic Gaussian activations (a random mixing matrix makes spectra uneven)."""
    r = _rng(seed)
    x = r.standard_normal((n, d))
    return x @ r.standard_normal((d, d)) + r.standard_normal(d) if mix else x


def _ortho(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(_rng(seed).standard_normal((d, d)))
    return q


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(1, keepdims=True)


# ------------------------------------------------------------------------------ CKA
def _cka_oracle(x: np.ndarray, y: np.ndarray, center: bool = True) -> float:
    cx = np.cov(x, rowvar=False, bias=True) if center else x.T @ x / len(x)
    cy = np.cov(y, rowvar=False, bias=True) if center else y.T @ y / len(y)
    return float(np.sum(cx * cy) / (np.linalg.norm(cx) * np.linalg.norm(cy)))


@pytest.mark.parametrize("n_s,n_t,d", [(40, 30, 5), (4, 3, 9)])  # d×d route, n×n route
@pytest.mark.parametrize("center", [True, False])
def test_cka_matches_covariance_cosine(n_s, n_t, d, center):
    x, y = _acts(n_s, d, 1), _acts(n_t, d, 2)
    assert linear_cka(x, y, center=center) == pytest.approx(_cka_oracle(x, y, center), rel=1e-12)


def test_cka_invariances():
    x, y = _acts(40, 6, 3), _acts(25, 6, 4)
    ref = linear_cka(x, y)
    q = _ortho(6, 5)
    assert linear_cka(x[::-1], _rng(6).permutation(y)) == pytest.approx(ref, rel=1e-12)
    assert linear_cka(3.7 * x, 0.2 * y) == pytest.approx(ref, rel=1e-12)
    assert linear_cka(x + 5.0, y - 2.0) == pytest.approx(ref, rel=1e-12)
    assert linear_cka(x @ q, y @ q) == pytest.approx(ref, rel=1e-12)
    assert linear_cka(torch.from_numpy(x).float(), y) == pytest.approx(ref, rel=1e-5)
    # negative control: a different second-moment geometry lowers CKA
    assert ref < 0.99


# ------------------------------------------------------------------------------ RSA
def _rsa_oracle(x: np.ndarray, y: np.ndarray) -> float:
    d = x.shape[1]
    rdm = lambda a: [
        1 - np.corrcoef(a[:, i], a[:, j])[0, 1]  # noqa: E731
        for i, j in itertools.combinations(range(d), 2)
    ]
    return float(stats.spearmanr(rdm(x), rdm(y))[0])


def test_rsa_matches_pairwise_oracle_and_invariances():
    x, y = _acts(30, 7, 7), _acts(20, 7, 8)
    ref = rsa(x, y)
    assert ref == pytest.approx(_rsa_oracle(x, y), rel=1e-12)
    perm = _rng(9).permutation(7)
    scale = _rng(10).uniform(0.5, 3.0, 7)
    assert rsa(x[::-1], y) == pytest.approx(ref, rel=1e-12)
    assert rsa(x * scale + 4.0, y) == pytest.approx(ref, rel=1e-12)
    assert rsa(x[:, perm], y[:, perm]) == pytest.approx(ref, rel=1e-12)
    # a constant feature is dropped in both tasks
    xc, yc = np.hstack([x, np.ones((30, 1))]), np.hstack([y, _rng(1).standard_normal((20, 1))])
    assert rsa(xc, yc) == pytest.approx(ref, rel=1e-12)


# ---------------------------------------------------------------------------- SVCCA
def _svcca_oracle(x: np.ndarray, y: np.ndarray, keep: float) -> float:
    def basis(a: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(np.cov(a, rowvar=False))
        w, v = w[::-1], v[:, ::-1]
        k = int(np.argmax(np.cumsum(w) / w.sum() >= keep)) + 1
        return v[:, :k]

    vs, vt = basis(x), basis(y)
    ps, pt = vs @ vs.T, vt @ vt.T
    cos2 = np.sort(np.linalg.eigvalsh(ps @ pt @ ps))[::-1][: min(vs.shape[1], vt.shape[1])]
    return float(np.sqrt(np.clip(cos2, 0, 1)).mean())


@pytest.mark.parametrize("keep", [0.5, 0.8, 0.95])
def test_svcca_matches_principal_angle_oracle(keep):
    x, y = _acts(50, 6, 11), _acts(40, 6, 12)
    assert svcca(x, y, keep=keep) == pytest.approx(_svcca_oracle(x, y, keep), rel=1e-10)


def test_svcca_invariances():
    x, y = _acts(50, 6, 13), _acts(40, 6, 14)
    ref = svcca(x, y, keep=0.8)
    q = _ortho(6, 15)
    assert svcca(_rng(0).permutation(x), y, keep=0.8) == pytest.approx(ref, rel=1e-10)
    assert svcca(10 * x + 1, y, keep=0.8) == pytest.approx(ref, rel=1e-10)
    assert svcca(x @ q, y @ q, keep=0.8) == pytest.approx(ref, rel=1e-10)


# ---------------------------------------------------------------------------- LogME
def _log_evidence(f: np.ndarray, y: np.ndarray, alpha: float, beta: float) -> float:
    """Dense Gaussian marginal likelihood: y ~ N(0, α⁻¹ F Fᵀ + β⁻¹ I)."""
    n = len(y)
    cov = f @ f.T / alpha + np.eye(n) / beta
    _, logdet = np.linalg.slogdet(cov)
    return float(-0.5 * (n * np.log(2 * np.pi) + logdet + y @ np.linalg.solve(cov, y)))


def _logme_oracle(f: np.ndarray, labels: np.ndarray) -> float:
    """Grid search over (log α, log β), then Nelder–Mead from the best grid point."""
    out = []
    for c in np.unique(labels):
        y = (labels == c).astype(float)
        neg = lambda p: -_log_evidence(f, y, np.exp(p[0]), np.exp(p[1]))  # noqa: E731
        grid = np.linspace(-8, 8, 41)
        best = min(itertools.product(grid, grid), key=neg)
        res = optimize.minimize(
            neg, best, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-13, "maxiter": 5000}
        )
        out.append(-res.fun / len(y))
    return float(np.mean(out))


@pytest.mark.parametrize("n,dim,classes", [(30, 4, 3), (10, 14, 2)])
def test_logme_matches_brute_force_evidence(n, dim, classes):
    r = _rng(n)
    labels = np.arange(n) % classes
    f = r.standard_normal((n, dim)) + 0.8 * np.eye(classes, dim)[labels]
    assert logme(f, labels) == pytest.approx(_logme_oracle(f, labels), rel=1e-6, abs=1e-8)


def test_logme_invariances_and_signal():
    r = _rng(21)
    labels = np.arange(60) % 3
    f = r.standard_normal((60, 5)) + 1.5 * np.eye(3, 5)[labels]
    ref = logme(f, labels)
    perm = r.permutation(60)
    assert logme(f[perm], labels[perm]) == pytest.approx(ref, rel=1e-9)
    assert logme(7.0 * f, labels) == pytest.approx(ref, rel=1e-9)
    assert logme(f @ _ortho(5, 22), labels) == pytest.approx(ref, rel=1e-9)
    # negative control: shuffled labels carry less evidence
    assert logme(f, r.permutation(labels)) < ref


# -------------------------------------------------------------------------- H-score
def _hscore_oracle(f: np.ndarray, labels: np.ndarray) -> float:
    cov_f = np.cov(f, rowvar=False, bias=True)
    cond = np.stack([f[labels == y].mean(0) for y in labels])  # E[f | y_i] per row
    cov_g = np.cov(cond, rowvar=False, bias=True)
    return float(np.trace(np.linalg.pinv(cov_f, rcond=1e-10) @ cov_g))


def test_hscore_matches_formula_and_invariances():
    r = _rng(31)
    labels = np.arange(40) % 4
    f = r.standard_normal((40, 6)) + np.eye(4, 6)[labels]
    ref = hscore(f, labels)
    assert ref == pytest.approx(_hscore_oracle(f, labels), rel=1e-10)
    m = r.standard_normal((6, 6)) + 3 * np.eye(6)  # invertible map
    perm = r.permutation(40)
    assert hscore(f @ m, labels) == pytest.approx(ref, rel=1e-8)
    assert hscore(f[perm], labels[perm]) == pytest.approx(ref, rel=1e-12)
    # rank-deficient features: pseudo-inverse, still matches
    fd = np.hstack([f, f[:, :2] + f[:, 2:4]])
    assert hscore(fd, labels) == pytest.approx(_hscore_oracle(fd, labels), rel=1e-8)


# ----------------------------------------------------------------------------- LEEP
def _leep_oracle(theta: np.ndarray, labels: np.ndarray) -> float:
    n, z_dim = theta.shape
    ys = sorted(set(labels.tolist()))
    joint = {(y, z): sum(theta[i, z] for i in range(n) if labels[i] == y) / n for y in ys for z in range(z_dim)}
    pz = [sum(joint[(y, z)] for y in ys) for z in range(z_dim)]
    return float(
        np.mean([np.log(sum(joint[(labels[i], z)] / pz[z] * theta[i, z] for z in range(z_dim))) for i in range(n)])
    )


def test_leep_matches_loops_and_hand_case():
    r = _rng(41)
    theta = _softmax(r.standard_normal((24, 5)))
    labels = np.arange(24) % 3
    assert leep(theta, labels) == pytest.approx(_leep_oracle(theta, labels), rel=1e-12)
    # deterministic source predictions that are a relabelling of the target: P(y|z) = 1,
    # so every term is log 1 = 0.
    assert leep(np.eye(3)[labels], labels) == pytest.approx(0.0, abs=1e-15)


def test_source_label_probs_restricts_and_renormalises():
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    theta = source_label_probs(p, np.array([3, 1, 3, -100]))
    # source labels {1, 3}: row 0 -> (0.2, 0.4)/0.6, row 1 -> (0.5, 0.5)
    np.testing.assert_allclose(theta.numpy(), [[1 / 3, 2 / 3], [0.5, 0.5]], rtol=1e-15)


# ------------------------------------------------------------- mean gradient cosine
def _autograd_mean_grad(acts: np.ndarray, w: torch.Tensor, labels: np.ndarray) -> torch.Tensor:
    w = w.clone().requires_grad_(True)
    a = torch.from_numpy(acts)
    loss = torch.nn.functional.cross_entropy(a @ w.T, torch.from_numpy(labels))
    (g,) = torch.autograd.grad(loss, w)
    return g


@pytest.mark.parametrize("method,block", [("dense", 3), ("pairs", 7), ("pairs", 10**6), ("auto", 2**22)])
def test_mean_gradient_cosine_matches_autograd(method, block):
    r = _rng(51)
    d, k = 5, 7
    w = torch.from_numpy(r.standard_normal((k, d)))
    a_s, a_t = _acts(13, d, 52), _acts(9, d, 53)
    y_s, y_t = r.integers(0, k, 13), r.integers(0, 3, 9)
    g_s, g_t = _autograd_mean_grad(a_s, w, y_s), _autograd_mean_grad(a_t, w, y_t)
    oracle = float((g_s * g_t).sum() / (g_s.norm() * g_t.norm()))
    err = lambda a, y: _softmax(a @ w.numpy().T) - np.eye(k)[y]  # noqa: E731
    got = mean_gradient_cosine(a_s, err(a_s, y_s), a_t, err(a_t, y_t), method=method, block_entries=block)
    assert got == pytest.approx(oracle, rel=1e-12, abs=1e-14)


def test_mean_gradient_cosine_outer_oracle_and_invariances():
    r = _rng(61)
    a_s, a_t = r.standard_normal((11, 4)), r.standard_normal((8, 4))
    e_s, e_t = r.standard_normal((11, 6)), r.standard_normal((8, 6))
    g_s = torch.stack([torch.outer(torch.from_numpy(e), torch.from_numpy(a)) for e, a in zip(e_s, a_s)]).mean(0)
    g_t = torch.stack([torch.outer(torch.from_numpy(e), torch.from_numpy(a)) for e, a in zip(e_t, a_t)]).mean(0)
    oracle = float((g_s * g_t).sum() / (g_s.norm() * g_t.norm()))
    ref = mean_gradient_cosine(a_s, e_s, a_t, e_t, method="pairs")
    assert ref == pytest.approx(oracle, rel=1e-12)
    perm = r.permutation(11)
    assert mean_gradient_cosine(a_s[perm], e_s[perm], 3 * a_t, e_t) == pytest.approx(ref, rel=1e-12)


# ------------------------------------------------- non-identifiability witness (Thm 3.2)
def _witness_streams() -> tuple[TaskStream, TaskStream]:
    """Same inputs through one model; source answers in tokens {0,1,2}, target in {3,4,5}.

    Each task's verbaliser head sees only its own tokens, so the error vectors live on
    disjoint coordinates: the mean head gradients are exactly orthogonal.
    """
    r = _rng(71)
    n, d, k = 60, 6, 6
    acts = _acts(n, d, 72)
    w = r.standard_normal((k, d))
    errs = []
    for block in (slice(0, 3), slice(3, 6)):
        e = np.zeros((n, k))
        p = _softmax(acts @ w[block].T)
        y = np.arange(n) % 3
        e[:, block] = p - np.eye(3)[y]
        errs.append(e)
    return (TaskStream(acts, errors=errs[0], name="src"), TaskStream(acts.copy(), errors=errs[1], name="tgt"))


def test_witness_activation_metrics_say_one_gradients_say_zero():
    s, t = _witness_streams()
    assert (s.resolved_labels().unique() == torch.arange(3)).all()
    assert (t.resolved_labels().unique() == torch.arange(3, 6)).all()
    for name in ("cka", "rsa", "svcca"):
        assert BASELINES[name](s, t) == pytest.approx(1.0, abs=1e-12), name
    assert BASELINES["grad_cos"](s, t) == pytest.approx(0.0, abs=1e-12)


def test_witness_shared_softmax_gradients_differ():
    """Same acts, one softmax over all K, disjoint label sets: cosine clearly below 1."""
    r = _rng(81)
    acts, w = r.standard_normal((80, 5)), 0.3 * r.standard_normal((6, 5))
    p = _softmax(acts @ w.T)
    # labels depend on the input, through different directions, in disjoint token sets
    y_s = np.argmax(acts @ r.standard_normal((5, 3)), 1)
    y_t = 3 + np.argmax(acts @ r.standard_normal((5, 3)), 1)
    assert linear_cka(acts, acts) == pytest.approx(1.0, abs=1e-12)
    assert mean_gradient_cosine(acts, p - np.eye(6)[y_s], acts, p - np.eye(6)[y_t]) < 0.5


# --------------------------------------------------------------------- random, registry
def test_random_scores_reproducible_and_order_free():
    a = random_scores(["x", "y", "z"], seed=3)
    assert a == random_scores(["z", "x", "y"], seed=3)
    assert a["x"] == random_scores(["x"], seed=3)["x"]
    assert a != random_scores(["x", "y", "z"], seed=4)
    assert a != random_scores(["x", "y", "z"], seed=3, salt="target-1")
    assert all(0.0 <= v < 1.0 for v in a.values())
    with pytest.raises(InputError):
        random_scores(["x", "x"], seed=0)


def test_registry_runs_every_method_on_streams():
    r = _rng(91)
    n, d, k = 48, 6, 5
    w = r.standard_normal((k, d))

    def stream(seed: int, name: str) -> TaskStream:
        a = _acts(n, d, seed)
        y = np.arange(n) % k
        y[0] = -100  # ignored row
        return TaskStream(a, probs=_softmax(a @ w.T), labels=y, name=name)

    s, t = stream(92, "s"), stream(93, "t")
    assert s.acts.shape == (n - 1, d)
    for name, fn in BASELINES.items():
        assert np.isfinite(fn(s, t)), name
    # errors-only stream: probs and labels are recovered exactly
    e_only = TaskStream(s.acts, errors=s.resolved_errors(), name="s")
    assert torch.equal(e_only.resolved_labels(), s.labels)
    torch.testing.assert_close(e_only.resolved_probs(), s.probs, rtol=0, atol=1e-15)
    assert BASELINES["leep"](e_only, t) == pytest.approx(BASELINES["leep"](s, t), rel=1e-12)
    # LogME/H-score see the target through the source subspace: source-dependent
    assert source_projection(s.acts, t.acts, keep=0.6).shape[1] < d
    with pytest.raises(InputError, match="names"):
        BASELINES["random"](TaskStream(s.acts), t)


# ----------------------------------------------------------------- degenerate inputs
def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg
    return msg


@pytest.mark.parametrize("fn", [logme, hscore])
def test_more_classes_than_samples_raise(fn):
    f = _rng(0).standard_normal((10, 3))
    with pytest.raises(InputError) as e:
        fn(f, np.arange(10))  # 10 classes, one example each
    assert "fewer than 2" in _one_line(e)
    with pytest.raises(InputError) as e:
        fn(f, np.zeros(10, dtype=int))  # one class: nothing to predict
    _one_line(e)


def test_leep_degenerate_raise():
    theta = _softmax(_rng(0).standard_normal((10, 4)))
    with pytest.raises(InputError):
        leep(theta, np.arange(10))
    with pytest.raises(InputError):
        leep(theta * 2, np.arange(10) % 2)  # rows are not distributions
    with pytest.raises(InputError) as e:
        leep(theta, np.arange(10) % 2, max_entries=7)  # 2×4 joint over a tiny budget
    assert "budget" in _one_line(e)


def test_vocabulary_scale_covariance_refused():
    # K = 49,152 features would need a K×K covariance (18 GiB in float64)
    f = np.zeros((4, 49_152), dtype=np.float32)
    with pytest.raises(InputError) as e:
        hscore(f, np.array([0, 0, 1, 1]))
    assert "49152×49152" in _one_line(e) and "budget" in str(e.value)


def test_bad_shapes_and_values_raise():
    x = _acts(10, 4, 0)
    with pytest.raises(InputError):
        linear_cka(x, _acts(10, 5, 1))
    with pytest.raises(InputError):
        linear_cka(x, np.ones((10, 4)))  # zero covariance
    with pytest.raises(InputError):
        rsa(x[:, :2], x[:, :2])  # fewer than 3 features
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError):
        svcca(bad, x)
    with pytest.raises(InputError):
        mean_gradient_cosine(x, np.zeros((10, 3)), x, np.ones((10, 3)))  # zero gradient
    with pytest.raises(InputError):
        mean_gradient_cosine(x, np.ones((9, 3)), x, np.ones((10, 3)))
