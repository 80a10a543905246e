"""Mixture weights from signatures: the prediction against an exact float64 reference, the solver
against a general-purpose optimiser, the Gram's correction, duplicates, budget rounding, and
every bad input of ``updatescope mix`` refused in one line."""

from __future__ import annotations

import collections
import json
import math
import shutil

import numpy as np
import pytest
import torch

import updatescope as us
from updatescope.cli import main
from updatescope.errors import InputError
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.select.mixture import mix, mixture_alignment, psd_project, round_budget, solve
from updatescope.sketch.align import inner_products

D, K, M = 16, 64, 1024
FAM = HeadTaskFamily(act_dim=D, out_dim=K)


def _stream(cluster, block, n, seed):
    a, logits, y = FAM.sample(cluster, block, n, seed=seed)
    return a, logits, y


def _sig(stream, m=M, seed=0, **meta):
    return us.FisherSketch(D, K, sketch_dim=m, seed=seed).update_logits(*stream).signature(**meta)


@pytest.fixture(scope="module")
def family():
    """A target and five sources of the synthetic head-task family, streams kept for the exact reference."""
    specs = {"t": (0, 0, 100), "c0b1": (0, 1, 1), "c1b0": (1, 0, 2), "c1b1": (1, 1, 3), "c2b2": (2, 2, 4)}
    specs["c0b0"] = (0, 0, 5)
    streams = {k: _stream(c, b, 500, seed=s) for k, (c, b, s) in specs.items()}
    sigs = {k: _sig(v, name=k) for k, v in streams.items()}
    return streams, sigs


@pytest.fixture(scope="module")
def exact(family):
    """Exact mean kernels of the three kinds between every two streams (self-pairs left out
    of a stream with itself): {(name, name): [fisher, activation, error]}."""
    streams, _ = family
    prepped = {n: (s[0].double(), us.error_vectors(s[1], s[2])[0].double()) for n, s in streams.items()}
    out = {}
    for i, (a1, e1) in prepped.items():
        for j, (a2, e2) in prepped.items():
            ga, ge = (a1 @ a2.T).square(), (e1 @ e2.T).square()
            mats = (ga * ge, ga, ge)
            if i == j:
                n = a1.shape[0]
                out[i, j] = [float((x.sum() - x.diagonal().sum()) / (n * (n - 1))) for x in mats]
            else:
                out[i, j] = [float(x.mean()) for x in mats]
    return out


# ---------------------------------------------------------------------- (a) prediction
def test_inner_products_match_alignment_matrix(family):
    _, sigs = family
    lst = list(sigs.values())
    g = inner_products(lst, "fisher")
    nrm = g.diagonal().sqrt()
    cos = g / nrm[:, None] / nrm[None, :]
    ref = us.alignment_matrix(lst)["fisher"]
    off = ~torch.eye(len(lst), dtype=torch.bool)
    assert torch.allclose(cos[off], ref[off], rtol=1e-10, atol=1e-12)


