"""steering-shadow: the span fractions against float64 oracles, the random null's mean,
the config's refusals, and the runner end to end on a tiny random Llama."""

import math

import pytest
import torch

from _tiny_lm import WordTokenizer, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import configure, heads
from updatescope.experiments import sentiment_texts as texts
from updatescope.experiments.steering_shadow import spans, verdicts


def _shadow(n=50, d=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g, dtype=torch.float64) + 0.3, g


def test_fractions_match_the_obvious_computation():
    D, g = _shadow()
    vecs = torch.randn(3, D.shape[1], generator=g, dtype=torch.float64)
    q = spans.orthonormal(vecs)
    assert torch.allclose(q.T @ q, torch.eye(3, dtype=torch.float64), atol=1e-12)
    # the oracle: project onto the span by least squares on the raw vectors, no QR, no Gram
    proj = vecs.T @ torch.linalg.solve(vecs @ vecs.T, vecs)  # (d, d) projector
    m = D.mean(0)
    assert spans.token_fraction(D.T @ D, q) == pytest.approx(float((D @ proj).pow(2).sum() / D.pow(2).sum()), 1e-12)
    assert spans.mean_fraction(m, q) == pytest.approx(float((proj @ m).pow(2).sum() / m.pow(2).sum()), 1e-12)
    # the ceiling is the top-k singular values of D itself, and no span beats it
    s = torch.linalg.svdvals(D)
    ceil = spans.top_k_fraction(D.T @ D, 3)
    assert ceil == pytest.approx(float(s[:3].pow(2).sum() / s.pow(2).sum()), 1e-12)
    assert spans.token_fraction(D.T @ D, q) <= ceil
    top = torch.linalg.svd(D, full_matrices=False).Vh[:3]
    assert spans.token_fraction(D.T @ D, spans.orthonormal(top)) == pytest.approx(ceil, 1e-12)


def test_a_shadow_inside_the_span_gives_one_and_an_orthogonal_one_zero():
    g = torch.Generator().manual_seed(1)
    d = 10
    basis = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    span, rest = basis[:, :2], basis[:, 2:]
    inside = torch.randn(30, 2, generator=g, dtype=torch.float64) @ span.T
    outside = torch.randn(30, d - 2, generator=g, dtype=torch.float64) @ rest.T
    q = spans.orthonormal(span.T * torch.tensor([[3.0], [-0.5]], dtype=torch.float64))  # any basis of the span
    assert spans.token_fraction(inside.T @ inside, q) == pytest.approx(1.0, abs=1e-12)
    assert spans.mean_fraction(inside.mean(0), q) == pytest.approx(1.0, abs=1e-12)
    assert spans.token_fraction(outside.T @ outside, q) == pytest.approx(0.0, abs=1e-12)
    assert spans.mean_fraction(outside.mean(0), q) == pytest.approx(0.0, abs=1e-12)


