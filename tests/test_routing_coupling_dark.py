"""routing's coupling-dark library: an end-to-end tiny run (few-shot and input-only requests,
every router, the pre-registered and control verdicts), the tie rule, and bad settings."""

from __future__ import annotations

import pytest

from _tiny_lm import loader, reproduce


@pytest.fixture
def tiny(monkeypatch):
    from updatescope.experiments import heads, mapping_tasks

    monkeypatch.setattr(heads, "load_model", loader())
    words = {"python": "def return self", "licence": "licence warranty copy", "digits": "1 2 3 4"}

    def texts(name, n, seed):
        return [f"{words[name]} {name}{i % 5}" for i in range(n)]

    monkeypatch.setattr(mapping_tasks, "class_texts", texts)


SETTINGS = {
    "design": "coupling_dark",
    "sketch_dim": 64,
    "n_boot": 50,
    "coupling_dark": {
        "n_fit": 4,
        "shot_pool": 3,
        "queries_per_mapping": 3,
        "lora": {"steps": 2, "batch": 4, "n_last": 1},
    },
}


def test_tiny_run_routes_few_shot_and_input_only_requests(tiny, tmp_path):
    rec = reproduce("routing", tmp_path, SETTINGS)
    m = rec["metrics"]
    assert m["design"] == "coupling_dark" and m["powered"] is False
    assert len(rec["config"]["preregistration_sha256"]) == 64
    assert len(m["families"]) == 1 and len(m["families"][0]["names"]) == 6
    n = 6 * 3
    assert len(m["requests"]["unit"]) == n and sorted(set(m["requests"]["mapping"])) == list(range(6))
    # the few-shot prompt carries 3 solved examples before the query: longer than the input alone
    assert all(f > i for f, i in zip(m["requests"]["tokens"]["few_shot"], m["requests"]["tokens"]["input_only"]))
    for kind in ("few_shot", "input_only"):
        s = m["summary"][kind]
        assert s["n_requests"] == n
        for r in ("fisher", "fisher_all_tokens", "error", "activation", "embedding", "arrow", "uniform_merge"):
            assert r in s and r in m["routers_see"]
        for r in ("fisher", "error", "activation", "embedding", "random", "own"):
            assert s[r]["oracle_gap"] >= -1e-12  # an adapter choice never beats the oracle
        assert s["oracle"]["oracle_gap"] == pytest.approx(0.0)
    assert m["summary"]["input_only"]["fisher_all_tokens"] == m["summary"]["input_only"]["fisher"]
    v = m["verdicts"]
    assert [c["comparison"] for c in v["comparisons"]] == [
        "FisherSketch vs embedding centroid",
        "FisherSketch vs PEFT Arrow",
        "FisherSketch vs error-only",
        "FisherSketch vs activation-only",
        "FisherSketch vs uniform merge",
    ]
    assert all(c["family_size"] == 5 and c["n_requests"] == n for c in v["comparisons"])
    assert [c["comparison"] for c in v["control"]] == [
        "FisherSketch vs random, few-shot",
        "FisherSketch vs random, input-only",
    ]
    assert all(c["family_size"] == 2 and c["clustered_bootstrap"]["n_clusters"] == 6 for c in v["control"])
    assert isinstance(m["regime"]["adapters_learned_their_mapping"], bool)
    assert len(m["regime"]["own_mapping_gain_few_shot"]) == len(m["regime"]["own_mapping_gain_input_only"]) == 6


def test_training_rows_are_posed_as_requests_and_differ_only_in_their_answers():
    """Amendment 2: each training example is a few-shot prompt of other training examples (one
    per class here), then the example; every answer is counted; the adapters share the draw, so
    their rows differ only at the answer tokens, and each answer follows the adapter's mapping."""
    from types import SimpleNamespace

    from updatescope.experiments.routing.coupling_library import fit_rows

    class Tok:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": ([1] if add_special_tokens else []) + [100 + ord(ch) % 50 for ch in text]}

    per_class = [[f"p{i}" for i in range(4)], [f"l{i}" for i in range(4)], [f"d{i}" for i in range(4)]]
    answers = [[7, 8, 9], [9, 7, 8]]  # two mappings' answer token per class
    rows, pos = fit_rows(SimpleNamespace(n_fit=4, shots=1), Tok(), "Cue:", per_class, answers, seed=0)
    assert len(rows) == 2 and len(rows[0]) == len(pos) == 12
    for i, p in enumerate(pos):
        assert len(p) == 3 + 1  # one solved example per class, then the example itself
        a, b = rows[0][i], rows[1][i]
        assert [j for j in range(len(a)) if a[j] != b[j]] == [j for j in p if a[j] != b[j]]
        k = i // 4  # rows are class by class: the last answer is the example's class's word
        assert (a[p[-1]], b[p[-1]]) == (answers[0][k], answers[1][k])
        for x, m in ((a, answers[0]), (b, answers[1])):
            assert all(x[j] in m for j in p)
    # the example is never among its own solved examples: its prompt appears once in its row
    tok = Tok()
    for i, row in enumerate(rows[0]):
        k, j = divmod(i, 4)
        body = tok(f"{per_class[k][j]}\nCue:", add_special_tokens=False)["input_ids"]
        assert sum(row[s : s + len(body)] == body for s in range(len(row))) == 1


