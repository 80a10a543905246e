"""What a value says: trust flags, regimes, standard-error coverage, self-comparison,
deterministic checksummed files, overflow, and random corruptions of a signature file."""

import hashlib
import json
import math
import struct

import pytest
import torch
from safetensors.torch import save_file

import updatescope as us
from updatescope.errors import UpdatescopeError
from updatescope.select.rank import diagnose
from updatescope.sketch.align import Alignment
from updatescope.sketch.signature import Signature


def _task(seed, n, d=6, k=6, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, dtype=torch.float64)
    a[:, 0] += shift
    w = torch.randn(k, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, k, (n,), generator=g)
    e = torch.softmax(a @ w.T, -1)
    e[torch.arange(n), y] -= 1
    return a, e


def _sig(a, e, m=128, seed=0):
    return us.FisherSketch(a.shape[1], e.shape[1], sketch_dim=m, seed=seed).update(a, e).signature()


def _with(sig, sums=None, diag=None, counts=None):
    return Signature(
        sig.config,
        sig.sums if sums is None else sums,
        sig.diag if diag is None else diag,
        sig.counts if counts is None else counts,
        dict(sig.meta),
    )


def _values_ok(al):
    vals = (al.fisher, al.activation, al.error)
    ses = (al.fisher_se, al.activation_se, al.error_se)
    return all(math.isfinite(v) and v >= 0 for v in vals) and all(math.isfinite(s) for s in ses)


# ---------------------------------------------------------------- 1. trusted only when possible
def test_negative_fisher_is_untrusted_with_reason():
    t = _sig(*_task(0, 400))
    neg = _with(t, sums=torch.stack((-t.sums[:, 0], t.sums[:, 1], t.sums[:, 2]), dim=1))  # φ → −φ
    al = us.alignment(neg, t)
    assert al.fisher < 0
    assert not al.trusted and any("fisher: negative estimate" in w for w in al.warnings)


def test_undefined_standard_error_is_untrusted():
    t = _sig(*_task(0, 400))
    lopsided = _with(t, counts=torch.tensor([399, 1]))  # a half with one sample: no sampling SE
    al = us.alignment(lopsided, t)
    assert math.isnan(al.fisher_se)
    assert not al.trusted and any("standard error undefined" in w for w in al.warnings)


def test_trusted_implies_possible_values_over_random_small_cases():
    """Small n, wide K: whenever trusted, every value is finite and ≥ 0 with a finite SE."""
    g = torch.Generator().manual_seed(5)
    n_trusted = 0
    for i in range(40):
        n = int(torch.randint(2, 120, (1,), generator=g))
        k = int(torch.randint(2, 400, (1,), generator=g))
        sigs = [
            _sig(
                torch.randn(n, 4, generator=g, dtype=torch.float64),
                torch.randn(n, k, generator=g, dtype=torch.float64),
                m=64,
                seed=i,
            )
            for _ in range(2)
        ]
        al = us.alignment(*sigs)
        n_trusted += al.trusted
        assert not al.trusted or _values_ok(al), al
        assert al.trusted or al.warnings


def test_undefined_values_get_no_regime_or_interpretation():
    a, _ = _task(1, 200)
    zero_err = torch.zeros(200, 6, dtype=torch.float64)  # error norm 0: fisher and error undefined
    t = _sig(*_task(0, 200))
    ranking = us.rank_sources(t, {"x": _sig(a, zero_err), "y": _sig(a[:100], zero_err[:100])})
    assert ranking.regime == "undefined"
    for r in ranking.rows:
        assert not r.trusted
        assert "geometry limits" not in r.note and "coupled" not in r.note and "indistinguishable" not in r.note
    text = json.dumps(ranking.as_dict(), allow_nan=False)  # strict JSON: NaN became null
    assert '"fisher": null' in text
    assert math.isnan(ranking.as_dict(json_safe=False)["rows"][0]["fisher"])


# ---------------------------------------------------------------- 2. regimes follow their definitions
def _al(f, a, e, se=0.01):
    return Alignment(f, a, e, f / (a * e) if a * e else float("nan"), se, se, se, se, 500, 500)


