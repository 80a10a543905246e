"""NetworkSketch: unbiased per-layer and full-network terms, merge/batch invariance, contracts."""

from __future__ import annotations

import math

import pytest
import torch

from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.network import (
    NetworkConfig,
    NetworkSketch,
    exact_block_products,
    exact_network_alignment,
    network_alignment,
)

LAYERS = (("a", 5, 3), ("b", 3, 4))


def _data(seed: int, n: int, seq: bool, t: int = 3):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, d, k in LAYERS:
        shape = (n, t) if seq else (n,)
        out[name] = (
            torch.randn(*shape, d, generator=g, dtype=torch.float64),
            torch.randn(*shape, k, generator=g, dtype=torch.float64),
        )
    if seq:  # a padded position
        out["a"][0][0, -1] = 0
        out["a"][1][0, -1] = 0
    return out


def _blocks(data):
    return [data[name] for name, _, _ in LAYERS]


def _estimates(cfg: NetworkConfig, ds, dt):
    """Block and full cross terms and unbiased squared norms of one basis.  (3, L + 1)"""
    ss, st = NetworkSketch(cfg).update(ds), NetworkSketch(cfg).update(dt)
    (ms, qs), (mt, qt) = ss.terms(), st.terms()
    return torch.stack(((ms * mt).sum(-1), qs, qt))


@pytest.mark.parametrize(
    "mode,kind", [("token", "dense"), ("sequence", "dense"), ("sequence", "srht"), ("token", "fold")]
)
def test_features_unbiased_for_their_kernel(mode, kind):
    seq = mode == "sequence"
    ds, dt = _data(1, 5, seq), _data(2, 4, seq)
    # slight correlation between tasks so the cross terms are not near zero
    dt = {k: (v[0] + 0.5 * ds[k][0][: v[0].shape[0]], v[1] + 0.5 * ds[k][1][: v[1].shape[0]]) for k, v in dt.items()}
    bp = exact_block_products(_blocks(ds), _blocks(dt), self_pairs=False)
    exact = torch.stack(
        (
            torch.cat((bp.cross.diagonal(), torch.tensor([bp.full_cross], dtype=torch.float64))),
            torch.cat((bp.sq_s.diagonal(), torch.tensor([bp.full_sq_s], dtype=torch.float64))),
            torch.cat((bp.sq_t.diagonal(), torch.tensor([bp.full_sq_t], dtype=torch.float64))),
        )
    )
    runs = torch.stack([_estimates(NetworkConfig(LAYERS, 64, seed, mode, kind, kind), ds, dt) for seed in range(30)])
    mean, se = runs.mean(0), runs.std(0) / runs.shape[0] ** 0.5
    # unbiased: the seed mean lies within 4 measured standard errors of the exact value
    # (a 4-SE miss has probability ~6e-5 per entry under normality; 9 entries per case)
    assert ((mean - exact).abs() <= 4 * se + 1e-12).all(), (mean, exact, se)
    assert (se > 0).all()  # the features are random: a zero SE would mean the test checks nothing
    # the off-diagonal part is estimated too: full − Σ diagonal differs from 0
    assert abs(float(exact[0, -1] - exact[0, :-1].sum())) > 0


