"""The README quickstart runs word for word (through main(), on the packaged SmolLM2)."""

import re
import shlex
from pathlib import Path

import pytest

from updatescope.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def quickstart_lines():
    text = README.read_text()
    block = re.search(r"<!-- quickstart:start -->\s*```bash\n(.*?)```\s*<!-- quickstart:end -->", text, re.S)
    assert block, "README lost its quickstart block"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_starts_with_the_two_commands():
    head = README.read_text().split("## ")[0]
    assert "make demo" in head and "make test" in head


def test_quickstart_runs(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    try:
        from updatescope.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
    except Exception as exc:  # the packaged model is part of `make` set-up
        pytest.skip(f"packaged SmolLM2 not installed: {exc}")
    monkeypatch.chdir(tmp_path)
    lines = quickstart_lines()
    assert any(ln.startswith("updatescope sketch") for ln in lines)
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "updatescope"
        rc = main(argv[1:] + (["--quiet"] if argv[1] == "sketch" else []))
        out, err = capsys.readouterr()
        assert rc == 0, f"{line}: {err}"
    assert "email" in out or "inspect" in line
    for name in ("email", "http", "space"):
        assert (tmp_path / f"{name}.safetensors").stat().st_size > 100_000