@pytest.mark.parametrize(
    "case,regime",
    [
        ({"x": (0.996, 1.0, 0.99), "y": (0.07, 0.995, 1.0)}, "coupled"),  # pure coupling
        ({"x": (0.30, 0.9, 0.9), "y": (0.60, 0.5, 0.5)}, "coupled"),  # product picks the other best
        ({"x": (0.80, 0.9, 0.9), "y": (0.81, 0.9, 0.895)}, "flat"),
        ({"x": (0.80, 0.9, 0.9), "y": (0.27, 0.9, 0.3)}, "activation-dark"),
        ({"x": (0.80, 0.9, 0.9), "y": (0.27, 0.3, 0.9)}, "error-dark"),
        ({"x": (0.81, 0.9, 0.9), "y": (0.25, 0.5, 0.5)}, "separable"),
        ({"x": (0.80, 0.5, 0.5), "y": (0.79, 0.9, 0.9)}, "separable"),  # different best, gap within noise
        ({"x": (float("nan"),) * 3, "y": (float("nan"),) * 3}, "undefined"),
    ],
)
def test_diagnose_one_case_per_regime(case, regime):
    assert diagnose({k: _al(*v) for k, v in case.items()})[0] == regime


def test_pure_coupling_from_data():
    """Same activation and error marginals, swapped pairing: A_F ≈ 0, both marginals ≈ 1."""
    g = torch.Generator().manual_seed(2)
    n = 600
    base_a, base_e = torch.eye(4, dtype=torch.float64)[:2], torch.eye(4, dtype=torch.float64)[:2]

    def stream(swap):
        i = torch.randint(0, 2, (n,), generator=g)
        a = base_a[i] + 0.05 * torch.randn(n, 4, generator=g, dtype=torch.float64)
        e = base_e[(1 - i) if swap else i] + 0.05 * torch.randn(n, 4, generator=g, dtype=torch.float64)
        return a, e

    sig = lambda s: _sig(*s, m=256, seed=3)
    ranking = us.rank_sources(sig(stream(False)), {"same": sig(stream(False)), "swapped": sig(stream(True))})
    rows = {r.source: r for r in ranking.rows}
    assert rows["same"].fisher > 0.8 and rows["swapped"].fisher < 0.2
    assert ranking.regime == "coupled" and "pure coupling" in ranking.explanation


# ---------------------------------------------------------------- 3. standard errors cover
def _population_truth(p, q):
    def mats(a, e):
        g = (a[:, :, None] * e[:, None, :]).reshape(a.shape[0], -1)  # per-sample gradient a ⊗ e
        return [x.T @ x / a.shape[0] for x in (g, a, e)]  # materialised F, M_a, Γ_e

    return [float((x * y).sum() / (x.norm() * y.norm())) for x, y in zip(mats(*p), mats(*q))]


def test_two_standard_errors_cover_95_percent_over_resampled_data():
    """Data sets are drawn with replacement from two fixed pools (whose empirical Fisher is the
    exact population value), with a fresh sketch seed each time.  Margin: 2 binomial SEs of
    the coverage estimate, √(0.95·0.05/R).  Before the fix: 0.91 / 0.81 / 0.80."""
    pool_s, pool_t = _task(1, 4000, shift=1.0), _task(2, 4000)
    truth = _population_truth(pool_s, pool_t)
    g = torch.Generator().manual_seed(0)
    reps, n = 600, 300
    hits = torch.zeros(3)
    for r in range(reps):
        i, j = torch.randint(0, 4000, (n,), generator=g), torch.randint(0, 4000, (n,), generator=g)
        al = us.alignment(
            _sig(pool_s[0][i], pool_s[1][i], m=256, seed=r), _sig(pool_t[0][j], pool_t[1][j], m=256, seed=r)
        )
        for k, (v, se) in enumerate(
            ((al.fisher, al.fisher_se), (al.activation, al.activation_se), (al.error, al.error_se))
        ):
            hits[k] += abs(v - truth[k]) <= 2 * se
    coverage = hits / reps
    margin = 2 * math.sqrt(0.95 * 0.05 / reps)
    assert ((coverage >= 0.93 - margin) & (coverage <= 0.97 + margin)).all(), coverage.tolist()


# ---------------------------------------------------------------- 4. self and near-duplicates
def test_target_is_never_ranked_against_itself(tmp_path):
    t = _sig(*_task(0, 400))
    copy = us.load_signature(us.save_signature(t, tmp_path / "t.safetensors"))
    other = _sig(*_task(3, 400, shift=2.0))
    ranking = us.rank_sources(t, {"t": t, "t-copy": copy, "other": other})
    assert [r.source for r in ranking.rows] == ["other"]
    assert set(ranking.skipped) == {"t", "t-copy"} and "target itself" in ranking.skipped["t"]
    with pytest.raises(us.InputError):
        us.rank_sources(t, {"t": t})
    al = us.alignment(t, t)
    assert not al.trusted and any("same signature" in w for w in al.warnings)