def test_truth_store_resumes_every_seed_and_family_and_refuses_another_configuration(tiny, tmp_path, monkeypatch):
    import json

    from updatescope.errors import InputError
    from updatescope.experiments.routing import coupling_library

    store = tmp_path / "store"
    settings = {**SETTINGS, "truth_store": str(store)}
    first = reproduce("routing", tmp_path / "a", settings)
    files = sorted(store.iterdir())
    assert len(files) == 1 and files[0].name.startswith("seed") and "Colour" in files[0].name

    def no_training(*_a, **_k):
        raise AssertionError("the stored ground truth should have been read")

    monkeypatch.setattr(coupling_library, "truth_family", no_training)
    again = reproduce("routing", tmp_path / "b", settings)
    for part in ("summary", "regime", "verdicts", "truth"):
        assert again["metrics"][part] == first["metrics"][part]
    rec = json.loads(files[0].read_text())
    rec["key"] = "0" * 64
    files[0].write_text(json.dumps(rec))
    with pytest.raises(InputError, match=files[0].name):
        reproduce("routing", tmp_path / "c", settings)


def test_ties_charge_the_mean_of_the_tied_adapters():
    import numpy as np
    import torch

    from updatescope.experiments.routing.coupling_library import _pick_sets, evaluate

    sets = _pick_sets(torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0], [float("nan")] * 3]))
    assert sets == [[0, 1], [1], [0, 1, 2]]
    loss = np.array([[1.0, 3.0, 5.0], [4.0, 2.0, 0.0], [3.0, 6.0, 9.0]])
    seed = {"loss": loss, "base": np.zeros(3), "uniform_merge": np.zeros(3), "arrow": np.zeros(3)}
    ev = evaluate(
        np.array([0, 1, 2]),
        [seed],
        {r: sets for r in ("fisher", "fisher_all_tokens", "error", "activation", "embedding")},
    )
    assert ev["routed_loss"]["fisher"] == [2.0, 2.0, 6.0]
    assert ev["routed_loss"]["oracle"] == [1.0, 0.0, 3.0]
    assert ev["routed_loss"]["own"] == [1.0, 2.0, 9.0]
    assert ev["oracle_hit"]["fisher"] == pytest.approx([0.5, 0.0, 1 / 3])
    assert ev["own_hit"]["fisher"] == pytest.approx([0.5, 1.0, 1 / 3])


@pytest.mark.parametrize(
    "item, message",
    [
        ("design=coupled", "design"),
        ('coupling_dark.families=["Shape:"]', "unknown coupling_dark.families"),
        ('coupling_dark.classes=["python","python","digits"]', "distinct"),
        ('coupling_dark.classes=["python","licence"]', "evenly"),
        ("coupling_dark.shots=17", "shot_pool"),
        ("coupling_dark.shots=16", "n_fit"),  # quick: 16 training inputs per class, so at most 15 others
        ("coupling_dark.queries_per_mapping=0", "queries_per_mapping"),
        ("truth_store=/dev/null", "truth_store"),  # not a folder (either design keeps a store)
        ('truth_store=" "', "truth_store"),  # blank
    ],
)
def test_bad_settings_get_one_line_and_exit_2(tmp_path, item, message):
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "updatescope",
            "reproduce",
            "routing",
            "--quick",
            "--set",
            item,
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_defaults_follow_the_amendment():
    from updatescope.experiments import configure

    full = configure("routing", settings={"design": "coupling_dark"})
    assert full.coupling_dark.families == ("Colour:", "Animal:", "Size:") and full.gt_seeds == 3
    assert (full.coupling_dark.n_fit, full.coupling_dark.queries_per_mapping, full.coupling_dark.lora.steps) == (
        32,
        12,
        40,
    )
    quick = configure("routing", quick=True, settings={"design": "coupling_dark"})
    assert quick.coupling_dark.families == ("Colour:",) and quick.gt_seeds == 1
    assert (quick.coupling_dark.n_fit, quick.coupling_dark.queries_per_mapping) == (16, 8)
