"""docs/guide-mix.md's worked example runs as written (through main(), on the packaged SmolLM2: slow,
minutes on two cores), and the same commands on a tiny saved model (fast)."""

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from updatescope.cli import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide-mix.md"


def example_lines():
    block = re.search(
        r"<!-- mix-example:start -->\s*```bash\n(.*?)```\s*<!-- mix-example:end -->", GUIDE.read_text(), re.S
    )
    assert block, "docs/guide-mix.md lost its example block"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_guide_states_what_is_measured_from_the_record():
    """The guide's evidence comes from the mixtures record through generated blocks, including
    the plain sentence on the best single source."""
    text = GUIDE.read_text()
    assert "<!-- generated: mixturesverdicts mixtures_" in text and "<!-- generated: mixturesguide mixtures_" in text
    assert "best single source" in text


@pytest.mark.slow
def test_guide_example_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    try:
        from updatescope.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
    except Exception as exc:
        pytest.skip(f"packaged SmolLM2 not installed: {exc}")
    monkeypatch.chdir(tmp_path)
    for line in example_lines():
        argv = shlex.split(line)
        assert argv[0] == "updatescope"
        rc = main(argv[1:] + (["--quiet"] if argv[1] == "sketch" else []))
        out, err = capsys.readouterr()
        assert rc == 0, f"{line}: {err}"
    assert "best single source" in out
    rows = [json.loads(r) for r in (tmp_path / "mixed.jsonl").read_text().splitlines()]
    assert rows and {r["source"] for r in rows} <= {"http", "space", "xml"}


def _tiny_model(path):
    """A one-layer random Llama with a word-level tokenizer, saved as a Hugging Face folder."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = "def return class import self if else for in the a of to and is = ( ) : . , @ / < >".split()
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


def test_guide_example_runs_on_a_tiny_model(tmp_path, monkeypatch, capsys):
    model = _tiny_model(tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)
    for line in example_lines():
        argv = [model if a == "smollm2" else a for a in shlex.split(line)]
        if argv[1] == "sketch":
            argv += ["--quiet", "--sketch-dim", "256"]
        rc = main(argv[1:])
        out, err = capsys.readouterr()
        assert rc == 0, f"{line}: {err}"
    assert "best single source" in out and "wrote mixed.jsonl" in out
    rows = [json.loads(r) for r in (tmp_path / "mixed.jsonl").read_text().splitlines()]
    assert rows and {r["source"] for r in rows} <= {"http", "space", "xml"}