def test_one_hot_weights_reproduce_alignment(family):
    _, sigs = family
    names = [n for n in sigs if n != "t"]
    for i, n in enumerate(names):
        w = [1.0 if j == i else 0.0 for j in range(len(names))]
        for kind in ("fisher", "activation", "error"):
            got = mixture_alignment([sigs[x] for x in names], sigs["t"], w, kind)
            a = us.alignment(sigs[n], sigs["t"])
            assert got["value"] == pytest.approx(getattr(a, kind), rel=1e-9, abs=1e-12)
            assert got["se"] == pytest.approx(getattr(a, f"{kind}_se"), rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("weights", [(0.5, 0.5, 0, 0, 0), (0.2, 0.3, 0.1, 0.1, 0.3), (0, 0.6, 0.4, 0, 0)])
def test_predicted_alignment_matches_exact_weighted_mixture(family, exact, weights):
    _, sigs = family
    names = ["c0b1", "c1b0", "c1b1", "c2b2", "c0b0"]
    w = np.array(weights, dtype=float)
    for k, kind in enumerate(("fisher", "activation", "error")):
        b = np.array([exact[n, "t"][k] for n in names])
        g = np.array([[exact[i, j][k] for j in names] for i in names])
        ref = float(w @ b / math.sqrt(w @ g @ w) / math.sqrt(exact["t", "t"][k]))
        got = mixture_alignment([sigs[n] for n in names], sigs["t"], list(weights), kind)
        # the sketch's error only (same streams): the reported SE includes sampling noise too, so 3·SE is generous
        assert abs(got["value"] - ref) <= 3 * got["se"] + 1e-3, (kind, got, ref)


# ---------------------------------------------------------------------- (b), (c) the solver
def _random_problem(n, rank, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, rank, generator=g, dtype=torch.float64) + 1.0
    t = torch.randn(rank, generator=g, dtype=torch.float64) + 1.0
    return x @ x.T, x @ t, float(t @ t)


def _objective(w, gram, b, tt):
    w = np.asarray(w, dtype=float)
    return float(w @ b / math.sqrt(max(w @ gram @ w, 1e-300) * tt))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_solver_matches_slsqp_and_beats_single_sources(seed):
    from scipy.optimize import minimize

    gram, b, tt = _random_problem(8, 12, seed)
    w, info = solve(gram, b, tt)
    assert float(w.sum()) == pytest.approx(1.0) and bool((w >= 0).all())
    ours = _objective(w.numpy(), gram.numpy(), b.numpy(), tt)
    g_np, b_np = gram.numpy(), b.numpy()
    best_ref = -math.inf
    for start in range(6):
        x0 = np.random.default_rng(start).dirichlet(np.ones(8))
        res = minimize(
            lambda v: -_objective(v, g_np, b_np, tt),
            x0,
            method="SLSQP",
            bounds=[(0, 1)] * 8,
            constraints=[{"type": "eq", "fun": lambda v: v.sum() - 1}],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        best_ref = max(best_ref, -res.fun)
    assert ours >= best_ref - 1e-7
    singles = [_objective(np.eye(8)[i], g_np, b_np, tt) for i in range(8)]
    assert ours >= max(singles) - 1e-12
    assert info["value"] == pytest.approx(ours, rel=1e-9)


def test_solver_matches_grid_on_three_sources():
    gram, b, tt = _random_problem(3, 3, 7)
    w, _ = solve(gram, b, tt)
    ours = _objective(w.numpy(), gram.numpy(), b.numpy(), tt)
    steps = 200
    grid = max(
        _objective([i / steps, j / steps, (steps - i - j) / steps], gram.numpy(), b.numpy(), tt)
        for i in range(steps + 1)
        for j in range(steps + 1 - i)
    )
    assert ours >= grid - 1e-9
    assert ours - grid < 1e-3


def test_mixture_at_least_best_single(family):
    _, sigs = family
    res = mix(sigs["t"], {n: s for n, s in sigs.items() if n not in ("t", "c0b0")})
    assert res.psd["clipped_eigenvalues"] == 0  # the unbiased Gram is the one optimised
    assert res.predicted >= res.best_single_value - 1e-9
    assert sum(res.weights) == pytest.approx(1.0)


@pytest.mark.parametrize("k", [1, 2])
def test_max_sources_exact_and_greedy(k, monkeypatch):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 10, generator=g, dtype=torch.float64)
    t = x.sum(0)  # the target is a blend of all seven: the unconstrained optimum uses them all
    gram, b, tt = x @ x.T, x @ t, float(t @ t)
    w0, _ = solve(gram, b, tt)
    assert int((w0 > 0).sum()) > 2
    w, info = solve(gram, b, tt, max_sources=k)
    assert int((w > 0).sum()) <= k and "exact" in info["selection"]
    import itertools

    best = -math.inf
    for sub in itertools.combinations(range(7), k):
        ws, _ = solve(gram[list(sub)][:, list(sub)], b[list(sub)], tt)
        best = max(best, _objective(ws.numpy(), gram[list(sub)][:, list(sub)].numpy(), b[list(sub)].numpy(), tt))
    assert _objective(w.numpy(), gram.numpy(), b.numpy(), tt) == pytest.approx(best, rel=1e-7)
    monkeypatch.setattr("updatescope.select.mixture.EXACT_SUBSETS", 0)
    wg, info = solve(gram, b, tt, max_sources=k)
    assert "greedy" in info["selection"] and int((wg > 0).sum()) <= k
    assert _objective(wg.numpy(), gram.numpy(), b.numpy(), tt) <= best + 1e-9


# ---------------------------------------------------------------------- (d) the Gram's correction
def test_psd_correction_leaves_a_clean_gram_alone_and_small_noise_small():
    gram, b, tt = _random_problem(6, 10, 11)
    fixed, info = psd_project(gram)
    assert info["clipped_eigenvalues"] == 0 and torch.equal(fixed, (gram + gram.T) / 2)
    w0, _ = solve(gram, b, tt)
    noise = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w1, _ = solve(gram + 1e-7 * float(gram.abs().max()) * (noise + noise.T) / 2, b, tt)
    assert torch.allclose(w0, w1, atol=1e-4)


def test_indefinite_gram_is_clipped_and_value_is_stable():
    gram, b, tt = _random_problem(8, 3, 5)  # rank 3: five zero eigenvalues
    w0, _ = solve(gram, b, tt)
    noise = torch.randn(8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    noisy = gram + 1e-8 * float(gram.abs().max()) * (noise + noise.T) / 2
    assert float(torch.linalg.eigvalsh(noisy).min()) < 0
    w1, info = solve(noisy, b, tt)
    assert info["psd"]["clipped_eigenvalues"] >= 1 and info["psd"]["relative_change"] < 1e-6
    assert _objective(w1.numpy(), gram.numpy(), b.numpy(), tt) == pytest.approx(
        _objective(w0.numpy(), gram.numpy(), b.numpy(), tt), abs=1e-6
    )


# ---------------------------------------------------------------------- (e) duplicates and ties
def test_identical_sources_merge_and_split_evenly(family):
    _, sigs = family
    base = {n: sigs[n] for n in ("c0b1", "c1b0", "c2b2")}
    twin = us.Signature(sigs["c0b1"].config, sigs["c0b1"].sums.clone(), sigs["c0b1"].diag.clone(), sigs["c0b1"].counts)
    one = mix(sigs["t"], base)
    two = mix(sigs["t"], {**base, "copy": twin})
    assert two.groups == (("c0b1", "copy"),)
    assert two.predicted == pytest.approx(one.predicted, rel=1e-9)
    w = dict(zip(two.sources, two.weights))
    assert w["c0b1"] == pytest.approx(w["copy"]) and w["c0b1"] + w["copy"] == pytest.approx(one.weights[0])


def test_duplicated_gram_column_gives_the_same_value():
    gram, b, tt = _random_problem(4, 6, 2)
    idx = [0, 1, 2, 3, 0]
    w, _ = solve(gram[idx][:, idx], b[idx], tt)
    w0, _ = solve(gram, b, tt)
    v = _objective(w.numpy(), gram[idx][:, idx].numpy(), b[idx].numpy(), tt)
    assert v == pytest.approx(_objective(w0.numpy(), gram.numpy(), b.numpy(), tt), rel=1e-7)


def test_near_duplicates_keep_the_prediction(family):
    streams, sigs = family
    near = _sig(_stream(0, 1, 500, seed=77))  # another sample of c0b1's distribution
    base = {n: sigs[n] for n in ("c0b1", "c1b0", "c2b2")}
    one, two = mix(sigs["t"], base), mix(sigs["t"], {**base, "near": near})
    assert abs(two.predicted - one.predicted) <= 2 * max(one.predicted_se, two.predicted_se)


# ---------------------------------------------------------------------- (f) budget
@pytest.mark.parametrize("budget", [1, 7, 1000, 999_983, 10**15])
def test_budget_rounding_sums_exactly(budget):
    rng = np.random.default_rng(budget % 1000)
    w = rng.dirichlet(np.ones(9)).tolist()
    tokens = round_budget(w, budget)
    assert sum(tokens) == budget and all(t >= 0 for t in tokens)
    assert all(abs(t - x * budget) < 1 for t, x in zip(tokens, w))
    assert round_budget([1 / 3] * 3, 10) == [4, 3, 3]  # ties go to the earlier source


def test_api_refusals(family):
    _, sigs = family
    src = {n: sigs[n] for n in ("c0b1", "c1b0")}
    with pytest.raises(InputError):
        mix(sigs["t"], {"a": sigs["c0b1"]})
    with pytest.raises(InputError):
        mix(sigs["t"], src, budget=0)
    with pytest.raises(InputError):
        mix(sigs["t"], src, max_sources=3)
    with pytest.raises(InputError):
        mix(sigs["t"], {**src, "self": sigs["t"]})
    with pytest.raises(us.IncompatibleSignatureError):
        mix(sigs["t"], {**src, "other": _sig(_stream(0, 1, 100, 9), seed=1)})
    nan = us.Signature(sigs["c1b1"].config, sigs["c1b1"].sums * float("nan"), sigs["c1b1"].diag, sigs["c1b1"].counts)
    res = mix(sigs["t"], {**src, "bad": nan}, budget=100)
    assert "bad" in res.dropped and res.weights[2] == 0.0 and sum(res.tokens) == 100
    for objective in ("error", "activation"):
        assert mix(sigs["t"], src, objective=objective).objective == objective


# ---------------------------------------------------------------------- (g) the CLI
@pytest.fixture(scope="module")
def files(family, tmp_path_factory):
    _, sigs = family
    d = tmp_path_factory.mktemp("mix")
    paths = {}
    for n, s in sigs.items():
        paths[n] = str(d / f"{n}.safetensors")
        us.save_signature(s, paths[n])
    paths["copy_t"] = str(d / "copy_t.safetensors")
    shutil.copy(paths["t"], paths["copy_t"])
    paths["seed1"] = str(d / "seed1.safetensors")
    us.save_signature(_sig(_stream(0, 1, 100, 9), seed=1, name="seed1"), paths["seed1"])
    paths["m512"] = str(d / "m512.safetensors")
    us.save_signature(_sig(_stream(0, 1, 100, 9), m=512, name="m512"), paths["m512"])
    s = sigs["c1b1"]  # zero sums, positive diagonal: the squared-norm estimate is negative
    zero = us.Signature(s.config, torch.zeros_like(s.sums), s.diag.clone(), s.counts.clone(), {"name": "zero"})
    paths["zero"] = str(d / "zero.safetensors")
    us.save_signature(zero, paths["zero"])
    from updatescope.network import NetworkConfig, NetworkSketch, save_network_signature

    g = torch.Generator().manual_seed(0)
    net = NetworkSketch(NetworkConfig((("lm_head", 3, 4),), 32, 3)).update(
        {"lm_head": (torch.randn(9, 3, generator=g, dtype=torch.float64), torch.randn(9, 4, generator=g))}
    )
    paths["net"] = str(save_network_signature(net, d / "net.safetensors"))
    return paths


def test_cli_table_and_json(files, capsys):
    args = ["mix", "--target", files["t"], files["c0b1"], files["c1b0"], files["c2b2"], "--budget", "1_000"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "predicted fisher alignment" in out and "best single source" in out
    assert main([*args, "--json", "--max-sources", "2", "--objective", "error"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert sum(rec["tokens"]) == 1000 and sum(1 for w in rec["weights"] if w > 0) <= 2
    assert rec["objective"] == "error"


def _bad_cases(f):
    s = [f["c0b1"], f["c1b0"]]
    return {
        "incompatible seed": [*s, f["seed1"]],
        "incompatible sketch size": [*s, f["m512"]],
        "network signature": [*s, f["net"]],
        "one source": [f["c0b1"]],
        "target among sources": [*s, f["t"]],
        "target content among sources": [*s, f["copy_t"]],
        "duplicate source file": [*s, f["c0b1"]],
        "budget zero": [*s, "--budget", "0"],
        "budget negative": [*s, "--budget", "-5"],
        "budget absurd": [*s, "--budget", "1e16"],
        "budget not a number": [*s, "--budget", "lots"],
        "max-sources zero": [*s, "--max-sources", "0"],
        "max-sources above n": [*s, "--max-sources", "3"],
        "too few after dropping": [f["c0b1"], f["zero"]],
    }


@pytest.mark.parametrize("case", list(_bad_cases(collections.defaultdict(str))))
def test_cli_bad_input_one_line_exit_2(files, case, tmp_path, capsys):
    args = _bad_cases(files)[case]
    out = tmp_path / "mix.jsonl"
    argv = ["mix", "--target", files["t"], *args, "--export", str(out), "--model", "smollm2", "--json"]
    if "--budget" not in args:
        argv += ["--budget", "100"]
    rc = main(argv)
    cap = capsys.readouterr()
    errors = [ln for ln in cap.err.splitlines() if ln.startswith("updatescope: error:")]
    assert rc == 2, (case, cap.err)
    assert len(errors) == 1 and all(ln.startswith("updatescope: ") for ln in cap.err.splitlines()), cap.err
    assert cap.out == ""
    assert not out.exists()


def test_cli_drops_a_source_with_no_usable_norm(files, capsys):
    assert main(["mix", "--target", files["t"], files["c0b1"], files["c1b0"], files["zero"], "--json"]) == 0
    cap = capsys.readouterr()
    assert "dropped zero" in cap.err and "not positive" in cap.err
    assert json.loads(cap.out)["dropped"]["zero"]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_nnls_gram_matches_scipy_nnls(seed):
    from scipy.optimize import nnls

    from updatescope.select.mixture import nnls_gram

    rng = np.random.default_rng(seed)
    a, c = rng.standard_normal((30, 12)), rng.standard_normal(30)
    x_ref, _ = nnls(a, c)
    x = nnls_gram(torch.from_numpy(a.T @ a), torch.from_numpy(a.T @ c))
    assert np.allclose(x.numpy(), x_ref, atol=1e-9)


def test_cli_drops_a_source_file_holding_nan(files, tmp_path, capsys):
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(files["c1b1"], framework="pt") as fh:
        meta = {k: v for k, v in (fh.metadata() or {}).items() if k != "sha256"}
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    tensors["sums"][0, 0, 0] = float("nan")
    bad = tmp_path / "nan.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    assert main(["mix", "--target", files["t"], files["c0b1"], files["c1b0"], str(bad), "--json"]) == 0
    cap = capsys.readouterr()
    assert f"dropped {bad}" in cap.err and "NaN or inf" in cap.err
    assert len(json.loads(cap.out)["sources"]) == 2
    assert main(["mix", "--target", files["t"], files["c0b1"], str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len([ln for ln in err if ln.startswith("updatescope: error:")]) == 1