def test_per_token_kernel_is_not_per_sequence_kernel():
    # negative control: the same positions summed per sequence give a different Fisher
    ds, dt = _data(1, 5, True), _data(2, 4, True)
    flat = lambda d: [(a.reshape(-1, a.shape[-1]), e.reshape(-1, e.shape[-1])) for a, e in _blocks(d)]
    seq = exact_block_products(_blocks(ds), _blocks(dt), self_pairs=True)
    tok = exact_block_products(flat(ds), flat(dt), self_pairs=True)
    assert abs(seq.full_cross / 9 - tok.full_cross) > 0.1 * abs(tok.full_cross)


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_merge_and_batch_split_invariance(mode):
    seq = mode == "sequence"
    cfg = NetworkConfig(LAYERS, 32, 7, mode)
    d = _data(3, 11, seq)
    part = lambda lo, hi: {k: (a[lo:hi], e[lo:hi]) for k, (a, e) in d.items()}
    whole = NetworkSketch(cfg).update(d)
    batched = NetworkSketch(cfg).update(part(0, 2)).update(part(2, 3)).update(part(3, 11))
    p1, p2, p3 = (NetworkSketch(cfg).update(part(lo, hi)) for lo, hi in ((0, 5), (5, 6), (6, 11)))
    before = p1.state_dict()
    merged = p1.merge(p2).merge(p3)
    for other in (batched, merged):
        for key in ("sums", "diag"):
            torch.testing.assert_close(other.state_dict()[key], whole.state_dict()[key], rtol=1e-12, atol=1e-14)
        assert torch.equal(other.state_dict()["counts"], whole.state_dict()["counts"])
    assert torch.equal(p1.state_dict()["sums"], before["sums"])  # merge does not mutate
    # negative control: half the data is not the whole
    assert not torch.allclose(p1.state_dict()["sums"], whole.state_dict()["sums"])
    # per layer: a one-layer sketch of layer "a" equals block "a" of the two-layer sketch
    one = NetworkSketch(NetworkConfig(LAYERS[:1], 32, 7, mode)).update({"a": d["a"]})
    torch.testing.assert_close(one.state_dict()["sums"][:, 0], whole.state_dict()["sums"][:, 0], rtol=1e-12, atol=0)


def test_state_round_trip_and_float32():
    cfg = NetworkConfig(LAYERS, 32, 0)
    d1, d2 = _data(4, 6, False), _data(5, 4, False)
    ref = NetworkSketch(cfg).update(d1).update(d2)
    again = NetworkSketch.from_state_dict(NetworkSketch(cfg).update(d1).state_dict()).update(d2)
    torch.testing.assert_close(again.state_dict()["sums"], ref.state_dict()["sums"], rtol=1e-12, atol=0)
    f32 = (
        NetworkSketch(cfg)
        .update({k: (a.float(), e.float()) for k, (a, e) in d1.items()})
        .update({k: (a.float(), e.float()) for k, (a, e) in d2.items()})
    )
    torch.testing.assert_close(f32.state_dict()["sums"], ref.state_dict()["sums"], rtol=1e-4, atol=1e-5)


def test_contracts():
    cfg = NetworkConfig(LAYERS, 32, 0)
    d = _data(6, 4, False)
    with pytest.raises(InputError):
        NetworkSketch(cfg).terms()  # empty
    with pytest.raises(IncompatibleSignatureError, match="seed"):
        network_alignment(NetworkSketch(cfg).update(d), NetworkSketch(NetworkConfig(LAYERS, 32, 1)).update(d))
    with pytest.raises(IncompatibleSignatureError, match="mode"):
        NetworkSketch(cfg).merge(NetworkSketch(NetworkConfig(LAYERS, 32, 0, "sequence")))
    with pytest.raises(InputError, match="missing"):
        NetworkSketch(cfg).update({"a": d["a"]})
    with pytest.raises(InputError):
        NetworkSketch(NetworkConfig(LAYERS, 32, 0, "sequence")).update(d)  # 2-D inputs in sequence mode
    with pytest.raises(InputError):
        NetworkSketch(cfg).update({"a": d["a"], "b": (d["b"][0][:3], d["b"][1][:3])})  # unequal n
    with pytest.raises(InputError):
        NetworkConfig(LAYERS, 32, 0, "tokens")
    with pytest.raises(InputError):
        NetworkConfig(LAYERS, 32, 0, act_map="countsketch")
    with pytest.raises(InputError):
        NetworkConfig((("a", 5, 3), ("a", 5, 3)), 32, 0)
    bad = {"a": (d["a"][0].clone(), d["a"][1]), "b": d["b"]}
    bad["a"][0][1, 2] = float("nan")
    sk = NetworkSketch(cfg)
    with pytest.raises(InputError):
        sk.update(bad)
    assert sk.count == 0  # a bad batch adds nothing


