"""``locallinear.run_protocol`` on a user's own model (an MLP, a quadratic with a known
Hessian, a peft LoRA model) and the public LoRA map Delta W = s B A."""

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from updatescope import locallinear
from updatescope.errors import InputError
from updatescope.locallinear import (
    ProtocolConfig,
    ba_increments,
    ba_pairs,
    delta_w,
    flat_params,
    push_w,
    run_protocol,
)

ROOT = Path(__file__).resolve().parents[1]
V = 64  # vocabulary of the tiny Llama

SMALL = ProtocolConfig(
    multitask_steps=8,
    multitask_lr=1e-2,
    forget_steps=4,
    forget_lr=1e-2,
    recover_steps=6,
    dense_steps=6,
    eval_every=3,
    power_iters=5,
    plane_batches=2,
    drift_every=3,
    rank_n=3,
)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # tiny models: one thread is faster, and immune to a busy machine's thread contention
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
        attn_implementation="eager",
    )
    return get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "v_proj"]))


def _lm_task(shift: int):
    """Sequences x_{j+1} = x_j + shift (mod V); the index seeds the batch."""

    def loss(model, index):
        g = torch.Generator().manual_seed(1000 * shift + index)
        ids = (torch.randint(0, V, (4, 1), generator=g) + shift * torch.arange(8)) % V
        return model(input_ids=ids, labels=ids).loss

    return loss


LM_TASKS = {"a": _lm_task(1), "b": _lm_task(3), "c": _lm_task(5)}


# ------------------------------------------------------------------------------ end to end
def test_peft_model_end_to_end():
    model = _lora_model()
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    rec = run_protocol(model, LM_TASKS, "c", SMALL)
    lora = [n for n, p in model.named_parameters() if p.requires_grad]
    assert rec.params == lora and all(".lora_" in n for n in lora)
    assert rec.dim == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags
    torch.testing.assert_close(flat_params(model).float(), rec.theta_rec)  # left at theta_rec
    k = SMALL.dense_steps
    for name, curve in rec.curves.items():
        assert len(curve) == k, name
    # the span of all the steps holds the whole displacement, in LoRA and in weight space
    assert abs(rec.curves["prefix"][-1] - 1.0) < 1e-6
    assert abs(rec.weight_space["curves"]["prefix"][-1] - 1.0) < 1e-6
    assert rec.weight_space["modules"] == 2 and rec.weight_space["dim"] == 2 * 16 * 16
    assert len(rec.losses["multitask"]) == 8 and len(rec.losses["recover"]) == 6
    assert len(rec.step_norms) == 6 and rec.forget_steps == 4
    assert rec.stability["eta_lambda_forg"] == pytest.approx(1.0)
    assert set(rec.rank) == {"a", "b", "c"} and rec.drift["steps"] == [3, 6]
    text = json.dumps(rec.to_dict(), allow_nan=False)  # NaN (an emptied remainder) becomes null
    assert json.loads(text)["config"]["recover_steps"] == 6


def test_mlp_and_an_explicit_parameter_subset():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    xs = torch.randn(64, 4)
    targets = {"p": torch.randn(4, 2), "q": torch.randn(4, 2)}
    losses = {t: (lambda m, i, w=w: ((m(xs[i % 8 :: 8]) - xs[i % 8 :: 8] @ w) ** 2).mean()) for t, w in targets.items()}
    first = net[0].weight.detach().clone()
    rec = run_protocol(net, losses, "q", SMALL, params=["2.weight", net[2].bias])
    assert rec.params == ["2.weight", "2.bias"] and rec.dim == 18
    assert all(p.requires_grad for p in net.parameters())  # restored
    assert rec.weight_space is None
    assert abs(rec.curves["prefix"][-1] - 1.0) < 1e-6
    torch.testing.assert_close(net[0].weight.detach(), first, rtol=0, atol=0)  # not in params: did not move


