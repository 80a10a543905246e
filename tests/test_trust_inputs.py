"""One-line refusals for classes of bad API and model input (issue: trust)."""

import json
import shutil

import numpy as np
import pytest
import torch

import updatescope as us
from updatescope.devices import resolve_device
from updatescope.errors import InputError


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint16])
def test_numpy_integer_sizes_are_accepted(dtype):
    sk = us.FisherSketch(dtype(8), dtype(10), dtype(64), dtype(3))
    ref = us.FisherSketch(8, 10, 64, 3)
    assert sk.config == ref.config and type(sk.config.sketch_dim) is int


@pytest.mark.parametrize("value", [8.0, "8", True, None])
def test_non_integer_sizes_are_refused(value):
    with pytest.raises(InputError):
        us.FisherSketch(value, 10, 64, 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(4, 8, dtype=torch.complex64),
        lambda: np.ones((4, 8), dtype=np.complex128),
        lambda: np.array([[object()] * 8] * 4),
        lambda: [["a"] * 8] * 4,
    ],
)
def test_non_real_inputs_are_refused_and_change_nothing(make):
    sk = us.FisherSketch(8, 10, 64, 0)
    with pytest.raises(InputError):
        sk.update(make(), torch.randn(4, 10))
    with pytest.raises(InputError):
        sk.update(torch.randn(4, 8), torch.randn(4, 10, dtype=torch.complex64))
    assert sk.count == 0


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:7", "tpu", "gpu0", 3])
def test_devices_this_machine_lacks_are_one_line_errors(spec):
    if torch.cuda.is_available() and spec in ("cuda", "cuda:0"):
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError) as info:
        us.FisherSketch(8, 10, 64, 0, device=spec)
    assert "\n" not in str(info.value)


def test_auto_and_cpu_devices():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_a_model_whose_weights_do_not_fit_its_config_is_refused(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from updatescope.cli import main
    from updatescope.models.hf import load_causal_lm

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    good = tmp_path / "good"
    transformers.LlamaForCausalLM(cfg).save_pretrained(good)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    other = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2).to_dict()
    (bad / "config.json").write_text(json.dumps(other))
    with pytest.raises(InputError, match="do not cover"):
        load_causal_lm(bad)
    data = tmp_path / "d.txt"
    data.write_text("a b c d e f g\n")
    capsys.readouterr()
    assert main(["sketch", "--model", str(bad), "--data", str(data), "--out", str(tmp_path / "s.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not cover" in err
    assert not (tmp_path / "s.safetensors").exists()
