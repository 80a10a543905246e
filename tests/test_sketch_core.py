"""FisherSketch: unbiasedness against the exact reference, invariances, contracts, bad input."""

import math

import pytest
import torch

import updatescope as us
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.sketch.align import _u_sq

MAPS = ["dense", "srht", "fold", "spread", "stack", "countsketch", "foldspread"]


def stream(n, d=6, k=10, seed=0, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64) + shift
    z = 2 * torch.randn(n, k, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=g)
    return a, z, y


def raw_estimates(sig_s, sig_t):
    """Cross term and unbiased squared norms from the state: the unbiased pieces.  (3,) each"""
    (ss, ds), (st, dt) = sig_s.total(), sig_t.total()
    cross = (ss * st).sum(-1) / (sig_s.count * sig_t.count)
    return cross, _u_sq((ss * ss).sum(-1), ds.sum(-1), sig_s.count), _u_sq((st * st).sum(-1), dt.sum(-1), sig_t.count)


def exact_pieces(a_s, e_s, a_t, e_t):
    def k(a1, e1, a2, e2):
        ga, ge = (a1 @ a2.T) ** 2, (e1 @ e2.T) ** 2
        return torch.stack(((ga * ge), ga, ge))

    cross = k(a_s, e_s, a_t, e_t).mean((1, 2))

    def u(a, e):
        kk = k(a, e, a, e)
        n = len(a)
        return (kk.sum((1, 2)) - kk.diagonal(dim1=1, dim2=2).sum(-1)) / (n * (n - 1))

    return cross, u(a_s, e_s), u(a_t, e_t)


@pytest.mark.parametrize("kind", MAPS)
def test_sketch_pieces_unbiased_over_seeds(kind):
    """Averaged over random bases, the sketch's cross term and U-norms equal the exact ones.

    Tolerance: 4 standard errors of the seed average, the SE measured from the same seeds.
    """
    a_s, z_s, y_s = stream(30, seed=1)
    a_t, z_t, y_t = stream(25, seed=2, shift=0.5)
    e_s, _ = us.error_vectors(z_s, y_s)
    e_t, _ = us.error_vectors(z_t, y_t)
    truth = torch.cat(exact_pieces(a_s, e_s, a_t, e_t))
    draws = []
    for seed in range(120):
        kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=seed, act_map=kind, error_map=kind)
        s = us.FisherSketch(**kw).update(a_s, e_s).signature()
        t = us.FisherSketch(**kw).update(a_t, e_t).signature()
        draws.append(torch.cat(raw_estimates(s, t)))
    draws = torch.stack(draws)
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(len(draws))
    assert bool((se > 0).all())
    z = ((mean - truth) / se).abs()
    assert float(z.max()) < 4.0, f"max |z| = {float(z.max()):.2f} ({kind})"


@pytest.mark.parametrize("kind", ["dense", "srht", "fold", "spread", "stack", "foldspread"])
def test_sketch_close_to_exact_within_reported_se(kind):
    fam = HeadTaskFamily(act_dim=32, out_dim=256 if kind == "dense" else 2048)
    src = fam.sample(0, 0, 600, seed=1, mix_to=(1, 1), mix=0.4)
    tgt = fam.sample(0, 0, 600, seed=2)
    # foldspread at m = 256 so that it folds (W = 1,024 < K)
    kw = dict(
        act_dim=32,
        out_dim=fam.out_dim,
        sketch_dim=256 if kind == "foldspread" else 2048,
        seed=3,
        error_map=kind,
        act_map="stack" if kind == "stack" else "auto",
    )
    sig_s = us.FisherSketch(**kw).update_logits(*src).signature()
    sig_t = us.FisherSketch(**kw).update_logits(*tgt).signature()
    est = us.alignment(sig_s, sig_t)
    ex = us.exact_alignment(src[0], us.error_vectors(src[1], src[2])[0], tgt[0], us.error_vectors(tgt[1], tgt[2])[0])
    for name in ("fisher", "activation", "error"):
        se = est.se_parts["sketch"][name]
        assert 0 < se < 0.2
        assert abs(getattr(est, name) - getattr(ex, name)) < 4 * se, name