# ------------------------------------------------------------------------------ stability
class Quadratic(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(d, dtype=torch.float64))


EIGS = torch.tensor([10.0, 5.0, 2.0, 1.0, 0.5, 0.2], dtype=torch.float64)


def _quadratic_tasks():
    """0.5 (theta - c_t)^T H (theta - c_t), full batch: the mix Hessian is H, lambda_max = 10."""
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    h = q @ torch.diag(EIGS) @ q.T
    centres = {t: torch.randn(6, generator=g, dtype=torch.float64) for t in ("a", "b")}
    return {t: (lambda m, i, c=c: 0.5 * (m.theta - c) @ h @ (m.theta - c)) for t, c in centres.items()}


@pytest.mark.parametrize("eta_lambda", [1.0, 1.9])
def test_stable_step_on_a_known_quadratic(eta_lambda):
    cfg = ProtocolConfig(
        multitask_steps=30,
        multitask_lr=0.1,
        forget_steps=30,
        forget_lr=0.1,
        recover_steps=10,
        dense_steps=6,
        eval_every=1,
        power_iters=60,
        eta_lambda=eta_lambda,
        rank_n=2,
    )
    rec = run_protocol(Quadratic(6), _quadratic_tasks(), "a", cfg)
    s = rec.stability
    assert s["lambda_max_forg"] == pytest.approx(10.0, rel=1e-3)  # constant Hessian: same at theta_rec
    assert s["lambda_max_rec"] == pytest.approx(10.0, rel=1e-3)
    assert s["eta_lambda_forg"] < 2 and s["eta_lambda_rec"] < 2 and s["stable"]
    assert s["monotone"] and rec.eval_losses["rec"]["mix_loss"] < rec.eval_losses["forg"]["mix_loss"]
    assert all(b < a for a, b in zip(rec.losses["recover"], rec.losses["recover"][1:]))


def test_a_step_past_the_bound_is_flagged():
    # negative control: eta * lambda_max = 2.5 makes the top eigendirection grow by 1.5 per step
    cfg = ProtocolConfig(
        multitask_steps=30,
        multitask_lr=0.1,
        forget_steps=30,
        forget_lr=0.1,
        recover_steps=10,
        dense_steps=6,
        eval_every=1,
        power_iters=60,
        recover_lr=0.25,
        rank_n=0,
    )
    rec = run_protocol(Quadratic(6), _quadratic_tasks(), "a", cfg)
    assert rec.stability["eta_lambda_forg"] == pytest.approx(2.5, rel=1e-3)
    assert not rec.stability["stable"] and not rec.stability["monotone"]
    assert rec.rank == {}


def _noisy_quadratic_tasks(scale: float):
    """The tasks of ``_quadratic_tasks`` with a centre that moves with the batch index: minibatch
    gradients of one fixed Hessian."""
    g = torch.Generator().manual_seed(3)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    h = q @ torch.diag(EIGS) @ q.T

    def task(c):
        def loss(m, i):
            n = torch.randn(6, generator=torch.Generator().manual_seed(int(i)), dtype=torch.float64)
            return 0.5 * (m.theta - c - scale * n) @ h @ (m.theta - c - scale * n)

        return loss

    centres = {t: torch.randn(6, generator=g, dtype=torch.float64) for t in ("a", "b")}
    return {t: task(c) for t, c in centres.items()}


