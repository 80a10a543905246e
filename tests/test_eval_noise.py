"""The evaluation bootstrap of a transfer table (scoring.eval_noise) against a direct float64 loop."""

import numpy as np
import pytest

from updatescope.experiments import scoring


def _seq(rng, n_seq=6):
    tok = rng.integers(5, 30, size=n_seq).astype(float)
    base = tok * 3.0 + rng.normal(0, 1, n_seq)
    loss = {
        "t": {
            "a": (base - tok * 0.2 + rng.normal(0, 0.5, n_seq)).tolist(),
            "b": (base - tok * 0.1 + rng.normal(0, 0.5, n_seq)).tolist(),
            "t": (base - tok * 0.5).tolist(),
        }
    }
    return {"base": {"t": base.tolist()}, "loss": loss, "tokens": {"t": tok.tolist()}}


def test_eval_noise_matches_a_direct_bootstrap():
    seq = _seq(np.random.default_rng(1))
    out = scoring.eval_noise(seq, n_boot=400, seed=3)
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 6, size=(400, 6))
    base, tok = np.array(seq["base"]["t"]), np.array(seq["tokens"]["t"])
    draws = {s: [] for s in ("a", "b")}
    for row in idx:
        for s in draws:
            loss = np.array(seq["loss"]["t"][s])
            draws[s].append((base[row].sum() - loss[row].sum()) / tok[row].sum())
    for s in draws:
        assert out["per_target"]["t"]["se"][s] == pytest.approx(np.std(draws[s], ddof=1), rel=1e-10)
    point = {s: (base.sum() - np.sum(seq["loss"]["t"][s])) / tok.sum() for s in draws}
    best = max(point, key=point.get)
    share = np.mean([max(draws, key=lambda s: draws[s][i]) == best for i in range(400)])
    assert out["per_target"]["t"]["best_stable"] == pytest.approx(share)
    second = min(point, key=point.get)  # two candidates: the other one
    gap = np.array(draws[best]) - np.array(draws[second])
    assert out["per_target"]["t"]["gap_se"] == pytest.approx(np.std(gap, ddof=1), rel=1e-10)
    assert "t" not in out["per_target"]["t"]["se"]  # self-transfer is not a candidate


def test_eval_noise_shrinks_with_more_sequences():
    rng = np.random.default_rng(0)
    small = scoring.eval_noise(_seq(rng, 8), seed=0)["median_se"]
    large = scoring.eval_noise(_seq(rng, 200), seed=0)["median_se"]
    assert large < small / 2  # SE ~ 1/sqrt(n): 25x the sequences, 1/5 of the SE