def test_batch_size_and_split_invariance():
    a, z, y = stream(41, seed=3)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=1)
    whole = us.FisherSketch(**kw).update_logits(a, z, y)
    batched = us.FisherSketch(**kw)
    for i in range(0, 41, 4):
        batched.update_logits(a[i : i + 4], z[i : i + 4], y[i : i + 4])
    left = us.FisherSketch(**kw).update_logits(a[:7], z[:7], y[:7])  # odd split: halves must realign
    right = us.FisherSketch(**kw).update_logits(a[7:], z[7:], y[7:])
    merged = left.merge(right)
    for other in (batched, merged):
        assert torch.allclose(other._sums, whole._sums, rtol=1e-12, atol=1e-12)
        assert torch.allclose(other._diag, whole._diag, rtol=1e-12, atol=1e-12)
        assert torch.equal(other._counts, whole._counts)


def test_order_invariance_of_estimate():
    a, z, y = stream(40, seed=4)
    b = stream(30, seed=5)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=1)
    t = us.FisherSketch(**kw).update_logits(*b).signature()
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(0))
    s1 = us.FisherSketch(**kw).update_logits(a, z, y).signature()
    s2 = us.FisherSketch(**kw).update_logits(a[perm], z[perm], y[perm]).signature()
    assert us.alignment(s1, t).fisher == pytest.approx(us.alignment(s2, t).fisher, rel=1e-10)


def test_float32_matches_float64():
    a, z, y = stream(50, seed=6)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=128, seed=2)
    t = us.FisherSketch(**kw).update_logits(*stream(50, seed=7)).signature()
    s64 = us.FisherSketch(**kw).update_logits(a, z, y).signature()
    s32 = us.FisherSketch(**kw).update_logits(a.float(), z.float(), y).signature()
    assert us.alignment(s32, t).fisher == pytest.approx(us.alignment(s64, t).fisher, rel=1e-4)


def test_numpy_input_equals_torch():
    a, z, y = stream(20, seed=8)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    s1 = us.FisherSketch(**kw).update_logits(a, z, y)
    s2 = us.FisherSketch(**kw).update_logits(a.numpy(), z.numpy(), y.numpy())
    assert torch.equal(s1._sums, s2._sums)


def test_update_logits_equals_update_with_errors_and_ignores_minus100():
    a, z, y = stream(20, seed=9)
    y = y.clone()
    y[[3, 8]] = -100
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    s1 = us.FisherSketch(**kw).update_logits(a, z, y)
    keep = y != -100
    e = torch.softmax(z[keep], 1) - torch.nn.functional.one_hot(y[keep], 10)
    s2 = us.FisherSketch(**kw).update(a[keep], e)
    assert s1.count == 18
    assert torch.allclose(s1._sums, s2._sums, rtol=1e-12, atol=1e-12)


def test_save_load_update_equals_update(tmp_path):
    a, z, y = stream(30, seed=10)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    direct = us.FisherSketch(**kw).update_logits(a[:13], z[:13], y[:13]).update_logits(a[13:], z[13:], y[13:])
    path = tmp_path / "x.safetensors"
    us.save_signature(us.FisherSketch(**kw).update_logits(a[:13], z[:13], y[:13]).signature(data="part"), path)
    loaded = us.load_signature(path)
    assert loaded.meta["data"] == "part"
    resumed = us.FisherSketch.from_signature(loaded).update_logits(a[13:], z[13:], y[13:])
    assert torch.allclose(resumed._sums, direct._sums, rtol=1e-12, atol=1e-14)
    assert torch.equal(resumed._counts, direct._counts)
    # state_dict round trip clones
    sd = direct.state_dict()
    again = us.FisherSketch.from_state_dict(sd)
    sd["sums"].zero_()
    assert torch.equal(again._sums, direct._sums)


