"""The network-selection runner on a tiny random Llama and a fake source-selection record."""

import json
import math

import pytest

from _tiny_lm import loader, reproduce, tiny_llama
from updatescope.errors import InputError
from updatescope.experiments import configure, heads
from updatescope.experiments import selection as source_selection
from updatescope.experiments.network_selection import runner as network_selection

DOMAINS = ["dom_a", "dom_b", "dom_c", "dom_d"]
WORDS = {
    "a": "alpha beta gamma delta",
    "b": "one two three four",
    "c": "red green blue cyan",
    "d": "alpha two red four",
}


def _texts(name, split, max_chars):
    words = WORDS[name[-1]].split()
    salt = {"sketch": 0, "train": 1, "eval": 2}[split]
    return [" ".join(words[(i * 7 + j + salt) % 4] for j in range(20)) for i in range(4)]


def _record(path, truth_noise=True):
    # transfer: dom_a and dom_d share words, so they help each other most
    base = {
        ("dom_a", "dom_d"): 0.3,
        ("dom_a", "dom_b"): 0.1,
        ("dom_a", "dom_c"): 0.05,
        ("dom_b", "dom_c"): 0.02,
        ("dom_b", "dom_d"): 0.12,
        ("dom_c", "dom_d"): 0.15,
    }
    sym = {**base, **{(b, a): v for (a, b), v in base.items()}}
    seeds = [
        {t: {s: sym[t, s] + 0.01 * k * (-1) ** i for i, s in enumerate(DOMAINS) if s != t} for t in DOMAINS}
        for k in range(3)
    ]
    mean = {t: {s: sum(tab[t][s] for tab in seeds) / 3 for s in DOMAINS if s != t} for t in DOMAINS}
    se = {t: {s: 0.005 for s in DOMAINS if s != t} for t in DOMAINS}
    rec = {
        "name": "source-selection",
        "config": {
            "model": "smollm2",
            "domains": DOMAINS,
            "tokens": {"sketch": 40, "train": 40, "eval": 40},
            "sketch_dim": 64,
            "ground_truth": "lora",
            "seed": 0,
            "lora": {"n_last": 1, "r": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]},
            "families": {"dom_a": "x", "dom_b": "x", "dom_c": "x", "dom_d": "y"},
        },
        "metrics": {"ground_truth": {"transfer": mean, "transfer_se": se, "transfer_by_seed": seeds}},
    }
    path.write_text(json.dumps(rec))
    return rec


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128))
    monkeypatch.setattr(source_selection, "load_texts", _texts)
    return tmp_path


def test_network_selection_tiny_run(tiny):
    _record(tiny / "gt.json")
    res = reproduce("network-selection", tiny / "out", {"ground_truth_record": str(tiny / "gt.json")})
    m = res["metrics"]
    # the LoRA layers are the record's targets in the last block; the second set adds every linear + head
    assert [n.split(".")[-1] for n in m["layers"]["lora_layers"]] == ["q_proj", "v_proj"]
    assert m["layers"]["last_blocks_head"][-1] == "lm_head" and len(m["layers"]["last_blocks_head"]) == 8
    assert m["mode"] == "token" and m["sketch_dim"] == 64
    # every sketch counted the same tokens as the head capture
    for k, row in m["tokens_sketched"].items():
        assert row == {d: 40 for d in DOMAINS}, k
    for method in ("head", "lora_layers", "lora_layers_bd", "last_blocks_head", "family", "random"):
        h = m["summary"][method]
        assert 0.0 <= h["top1"] <= 1.0 and -1.0 <= h["spearman"] <= 1.0
        assert all(math.isfinite(v) for row in m["scores"][method].values() for v in row.values())
    assert m["paired"]["lora_layers - head"]["spearman"]["n"] == 4
    assert m["truth_noise"]["n_seeds"] == 3  # computed from the per-seed tables (the record has none)
    assert len(m["profiles"]) == 3 and m["profiles"][0]["pair"] == ["dom_a", "dom_d"]  # highest transfer first
    p = m["profiles"][0]
    assert len(p["profile"]) == len(p["blocks"]) == 8 and 0.0 < p["profile_cosine"] <= 1.0 + 1e-9
    assert set(m["cost"]["total"]) == {"head", "lora_layers", "last_blocks_head"}
    assert m["verdict"].split(" (")[0] in (
        "the LoRA-layer sketch predicts LoRA transfer better than the head sketch",
        "the LoRA-layer sketch predicts LoRA transfer worse than the head sketch",
        "no resolvable difference between the LoRA-layer sketch and the head sketch",
    )
    assert (tiny / "out" / "network_selection_profile.png").is_file()