def test_krylov_holds_gd_exactly_and_flags_minibatch_steps():
    """GD on a quadratic: theta_k - theta_0 ∈ K_k(H, g_0) and the k updates span K_k
    (capture and overlap 1 at every k).  With index-dependent centres (minibatch SGD) the
    recovery's own steps leave K_k: the check can fail."""
    cfg = ProtocolConfig(
        multitask_steps=30,
        multitask_lr=0.1,
        forget_steps=30,
        forget_lr=0.1,
        recover_steps=10,
        dense_steps=5,
        eval_every=1,
        power_iters=60,
        rank_n=0,
        krylov_k=5,
    )
    rec = run_protocol(Quadratic(6), _quadratic_tasks(), "a", cfg)
    kr = rec.krylov
    assert kr["k"] == 5 and kr["dim"] == 5 and len(kr["gd_capture"]) == 5
    # the overlap orthonormalises k updates whose components shrink like (1 - eta*lambda)^j: a
    # float64 tolerance of 1e-5 at k = 5 on eigenvalues 0.2..10
    assert min(kr["gd_capture"]) > 1 - 1e-8 and min(kr["gd_overlap"]) > 1 - 1e-5
    assert min(kr["sgd_capture"]) > 1 - 1e-8  # full-batch tasks: the recovery is this GD too
    assert kr["gd_loss"][1] < kr["gd_loss"][0]
    noisy = run_protocol(Quadratic(6), _noisy_quadratic_tasks(2.0), "a", cfg)
    assert min(noisy.krylov["gd_capture"]) > 1 - 1e-8  # the fixed loss: still exact
    assert noisy.krylov["sgd_capture"][0] < 0.95 and noisy.krylov["sgd_overlap"][0] < 0.95
    assert json.loads(json.dumps(noisy.to_dict()))["krylov"]["k"] == 5
    assert run_protocol(Quadratic(6), _quadratic_tasks(), "a", SMALL).krylov is None  # krylov_k = 0 skips it