def test_merge_does_not_mutate_and_checks_config():
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    x = us.FisherSketch(**kw).update_logits(*stream(11, seed=1))
    y = us.FisherSketch(**kw).update_logits(*stream(12, seed=2))
    before = (x._sums.clone(), y._sums.clone(), x.count, y.count)
    m = x.merge(y)
    assert m.count == 23
    assert torch.equal(x._sums, before[0]) and torch.equal(y._sums, before[1])
    assert (x.count, y.count) == before[2:]
    for field, val in [("seed", 3), ("sketch_dim", 128), ("out_dim", 11), ("act_dim", 7)]:
        other = us.FisherSketch(**{**kw, field: val})
        with pytest.raises(us.IncompatibleSignatureError, match=field):
            x.merge(other)
    fp = us.FisherSketch(**kw, fingerprint="abc").update_logits(*stream(5, seed=3))
    with pytest.raises(us.IncompatibleSignatureError, match="fingerprint.*'abc'"):
        us.alignment(x.signature(), fp.signature())


def test_merge_identity_and_empty_raises():
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    x = us.FisherSketch(**kw).update_logits(*stream(9, seed=1))
    m = us.FisherSketch(**kw).merge(x)
    assert torch.equal(m._sums, x._sums)
    with pytest.raises(us.InputError, match="empty"):
        us.FisherSketch(**kw).signature()


def test_bad_input_rejected_and_nothing_accumulated():
    kw = dict(act_dim=6, out_dim=10, sketch_dim=64, seed=2)
    sk = us.FisherSketch(**kw).update_logits(*stream(5, seed=1))
    snap = sk._sums.clone()
    a, z, y = stream(5, seed=2)
    bad = z.clone()
    bad[1, 2] = float("inf")
    with pytest.raises(us.InputError, match="logits in batch 1 contain NaN or inf"):
        sk.update_logits(a, bad, y)
    a_bad = a.clone()
    a_bad[0, 0] = float("nan")
    with pytest.raises(us.InputError, match="activations in batch 1"):
        sk.update_logits(a_bad, z, y)
    with pytest.raises(us.InputError, match=r"label 10 .* outside \[0, 10\)"):
        sk.update_logits(a, z, torch.tensor([0, 1, 10, 2, 3]))
    with pytest.raises(us.InputError, match=r"shape \(n, act_dim=6\), got \(5, 7\)"):
        sk.update_logits(torch.randn(5, 7), z, y)
    with pytest.raises(us.InputError, match="different numbers of rows"):
        sk.update(a[:4], torch.randn(5, 10))
    assert torch.equal(sk._sums, snap) and sk.count == 5
    sk.update_logits(a, z, torch.full((5,), -100))  # all ignored: a no-op
    assert torch.equal(sk._sums, snap) and sk.count == 5


def test_config_validation():
    with pytest.raises(us.InputError, match="sketch_dim must be a multiple of 16"):
        us.FisherSketch(6, 10, sketch_dim=100)
    with pytest.raises(us.InputError, match="act_dim must be a positive integer"):
        us.FisherSketch(0, 10)
    with pytest.raises(us.InputError, match="unknown projection kind"):
        us.FisherSketch(6, 10, error_map="fft")
    # auto: stacked SRHTs up to next_pow2(m), the wide-block SRHT of spread beyond
    assert (us.SketchConfig(576, 49152).act_map, us.SketchConfig(576, 49152).error_map) == ("stack", "spread")
    assert us.SketchConfig(576, 1000).error_map == "stack"
    assert us.SketchConfig(576, 4096, sketch_dim=4080).error_map == "stack"  # next_pow2(4080) = 4096
    assert us.SketchConfig(576, 1000, sketch_dim=256).act_map == "spread"
    assert us.SketchConfig(576, 49152, act_map="dense", error_map="srht").error_map == "srht"  # the earlier default
    assert us.SketchConfig(576, 5000, error_map="stack").error_map == "stack"  # any width when asked for
    assert (
        us.SketchConfig(576, 49152, act_map="spread", error_map="spread").error_map == "spread"
    )  # opt-in, kept as given
    assert us.SketchConfig(576, 49152, act_map="fold", error_map="fold").error_map == "fold"  # opt-in, kept as given


