"""Selection metrics against small tables worked by hand (arithmetic in the comments)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from updatescope.errors import InputError
from updatescope.select.metrics import (
    bootstrap_ci,
    chance_top1,
    oracle_normalised_transfer,
    pooled_spearman,
    regret,
    spearman,
    summarise,
    top1_accuracy,
)

# Three targets A, B, C; a target is never its own source (scores["A"]["A"] is ignored).
TRANSFER = {
    "A": {"B": 0.30, "C": 0.10, "D": -0.05},
    "B": {"A": 0.20, "C": 0.40, "D": 0.10},
    "C": {"A": -0.10, "B": -0.20, "D": -0.30},
}
SCORES = {
    "A": {"A": 99.0, "B": 0.9, "C": 0.5, "D": 0.1},  # picks B = best            -> hit
    "B": {"A": 0.7, "C": 0.6, "D": 0.2},  # picks A (0.20), best C 0.40 -> miss
    "C": {"A": 0.3, "B": 0.3, "D": 0.1},  # A, B tied; best is A        -> 1/2
}


def test_top1_hand_case():
    m = top1_accuracy(SCORES, TRANSFER)
    # A: 1, B: 0, C: tie {A (best), B} -> expected hit 1/2.  mean = 1.5 / 3 = 0.5
    assert m.per_target == {"A": 1.0, "B": 0.0, "C": 0.5}
    assert m.mean == pytest.approx(0.5)
    # sd (ddof=1): deviations (0.5, -0.5, 0), sum of squares 0.5, /2 = 0.25 -> 0.5
    assert m.sd == pytest.approx(0.5)
    # chance: one best of three candidates per target -> 1/3
    assert chance_top1(TRANSFER).mean == pytest.approx(1 / 3)


def test_regret_hand_case():
    m = regret(SCORES, TRANSFER)
    # A: 0.30 - 0.30 = 0; B: 0.40 - 0.20 = 0.20;
    # C: chosen = mean(-0.10, -0.20) = -0.15, best -0.10 -> regret 0.05
    assert m.per_target["A"] == pytest.approx(0.0)
    assert m.per_target["B"] == pytest.approx(0.20)
    assert m.per_target["C"] == pytest.approx(0.05)
    assert m.mean == pytest.approx(0.25 / 3)  # (0 + 0.20 + 0.05) / 3
    assert m.max == pytest.approx(0.20)


def test_oracle_normalised_transfer_hand_case():
    m = oracle_normalised_transfer(SCORES, TRANSFER)
    # A: 0.30 / 0.30 = 1; B: 0.20 / 0.40 = 0.5; C: best -0.10 <= 0 -> excluded
    assert m.per_target == pytest.approx({"A": 1.0, "B": 0.5})
    assert m.mean == pytest.approx(0.75)
    assert set(m.excluded) == {"C"} and "no source helps" in m.excluded["C"]


def test_spearman_hand_case_with_ties():
    m = spearman(SCORES, TRANSFER)
    # A: score ranks (3,2,1), transfer ranks (3,2,1) -> rho = 1
    # B: score ranks A3 C2 D1, transfer ranks A2 C3 D1; d = (1,-1,0), sum d^2 = 2
    #    rho = 1 - 6*2 / (3*(9-1)) = 1 - 12/24 = 0.5
    # C: score ranks (2.5, 2.5, 1) (tie -> average), transfer ranks (3, 2, 1);
    #    Pearson on ranks: x - 2 = (.5, .5, -1), y - 2 = (1, 0, -1);
    #    cov 1.5, var_x 1.5, var_y 2 -> rho = 1.5 / sqrt(3) = 0.8660
    assert m.per_target["A"] == pytest.approx(1.0)
    assert m.per_target["B"] == pytest.approx(0.5)
    assert m.per_target["C"] == pytest.approx(1.5 / math.sqrt(3))
    assert m.mean == pytest.approx((1.5 + 1.5 / math.sqrt(3)) / 3)
    assert set(m.extra["p_value"]) == {"A", "B", "C"}


def test_constant_scores_are_chance_and_excluded_from_spearman():
    const = {t: {s: 0.42 for s in row} for t, row in TRANSFER.items()}
    # all three candidates tied -> expected hit 1/3 per target = chance
    assert top1_accuracy(const, TRANSFER).mean == pytest.approx(1 / 3)
    # chosen = mean transfer; B: best 0.40 - mean(0.2, 0.4, 0.1) = 0.40 - 0.70/3
    assert regret(const, TRANSFER).per_target["B"] == pytest.approx(0.40 - 0.70 / 3)
    m = spearman(const, TRANSFER)
    assert m.per_target == {} and all(v == "constant scores" for v in m.excluded.values())
    assert math.isnan(m.mean)
    flat = {"A": {"B": 1.0, "C": 1.0, "D": 1.0}}
    assert spearman({"A": {"B": 1.0, "C": 2.0, "D": 3.0}}, flat).excluded == {"A": "constant transfer"}
    assert spearman({"A": {"B": 1.0, "C": 2.0}}, {"A": {"B": 1.0, "C": 2.0}}).excluded["A"].startswith("only 2")


def test_array_input_excludes_diagonal_and_matches_mapping():
    names = ["A", "B", "C", "D"]
    tr = np.full((4, 4), np.nan)
    sc = np.zeros((4, 4))
    for i, t in enumerate(names):
        for j, s in enumerate(names):
            if t in TRANSFER and s in TRANSFER[t]:
                tr[i, j] = TRANSFER[t][s]
            if t in SCORES and s in SCORES[t]:
                sc[i, j] = SCORES[t][s]
    tr[3] = [0.3, 0.2, 0.1, 9.9]  # target D: the diagonal 9.9 is never a candidate
    sc[3] = [0.1, 0.2, 0.3, 9.9]  # picks C (0.1), best A (0.3) -> miss, regret 0.2
    m = top1_accuracy(sc, tr, targets=names, sources=names)
    assert m.per_target == {"A": 1.0, "B": 0.0, "C": 0.5, "D": 0.0}
    assert regret(sc, tr).per_target["3"] == pytest.approx(0.2)  # unnamed square: "0".."3"


def test_pooled_spearman_matches_definition():
    # pooled pairs (score, transfer): (.9,.3) (.5,.1) (.1,-.05) (.7,.2) (.6,.4) (.2,.1)
    # (.3,-.1) (.3,-.2) (.1,-.3): computed independently with rank arithmetic below.
    s = np.array([0.9, 0.5, 0.1, 0.7, 0.6, 0.2, 0.3, 0.3, 0.1])
    t = np.array([0.3, 0.1, -0.05, 0.2, 0.4, 0.1, -0.1, -0.2, -0.3])

    def ranks(v):
        order = sorted(v)
        return np.array([np.mean([k + 1 for k, o in enumerate(order) if o == x]) for x in v])

    rs, rt = ranks(s), ranks(t)
    rho = np.corrcoef(rs, rt)[0, 1]
    out = pooled_spearman(SCORES, TRANSFER)
    assert out["n"] == 9 and out["rho"] == pytest.approx(rho, rel=1e-12)
    assert 0.0 < out["p"] < 1.0


def test_bootstrap_ci_hand_case_and_reproducibility():
    # two values {0, 1}: a resample mean is 0, 0.5 or 1 with prob 1/4, 1/2, 1/4, so the
    # 2.5% quantile is 0 and the 97.5% quantile is 1 (n_boot large enough to see both).
    assert bootstrap_ci([0.0, 1.0], n_boot=4000, seed=1) == (0.0, 1.0)
    # with alpha = 0.5 the quartiles of that distribution are both 0.5
    assert bootstrap_ci([0.0, 1.0], n_boot=4000, seed=1, alpha=0.6) == (0.5, 0.5)
    v = np.random.default_rng(0).normal(size=25)
    a = bootstrap_ci(v, n_boot=500, seed=7)
    assert a == bootstrap_ci(list(v), n_boot=500, seed=7)
    assert a != bootstrap_ci(v, n_boot=500, seed=8)
    assert a[0] < v.mean() < a[1]
    assert bootstrap_ci([2.0, 2.0, np.nan], n_boot=10) == (2.0, 2.0)  # NaN dropped
    assert bootstrap_ci({"x": 1.0, "y": 3.0}, n_boot=10, seed=0)[0] >= 1.0
    with pytest.raises(InputError):
        bootstrap_ci([1.0, np.nan])


def test_summarise_is_complete_and_json_ready():
    out = summarise(SCORES, TRANSFER, n_boot=200, seed=3)
    assert out["n_targets"] == 3
    assert out["top1"]["mean"] == pytest.approx(0.5)
    assert out["top1_over_chance"] == pytest.approx(1.5)
    assert out["regret"]["max"] == pytest.approx(0.2)
    assert out["oracle_normalised_transfer"]["n"] == 2
    assert "C" in out["oracle_normalised_transfer"]["excluded"]
    assert out["spearman"]["ci"] is not None and len(out["spearman"]["p_value"]) == 3
    json.dumps(out, allow_nan=False)
    assert out == summarise(SCORES, TRANSFER, n_boot=200, seed=3)


def test_bad_tables_raise():
    with pytest.raises(InputError):
        top1_accuracy({"A": {"B": 1.0}}, {"A": {"B": 1.0, "C": 2.0}})  # missing score
    with pytest.raises(InputError):
        top1_accuracy({"A": {"B": float("nan"), "C": 1.0}}, {"A": {"B": 1.0, "C": 2.0}})
    with pytest.raises(InputError):
        top1_accuracy({"A": {"A": 1.0}}, {"A": {"A": 1.0}})  # only itself
    with pytest.raises(InputError):
        top1_accuracy(np.zeros((2, 3)), np.zeros((3, 3)))


# ------------------------------------------- within-family, paired, noise ceiling
from updatescope.select.metrics import mean_and_se, noise_ceiling, paired_difference, within_group  # noqa: E402


def test_within_group_ranks_only_same_family_sources():
    # targets A, B in family f; C, D, E in family g.  For C the same-family candidates are
    # D (0.2) and E (0.1); the scores prefer E -> within-family miss, although overall the
    # scores pick the global best... no: the global best for C is A (0.9), outside g.
    groups = {"A": "f", "B": "f", "C": "g", "D": "g", "E": "g"}
    transfer = {
        "C": {"A": 0.9, "B": 0.8, "D": 0.2, "E": 0.1},
        "D": {"A": 0.0, "B": 0.0, "C": 0.3, "E": 0.2},
        "A": {"B": 0.5, "C": 0.1, "D": 0.1, "E": 0.1},
    }
    scores = {
        "C": {"A": 1.0, "B": 0.9, "D": 0.0, "E": 0.5},
        "D": {"A": 0.0, "B": 0.0, "C": 0.6, "E": 0.5},
        "A": {"B": 0.0, "C": 1.0, "D": 1.0, "E": 1.0},
    }
    w = within_group(scores, transfer, groups)
    # A has one same-family candidate (B): excluded from top-1; C miss, D hit
    assert w["top1"].per_target == {"C": 0.0, "D": 1.0}
    assert w["chance_top1"].per_target == {"C": 0.5, "D": 0.5}
    # Spearman needs >= 3 candidates: nobody qualifies here
    assert w["spearman"].per_target == {}
    assert top1_accuracy(scores, transfer).per_target["C"] == 1.0  # overall it is a hit


def test_paired_difference_known_shift_and_null():
    rng = np.random.default_rng(0)
    base = {f"t{i}": float(v) for i, v in enumerate(rng.normal(size=40))}
    shifted = {t: v + 0.5 for t, v in base.items()}
    d = paired_difference(shifted, base, seed=1)
    # every per-target difference is exactly 0.5, so the bootstrap cannot move it
    assert d["mean"] == pytest.approx(0.5) and d["ci"] == pytest.approx([0.5, 0.5]) and d["n"] == 40
    assert d["frac_boot_le_0"] == 0.0
    # a noisy shift of 0.5 with unit noise over 40 targets: SE 0.16, so the CI excludes 0
    # and (fixed seed) covers the true 0.5
    noisy = {t: v + 0.5 + float(rng.normal()) for t, v in base.items()}
    d = paired_difference(noisy, base, seed=1)
    assert 0.0 < d["ci"][0] < 0.5 < d["ci"][1]
    # null: pure noise around the same values -> the CI covers 0 (fixed seed; |mean| ~ 0.1 < 2 SE)
    null = {t: v + float(rng.normal()) for t, v in base.items()}
    d = paired_difference(null, base, seed=1)
    assert d["ci"][0] < 0.0 < d["ci"][1]
    # only common, finite targets are paired
    assert paired_difference({"a": 1.0, "b": math.nan}, {"a": 0.0, "c": 5.0})["n"] == 1


def test_mean_and_se_by_hand():
    tabs = [{"A": {"B": 1.0}}, {"A": {"B": 2.0}}, {"A": {"B": 6.0}}]
    mean, se = mean_and_se(tabs)
    # mean 3; sd (ddof 1) = sqrt(((-2)^2 + (-1)^2 + 3^2) / 2) = sqrt(7); se = sqrt(7/3)
    assert mean == {"A": {"B": 3.0}} and se["A"]["B"] == pytest.approx(math.sqrt(7 / 3))
    assert math.isnan(mean_and_se(tabs[:1])[1]["A"]["B"])


def _seed_tables(signal_sd: float, noise_sd: float, n_seeds: int = 3, n: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    names = [f"d{i}" for i in range(n)]
    truth = rng.normal(scale=signal_sd, size=(n, n))
    return [
        {
            t: {s: float(truth[i, j] + noise_sd * rng.normal()) for j, s in enumerate(names) if j != i}
            for i, t in enumerate(names)
        }
        for _ in range(n_seeds)
    ]


def test_noise_ceiling_is_perfect_without_noise_and_chance_with_only_noise():
    exact = noise_ceiling(_seed_tables(1.0, 0.0))
    assert exact["top1"]["mean"] == 1.0 and exact["spearman"]["mean"] == pytest.approx(1.0)
    assert exact["oracle_normalised_transfer"]["mean"] == pytest.approx(1.0) and exact["regret"]["mean"] == 0.0
    # no signal: 12 targets x 11 candidates x 3 seeds; top-1 chance 1/11; Spearman ~ 0 with
    # SE ~ 0.3 / sqrt(12 * 3) = 0.05 -> allow 4 SE
    pure = noise_ceiling(_seed_tables(0.0, 1.0))
    assert abs(pure["spearman"]["mean"]) < 0.2 and pure["top1"]["mean"] < 0.35
    # in between: strictly below perfect, clearly above chance
    mid = noise_ceiling(_seed_tables(1.0, 0.5), groups={f"d{i}": str(i % 2) for i in range(12)})
    assert 0.3 < mid["spearman"]["mean"] < 0.99 and "within_spearman" in mid and mid["n_seeds"] == 3
    with pytest.raises(InputError):
        noise_ceiling(_seed_tables(1.0, 0.0, n_seeds=1))