# ------------------------------------------------------------------------------ Delta W = s B A
def test_delta_w_is_b_a_times_scaling_of_the_peft_modules():
    model = _lora_model(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.normal_()  # B != 0
    pairs = ba_pairs(model)
    mods = [m for _, m in model.named_modules() if isinstance(getattr(m, "lora_A", None), nn.ModuleDict)]
    assert len(pairs) == len(mods) == 2
    assert [pr.scaling for pr in pairs] == [m.scaling["default"] for m in mods] == [3.0, 3.0]  # alpha / r
    ref = torch.cat(
        [
            (m.lora_B["default"].weight.double() @ m.lora_A["default"].weight.double() * m.scaling["default"]).reshape(
                -1
            )
            for m in mods
        ]
    )
    theta = flat_params(model).float()
    got = delta_w(theta, torch.zeros_like(theta), pairs).double()
    torch.testing.assert_close(got, ref.detach(), rtol=1e-6, atol=1e-6)
    assert float(delta_w(theta, theta, pairs).abs().max()) == 0.0
    # push_w is the Jacobian of the bilinear map: a central difference is exact up to rounding
    v = torch.randn(theta.numel(), generator=torch.Generator().manual_seed(2))
    eps = 1e-2
    fd = (delta_w(theta + eps * v, theta, pairs).double() - delta_w(theta - eps * v, theta, pairs).double()) / (2 * eps)
    torch.testing.assert_close(fd, push_w(v, theta, pairs).double(), rtol=1e-3, atol=1e-3)
    # increments telescope to the end point
    thetas = [theta + j * 0.1 * v for j in (1, 2, 3)]
    kept, norms, end = ba_increments(thetas, theta, pairs, keep=2)
    assert kept.shape == (2, ref.numel()) and norms.shape == (3,)
    torch.testing.assert_close(end, delta_w(thetas[-1], theta, pairs).double())


def test_a_model_without_lora_has_no_pairs():
    assert ba_pairs(nn.Linear(3, 2)) == []


# ------------------------------------------------------------------------------ bad inputs
def _one_line(excinfo, words: str) -> None:
    msg = str(excinfo.value)
    assert "\n" not in msg and re.search(words, msg), msg


@pytest.mark.parametrize(
    "change, words",
    [
        ({"recover_steps": 0}, "recover_steps"),
        ({"forget_steps": -1}, "forget_steps"),
        ({"multitask_steps": -2}, "multitask_steps"),
        ({"recover_lr": 0.0}, "recover_lr"),
        ({"forget_lr": -1e-3}, "forget_lr"),
        ({"dense_steps": 0}, "dense_steps"),
        ({"dense_steps": 51}, "dense_steps"),
        ({"rank_n": 1}, "rank_n"),
        ({"power_iters": 0}, "power_iters"),
        ({"krylov_k": 21}, "krylov_k"),
        ({"krylov_k": -1}, "krylov_k"),
    ],
)
def test_bad_configs_raise(change, words):
    with pytest.raises(InputError) as e:
        ProtocolConfig(**change)
    _one_line(e, words)


def test_bad_calls_raise():
    net = nn.Linear(2, 1)
    losses = {"a": lambda m, i: m(torch.ones(1, 2)).sum() ** 2, "b": lambda m, i: m(torch.zeros(1, 2)).sum() ** 2}
    with pytest.raises(InputError) as e:
        run_protocol(net, losses, "z", SMALL)
    _one_line(e, "focus task 'z'")
    with pytest.raises(InputError) as e:
        run_protocol(net, {"a": losses["a"]}, "a", SMALL)
    _one_line(e, "at least 2 tasks")
    with pytest.raises(InputError) as e:
        run_protocol(net, losses, "a", SMALL, params=["nope"])
    _one_line(e, "'nope'")
    net.requires_grad_(False)
    with pytest.raises(InputError) as e:
        run_protocol(net, losses, "a", SMALL)
    _one_line(e, "no parameters to move")
    with pytest.raises(InputError) as e:
        run_protocol(net, losses, "a", SMALL, params=[])
    _one_line(e, "no parameters to move")
    assert not any(p.requires_grad for p in net.parameters())  # flags restored after the error


# ------------------------------------------------------------------------------ public surface, docs
def test_public_names():
    for name in (
        "run_protocol",
        "ProtocolConfig",
        "ProtocolRecord",
        "INDEX_OFFSETS",
        "unit_rows",
        "BAPair",
        "ba_pairs",
        "delta_w",
        "push_w",
        "ba_increments",
        "krylov_basis",
        "krylov_curves",
        "matched_horizon",
    ):
        assert name in locallinear.__all__ and getattr(locallinear, name) is not None


def test_docs_example_runs():
    text = (ROOT / "docs" / "locallinear.md").read_text()
    section = text.split("## Run the protocol on your own model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "docs/locallinear.md", "exec"), scope)
    rec = scope["rec"]
    assert abs(rec.curves["prefix"][-1] - 1.0) < 1e-6 or rec.config.dense_steps < rec.config.recover_steps
    json.dumps(rec.to_dict(), allow_nan=False)


def test_forgetting_facts_and_refusals():
    """The criterion is the others' mean exact match below fraction x its start value; a run that
    stopped short of it, or whose step came from an unconverged power iteration, is refused."""
    from updatescope.locallinear.lab import forget_facts, refusals

    base = {"copy": 1.0, "reverse": 1.0, "sort": 0.9, "mod-add": 0.8}
    rows = [{"step": 10 * i, "metrics": {"copy": 1.0, "reverse": 0.8, "sort": 0.7, "mod-add": 0.6}} for i in (1, 2)]
    f = forget_facts(rows, base, "copy", 0.5, 20)
    assert f["steps"] == 2 and f["cap"] == 20 and f["start_value"] == pytest.approx(0.9)
    assert f["target"] == pytest.approx(0.45) and f["value"] == pytest.approx(0.7) and not f["reached"]
    info = {"forget": f, "radius_converged": True}
    assert len(refusals(info)) == 1 and "not below the target 0.450" in refusals(info)[0]
    rows[-1]["metrics"] = {"copy": 1.0, "reverse": 0.4, "sort": 0.4, "mod-add": 0.4}
    f2 = forget_facts(rows, base, "copy", 0.5, 20)
    assert f2["reached"] and refusals({"forget": f2, "radius_converged": True}) == []
    assert refusals({"forget": f2, "radius_converged": False}) == ["the power iteration that set eta did not converge"]
