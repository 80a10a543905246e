"""Contrast pairs, residual capture, CAA, vector files and sweeps."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from updatescope.errors import InputError  # noqa: E402
from updatescope.steering import (
    ContrastPairs,
    SteeringVector,
    caa_vector,
    capture_residuals,  # noqa: E402
    load_pairs,
    load_vector,
    model_fingerprint,
    pad_sequences,
    plot_sweep,
    save_vector,
    sweep,
)


def tiny(layers=3, hidden=32, vocab=97, seed=0, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval().to(dtype)


class Words:
    """Word-level tokenizer: each new word gets the next id; BOS = 1, pad = 0."""

    pad_token_id = 0

    def __init__(self):
        self.ids: dict[str, int] = {}

    def __call__(self, text):
        return {"input_ids": [1] + [self.ids.setdefault(w, 2 + len(self.ids)) for w in text.split()]}


PAIRS = ContrastPairs.from_pairs(
    [
        ("the cat is happy today", "the cat is sad"),
        ("a good day", "a bad day indeed"),
        ("I love it", "I hate it so much"),
    ]
)


def hidden_at(model, ids, layer, index):
    """Oracle: decoder layer ``layer``'s output (= hidden_states[layer + 1] below the last layer)."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[layer + 1][0, index]


def test_caa_equals_hand_computed_mean_difference():
    model, tok = tiny(), Words()
    vec = caa_vector(model, tok, PAIRS, layers=[0, 1], position="last", batch_size=2)
    for row, layer in enumerate((0, 1)):
        pos = torch.stack([hidden_at(model, tok(t)["input_ids"], layer, -1) for t in PAIRS.positives])
        neg = torch.stack([hidden_at(model, tok(t)["input_ids"], layer, -1) for t in PAIRS.negatives])
        torch.testing.assert_close(vec.vectors[row], pos.mean(0) - neg.mean(0), rtol=1e-6, atol=1e-7)
    assert vec.layers == (0, 1) and vec.method == "caa" and vec.model_fingerprint == model_fingerprint(model)
    swapped = caa_vector(model, tok, ContrastPairs(PAIRS.negatives, PAIRS.positives), layers=[0, 1])
    torch.testing.assert_close(swapped.vectors, -vec.vectors)  # negative control: sign flips


@pytest.mark.parametrize("position,index", [("all", None), (2, 2), (-2, -2)])
def test_capture_positions_and_padding_sides(position, index):
    model, tok = tiny(), Words()
    texts = list(PAIRS.positives)
    seqs = [tok(t)["input_ids"] for t in texts]
    got = {}
    for side in ("left", "right"):
        ids, mask = pad_sequences(seqs, side=side)
        got[side] = capture_residuals(model, ids, mask, layers=[1], position=position, batch_size=2)
    torch.testing.assert_close(got["left"], got["right"], rtol=1e-5, atol=1e-6)
    for i, s in enumerate(seqs):
        with torch.no_grad():
            hs = model(input_ids=torch.tensor([s]), output_hidden_states=True).hidden_states[2][0]
        ref = hs.mean(0) if index is None else hs[index]
        torch.testing.assert_close(got["left"][0, i], ref, rtol=1e-5, atol=1e-6)


def test_pairs_loading_and_errors(tmp_path):
    good = tmp_path / "pairs.jsonl"
    good.write_text("\n".join(json.dumps({"positive": f"yes {i}", "negative": f"no {i}"}) for i in range(6)))
    pairs = load_pairs(good)
    assert pairs.paired and len(pairs.positives) == 6
    a, b = pairs.split(0.5, seed=1)
    assert set(a.positives).isdisjoint(b.positives) and len(a.positives) + len(b.positives) == 6
    labelled = tmp_path / "labels.jsonl"
    labelled.write_text('{"prompt": "x y", "label": 1}\n\n{"prompt": "z", "label": 0}\n{"prompt": "w", "label": 0}\n')
    lab = load_pairs(labelled)
    assert lab.positives == ("x y",) and lab.negatives == ("z", "w") and not lab.paired
    assert len(lab.shuffled(seed=0).positives) == 1
    cases = {
        "{not json": "not valid JSON",
        '{"prompt": "a", "label": 2}': "label",
        '{"text": "a"}': "needs fields",
        '{"positive": "a", "negative": "b"}\n{"prompt": "c", "label": 1}': "mixes",
        "": "no contrast pairs",
        '{"prompt": "a", "label": 1}': "no negatives",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(InputError, match=message):
            load_pairs(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_pairs(tmp_path / "missing.jsonl")


def test_save_load_round_trip_and_refusals(tmp_path):
    model, tok = tiny(), Words()
    vec = caa_vector(model, tok, PAIRS, layers=[0, 2]).normalised()
    path = save_vector(vec, tmp_path / "v.safetensors")
    back = load_vector(path, model=model)
    assert back.allclose(vec, rtol=0) and back.norms == vec.norms and back.normalisation == "unit"
    assert back.position == "last" and back.provenance["n_positive"] == "3"
    # Same architecture, different weights -> different fingerprint -> refused.
    with pytest.raises(InputError, match="made for model"):
        load_vector(path, model=tiny(seed=1))
    with pytest.raises(InputError, match="made for model"):
        load_vector(path, model=tiny(layers=2))
    fp = model_fingerprint(model)
    assert model_fingerprint(tiny()) == fp  # deterministic
    assert model_fingerprint(tiny(dtype=torch.float32)) == fp  # blind to the dtype a copy is loaded in
    raw = path.read_bytes()
    for name, data in {"junk": b"\x00garbage", "truncated": raw[: len(raw) // 2], "empty": b""}.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError, match="safetensors|steering-vector"):
            load_vector(tmp_path / name)
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(InputError, match="not an updatescope steering-vector file"):
        load_vector(tmp_path / "foreign.safetensors")
    with pytest.raises(InputError, match="no such"):
        load_vector(tmp_path / "nope.safetensors")


def test_steering_vector_validation():
    with pytest.raises(InputError, match="n_layers, d"):
        SteeringVector(torch.zeros(3), layers=(0,))
    with pytest.raises(InputError, match="layer indices"):
        SteeringVector(torch.zeros(2, 4), layers=(0,))
    with pytest.raises(InputError, match="position"):
        SteeringVector(torch.zeros(1, 4), layers=(0,), position="first")
    with pytest.raises(InputError, match="finite"):
        SteeringVector(torch.full((1, 4), float("nan")), layers=(0,))
    v = SteeringVector(torch.tensor([[3.0, 4.0], [0.0, 2.0]]), layers=(1, 3))
    n = v.normalised()
    torch.testing.assert_close(n.vectors.norm(dim=1), torch.ones(2))
    assert n.norms == (5.0, 2.0) and v.select([3]).layers == (3,)


def test_sweep_table_and_plot(tmp_path):
    table = sweep(
        lambda layer, scale: -abs(layer - 2) - (scale - 1.0) ** 2, layers=[0, 1, 2, 3], scales=[0.0, 1.0, 2.0]
    )
    assert table["best"] == {"layer": 2, "scale": 1.0, "score": 0.0}
    assert len(table["scores"]) == 4 and len(table["scores"][0]) == 3
    json.dumps(table)
    pytest.importorskip("matplotlib")
    out = plot_sweep(table, tmp_path / "sweep.png", title="toy")
    assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(InputError):
        sweep(lambda layer, scale: float("nan"), [0], [1.0])