def test_random_null_mean_is_k_over_d():
    D, _ = _shadow(n=40, d=24, seed=2)
    gram, m = D.T @ D, D.mean(0)
    for k in (1, 3):
        tok, mf = spans.random_null(gram, m, k, 2000, torch.Generator().manual_seed(k))
        assert tok.shape == mf.shape == (2000,)
        for x in (tok, mf):
            se = float(x.std() / math.sqrt(len(x)))
            # E = k/d exactly for a uniform random subspace; 4 SE leaves a seed-robust margin
            assert abs(float(x.mean()) - k / 24) < 4 * se
            assert 0 <= float(x.min()) and float(x.max()) <= 1
    # the same generator seed draws the same subspaces
    a = spans.random_null(gram, m, 3, 50, torch.Generator().manual_seed(5))
    b = spans.random_null(gram, m, 3, 50, torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_measures_without_a_coordinate_equal_those_on_data_with_it_zeroed():
    # amendment 3: restricting rows and vectors to the other d - 1 coordinates must give what
    # the full-space functions give on data whose coordinate c was zeroed beforehand
    D, g = _shadow(n=40, d=9, seed=4)
    vecs = torch.randn(2, 3, 9, generator=g, dtype=torch.float64)  # two layers' spans, k = 3
    shadows = torch.stack([D, 2 * D.flip(0) - 1])  # (Lyr 2, n, d)
    coords = [4, 0]  # a different coordinate per layer
    Dr, vr = spans.drop_coordinates(shadows, coords), spans.drop_coordinates(vecs, coords)
    assert Dr.shape == (2, 40, 8) and vr.shape == (2, 3, 8)
    for x, c in enumerate(coords):
        zeroed, vz = shadows[x].clone(), vecs[x].clone()
        zeroed[:, c], vz[:, c] = 0.0, 0.0
        gz, gr = zeroed.T @ zeroed, Dr[x].T @ Dr[x]
        qz, qr = spans.orthonormal(vz), spans.orthonormal(vr[x])
        for k in (1, 3):
            assert spans.token_fraction(gr, qr[:, :k]) == pytest.approx(spans.token_fraction(gz, qz[:, :k]), abs=1e-12)
            assert spans.mean_fraction(Dr[x].mean(0), qr[:, :k]) == pytest.approx(
                spans.mean_fraction(zeroed.mean(0), qz[:, :k]), abs=1e-12
            )
            assert spans.top_k_fraction(gr, k) == pytest.approx(spans.top_k_fraction(gz, k), abs=1e-12)
        # the other coordinates, in order; the restricted null lives in d - 1 dimensions
        assert torch.equal(Dr[x], torch.cat([shadows[x][:, :c], shadows[x][:, c + 1 :]], 1))
        tok, mf = spans.random_null(gr, Dr[x].mean(0), 1, 2000, torch.Generator().manual_seed(x))
        se = float(mf.std() / math.sqrt(len(mf)))
        assert abs(float(mf.mean()) - 1 / 8) < 4 * se  # E = k/(d - 1); 4 SE leaves a seed-robust margin
    # negative control: with the coordinate kept, the fraction differs
    full = spans.token_fraction(shadows[0].T @ shadows[0], spans.orthonormal(vecs[0]))
    assert abs(full - spans.token_fraction(Dr[0].T @ Dr[0], spans.orthonormal(vr[0]))) > 1e-3
    with pytest.raises(InputError):
        spans.drop_coordinates(shadows, [9, 0])
    with pytest.raises(InputError):
        spans.drop_coordinates(shadows, [1])


def test_coordinate_share_by_hand():
    D = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, -2.0]], dtype=torch.float64)
    # per token: coordinate 0 holds 1 + 9 of 1 + 4 + 9 + 4 = 18; the mean (2, 1, -1): 4 of 6
    assert spans.coordinate_share(D.T @ D, D.mean(0), 0) == pytest.approx((10 / 18, 4 / 6), abs=1e-15)
    assert spans.coordinate_share(D.T @ D, D.mean(0), 2) == pytest.approx((4 / 18, 1 / 6), abs=1e-15)


def test_verdict_rules():
    layers = verdicts.rule_layers(30, (6, 18))
    assert layers == list(range(6, 19))
    assert verdicts.rule_layers(2, (6, 18)) == [0, 1]  # a model without those layers reads all of its own
    null = [0.01] * 30
    frac = [0.5 if x < 12 else 0.0 for x in range(30)]  # above at 6..11: 6 of 13, not a majority
    assert verdicts.span_word(frac, null, layers, True) == "no more than random"
    frac[12] = 0.5  # 7 of 13
    assert verdicts.span_word(frac, null, layers, True) == "spans more than random"
    assert verdicts.span_word(frac, null, layers, False) == "not measured"
    assert verdicts.regime_passes(0.1, 0.04, 2.0) and not verdicts.regime_passes(0.1, 0.06, 2.0)
    assert not verdicts.regime_passes(float("nan"), 0.01, 2.0)
    sh = [0.9] + [0.1] * 29
    sh[10] = sh[14] = 0.7
    assert verdicts.headline_layer(sh, layers) == 10  # highest within the rule layers, first on ties


def test_pair_regime_pools_both_classes_paired_on_the_sentence():
    d_pos, d_neg = [0.3, 0.1, 0.2], [0.0, 0.4, 0.2, 0.1]
    r = verdicts.pair_regime(d_pos, d_neg, 2.0)
    d = d_pos + d_neg
    mean = sum(d) / 7
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / 6) / math.sqrt(7)
    assert r["n"] == 7 and r["mean"] == pytest.approx(mean, 1e-12) and r["se"] == pytest.approx(se, 1e-12)
    assert r["mean_positive"] == pytest.approx(0.2) and r["mean_negative"] == pytest.approx(0.175)
    assert r["passes"] == (mean - 2 * se > 0) and r["passes"]
    # one class's fine-tune helps the other class more: the mean falls below 2 SE, refused
    assert not verdicts.pair_regime([0.3, 0.1, 0.2], [-0.3, -0.1, -0.2, 0.05], 2.0)["passes"]
    assert not verdicts.pair_regime([0.1], [], 2.0)["passes"]  # a class without sentences


