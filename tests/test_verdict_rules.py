"""Every verdict word of the paper-B, steering and network docs is computed by a rule: a copy of
the real record with the relevant numbers changed flips the printed word, and the unmodified
record gives the word the doc shows.  No model, no experiment: the generators only read JSON."""

import copy
import json
from pathlib import Path

import pytest

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


@pytest.fixture(scope="module")
def ll():
    return docs_script("locallinear_table")


@pytest.fixture(scope="module")
def st():
    return docs_script("steering_table")


@pytest.fixture(scope="module")
def nw():
    return docs_script("network_table")


def _rec(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _metrics(name: str) -> dict:
    return copy.deepcopy(_rec(name)["metrics"])


def _row(rows: list[str], start: str) -> str:
    hits = [r for r in rows if r.startswith(start)]
    assert len(hits) == 1, (start, hits)
    return hits[0]


def _verdict(row: str) -> str:
    return row.rstrip(" |").rsplit("|", 1)[1].strip()


# ------------------------------------------------------------------ locallinear: recovery table
def test_static_plane_little_flips(ll):
    m = _metrics("recovery_quick")
    row = lambda: _verdict(_row(ll.recovery_table(m), "| static planes capture little"))  # noqa: E731
    assert row().startswith("not reproduced: local above the paper's ≈ 15% by 2 SE; local > pre-interference")
    m["summary"]["task_plane.capture_forg"].update(mean=0.14, se=0.01)  # at the paper's ≈ 15%
    assert row() == "little; local > pre-interference"
    m["summary"]["task_plane.capture_mt"].update(mean=0.30, se=0.01)  # pre-interference above local
    assert row() == "little; local < pre-interference"
    m["summary"]["task_plane.capture_mt"].update(mean=0.15, se=0.05)
    assert row() == "little; local ≈ (within 2 SE) pre-interference"


def test_drift_flips(ll):
    m = _metrics("recovery_quick")
    s = m["summary"]
    i = s["drift.steps"].index(100)  # the last step the table shows
    row = lambda: _verdict(_row(ll.recovery_table(m), "| the task plane drifts"))  # noqa: E731
    assert row() == "drift beyond resampling"
    s["drift.normalised"]["mean"][i], s["drift.normalised"]["se"][i] = 0.9, 0.05
    assert row() == "little drift beyond resampling"
    s["drift.normalised"]["se"][i] = 0.3  # 0.9 − 0.6 < 0.5 < 0.9
    assert row().startswith("drift not resolved")


def test_rank_flips(ll):
    m = _metrics("recovery_quick")
    s = m["summary"]
    row = lambda: _verdict(_row(ll.recovery_table(m), "| effective rank, sort"))  # noqa: E731
    assert row() == "stable rank ≤ 8; directions not lower-rank than shuffled labels"
    s["rank.sort.task_unit.stable_rank"].update(mean=2.0, se=0.1)
    s["rank.sort.shuffled_unit.stable_rank"].update(mean=9.0, se=0.1)
    assert row() == "stable rank ≤ 8; directions lower-rank than shuffled labels"
    s["rank.sort.task.stable_rank"].update(mean=12.0, se=0.5)
    assert row().startswith("stable rank > 8")
    s["rank.sort.task.stable_rank"].update(mean=7.5, se=0.5)
    assert row().startswith("stable rank not resolved vs 8")


def test_krylov_flips(ll):
    m = _metrics("recovery_quick")
    s = m["summary"]
    gd = lambda: _verdict(_row(ll.recovery_table(m), "| Krylov: θ_k"))  # noqa: E731
    sgd = lambda: _verdict(_row(ll.recovery_table(m), "| Krylov, minibatch SGD (same η"))  # noqa: E731
    assert gd() == "holds only partly at k = 10" and sgd() == "breaks with minibatch noise"
    s["krylov.gd_capture"]["mean"][-1], s["krylov.gd_capture"]["se"][-1] = 0.97, 0.01
    assert gd() == "holds at this horizon (≥ 90%)"
    s["krylov.sgd_capture"]["mean"][-1] = 0.95
    assert sgd() == "close to GD (within 2 SE)"


def test_prefix_beyond_nulls_flips(ll):
    m = _metrics("recovery_quick")
    s = m["summary"]
    row = lambda: _verdict(_row(ll.recovery_table(m), "| trajectory prefix captures Δ_GD, k = 10"))  # noqa: E731
    assert row() == "not beyond the nulls"
    s["curve.independent"]["mean"][9] = 0.3
    assert row() == "beyond every null"


def test_recovery_rules_line_is_printed(ll):
    rows = ll.recovery_table(_metrics("recovery_quick"))
    assert rows[-1].startswith("Rules:") and "≈ 15%" in rows[-1] and "2 SE" in rows[-1]


# ------------------------------------------------------------------ locallinear: random-search table
def test_sigma_window_flips(ll):
    m = _metrics("random_search_quick")
    m["config_n_sweep"] = 16
    row = lambda: _verdict(_row(ll.search_table(m), "| σ window, trajectory prefix"))  # noqa: E731
    assert row().startswith("not resolved (one draw per ρ, no SE)")
    sweep = m["sigma_window"]["trajectory_prefix"]
    for r in sweep:  # the recorded gains, now with small SEs: positive in the middle, falling at both ends
        r["gain_tune_se"] = 0.001
    sweep[0]["gain_tune"] = -0.01
    assert "window (falls off on both sides)" in row()
    for r in sweep:
        r["gain_tune"] = -0.01
    assert row().startswith("no ρ gains on the tune split by 2 SE")


def test_density_beats_mass_flips(ll):
    m = _metrics("random_search_quick")
    m["config_n_sweep"] = 16
    dens = m["density_vs_mass"]
    row = lambda: _verdict(_row(ll.search_table(m), "| density beats mass"))  # noqa: E731
    # paired differences +0.05 and -0.02: mean +0.015, SE 0.035, within 2 SE of 0
    dens["small_aligned_r2"]["gain_heldout"] = [0.20, 0.10]
    dens["large_containing_r40"]["gain_heldout"] = [0.15, 0.12]
    assert row() == "not resolved"
    dens["small_aligned_r2"]["gain_heldout"] = [0.20, 0.16]
    dens["large_containing_r40"]["gain_heldout"] = [0.11, 0.08]
    assert row() == "reproduced"
    dens["small_aligned_r2"]["gain_heldout"] = [0.05, 0.04]
    assert row() == "opposite"
    assert _verdict(_row(ll.search_table(_metrics("random_search_full") | {"config_n_sweep": 32}), "| density")) == (
        "reproduced"
    )


def test_prefix_search_flips(ll):
    m = _metrics("random_search_quick")
    m["config_n_sweep"] = 16
    row = lambda: _verdict(_row(ll.search_table(m), "| search in the trajectory prefix"))  # noqa: E731
    assert row().startswith("not reproduced")
    for k, v in m["subspaces"].items():
        if k != "trajectory_prefix":
            v["gain_heldout_mean"], v["gain_heldout_se"] = 0.0, 0.001
    assert row() == "reproduced"


# ------------------------------------------------------------------ locallinear: LoRA recovery
def _lora(name: str) -> dict:
    rec = _rec(name)
    m = copy.deepcopy(rec["metrics"])
    m["config"] = rec["config"]
    m["_file"], m["_seconds"] = f"{name}.json", rec.get("seconds")
    return m


def test_lora_static_planes_table_and_prose_flip_together(ll):
    m = _lora("lora_recovery_quick")
    row = lambda: _verdict(_row(ll.lora_recovery_table(m), "| static planes capture little (4-dim task plane, LoRA"))  # noqa: E731
    line = lambda: ll.plane_verdicts(m)[0]  # noqa: E731
    assert row().startswith("not reproduced") and f"**{row()}**" in line()  # the record's own word, both places
    m["summary"]["task_plane.capture_forg"].update(mean=0.40, se=0.03)
    m["summary"]["task_plane.capture_mt"].update(mean=0.45, se=0.02)
    word = "not reproduced: local above the paper's ≈ 15% by 2 SE; local ≈ (within 2 SE) pre-interference"
    assert row() == word and f"**{word}**" in line()
    m["summary"]["task_plane.capture_forg"].update(mean=0.40, se=0.01)
    m["summary"]["task_plane.capture_mt"].update(mean=0.48, se=0.01)
    assert row() == "not reproduced: local above the paper's ≈ 15% by 2 SE; local < pre-interference"
    m["summary"]["task_plane.capture_forg"].update(mean=0.12, se=0.02)
    m["summary"]["task_plane.capture_mt"].update(mean=0.01, se=0.005)
    assert row() == "little; local > pre-interference"
    assert "LoRA space: static planes (local 12.00% ± 2.00, pre-interference 1.00% ± 0.50" in line()
    assert "**little; local > pre-interference**" in line()


def test_lora_drift_and_forgetting_flip(ll):
    m = _lora("lora_recovery_quick")
    s = m["summary"]
    rows = ll.lora_recovery_table(m)
    assert _verdict(_row(rows, "| the task plane drifts |")) == "little drift beyond resampling"
    assert _verdict(_row(rows, "| forgetting")).startswith("clear")
    last = len(s["drift.steps"]) - 1
    s["drift.normalised"]["mean"][last], s["drift.normalised"]["se"][last] = 0.2, 0.05
    for t in m["tasks"]:
        if t != m["focus"]:
            s[f"forget_rise.{t}"].update(mean=0.04)
    rows = ll.lora_recovery_table(m)
    assert _verdict(_row(rows, "| the task plane drifts |")) == "drift beyond resampling"
    assert "drift to step 30 **drift beyond resampling**" in ll.plane_verdicts(m)[0]
    assert _verdict(_row(rows, "| forgetting")) == "not clear in every task"


def test_seconds_line_reads_the_record(ll):
    m = _lora("lora_recovery_quick")
    assert ll.seconds_line(m) == [f"- `lora_recovery_quick.json`: {m['_seconds']:.1f} s"]
    rs = _rec("random_search_quick")
    assert ll.seconds_line({"_file": "random_search_quick.json", "_seconds": rs["seconds"]}) == [
        f"- `random_search_quick.json`: {rs['seconds']:.1f} s"
    ]


# ------------------------------------------------------------------ locallinear: schedules
def test_schedules_verdict_flips(ll):
    m = _metrics("schedules_quick")
    line = lambda: ll.schedules_table(m)[-1]  # noqa: E731
    m["summary"]["paired"]["recovery_cost"]["ci"] = [-5.0, 9.0]
    assert line().endswith("**not shown**.")
    m["summary"]["paired"]["recovery_cost"]["ci"] = [-50.0, -10.0]
    assert line().endswith("**more robust**.")
    m["summary"]["paired"]["recovery_cost"]["ci"] = [10.0, 50.0]
    assert line().endswith("**opposite**.")
    m["regime"]["passed"] = False
    assert "**cannot be decided" in line()
    # a record's own line carries the word its interval gives
    full = _metrics("schedules_full_replay")
    lo, hi = full["summary"]["paired"]["recovery_cost"]["ci"]
    word = "more robust" if hi < 0 else "opposite" if lo > 0 else "not shown"
    assert ll.schedules_table(full)[-1].endswith(f"**{word}**.")


# ------------------------------------------------------------------ steering
def test_steering_vectors_over_every_vector_flip(st):
    rec = copy.deepcopy(_rec("steering_medium"))
    text = lambda: "\n".join(st.steering_block(rec, "steering_medium"))  # noqa: E731
    assert "Test gain above 2 SE: search_2 (+0.113 ± 0.052)" in text()
    assert "No vector's test gain exceeds 2 SE" not in text()
    for v in rec["metrics"]["steering_test"].values():
        if "gain" in v:
            v["gain"] = 0.0
    assert "No vector's test gain exceeds 2 SE." in text()
    assert "Verdict: not reproduced at this size." in text()


def test_steering_base_auc_flips(st):
    rec = copy.deepcopy(_rec("steering_medium"))
    setup = lambda: "\n".join(st.setup_block(rec, "steering_medium"))  # noqa: E731
    verdict = lambda: "\n".join(st.steering_block(rec, "steering_medium"))  # noqa: E731
    assert "does not separate true from false statements (AUC − 2 SE ≤ 0.5)" in setup()
    assert "the base margins do not separate" in verdict()
    rec["metrics"]["base"]["test"]["auc"] = 0.8
    assert "the margin separates true from false statements (AUC − 2 SE > 0.5)" in setup()
    assert "the base margins do not separate" not in verdict()
    rec["metrics"]["base"]["test"]["auc"] = 0.55  # above 0.5, but not by 2 SE at n = 62
    assert "does not separate" in setup()


def test_steering_subjects_counted_from_the_prompts(st):
    rec = copy.deepcopy(_rec("steering_medium"))
    setup = "\n".join(st.setup_block(rec, "steering_medium"))
    assert "32 / 16 / 31 (requested: test 48" in setup and "(64 / 32 / 62 prompts)" in setup
    rec["metrics"]["n"]["test"] = 96
    assert "32 / 16 / 48 subjects (64 / 32 / 96 prompts)" in "\n".join(st.setup_block(rec, "steering_medium"))


# ------------------------------------------------------------------ network
def test_network_internal_share_and_weakly_tested_flip(nw):
    rec = copy.deepcopy(_rec("network_quick"))
    row = nw.validation_verdicts(rec)[2]
    assert "internal linear weights only 0.057–0.31%" in row and "weakly tested" in row
    for mm in rec["metrics"]["models"]:
        mm["target_energy_share"]["internal_linear"] = 0.2
    row = nw.validation_verdicts(rec)[2]
    assert "weakly tested" not in row and "**supported**" in row
    for mm in rec["metrics"]["models"]:
        mm["tracking"]["exact"]["head"]["spearman"] = 0.5
    assert "**not supported**" in nw.validation_verdicts(rec)[2]


def test_network_other_verdicts_flip(nw):
    rec = copy.deepcopy(_rec("network_quick"))
    rows = nw.validation_verdicts(rec)
    assert "**supported** at m" in rows[3] and "**not supported as a predictor**" in rows[5]
    assert "slack as a predictor: not supported" in rows[6]
    for mm in rec["metrics"]["models"]:
        for k in mm["sketch_vs_exact"]:
            mm["sketch_vs_exact"][k]["coverage_2se"] = 0.5
        mm["diagnostics"]["spearman_head_error_vs_1_minus_profile_cosine"] = 0.7
        mm["diagnostics"]["spearman_head_error_vs_offdiag_slack"] = 0.7
    rows = nw.validation_verdicts(rec)
    assert "**not supported** at m" in rows[3] and "**supported as a predictor**" in rows[5]
    assert "slack as a predictor: supported" in rows[6]


def test_llm_search_claim_words_follow_the_record_verdicts(ll):
    m = _metrics("llm_search_full")
    (line,) = ll.llm_claims(m)
    assert "σ window **not reproduced**" in line and "gain vs N **not decidable**" in line
    assert "random **reproduced**" in line
    m["verdicts"]["sigma_window"] = "gain > 0 by 2 SE at σ ∈ [1e-03, 3e-03]; falls off on both sides"
    m["verdicts"]["gain_vs_n"] = "grows with N by 2 SE; at N = 16 consistent with the linear prediction (ratio 1.00)"
    m["verdicts"]["prefix_vs_isotropic"] = "prefix beats neither by 2 SE"
    (line,) = ll.llm_claims(m)
    assert "σ window **reproduced**" in line and "gain vs N **reproduced**" in line
    assert "random **not reproduced**" in line
    m["verdicts"]["gain_vs_n"] = "does not grow with N by 2 SE; at N = 16 below the linear prediction (ratio 0.10)"
    assert "gain vs N **not reproduced**" in ll.llm_claims(m)[0]


def test_schedules_claim_word_follows_the_paired_interval(ll):
    m = _metrics("schedules_full_replay")
    m["summary"]["paired"]["recovery_cost"]["ci"] = [-50.0, -10.0]
    assert "**reproduced on the synthetic lab**" in ll.schedules_claim(m)[0]
    m["summary"]["paired"]["recovery_cost"]["ci"] = [5.0, 9.0]
    assert "**contradicted**" in ll.schedules_claim(m)[0]
    m["summary"]["paired"]["recovery_cost"]["ci"] = [-5.0, 9.0]
    assert "**not decided**" in ll.schedules_claim(m)[0]


def test_lora_prefix_and_rank_claims_flip(ll):
    m = _lora("lora_recovery_full")
    s = m["summary"]
    line = lambda: ll.lora_claims(m)[0]  # noqa: E731
    assert "**not reproduced as a trajectory-specific structure**" in line()
    assert "effective rank **not decidable as a task property" in line()
    for key in ("curve.walk", "curve.independent", "curve.local_plane"):
        s[key]["mean"] = [0.0] * len(s[key]["mean"])
        s[key]["se"] = [0.0] * len(s[key]["se"])
    s["curve.prefix"]["mean"][19], s["curve.prefix"]["se"][19] = 0.9, 0.01
    assert "prefix capture at k = 20 **reproduced**" in line()
    for t in m["tasks"]:
        s[f"rank.{t}.task.stable_rank"].update(mean=2.0, se=0.1)
        s[f"rank.{t}.task_unit.stable_rank"].update(mean=1.2, se=0.05)
        s[f"rank.{t}.shuffled_unit.stable_rank"].update(mean=3.0, se=0.05)
    assert "effective rank **reproduced**" in line()
    for t in m["tasks"]:
        s[f"rank.{t}.task.stable_rank"].update(mean=20.0, se=0.1)
    assert "effective rank **not reproduced**" in line()
