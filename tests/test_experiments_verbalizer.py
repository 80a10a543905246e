"""The verbalizer runner on a tiny random Llama: plumbing, activation identity, metrics."""

import math

import pytest

from _tiny_lm import loader, reproduce
from updatescope.experiments import heads, scoring
from updatescope.experiments.groundtruth import head as head_gt
from updatescope.experiments.verbalizer import runner as verbalizer


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader())
    words = ["fine", "dull", "bright", "slow", "warm", "cold", "sharp", "flat"]
    sents = [(f"the film was {words[i % 8]} and {words[(3 * i) % 8]} number {i}", i % 2) for i in range(30)]
    monkeypatch.setattr(verbalizer, "load_sentences", lambda: sents)
    return tmp_path


@pytest.mark.parametrize("gt", ["head", "lora"])
def test_verbalizer_tiny_run(tiny, gt):
    cfg = {
        "sketch_dim": 64,
        "verify_n": 6,
        "ground_truth": gt,
        "lora": {"n_last": 1, "r": 2, "alpha": 4, "targets": ["q_proj", "v_proj"], "lr": 1e-2, "steps": 3, "batch": 8},
        "finetune": {"lr": 1e-2, "steps": 3, "batch": None, "extra_rows": 8},
    }
    res = reproduce("verbalizer", tiny / "out", cfg)
    m = res["metrics"]
    assert set(res) == {"name", "config", "metrics", "env", "seconds"}
    assert len(res["config"]["verbalizers"]) == 6
    # same prefix -> same head input, up to float round-off of differently padded batches
    assert m["activation_identity"]["max_abs_diff"] < 1e-4 * max(1.0, m["activation_identity"]["max_abs_activation"])
    # activation-only methods see identical streams: constant scores -> chance top-1
    assert m["score_spread"]["activation"] < 1e-9
    assert m["score_spread"]["cka"] < 1e-9
    assert m["summary"]["activation"]["top1"] == pytest.approx(m["summary"]["activation"]["chance_top1"])
    # the error side differs between sets
    assert m["score_spread"]["error"] > 0 and m["score_spread"]["exact_error"] > 0
    for method in ("fisher", "exact_fisher", "grad_cos", "random"):
        h = m["summary"][method]
        assert 0.0 <= h["top1"] <= 1.0 and h["regret_mean"] >= 0.0
    # transfer table: 6 targets x 6 sources, finite
    tr = m["ground_truth"]["transfer"]
    assert len(tr) == 6 and all(len(r) == 6 and all(math.isfinite(v) for v in r.values()) for r in tr.values())
    assert (tiny / "out" / "verbalizer.png").is_file()
    # trivial baselines: same words up to case is the family; word mass is a probability
    fam = m["scores"]["family"]
    assert fam["Yes/No"]["yes/no"] == 1.0 and fam["Yes/No"]["True/False"] == 0.0
    wp = m["scores"]["word_prob"]["Yes/No"]
    assert all(0.0 < v < 1.0 for v in wp.values()) and len(set(wp.values())) > 1
    # the source size is identical for every set: exactly chance, like activation-only
    assert m["summary"]["size"]["top1"] == pytest.approx(m["summary"]["size"]["chance_top1"])
    assert len(m["ground_truth"]["transfer_by_seed"]) == 3 and m["truth_noise"]["ceiling"] is not None


def test_transfer_matrix_self_training_helps():
    import torch

    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(20, 5, generator=g) * 0.1
    acts = torch.randn(200, 5, generator=g)
    lab_a = (acts[:, 0] > 0).long()  # task A: tokens 0/1
    lab_b = (acts[:, 0] > 0).long() + 10  # task B: tokens 10/11, same inputs
    tr = {"a": {"acts": acts[:150], "labels": lab_a[:150]}, "b": {"acts": acts[:150], "labels": lab_b[:150]}}
    ev = {"a": {"acts": acts[150:], "labels": lab_a[150:]}, "b": {"acts": acts[150:], "labels": lab_b[150:]}}
    gt = head_gt.transfer_matrix(w0, None, tr, ev, steps=50, lr=0.05, batch=10**9)
    # training on a task lowers its own held-out loss, and helps it more than the other task does
    assert gt["transfer"]["a"]["a"] > 0 and gt["transfer"]["b"]["b"] > 0
    assert gt["transfer"]["a"]["a"] > gt["transfer"]["a"]["b"]
    assert gt["transfer"]["b"]["b"] > gt["transfer"]["b"]["a"]