def test_state_and_signature_sizes():
    sk = us.FisherSketch(8, 20, sketch_dim=4096).update_logits(*stream(4, d=8, k=20))
    sig = sk.signature()
    assert sig.sums.numel() * sig.sums.element_size() <= 192 * 1024
    v = sig.vector()
    assert v.dtype == torch.float32 and v.numel() * 4 == 16 * 1024


def test_vector_dot_is_fisher_alignment():
    fam = HeadTaskFamily(act_dim=16, out_dim=64)
    kw = dict(act_dim=16, out_dim=64, sketch_dim=256, seed=0)
    s = us.FisherSketch(**kw).update_logits(*fam.sample(0, 0, 300, seed=1)).signature()
    t = us.FisherSketch(**kw).update_logits(*fam.sample(0, 1, 300, seed=2, mix_to=(0, 0), mix=0.5)).signature()
    assert float(s.vector() @ t.vector()) == pytest.approx(us.alignment(s, t).fisher, rel=1e-5)


def test_negative_controls():
    """Half the data is not the whole; a changed label changes the error geometry."""
    a, z, y = stream(200, seed=11)
    kw = dict(act_dim=6, out_dim=10, sketch_dim=256, seed=0)
    whole = us.FisherSketch(**kw).update_logits(a, z, y).signature()
    half = us.FisherSketch(**kw).update_logits(a[:100], z[:100], y[:100]).signature()
    assert not torch.allclose(whole.sums, half.sums)
    y2 = y % 3  # labels concentrated on three classes
    e1, _ = us.error_vectors(z, y)
    e2, _ = us.error_vectors(z, y2)
    ex = us.exact_alignment(a, e1, a, e2)
    assert ex.error < 0.9
    flipped = us.FisherSketch(**kw).update_logits(a, z, y2).signature()
    assert not torch.allclose(whole.sums[:, 2], flipped.sums[:, 2])
    assert torch.allclose(whole.sums[:, 1], flipped.sums[:, 1])  # activation part unchanged


def test_bad_errors_rejected_after_projection_and_nothing_accumulated():
    """update() finds NaN/inf in the errors through the batch's sums (no separate scan of
    the (n, K) matrix) and still names the first bad row and adds nothing."""
    for emap in ("dense", "srht", "fold", "countsketch"):
        kw = dict(act_dim=6, out_dim=300, sketch_dim=64, seed=2, error_map=emap)
        g = torch.Generator().manual_seed(0)
        a = torch.randn(7, 6, generator=g)
        e, _ = us.error_vectors(torch.randn(7, 300, generator=g), torch.randint(0, 300, (7,), generator=g))
        sk = us.FisherSketch(**kw).update(a, e)
        snap, diag, count = sk._sums.clone(), sk._diag.clone(), sk.count
        for bad_value in (float("nan"), float("inf"), float("-inf")):
            bad = e.clone()
            bad[4, 123] = bad_value
            with pytest.raises(us.InputError, match=r"errors in batch 1 contain NaN or inf \(first bad row 4\)"):
                sk.update(a, bad)
            assert torch.equal(sk._sums, snap) and torch.equal(sk._diag, diag) and sk.count == count, emap
        huge = e.clone()
        huge[2] *= 1e36  # finite, but the float32 projections overflow
        with pytest.raises(us.InputError, match="overflow"):
            sk.update(a, huge)
        assert torch.equal(sk._sums, snap) and sk.count == count
        sk.update(a, e)  # the batch counter did not move on the rejected batches
        assert sk.count == 2 * count
