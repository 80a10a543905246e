"""The verdict function of the results pages: exact sign-flip test, Holm, the verdict word."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from updatescope.errors import InputError
from updatescope.select.metrics import holm, paired_verdicts, sign_flip_p


def _brute(d):
    """Two-sided sign-flip p by listing every sign assignment (zeros included)."""
    obs = abs(sum(d))
    hits = [
        abs(sum(s * x for s, x in zip(signs, d))) >= obs - 1e-12 for signs in itertools.product((1, -1), repeat=len(d))
    ]
    return sum(hits) / len(hits)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 11])
def test_exact_sign_flip_matches_brute_force(n):
    rng = np.random.default_rng(n)
    d = list(rng.normal(0.1, 1.0, size=n))
    d[0] = 0.0 if n > 2 else d[0]  # a zero difference changes nothing
    p, se, test = sign_flip_p(d)
    assert test == "exact" and se == 0.0
    assert p == pytest.approx(_brute(d), abs=1e-12)


def test_exact_sign_flip_small_cases_by_hand():
    # all 4 positive: only the all-+ and all-− assignments reach |sum| = 4 -> 2 / 16
    assert sign_flip_p([1.0, 1.0, 1.0, 1.0])[0] == pytest.approx(2 / 16)
    assert sign_flip_p([1.0, -1.0])[0] == 1.0
    assert sign_flip_p([0.0, 0.0]) == (1.0, 0.0, "exact")
    with pytest.raises(InputError):
        sign_flip_p([1.0, float("nan")])


def test_monte_carlo_sign_flip_is_close_to_exact_and_states_its_se():
    d = list(np.random.default_rng(3).normal(0.3, 1.0, size=14))
    exact, _, _ = sign_flip_p(d)
    p, se, test = sign_flip_p(d, exact_max=4, n_draws=40_000, seed=1)
    assert test == "Monte Carlo" and 0 < se < 0.003
    assert abs(p - exact) < 5 * se + 1e-4
    assert sign_flip_p(d, exact_max=4, n_draws=40_000, seed=1) == (p, se, test)  # fixed seed


def test_holm_against_a_hand_computed_example():
    # sorted 0.01, 0.02, 0.03, 0.2 -> ×4, ×3, ×2, ×1 = 0.04, 0.06, 0.06, 0.2 (made monotone)
    assert holm([0.03, 0.2, 0.01, 0.02]) == pytest.approx([0.06, 0.2, 0.04, 0.06])
    # monotone step: 0.04 × 2 = 0.08 would drop below the first's 0.09 -> raised to 0.09
    assert holm([0.03, 0.04, 0.5]) == pytest.approx([0.09, 0.09, 0.5])
    assert holm([0.6, 0.7]) == [1.0, 1.0]


def test_paired_verdicts_words_family_and_holm():
    up = {f"t{i}": 0.1 + 0.01 * i for i in range(8)}  # 8 positive: exact p = 2 / 256
    down = {k: -v for k, v in up.items()}
    mixed = {"a": 0.1, "b": -0.1, "c": 0.2}
    out = paired_verdicts({"x − y": up, "x − z": down, "x − w": mixed}, family="test family")
    assert [v.word for v in out] == ["better", "worse", "no difference"]
    assert all(v.family == "test family" and v.family_size == 3 for v in out)
    assert out[0].p == pytest.approx(2 / 256) and out[0].p_holm == pytest.approx(3 * 2 / 256)
    assert out[0].n == 8 and out[0].mean == pytest.approx(np.mean(list(up.values())))
    assert "Holm" in out[0].note() and "over 3" in out[0].note()
    # the same comparison alone is resolved; in a family of 40 copies it is not
    alone = paired_verdicts({"x − y": {k: up[k] for k in list(up)[:6]}}, family="one")
    assert alone[0].word == "better" and alone[0].p == pytest.approx(2 / 64)
    many = paired_verdicts({f"c{i}": {k: up[k] for k in list(up)[:6]} for i in range(40)}, family="forty")
    assert {v.word for v in many} == {"no difference"}


def test_paired_verdicts_clusters_flip_whole_clusters():
    diffs = {f"t{i}": 1.0 for i in range(8)}
    free = paired_verdicts({"c": diffs}, family="f")[0]
    pairs = paired_verdicts({"c": diffs}, family="f", clusters={f"t{i}": i // 4 for i in range(8)})[0]
    assert free.p == pytest.approx(2 / 256)
    assert pairs.p == pytest.approx(2 / 4) and "2 clusters" in pairs.test and pairs.word == "no difference"
    with pytest.raises(InputError):
        paired_verdicts({"c": diffs}, family="f", clusters={"t0": 0})