def test_grad_cos_matches_baseline():
    import torch

    from updatescope.select.baselines import mean_gradient_cosine

    g = torch.Generator().manual_seed(1)
    w0 = torch.randn(30, 6, generator=g)
    tasks = {
        n: {"acts": torch.randn(12, 6, generator=g), "labels": torch.randint(0, 30, (12,), generator=g)} for n in "abc"
    }
    sc = scoring.score_methods(w0, None, tasks, sketch_dim=32, baselines=("cka",))
    for t in "abc":
        for s in "abc":
            if s == t:
                continue
            ref = mean_gradient_cosine(
                tasks[s]["acts"],
                heads.errors_of(w0, None, tasks[s]["acts"], tasks[s]["labels"]),
                tasks[t]["acts"],
                heads.errors_of(w0, None, tasks[t]["acts"], tasks[t]["labels"]),
            )
            assert sc["scores"]["grad_cos"][t][s] == pytest.approx(ref, abs=1e-6)


def test_verbalizer_contrast_design(tiny):
    """Flipped, one-shared-word and control sets: identical prefixes except the control's."""
    cfg = {
        "sketch_dim": 64,
        "verify_n": 6,
        "design": "contrast",
        "ground_truth": "head",
        "gt_seeds": 2,
        "finetune": {"lr": 1e-2, "steps": 3, "batch": None, "extra_rows": 8},
    }
    m = reproduce("verbalizer", tiny / "out", cfg)["metrics"]
    names = [c[0] for c in verbalizer.CONTRAST]
    ids = m["verbalizer_token_ids"]
    # the flipped set swaps the two words of Yes/No
    assert ids["No/Yes, flipped"] == {"positive": ids["Yes/No"]["negative"], "negative": ids["Yes/No"]["positive"]}
    # the control trains on the other half of the sentences, the same number of them
    rows = m["train_rows_per_set"]
    assert len(set(rows.values())) == 1 and set(rows) == set(names)
    # same words in either order (and the control) share a family; one shared word does not
    fam = m["scores"]["family"]["Yes/No"]
    assert fam["Yes/No, other half"] == fam["No/Yes, flipped"] == 1.0 and fam["Yes/Bad"] == 0.0
    # activation-only scores: one value over the identical-prefix sources, another for the control
    act = m["scores"]["exact_activation"]["Yes/No"]
    same = {round(v, 9) for s, v in act.items() if s != "Yes/No, other half"}
    assert len(same) == 1 and abs(act["Yes/No, other half"] - same.pop()) > 1e-6
    tr = m["ground_truth"]["transfer"]
    assert len(tr) == 6 and all(len(r) == 6 for r in tr.values())


def test_sketch_resolution_curve_matches_sketch_vs_exact():
    """Each point of the curve is sketch_vs_exact of the signatures at that size and seed; the
    error shrinks as the sketch grows (variance ~ 1/m)."""
    import torch

    import updatescope as us

    g = torch.Generator().manual_seed(2)
    w0 = torch.randn(40, 8, generator=g)
    tasks = {
        n: {"acts": torch.randn(200, 8, generator=g) + i, "labels": torch.randint(0, 40, (200,), generator=g)}
        for i, n in enumerate("abcd")
    }
    sc = scoring.score_methods(w0, None, tasks, sketch_dim=64, baselines=(), exact_n=None)
    res = scoring.sketch_resolution(w0, None, tasks, sc["exact_alignment"], dims=[64, 4096], seeds=3, base_seed=5)
    names = list(tasks)
    for m in (64, 4096):
        sigs = [
            heads.sketch_stream(w0, None, tasks[n]["acts"], tasks[n]["labels"], sketch_dim=m, seed=6, name=n)
            for n in names
        ]
        mats = us.alignment_matrix(sigs)
        ref = scoring.sketch_vs_exact(
            {k: scoring._table(names, mats[k]) for k in scoring.SKETCH_KINDS}, sc["exact_alignment"]
        )
        got = res["by_dim"][str(m)]["fisher"]
        assert got["mean_abs_err"]["values"][1] == pytest.approx(ref["fisher"]["mean_abs_err"])
        assert len(got["spearman"]["values"]) == 3
    err = {m: res["by_dim"][str(m)]["fisher"]["mean_abs_err"]["mean"] for m in (64, 4096)}
    assert err[4096] < err[64] / 2
    assert res["exact_range"]["fisher"] > 0