def test_near_duplicate_is_noted_and_a_different_source_is_not():
    a, e = _task(0, 4000)
    t = _sig(a[:2000], e[:2000], m=256)
    twin = _sig(a[2000:], e[2000:], m=256)  # a disjoint sample of the target's population
    far = _sig(*_task(3, 2000, shift=2.0), m=256)
    rows = {r.source: r for r in us.rank_sources(t, {"twin": twin, "far": far}).rows}
    assert "indistinguishable from the target" in rows["twin"].note
    assert "indistinguishable" not in rows["far"].note


# ---------------------------------------------------------------- 7. same sketch, same bytes; checksum
def test_same_signature_same_bytes_and_checksum(tmp_path):
    t = _sig(*_task(0, 100))
    t = Signature(t.config, t.sums, t.diag, t.counts, {"zeta": "1", "alpha": "2", "data": "toy"})
    t2 = Signature(t.config, t.sums, t.diag, t.counts, {"data": "toy", "alpha": "2", "zeta": "1"})
    p1, p2 = us.save_signature(t, tmp_path / "a.sig"), us.save_signature(t2, tmp_path / "b.sig")
    p3 = us.save_signature(us.load_signature(p1), tmp_path / "c.sig")
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in (p1, p2, p3)}
    assert len(digests) == 1


