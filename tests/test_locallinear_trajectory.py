"""Recovery protocol on a tiny model: shapes, bookkeeping, seeds; synthetic tasks."""

import pytest
import torch
from torch import nn

from updatescope.locallinear import (
    TASKS,
    DigitTasks,
    ModelConfig,
    ParamLayout,
    PhaseConfig,
    RecoveryConfig,
    TinyTransformer,
    flat_params,
    run_recovery,
    set_flat_params,
    swapped_params,
)


def _toy_tasks():
    """Two regression tasks on one small MLP: closures (model, index) -> loss."""
    w = {"a": torch.tensor([[1.0, -1.0, 0.5]]), "b": torch.tensor([[-0.5, 2.0, 1.0]])}

    def make(name):
        def loss(model, index):
            x = torch.randn(16, 3, generator=torch.Generator().manual_seed(index))
            return ((model(x) - x @ w[name].T) ** 2).mean()

        return loss

    return {n: make(n) for n in w}


def _cfg(**kw):
    return RecoveryConfig(
        multitask=PhaseConfig(steps=30, lr=1e-2),
        forget=PhaseConfig(steps=20, lr=1e-2),
        recover=PhaseConfig(steps=12, lr=5e-2, optimizer="sgd"),
        dense_steps=5,
        snapshot_every=4,
        **kw,
    )


def _run(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    return run_recovery(model, _toy_tasks(), "a", _cfg()), model


def test_recovery_bookkeeping_on_any_module():
    run, model = _run(0)
    d = ParamLayout.of(model).dim
    assert run.theta_mt.shape == run.theta_forg.shape == run.theta_rec.shape == (d,)
    assert run.updates.shape == (5, d)
    assert sorted(run.snapshots) == [0, 4, 8, 12]
    torch.testing.assert_close(run.snapshots[12], run.theta_rec)
    torch.testing.assert_close(run.delta_gd, run.theta_rec - run.theta_forg)
    # the dense updates telescope to theta_5 - theta_forg; snapshot 4 is theta_4
    torch.testing.assert_close(run.updates[:4].sum(0), run.snapshots[4] - run.theta_forg, atol=1e-6, rtol=0)
    phases = [r["phase"] for r in run.history]
    assert phases.count("multitask") == 30 and phases.count("recover") == 12
    assert run.forget_steps == 20  # no metrics -> no early stop


def test_recovery_reproduces_under_seed():
    a, _ = _run(1)
    b, _ = _run(1)
    c, _ = _run(2)
    assert torch.equal(a.theta_rec, b.theta_rec) and torch.equal(a.updates, b.updates)
    assert not torch.equal(a.theta_rec, c.theta_rec)


def test_forgetting_stops_early_on_metric_drop():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    tasks = _toy_tasks()
    metrics = lambda m: {n: -float(tasks[n](m, 999).detach()) for n in tasks}  # higher is better
    cfg = RecoveryConfig(
        multitask=PhaseConfig(steps=30, lr=1e-2),
        forget=PhaseConfig(steps=200, lr=5e-2, eval_every=1),
        recover=PhaseConfig(steps=6, lr=5e-2, optimizer="sgd"),
        dense_steps=3,
        snapshot_every=3,
        forget_fraction=2.0,  # negative scores: "worse than 2x"
    )
    run = run_recovery(model, tasks, "a", cfg, metrics=metrics)
    assert 1 <= run.forget_steps < 200


def test_config_errors_name_the_value():
    with pytest.raises(ValueError, match="optimizer"):
        PhaseConfig(steps=1, lr=1.0, optimizer="lbfgs")
    with pytest.raises(ValueError, match="dense_steps=9"):
        RecoveryConfig(PhaseConfig(1, 1.0), PhaseConfig(1, 1.0), PhaseConfig(5, 1.0), dense_steps=9)
    with pytest.raises(ValueError, match="focus"):
        run_recovery(nn.Linear(3, 1), _toy_tasks(), "zzz", _cfg())


def test_digit_tasks_targets_and_determinism():
    t = DigitTasks(seq_len=4, batch_size=8, seed=0)
    x = torch.tensor([[3, 1, 4, 1]])
    assert t.targets("copy", x).tolist() == [[3, 1, 4, 1]]
    assert t.targets("reverse", x).tolist() == [[1, 4, 1, 3]]
    assert t.targets("sort", x).tolist() == [[1, 1, 3, 4]]
    assert t.targets("mod-add", x).tolist() == [[4, 3, 7, 5]]
    assert torch.equal(t.batch("sort", 3), t.batch("sort", 3))
    assert not torch.equal(t.batch("sort", 3), t.batch("sort", 4))
    assert not torch.equal(t.batch("sort", 3, "select")[:, 1:], t.batch("sort", 3, "heldout")[:, 1:])
    seq = t.batch("mod-add", 0)
    assert seq.shape == (8, 10) and int(seq[0, 0]) == 11 + TASKS.index("mod-add") and int(seq[0, 5]) == 10


def test_tiny_transformer_shapes_and_param_swap():
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=1, d_model=16, n_head=2, seq_len=3)
    model = TinyTransformer(cfg)
    tasks = DigitTasks(seq_len=3, batch_size=4)
    assert model(tasks.batch("copy", 0)[:, :-1]).shape == (4, cfg.context, cfg.vocab)
    acc = tasks.accuracy(model, n=16)
    assert set(acc) == set(TASKS) and all(0.0 <= v <= 1.0 for v in acc.values())
    theta = flat_params(model)
    with swapped_params(model, torch.zeros_like(theta)):
        assert float(flat_params(model).abs().sum()) == 0.0
    torch.testing.assert_close(flat_params(model), theta)
    set_flat_params(model, theta + 1)
    torch.testing.assert_close(flat_params(model), theta + 1)
