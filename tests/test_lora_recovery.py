"""The ``lora-recovery`` experiment: config checks, the BA-space maps against peft's own delta
weights, the verdict rule, and a tiny end-to-end run on a random Llama."""

import dataclasses
import json
import math

import pytest
import torch

from _tiny_lm import WordTokenizer, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import heads
from updatescope.experiments.configs import LoRAConfig
from updatescope.experiments.lora_recovery import runner as lora_recovery
from updatescope.experiments.lora_recovery.config import LoRARecoveryConfig

WORDS = {"a": "alpha beta gamma delta epsilon", "b": "one two three four five", "c": "red green blue cyan teal"}


def _texts(name, split, max_chars):
    words = WORDS[name[-1]].split()
    salt = {"train": 1, "eval": 2, "sketch": 0}[split]
    return [" ".join(words[(i * 3 + j * (i + 1) + salt) % 5] for j in range(20)) for i in range(6)]


TINY = {
    "tasks": ["dom_a", "dom_b", "dom_c"],
    "focus": "dom_c",
    "train_tokens": 96,
    "eval_tokens": 32,
    "lora": {
        "n_last": 1,
        "r": 2,
        "alpha": 4,
        "targets": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "lr": 2e-2,
        "steps": 6,
        "batch": 2,
        "seq_len": 8,
    },
    "forget_lr": 3e-2,
    "forget_cap": 20,  # a cap, not a length: the tiny run reaches its criterion after a few steps
    "forget_rise": 0.02,
    "forget_eval_every": 2,
    "recover_steps": 6,
    "dense_steps": 4,
    "recover_eval_every": 3,
    "power_iters": 100,  # a cap: the convergence checks stop each power iteration
    "hessian_batch": 2,
    "batches_per_task": 2,
    "plane_batch": 2,
    "rank_n": 3,
    "drift_steps": [1, 3, 6],
    "seeds": 2,
}


# ------------------------------------------------------------------------------ config
def test_defaults_are_valid_and_quick_is_small():
    full, quick = LoRARecoveryConfig.defaults(False, 2), LoRARecoveryConfig.defaults(True, 2)
    assert full.seed == quick.seed == 2 and quick.quick and not full.quick
    assert full.seeds >= 3 and quick.seeds >= 2 and full.focus in full.tasks
    assert quick.train_tokens < full.train_tokens and quick.recover_steps < full.recover_steps
    assert quick.dense_steps >= 20 and full.dense_steps >= 20  # the paper's k = 10 and k = 20
    assert set(full.lora.targets) <= {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"focus": "reviews"}, "focus"),
        ({"tasks": ("code_email",), "focus": "code_email"}, "tasks"),
        ({"seeds": 2}, "seeds"),
        ({"dense_steps": 500}, "dense_steps"),
        ({"drift_steps": (1, 10**4)}, "drift_steps"),
        ({"eta_lambda": 2.0}, "eta_lambda"),
        ({"rank_n": 1}, "rank_n"),
        ({"forget_rise": 0.0}, "forget_rise"),
    ],
)
def test_bad_configs_are_refused(change, words):
    with pytest.raises(InputError, match=words):
        dataclasses.replace(LoRARecoveryConfig(), **change)


def test_quick_may_use_two_replicates_but_not_one():
    assert dataclasses.replace(LoRARecoveryConfig.defaults(True), seeds=2).seeds == 2
    with pytest.raises(InputError, match="seeds"):
        dataclasses.replace(LoRARecoveryConfig.defaults(True), seeds=1)