def _header(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    return n, json.loads(raw[8 : 8 + n])


def test_bit_flip_in_tensor_data_is_refused(tmp_path):
    p = us.save_signature(_sig(*_task(0, 100)), tmp_path / "a.sig")
    raw = bytearray(p.read_bytes())
    n, hdr = _header(bytes(raw))
    lo, _ = hdr["sums"]["data_offsets"]
    raw[8 + n + lo + 3] ^= 0x01  # a low mantissa bit of one sum: value stays finite and plausible
    p.write_bytes(bytes(raw))
    with pytest.raises(us.SignatureFileError, match="checksum"):
        us.load_signature(p)


def test_file_without_checksum_still_loads(tmp_path):
    t = _sig(*_task(0, 100))
    meta = {
        "format": "updatescope-signature",
        "format_version": "1",
        "library_version": "0",
        "config": json.dumps(t.config.to_dict()),
    }
    save_file(t.state_dict(), str(tmp_path / "old.sig"), metadata=meta)
    back = us.load_signature(tmp_path / "old.sig")
    assert torch.equal(back.sums, t.sums)


@pytest.mark.parametrize(
    "key,value",
    [
        ("format_version", "0"),
        ("format_version", "-1"),
        ("config", "[1, 2]"),
        ("config", '"text"'),
        ("config", "[" * 5000),
        ("config", '{"act_dim": "6", "out_dim": 6, "sketch_dim": 128}'),
    ],
)
def test_bad_metadata_is_one_line_refusal(tmp_path, key, value):
    t = _sig(*_task(0, 100))
    meta = {"format": "updatescope-signature", "format_version": "1", "config": json.dumps(t.config.to_dict())}
    meta[key] = value
    save_file(t.state_dict(), str(tmp_path / "x.sig"), metadata=meta)
    with pytest.raises(us.SignatureFileError) as exc:
        us.load_signature(tmp_path / "x.sig")
    assert "\n" not in str(exc.value)


# ---------------------------------------------------------------- 8. overflow
def test_huge_counts_do_not_crash_or_wrap(tmp_path):
    t = _sig(*_task(0, 400))
    other = _sig(*_task(3, 400, shift=1.0))
    # every sample repeated k times: counts ≈ 6.7e9 > 4.3e9 (n(n−1) > 2⁶³); the value tends to
    # the plug-in one as k grows, so k = 2²⁰ and k = 2²⁴ agree to O(1/k)
    rep = lambda k: _with(t, sums=t.sums * k, diag=t.diag * k, counts=t.counts * k)
    big = rep(2**24)
    al_big, al = us.alignment(other, big), us.alignment(other, rep(2**20))  # n(n−1) < 2⁶³ here
    assert math.isfinite(al_big.fisher) and al_big.fisher == pytest.approx(al.fisher, rel=1e-5)
    k = 2**24
    back = us.load_signature(us.save_signature(big, tmp_path / "big.sig"))
    assert back.count == 400 * k
    near = _with(t, counts=torch.tensor([2**62 - 1, 2**62 - 1]))  # int64 sum would wrap
    assert near.count == 2 * (2**62 - 1)
    us.alignment(other, near)  # no exception
    with pytest.raises(us.SignatureFileError, match="counts"):
        us.load_signature(us.save_signature(near, tmp_path / "near.sig"))


def test_sums_near_1e300_keep_their_value():
    t, s = _sig(*_task(0, 400)), _sig(*_task(3, 400, shift=1.0))
    blow = lambda x: _with(
        x, sums=x.sums * (1e150 / float(x.sums.abs().max())), diag=x.diag * (1e150 / float(x.sums.abs().max())) ** 2
    )
    huge, huge_s = blow(t), blow(s)
    assert float(huge.diag.max()) > 1e290 and torch.isfinite(huge.diag).all()
    al, ref = us.alignment(huge_s, huge), us.alignment(s, t)  # the product of the norms is ~1e600
    for name in ("fisher", "activation", "error"):
        assert getattr(al, name) == pytest.approx(getattr(ref, name), rel=1e-9)
    assert al.trusted == ref.trusted
    m = us.alignment_matrix([huge_s, huge])
    assert float(m["fisher"][0, 1]) == pytest.approx(ref.fisher, rel=1e-9)
    assert float(huge.vector() @ huge_s.vector()) == pytest.approx(float(t.vector() @ s.vector()), rel=1e-5)


# ---------------------------------------------------------------- corruptions, property style
def test_random_corruptions_load_correctly_or_refuse_in_one_line(tmp_path):
    good = _sig(*_task(0, 200), m=64)
    other = _sig(*_task(3, 200, shift=1.0), m=64)
    raw = us.save_signature(good, tmp_path / "good.sig").read_bytes()
    n_hdr, hdr = _header(raw)
    g = torch.Generator().manual_seed(11)
    rnd = lambda hi: int(torch.randint(0, hi, (1,), generator=g))
    edits = [
        ("format_version", ["2", "0", "x", "1 "]),
        (
            "config",
            [
                "{}",
                "null",
                "[]",
                '{"act_dim": 6}',
                "{",
                json.dumps({**good.config.to_dict(), "seed": 1}),
                json.dumps({**good.config.to_dict(), "sketch_dim": 32}),
            ],
        ),
        ("sha256", ["0" * 64, ""]),
        ("format", ["other"]),
        ("library_version", ["9.9", ""]),
        ("data", ["free text [/bold]"]),
    ]  # the last two load
    outcomes = {"loaded": 0, "refused": 0}
    for trial in range(300):
        data = bytearray(raw)
        kind = trial % 4
        if kind == 0:  # byte flips anywhere
            for _ in range(1 + rnd(4)):
                data[rnd(len(data))] ^= 1 << rnd(8)
        elif kind == 1:  # truncation
            data = data[: rnd(len(data))]
        elif kind == 2:  # metadata edit, header rewritten consistently
            key, values = edits[rnd(len(edits))]
            h = json.loads(json.dumps(hdr))
            h["__metadata__"][key] = values[rnd(len(values))]
            text = json.dumps(h).encode()
            text += b" " * (-len(text) % 8)
            data = bytearray(struct.pack("<Q", len(text)) + text + raw[8 + n_hdr :])
        else:  # a tensor's bytes overwritten with random ones
            lo, hi = hdr[["sums", "diag", "counts"][rnd(3)]]["data_offsets"]
            pos = 8 + n_hdr + lo + rnd(hi - lo)
            data[pos] = rnd(256)
        path = tmp_path / f"c{trial}.sig"
        path.write_bytes(bytes(data))
        try:
            sig = us.load_signature(path)
        except UpdatescopeError as exc:
            assert "\n" not in str(exc) and str(exc)
            outcomes["refused"] += 1
            continue
        # a load must be correct: the same state as the original (only free metadata may differ)
        assert torch.equal(sig.sums, good.sums) and torch.equal(sig.diag, good.diag)
        assert torch.equal(sig.counts, good.counts) and sig.config == good.config
        try:
            json.dumps(us.rank_sources(sig, {"other": other}).as_dict(), allow_nan=False)
        except UpdatescopeError as exc:
            assert "\n" not in str(exc)
        outcomes["loaded"] += 1
    assert outcomes["refused"] > 100 and outcomes["loaded"] > 0, outcomes


def test_countsketch_values_are_flagged_as_uncalibrated():
    a, e = _task(0, 300)
    sig = lambda emap, x: us.FisherSketch(6, 6, sketch_dim=128, seed=0, error_map=emap).update(*x).signature()
    other = _task(3, 300, shift=1.0)
    al = us.alignment(sig("countsketch", (a, e)), sig("countsketch", other))
    assert not al.trusted and any("countsketch" in w and "not calibrated" in w for w in al.warnings)
    assert not any("countsketch" in w for w in us.alignment(sig("srht", (a, e)), sig("srht", other)).warnings)