def test_config_refuses_bad_values():
    for bad in (
        {"random_draws": 100},
        {"quantile": 1.0},
        {"n_heldout": 1},
        {"pushforward_sentences": 81},
        {"verdict_layers": [10, 5]},
        {"n_prompts": 50},  # a full run needs >= 200 prompts
        {"lr": 0.0},
        {"n_val": 1},  # amendment 4: the validation d needs an SE
        {"n_val": 80},  # and the fine-tunes a training sentence
        {"val_every": 61},  # no step would be kept
        {"val_every": 0},
    ):
        with pytest.raises(InputError):
            configure("steering-shadow", settings=bad)
    q = configure("steering-shadow", quick=True)
    assert (q.steps, q.n_prompts, q.n_fit, q.n_heldout, q.lora_r) == (24, 40, 80, 20, 8)
    assert configure("steering-shadow").steps == 60
    assert (q.n_val, q.val_every) == (16, 4)


def test_first_dropped_leaves_out_exactly_the_first_real_token():
    # right padding (rows 0, 1) and left padding (row 2): the first real position differs
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1]])
    h = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    w = texts.first_dropped(mask, mask).double()
    assert w.tolist() == [[0, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    got = (h * w[..., None]).sum(1) / w.sum(1, keepdim=True)
    # the oracle: the plain mean over the listed positions
    want = torch.stack([h[0, 1:3].mean(0), h[1, 1:4].mean(0), h[2, 2:4].mean(0)])
    assert torch.allclose(got, want, rtol=0, atol=1e-15)
    with pytest.raises(InputError):
        texts.first_dropped(mask, torch.tensor([[1, 0, 0, 0]]))  # nothing would be left


def test_skip_first_token_means_and_shift_against_per_position_oracles():
    pytest.importorskip("transformers")
    from updatescope.experiments.steering_shadow.runner import token_residuals
    from updatescope.steering import encode_prompts, gradient_step, pushforward

    model, tok = tiny_llama(), WordTokenizer()
    sents = ["a b c d", "e f g h i j", "k l m"]
    ids, mask = encode_prompts(tok, sents, side="right")
    # the residual at every real token, rows in order; the first token of row i is at offset
    rows = token_residuals(model, ids, mask, [0], 8)[0].double()
    starts = [0, *mask.sum(1).cumsum(0).tolist()]
    every = torch.stack([rows[a:b].mean(0) for a, b in zip(starts, starts[1:])])
    rest = torch.stack([rows[a + 1 : b].mean(0) for a, b in zip(starts, starts[1:])])
    # sentiment-steering's call (no skip_first) is the mean over every token, as before
    default = texts.token_means(model, ids, mask, mask, [0], 8)[0]
    assert torch.allclose(default, every, rtol=0, atol=1e-5)
    assert torch.equal(default, texts.token_means(model, ids, mask, mask, [0], 8, skip_first=False)[0])
    assert torch.allclose(texts.token_means(model, ids, mask, mask, [0], 8, skip_first=True)[0], rest, atol=1e-5)
    assert not torch.allclose(rest, every, atol=1e-3)  # the first token does move the mean
    kept = token_residuals(model, ids, mask, [0], 8, skip_first=True)[0].double()
    assert kept.shape[0] == rows.shape[0] - len(sents)
    assert torch.equal(kept, torch.cat([rows[a + 1 : b] for a, b in zip(starts, starts[1:])]))
    # the one-step shift: the per-position pushforward, averaged over positions 1.. of each sentence
    labels = ids.masked_fill(mask == 0, -100)
    delta = gradient_step(model, ids, labels, mask, lr=1.0)
    n = mask.sum(1).tolist()
    per_pos = [  # per sentence (alone, unpadded), the shift at each of its positions: (n_i, d)
        torch.stack([pushforward(model, delta, ids[i : i + 1, : n[i]], position=k)[0, 0] for k in range(n[i])])
        for i in range(3)
    ]
    want = torch.stack([p[1:].double().mean(0) for p in per_pos]).mean(0)
    want_all = torch.stack([p.double().mean(0) for p in per_pos]).mean(0)
    step = texts.class_step(model, tok, sents)
    got = texts.one_step_shift(model, step, 3, 8, skip_first=True)[0]
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    assert torch.allclose(texts.one_step_shift(model, step, 3, 8)[0], want_all, rtol=1e-4, atol=1e-6)


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    pytest.importorskip("gensim")
    pytest.importorskip("vaderSentiment")
    pytest.importorskip("peft")
    model, tok = tiny_llama(), WordTokenizer()
    monkeypatch.setattr(heads, "load_model", lambda spec="smollm2": (model, tok))
    return tmp_path, model


def test_steering_shadow_tiny_run(tiny, monkeypatch):
    out, model = tiny
    # a tiny random model learns no sentiment in a few steps (its d sits within an SE of 0),
    # so the pair is let through here to run the measurement end to end; the check's
    # arithmetic is tested above, and a refused pair below
    real = verdicts.pair_regime
    monkeypatch.setattr(verdicts, "pair_regime", lambda *a: {**real(*a), "passes": True})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = {"steps": 30, "lr": 0.03, "regime_z": 0.0, "n_prompts": 8, "pushforward_sentences": 4, "batch_size": 32}
    res = reproduce("steering-shadow", out / "out", cfg)
    m, c = res["metrics"], res["config"]
    # the base model is untouched: each fine-tune trains a copy
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert len(c["preregistration_sha256"]) == 64
    assert m["n_layers"] == 1 and m["rule_layers"] == [0] and m["headline_layer"] == 0 and m["d"] == 16
    assert m["n"]["prompts"] == 8 and m["n"]["tokens"] > 8
    assert c["skip_first_token"]
    ft = m["first_token"]  # amendment 2's diagnostic, one entry per layer
    assert len(ft["first_norm"]) == len(ft["other_norm"]) == len(ft["top_share"]) == 1
    assert ft["first_norm"][0] > 0 and ft["other_norm"][0] > 0 and 0 < ft["top_share"][0] <= 1
    assert 0 <= ft["top_coordinate"][0] < 16 and -1 <= ft["cos_caa_with_first"][0] <= 1
    assert 0 <= ft["caa_top_share"][0] <= 1 and 0 <= ft["caa_with_first_top_share"][0] <= 1
    pair = m["regime"]["pair"]
    assert len(pair["d_positive"]) == len(pair["d_negative"]) == 20 and pair["n"] == 40
    assert pair["mean"] == pytest.approx(sum(pair["d_positive"] + pair["d_negative"]) / 40)
    for d, r in m["regime"]["per_direction"].items():  # the pre-registered check, kept as a fact
        assert len(r["own_drop"]) == len(r["other_drop"]) == 20
        diff = [a - b for a, b in zip(r["own_drop"], r["other_drop"])]
        assert r["mean"] == pytest.approx(sum(diff) / 20)
        assert len(m["training"][d]["per_step"]) == 30
    # amendment 4: the pair is scored on the validation sentences every 4 steps and restored
    # to the step with the highest mean validation d (the earliest of the maxima)
    sel = m["selection"]
    assert [r["step"] for r in sel["per_step"]] == list(range(4, 31, 4)) and sel["n_val"] == 16
    best = max(r["mean"] for r in sel["per_step"])
    assert sel["chosen_step"] == next(r["step"] for r in sel["per_step"] if r["mean"] == best)
    for r in sel["per_step"]:
        assert r["se"] > 0 and set(r["loss"]) == {"positive", "negative"}
    # d(x) is the same held-out losses seen from the other side: d = other's drop - own drop
    pd = m["regime"]["per_direction"]
    assert pair["d_positive"] == pytest.approx(
        [a - b for a, b in zip(pd["positive"]["own_drop"], pd["negative"]["other_drop"])], abs=1e-9
    )
    assert pair["passes"]
    assert set(m["shadow"]) == {"contrast", "positive", "negative"}
    for name, sh in m["shadow"].items():
        words = m["verdicts"][name]
        for span, k in (("caa", 1), ("caa+shifts", 3)):
            v = sh["spans"][span]
            assert 0 <= v["mean"][0] <= 1 and 0 <= v["token"][0] <= v["ceiling_token"][0] + 1e-12
            assert v["null_mean_mean"][0] == pytest.approx(k / 16, abs=0.05)
            assert v["null_mean_q"][0] >= v["null_mean_mean"][0]
            assert words[span]["mean"] == verdicts.span_word(v["mean"], v["null_mean_q"], [0], True)
        # the bigger span holds at least what CAA alone holds
        assert sh["spans"]["caa+shifts"]["mean"][0] >= sh["spans"]["caa"]["mean"][0] - 1e-12
        assert -1 <= sh["cos_mean_caa"][0] <= 1
    for d in ("positive", "negative"):
        assert -1 <= m["shadow"][d]["cos_mean_contrast"][0] <= 1
        assert -1 <= m["shadow_without_massive"][d]["cos_mean_contrast"][0] <= 1
    # amendment 3: the massive coordinate is the first-token diagnostic's, its share of each
    # shadow is recorded, and every measure again without it (in 15 dimensions) is primary
    assert m["massive"]["coordinate"] == ft["top_coordinate"]
    assert set(m["shadow_without_massive"]) == set(m["massive"]["share"]) == set(m["shadow"])
    for name, sh in m["shadow_without_massive"].items():
        full, words = m["shadow"][name], m["verdicts_without_massive"][name]
        assert 0 <= m["massive"]["share"][name]["token"][0] <= 1 and 0 <= m["massive"]["share"][name]["mean"][0] <= 1
        # the energy left after dropping the coordinate is the full energy less the coordinate's share
        kept = 1 - m["massive"]["share"][name]["token"][0]
        assert sh["token_rms"][0] ** 2 == pytest.approx(kept * full["token_rms"][0] ** 2, rel=1e-9)
        for span, k in (("caa", 1), ("caa+shifts", 3)):
            v = sh["spans"][span]
            assert 0 <= v["mean"][0] <= 1 and 0 <= v["token"][0] <= v["ceiling_token"][0] + 1e-12
            assert v["null_mean_mean"][0] == pytest.approx(k / 15, abs=0.05)
            for ms in ("mean", "token"):  # the primary words follow the restricted numbers
                assert words[span][ms] == verdicts.span_word(v[ms], v[f"null_{ms}_q"], [0], True)
                assert words[span][f"{ms}_layers_above"] == verdicts.layers_above(v[ms], v[f"null_{ms}_q"], [0])
    assert m["figures"] == ["steering_shadow.png"]
    assert (out / "out" / "steering_shadow.png").is_file()


def test_a_refused_pair_measures_nothing_and_draws_no_figure(tiny):
    out, _ = tiny
    # regime_z far above any SE: the pair is refused whatever the fine-tunes learned
    cfg = {"steps": 2, "val_every": 1, "regime_z": 1e6, "n_prompts": 4, "pushforward_sentences": 2, "batch_size": 32}
    res = reproduce("steering-shadow", out / "refused", cfg)
    m = res["metrics"]
    assert not m["regime"]["pair"]["passes"]
    assert all(s is None for s in m["shadow"].values())
    assert all(s is None for s in m["shadow_without_massive"].values())
    assert all(s is None for s in m["massive"]["share"].values())
    for key in ("verdicts", "verdicts_without_massive"):
        assert {w for v in m[key].values() for s in v.values() for w in (s["mean"], s["token"])} == {"not measured"}
    assert m["figures"] == [] and not (out / "refused" / "steering_shadow.png").exists()


def test_a_kept_step_restores_exactly_the_weights_and_losses_it_was_scored_with(tiny):
    """finetune keeps the LoRA weights every val_every steps with the validation losses they
    gave; restore puts them back, so the restored fine-tune scores those losses again."""
    from updatescope.experiments.steering_shadow.config import SteeringShadowConfig
    from updatescope.experiments.steering_shadow.runner import finetune, restore, sentence_losses
    from updatescope.steering import encode_prompts

    _, model = tiny
    tok = WordTokenizer()
    pos, neg = texts.polarity_sentences()
    ids, mask = encode_prompts(tok, pos[:12], side="right")
    val = {
        "positive": encode_prompts(tok, pos[12:16], side="right"),
        "negative": encode_prompts(tok, neg[:4], side="right"),
    }
    cfg = SteeringShadowConfig(steps=6, val_every=2, lr=0.03, batch=4, batch_size=8, n_prompts=4, quick=True)
    ft, losses, kept = finetune(model, ids, mask, cfg, 0, val=val)
    assert sorted(kept) == [2, 4, 6] and len(losses) == 6
    last = {c: sentence_losses(ft, *val[c], 8) for c in val}
    assert all(torch.equal(last[c], kept[6]["val"][c]) for c in val)  # step 6 is the last
    restore(ft, kept[2]["state"])
    again = {c: sentence_losses(ft, *val[c], 8) for c in val}
    assert all(torch.equal(again[c], kept[2]["val"][c]) for c in val)
    assert not torch.equal(again["positive"], last["positive"])  # the weights did move