def test_head_scores_match_the_record_and_layer_sketch_counts_its_tokens(tiny):
    """The re-made head sketch equals the one a run on the same streams records (same tokens,
    m, seed), and the token batches count exactly the head capture's targets."""
    rec = _record(tiny / "gt.json")
    model, tok = heads.load_model()
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    import updatescope as us

    sigs = []
    for d in DOMAINS:
        texts = _texts(d, "sketch", 0)
        cap = heads.capture_acts(model, tok, texts, fp=fp, max_tokens=40)
        sigs.append(heads.sketch_stream(w0, b0, cap["acts"], cap["labels"], sketch_dim=64, seed=0))
        n = sum(int((b["labels"] != -100).sum()) for b in network_selection.token_batches(model, tok, texts, 40))
        assert n == cap["labels"].numel() == 40
    mat = us.alignment_matrix(sigs)["fisher"]
    rec["metrics"]["scores"] = {
        "fisher": {t: {s: float(mat[i, j]) for j, s in enumerate(DOMAINS) if s != t} for i, t in enumerate(DOMAINS)}
    }
    (tiny / "gt.json").write_text(json.dumps(rec))
    res = reproduce(
        "network-selection",
        tiny / "out",
        {"ground_truth_record": str(tiny / "gt.json"), "all_layers": False, "profile_pairs": 1},
    )
    m = res["metrics"]
    assert m["head_vs_record"]["same_tokens_and_dim"] and m["head_vs_record"]["max_abs_diff"] < 1e-9
    assert "last_blocks_head" not in m["scores"] and len(m["profiles"]) == 1


def test_a_shorter_stream_counts_fewer_tokens(tiny):
    _record(tiny / "gt.json")
    res = reproduce(
        "network-selection",
        tiny / "out",
        {"ground_truth_record": str(tiny / "gt.json"), "sketch_tokens": 20, "all_layers": False},
    )
    m = res["metrics"]
    assert m["tokens_sketched"]["lora_layers"] == {d: 20 for d in DOMAINS}
    with pytest.raises(InputError, match="exceeds"):
        reproduce(
            "network-selection", tiny / "out2", {"ground_truth_record": str(tiny / "gt.json"), "sketch_tokens": 80}
        )


def test_record_checks(tiny):
    with pytest.raises(InputError, match="does not exist"):
        network_selection.read_ground_truth(tiny / "missing.json")
    (tiny / "other.json").write_text(json.dumps({"name": "smiles", "config": {}, "metrics": {}}))
    with pytest.raises(InputError, match="not a source-selection record"):
        network_selection.read_ground_truth(tiny / "other.json")
    rec = _record(tiny / "gt.json")
    rec["config"]["ground_truth"] = "head"
    (tiny / "head.json").write_text(json.dumps(rec))
    with pytest.raises(InputError, match="needs 'lora'"):
        network_selection.read_ground_truth(tiny / "head.json")


def test_lora_layer_names_follow_targets_and_blocks():
    model = tiny_llama()
    lora, every = network_selection.lora_layer_names(model, 1, ["q_proj", "down_proj"])
    assert lora == ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"]
    assert len(every) == 7 and set(lora) <= set(every)
    with pytest.raises(InputError, match="n_last"):
        network_selection.lora_layer_names(model, 2, ["q_proj"])
    with pytest.raises(InputError, match="no linear layer"):
        network_selection.lora_layer_names(model, 1, ["nope"])


def test_profile_pairs_spread_over_the_truth():
    tr = {
        "a": {"b": 3.0, "c": 2.0, "d": 0.0},
        "b": {"a": 3.0, "c": 1.0, "d": 0.5},
        "c": {"a": 2.0, "b": 1.0, "d": 1.5},
        "d": {"a": 0.0, "b": 0.5, "c": 1.5},
    }
    pairs = network_selection.profile_pairs(tr, 3)
    assert pairs[0] == ("a", "b") and pairs[2] == ("a", "d") and len(set(pairs)) == 3


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "layer"},
        {"sketch_dim": 100},
        {"sketch_tokens": 0},
        {"profile_pairs": -1},
        {"ground_truth_record": "gt.txt"},
    ],
)
def test_config_validation(bad):
    with pytest.raises(InputError):
        configure("network-selection", quick=True, settings=bad)


def test_defaults():
    q = configure("network-selection", quick=True)
    assert q.ground_truth_record.endswith("source_selection_quick.json") and q.mode == "token"
    assert q.sketch_tokens is None and q.sketch_dim is None and q.all_layers
    assert configure("network-selection").ground_truth_record.endswith("source_selection_full.json")