def test_sketch_tracks_exact_network_alignment():
    ds, dt = _data(7, 40, False), _data(8, 40, False)
    dt = {k: (v[0] + ds[k][0], v[1] + ds[k][1]) for k, v in dt.items()}
    cfg = NetworkConfig(LAYERS, 4096, 0)
    est = network_alignment(NetworkSketch(cfg).update(ds), NetworkSketch(cfg).update(dt))
    ex = exact_network_alignment(_blocks(ds), _blocks(dt), names=("a", "b"))
    assert est.blocks == ("a", "b")
    for f in ("full", "block_diagonal", "profile_cosine"):
        assert abs(getattr(est, f) - getattr(ex, f)) < 0.1, (f, getattr(est, f), getattr(ex, f))
    for p, q in zip(est.profile, ex.profile):
        assert abs(p - q) < 0.15


def test_row_chunks_do_not_change_the_state(monkeypatch):
    import updatescope.network.sketch as mod

    cfg = NetworkConfig(LAYERS, 32, 2, "sequence")
    d = _data(9, 9, True)
    ref = NetworkSketch(cfg).update(d).state_dict()
    monkeypatch.setattr(mod, "_CHUNK_ELEMS", 1)  # one sample per step
    small = NetworkSketch(cfg).update(d).state_dict()
    torch.testing.assert_close(small["sums"], ref["sums"], rtol=1e-12, atol=1e-14)
    assert torch.equal(small["counts"], ref["counts"])


def test_sketch_standard_error_matches_spread_over_seeds():
    ds, dt = _data(10, 30, False), _data(11, 30, False)
    dt = {k: (v[0] + ds[k][0], v[1] + ds[k][1]) for k, v in dt.items()}
    runs = [
        network_alignment(
            NetworkSketch(NetworkConfig(LAYERS, 256, s)).update(ds),
            NetworkSketch(NetworkConfig(LAYERS, 256, s)).update(dt),
        )
        for s in range(20)
    ]
    for key in ("full", "block_diagonal"):
        vals = torch.tensor([getattr(r, key) for r in runs], dtype=torch.float64)
        se = torch.tensor([r.se_parts["sketch"][key] for r in runs], dtype=torch.float64)
        # the jackknife over 16 feature blocks is a rough SE: within a factor 2.5 of the seed spread
        ratio = float(se.mean() / vals.std())
        assert 0.4 < ratio < 2.5, (key, ratio)
        defined = [r for r in runs if math.isfinite(r.se_parts["sampling"][key])]
        assert len(defined) >= 15
        assert all(r.se[key] >= r.se_parts["sketch"][key] > 0 for r in defined)
        # a sampling part that cannot be measured leaves the se undefined, not the sketch part alone
        assert all(math.isnan(r.se[key]) for r in runs if r not in defined)
    assert set(runs[0].se) >= {"full", "profile[a]", "profile[b]", "profile_cosine", "offdiag_term"}


@pytest.mark.parametrize("kind", ["dense", "srht", "fold"])
def test_per_token_layer_features_are_the_head_sketch_features(kind):
    from updatescope.network import layer_config, linear_projections
    from updatescope.sketch.fishersketch import features

    cfg = layer_config("lm_head", 6, 40, 64, 3, kind, kind)
    g = torch.Generator().manual_seed(0)
    a, e = torch.randn(7, 6, generator=g, dtype=torch.float64), torch.randn(7, 40, generator=g, dtype=torch.float64)
    pu, pv = linear_projections(cfg, a, e)
    torch.testing.assert_close(pu * pv / 8.0, features(cfg, a, e)[:, 0], rtol=1e-10, atol=1e-12)
    # a sequence of length one is a token
    su, sv = linear_projections(cfg, a.unsqueeze(1), e.unsqueeze(1))
    torch.testing.assert_close(su * sv, pu * pv, rtol=1e-12, atol=0)