# ------------------------------------------------------------------------------ BA space
@pytest.fixture
def tail():
    from updatescope.experiments.groundtruth import lora as lora_gt

    model, tok = tiny_llama(64), WordTokenizer(64)
    data = lora_gt.capture_block_inputs(
        model, tok, _texts("x_a", "train", 0), n_last=1, fp="t", seq_len=8, use_cache=False
    )
    cfg = dataclasses.replace(
        LoRARecoveryConfig.defaults(True),
        lora=LoRAConfig(n_last=1, r=2, alpha=6, targets=("q_proj", "v_proj"), lr=1e-2, steps=1, batch=2, seq_len=8),
    )
    t = lora_recovery.lora_tail(model, data, cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in t.parameters():
            if p.requires_grad:
                p.normal_()  # B != 0, so BA and its Jacobian are non-trivial
    return t


def test_delta_w_equals_peft_delta_weights(tail):
    from updatescope.locallinear import flat_params

    theta = flat_params(tail).double()
    pairs = lora_recovery.ba_pairs(tail)
    assert len(pairs) == 2 and {s for *_, s in pairs} == {3.0}
    # oracle: peft's own delta weight of every adapted module, in layout order
    mods = [m for n, m in tail.named_modules() if hasattr(m, "get_delta_weight")]
    ref = torch.cat([m.get_delta_weight("default").detach().double().reshape(-1) for m in mods])
    got = lora_recovery.delta_w(theta, torch.zeros_like(theta), pairs).double()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    # relative to itself: zero
    assert float(lora_recovery.delta_w(theta, theta, pairs).abs().max()) == 0.0


def test_push_w_is_the_jacobian_of_ba(tail):
    from updatescope.locallinear import flat_params

    theta0 = flat_params(tail).double()
    pairs = lora_recovery.ba_pairs(tail)
    v = torch.randn(theta0.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    eps = 1e-4
    # central difference of the bilinear map: exact up to float32 rounding of delta_w
    fd = (
        lora_recovery.delta_w(theta0 + eps * v, theta0, pairs).double()
        - lora_recovery.delta_w(theta0 - eps * v, theta0, pairs).double()
    ) / (2 * eps)
    jv = lora_recovery.push_w(v, theta0, pairs).double()
    assert float((fd - jv).norm() / jv.norm()) < 1e-2
    # and BA increments sum to the end point
    thetas = [theta0 + (j + 1) * 0.1 * v for j in range(4)]
    kept, norms, end = lora_recovery._w_increments(thetas, theta0, pairs, keep=2)
    assert kept.shape[0] == 2 and norms.shape == (4,)
    torch.testing.assert_close(end, lora_recovery.delta_w(thetas[-1], theta0, pairs).double(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ verdict rule
def test_pushed_rows_are_the_jacobian_applied_row_by_row(tail):
    pairs = lora_recovery.ba_pairs(tail)
    from updatescope.locallinear import flat_params

    theta0 = flat_params(tail).float()
    theta0 = theta0 + 0.1 * torch.randn(theta0.shape, generator=torch.Generator().manual_seed(3))
    g = torch.randn(3, theta0.numel(), generator=torch.Generator().manual_seed(4))
    got = lora_recovery._push_rows(g, theta0, pairs)
    assert got.dtype == torch.float32 and got.shape == (3, lora_recovery.push_w(g[0], theta0, pairs).numel())
    for i in range(3):
        torch.testing.assert_close(got[i], lora_recovery.push_w(g[i], theta0, pairs))
    # linear in the rows: the pushed plane of a stack is the push of its span
    torch.testing.assert_close(
        lora_recovery._push_rows((g[:1] + 2 * g[1:2]), theta0, pairs)[0], got[0] + 2 * got[1], rtol=1e-5, atol=1e-5
    )


def test_beyond_rule():
    s = {
        "curve.a": {"mean": [0.9, 0.5], "se": [0.01, 0.2]},
        "curve.n1": {"mean": [0.5, 0.5], "se": [0.05, 0.0]},
        "curve.n2": {"mean": [0.8], "se": [0.01]},
    }
    assert lora_recovery.beyond(s, "a", 0, ["n1", "n2"]) is True
    assert lora_recovery.beyond(s, "a", 1, ["n1", "n2"]) is False  # 0.5 - 0.4 below 0.5
    assert lora_recovery.beyond(s, "a", 2, ["n1"]) is None  # curve too short
    s["curve.n2"]["mean"][0] = 0.86  # 0.88 > 0.88 fails: within 2 SE of a null
    assert lora_recovery.beyond(s, "a", 0, ["n1", "n2"]) is False


# ------------------------------------------------------------------------------ tiny end to end
@pytest.fixture
def tiny(monkeypatch, tmp_path):
    from _tiny_lm import loader

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=64))
    monkeypatch.setattr(lora_recovery, "load_texts", _texts)
    return tmp_path


def test_lora_recovery_tiny_run(tiny):
    rec = reproduce("lora-recovery", tiny / "out", TINY)
    m = rec["metrics"]
    s, reps = m["summary"], m["replicates"]
    assert len(reps) == 2 and m["tasks"] == TINY["tasks"] and m["figures"] == [lora_recovery.FIGURE]
    # LoRA space is the adapters: q, k, v, o of one block at r = 2, hidden 16 (2 heads of 8, 2 kv heads)
    assert m["dim"] == 4 * (2 * 16 + 16 * 2) and m["dw_dim"] == 4 * 16 * 16
    for key in lora_recovery.CAPTURE_CLAIMS:
        for name in (key, *lora_recovery.CAPTURE_CLAIMS[key]):
            curve = s[f"curve.{name}"]
            width = len(TINY["tasks"]) * TINY["batches_per_task"]  # static planes span their full width
            want = {"local_plane": width, "dw_static": width, "local_plane_g0": width + 1, "dw_static_g0": width + 1}
            assert len(curve["mean"]) == want.get(name, TINY["dense_steps"])
            assert curve["n"] == 2
            assert all(-1e-9 <= v <= 1 + 1e-9 for v in curve["mean"] if not math.isnan(v))
    for r in reps:
        c = r["curves"]
        # a prefix curve never falls (nested spans) and the walk's last step is its own end point's
        assert all(b >= a - 1e-12 for a, b in zip(c["prefix"], c["prefix"][1:]))
        assert all(b >= a - 1e-12 for a, b in zip(c["dw_prefix"], c["dw_prefix"][1:]))
        st = r["stability"]
        # eta from the largest of the radius draws; eta * rho at theta_forg is >= 1 once re-measured
        assert st["recover_lr"] == pytest.approx(1.0 / max(x["radius"] for x in r["radius_draws"]))
        assert st["eta_lambda_set"] == pytest.approx(1.0) and st["eta_lambda_forg"] >= 1.0 - 1e-9
        assert len(r["step_norms"]) == TINY["recover_steps"] and r["forget_steps"] >= 1
        assert set(r["forget_rise"]) == set(TINY["tasks"])
        assert r["drift"]["steps"] == [1, 3, 6] and r["task_plane"]["batches_disjoint"]
        # the resample floor measured at every drift step; drift divided by both ends' floors
        for key, plane in (("drift", "task_plane"), ("drift_dw", "task_plane_dw")):
            dr, start = r[key], r[plane]["resample_floor"]
            assert len(dr["floor"]) == 3 and all(0 <= v <= 1 + 1e-9 for v in dr["floor"])
            for ov, fl, norm in zip(dr["overlap"], dr["floor"], dr["normalised"]):
                assert norm == pytest.approx(ov / math.sqrt(start * fl))
            # the initial gradient direction added to the task plane can only capture more
            assert r[plane]["capture_forg_g0"] >= r[plane]["capture_forg"] - 1e-9
        assert r["drift_dw"]["steps"] == r["drift"]["steps"]
        assert 0 <= r["task_plane_dw"]["resample_floor"] <= 1 + 1e-9
        assert all(0 <= v <= 1 + 1e-9 for v in r["drift_dw"]["overlap"])
        assert r["task_plane_dw"]["random_overlap"] == pytest.approx(len(TINY["tasks"]) / m["dw_dim"])
        kinds = {"task", "gaussian", "shuffled"}
        for t in TINY["tasks"]:
            assert set(r["rank"][t]) == {f"{p}{k}{u}" for p in ("", "dw_") for k in kinds for u in ("", "_unit")}
            for k in ("task", "dw_task"):
                assert 1 <= r["rank"][t][k]["entropy_rank"] <= TINY["rank_n"] + 1e-9
    # k = 10 and 20 lie past the 4 recorded steps: no verdict rather than a wrong one
    assert m["verdicts"]["prefix.k10"] is None and isinstance(m["verdicts"]["forgetting_clear"], bool)
    assert r["step_norms"] != reps[0]["step_norms"] or r is reps[0]  # fresh minibatches per replicate
    assert reps[0]["step_norms"] != reps[1]["step_norms"]
    assert m["resumed_replicates"] == []
    _check_regime(m, TINY)
    # the docs table renders the BA-space plane, drift and rank rows of a new record
    rows = _table_module().lora_recovery_table({**m, "config": rec["config"]})
    dw = [r for r in rows if "ΔW = BA space" in r and ("task plane" in r or "effective rank" in r)]
    assert len(dw) == 2 + len(TINY["tasks"]) and all("nan" not in r for r in dw)
    # ... and its regime facts: one row per replicate, both reported
    assert sum(r.startswith(f"| {i} | {i} | ") and r.endswith("| reported |") for r in rows for i in (0, 1)) == 2
    pytest.importorskip("matplotlib")
    assert (tiny / "out" / lora_recovery.FIGURE).stat().st_size > 0


def _check_regime(m, cfg):
    """The regime facts of every replicate of a tiny run: its own theta_mt, forgetting to its
    criterion, radius draws with their convergence checks (and eta from the largest)."""
    reps = m["replicates"]
    assert m["reported_replicates"] == [0, 1] and m["refused"] == []
    assert m["eta_rule"]["draws"] == 3 and m["eta_rule"]["iters"] == cfg["power_iters"]
    for r in reps:
        assert r["refused"] == [] and r["mt_seed"] == r["replicate"]  # seed 0 + r
        f = r["forget"]
        assert f["reached"] and f["value"] >= f["target"] == cfg["forget_rise"] and 1 <= f["steps"] <= f["cap"]
        assert f["steps"] == r["forget_steps"] and f["cap"] == cfg["forget_cap"]
        draws = r["radius_draws"]
        assert len(draws) == 3 and len({d["seed"] for d in draws}) == 3  # different Hessian batches
        for d in draws + [r["stability"]["radius_check"], r["stability"]["radius_rec"]]:
            assert d["radius"] > 0 and 1 <= d["iters"] <= cfg["power_iters"] and isinstance(d["converged"], bool)
            assert d["converged"] == (d["rel_change"] <= 1e-3 and d["residual"] <= 0.05)
        top = max(draws, key=lambda d: d["radius"])
        assert r["radius_converged"] == top["converged"] is True
        assert r["stability"]["lambda_max_forg"] == top["radius"]
    # replicates vary theta_mt: their own multitask phase (history per replicate), other losses
    assert reps[0]["multitask_history"] != reps[1]["multitask_history"]
    assert reps[0]["losses"]["mt"] != reps[1]["losses"]["mt"]
    assert reps[0]["multitask_history"][-1]["step"] == TINY["lora"]["steps"]


def test_shared_theta_mt_when_not_varied(tiny):
    m = reproduce("lora-recovery", tiny / "out", {**TINY, "vary_theta_mt": False})["metrics"]
    reps = m["replicates"]
    assert [r["mt_seed"] for r in reps] == [0, 0] and reps[0]["losses"]["mt"] == reps[1]["losses"]["mt"]
    assert m["multitask_history"] == reps[0]["multitask_history"] == reps[1]["multitask_history"]


def test_a_replicate_that_hits_the_cap_is_refused_and_left_out(tiny):
    # a rise no two steps can reach: forgetting stops at the cap in every replicate
    rec = reproduce("lora-recovery", tiny / "out", {**TINY, "forget_rise": 100.0, "forget_cap": 2})
    m = rec["metrics"]
    assert m["summary"] is None and m["verdicts"] is None and m["reported_replicates"] == []
    assert [x["replicate"] for x in m["refused"]] == [0, 1]
    for r in m["replicates"]:
        assert r["forget"]["steps"] == 2 and not r["forget"]["reached"] and r["forget"]["value"] < 100.0
        assert len(r["refused"]) == 1 and "stopped at the cap (2 steps)" in r["refused"][0]
        assert "stability" not in r and "curves" not in r  # no recovery, no analysis of a missed regime
        assert len(r["radius_draws"]) == 3  # the regime facts are still recorded
    assert m.get("figures", []) == []  # no figure of a record with nothing reported
    mod = _table_module()
    full = {**m, "config": rec["config"]}
    rows = mod.lora_recovery_table(full)
    assert rows[-1].startswith("No replicate is reported (2 refused)")
    assert sum("| not reached (stopped at the cap) |" in r and "refused: forgetting stopped" in r for r in rows) == 2
    assert mod.plane_verdicts(full)[0].startswith("No replicate") and mod.lora_claims(full)[0].startswith("No")


def test_an_unconverged_radius_leaves_its_replicate_out_of_the_summary(tiny, monkeypatch):
    real = lora_recovery._radius_draw

    def draw(cfg, tail, data, theta, seed):  # replicate 1's draws at theta_forg (seeds 1 + 1000 j) fail
        out = real(cfg, tail, data, theta, seed)
        return {**out, "converged": False} if seed % 1000 == 1 else out

    monkeypatch.setattr(lora_recovery, "_radius_draw", draw)
    rec = reproduce("lora-recovery", tiny / "out", TINY)
    m = rec["metrics"]
    assert m["reported_replicates"] == [0]
    assert m["refused"] == [{"replicate": 1, "reasons": ["the power iteration that set eta did not converge"]}]
    s = m["summary"]
    assert s["curve.prefix"]["n"] == 1 and s["forget_steps"]["n"] == 1
    assert s["curve.prefix"]["mean"] == m["replicates"][0]["curves"]["prefix"]  # replicate 0's numbers only
    rows = _table_module().lora_recovery_table({**m, "config": rec["config"]})
    assert any(r.startswith("Replicates: 1 reported of 2") for r in rows)
    assert any(r.startswith("| 1 | 1 | ") and "refused: the power iteration" in r for r in rows)


def test_an_interrupted_run_resumes_at_its_first_unfinished_replicate(tiny, monkeypatch):
    first = reproduce("lora-recovery", tiny / "a", TINY)["metrics"]
    # a stop after replicate 0: its cache entry stays, replicate 1's is lost
    for p in (tiny / "cache").rglob("lora-recovery-rep1-*.pt"):
        p.unlink()
    again = reproduce("lora-recovery", tiny / "b", TINY)["metrics"]
    assert again["resumed_replicates"] == [0]
    # the same numbers (wall times aside; NaN compared as text)
    same = lambda reps: json.dumps([{k: v for k, v in x.items() if k != "timings_s"} for x in reps], sort_keys=True)
    assert same(again["replicates"]) == same(first["replicates"])
    assert again["replicates"][0]["timings_s"] == first["replicates"][0]["timings_s"]  # loaded, not rerun
    # another setting is another key: nothing is loaded
    other = reproduce("lora-recovery", tiny / "c", {**TINY, "recover_eval_every": 2})["metrics"]
    assert other["resumed_replicates"] == []
    # so is another version of the code
    monkeypatch.setattr(lora_recovery, "_code_digest", lambda: "edited")
    assert reproduce("lora-recovery", tiny / "d", TINY)["metrics"]["resumed_replicates"] == []


# ------------------------------------------------------------------------------ docs table
def _table_module():
    from _docs_script import docs_script

    return docs_script("locallinear_table")


def test_docs_table_follows_the_record():
    import copy
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    mod = _table_module()
    text = (root / "docs" / "locallinear.md").read_text()
    assert any(kind == "lora-recovery" for _, kind, *_ in mod.BLOCK.findall(text))
    rec = json.loads((root / "docs" / "results" / "lora_recovery_quick.json").read_text())
    m = {**rec["metrics"], "config": rec["config"]}
    before = "\n".join(mod.lora_recovery_table(m))
    m2 = copy.deepcopy(m)
    s = m2["summary"]
    s["curve.dw_prefix"]["mean"][9] += 0.05
    assert "\n".join(mod.lora_recovery_table(m2)) != before
    # the verdict follows the numbers: a prefix at 100% with no spread above nulls at 0 is beyond them
    for key in ("curve.prefix", "curve.walk", "curve.independent", "curve.local_plane"):
        s[key]["mean"] = [1.0 if key == "curve.prefix" else 0.0] * len(s[key]["mean"])
        s[key]["se"] = [0.0] * len(s[key]["mean"])
    rows = [r for r in mod.lora_recovery_table(m2) if "trajectory prefix captures Δ_GD, k = 10" in r]
    assert rows and rows[0].endswith("| beyond every null |")


# ------------------------------------------------------------------------------ plane sample sizes
def test_plane_draws_are_disjoint_while_they_fit_else_with_replacement():
    a, b, disjoint = lora_recovery.plane_draws(10, 5, 0)
    assert disjoint and len(set(a.tolist()) | set(b.tolist())) == 10
    a, b, disjoint = lora_recovery.plane_draws(10, 8, 0)
    assert not disjoint and a.numel() == b.numel() == 8 and int(a.max()) < 10


def test_micro_batch_accumulation_equals_the_whole_batch(tail):
    from updatescope.experiments.groundtruth import lora as lora_gt
    from updatescope.locallinear import flat_grad

    data = lora_gt.capture_block_inputs(
        tiny_llama(64), WordTokenizer(64), _texts("x_a", "train", 0), n_last=1, fp="t", seq_len=8, use_cache=False
    )
    rows = torch.arange(data["labels"].shape[0])
    whole = flat_grad(lora_recovery._loss(tail, data, rows), tail).double()
    parts, acc = lora_recovery._part_grads(tail, data, rows, 3)
    assert parts.shape[0] == 3 and not torch.allclose(parts[0], parts[1])  # the parts differ ...
    torch.testing.assert_close(acc, whole, rtol=1e-4, atol=1e-6)  # ... their count-weighted mean does not


def test_static_plane_width_must_split_into_the_two_draws():
    with pytest.raises(InputError, match="batches_per_task"):
        dataclasses.replace(LoRARecoveryConfig(), batches_per_task=7)
    full, quick = LoRARecoveryConfig.defaults(False), LoRARecoveryConfig.defaults(True)
    assert min(full.plane_batch, quick.plane_batch) >= 256 and min(full.rank_n, quick.rank_n) >= 100