def test_verbalizer_records_the_resolution_curve(tiny):
    cfg = {
        "sketch_dim": 64,
        "verify_n": 6,
        "ground_truth": "head",
        "gt_seeds": 2,
        "resolution_dims": [32, 256],
        "resolution_seeds": 2,
        "finetune": {"lr": 1e-2, "steps": 3, "batch": None, "extra_rows": 8},
    }
    m = reproduce("verbalizer", tiny / "out", cfg)["metrics"]
    curve = m["sketch_resolution"]
    assert curve["dims"] == [32, 256] and set(curve["by_dim"]) == {"32", "256"}
    assert len(curve["by_dim"]["32"]["fisher"]["spearman"]["values"]) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"resolution_dims": []},
        {"resolution_dims": [100]},
        {"resolution_dims": [64], "resolution_seeds": 1},
        {"resolution_seeds": 3},
    ],
)
def test_bad_resolution_settings(bad):
    from updatescope.errors import InputError
    from updatescope.experiments import configure

    with pytest.raises(InputError):
        configure("verbalizer", settings=bad)


LORA = {"n_last": 1, "r": 2, "alpha": 4, "targets": ["q_proj", "v_proj"], "lr": 1e-2, "steps": 3, "batch": 8}


def test_verbalizer_budget_is_chosen_on_the_train_tail_only(tiny, monkeypatch):
    """The probe fine-tunes on train rows before the tail, evaluates on the tail, never on the
    eval split, and the truth is measured at the chosen budget."""
    seen = []
    real = verbalizer.lora_ground_truth

    def spy(model, tok, fp, prompts, tasks, n_train, lc, seed, log, rows=None, eval_rows=None):
        seen.append(
            (
                lc.steps,
                None if rows is None else {n: r.tolist() for n, r in rows.items()},
                None if eval_rows is None else eval_rows.tolist(),
                n_train,
                len(prompts),
            )
        )
        return real(model, tok, fp, prompts, tasks, n_train, lc, seed, log, rows=rows, eval_rows=eval_rows)

    monkeypatch.setattr(verbalizer, "lora_ground_truth", spy)
    cfg = {"sketch_dim": 64, "verify_n": 6, "gt_seeds": 2, "lora": LORA, "budget_grid": [1, 4]}
    res = reproduce("verbalizer", tiny / "out", cfg)
    b = res["metrics"]["budget"]
    assert [r["steps"] for r in b["grid"]] == [1, 4] and b["chosen"] in (1, 4) and b["seeds"] == 2
    assert res["config"]["lora_steps_used"] == b["chosen"]
    probe, truth = seen[:4], seen[4:]
    n_train = probe[0][3]
    assert b["validation_n"] == round(0.3 * n_train)
    n_fit = n_train - b["validation_n"]
    for _steps, rows, ev, _n, _total in probe:
        assert ev == list(range(n_fit, n_train))  # the train tail, not the eval split
        assert all(max(r) < n_fit for r in rows.values())
    assert [p[0] for p in probe] == [1, 1, 4, 4]
    assert len(truth) == 2 and all(t[0] == b["chosen"] and t[2] is None for t in truth)  # default: eval split


@pytest.mark.parametrize(
    "bad",
    [
        {"budget_grid": [3]},
        {"budget_grid": [3, 3]},
        {"budget_grid": [2.5, 4]},
        {"budget_grid": [2, 4], "ground_truth": "head"},
        {"budget_val_frac": 1.0},
    ],
)
def test_bad_budget_settings(bad):
    from updatescope.errors import InputError
    from updatescope.experiments import configure

    with pytest.raises(InputError):
        configure("verbalizer", settings=bad)
