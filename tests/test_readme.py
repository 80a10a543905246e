"""The README quickstart runs word for word (through main(), on the packaged SmolLM2), and so
does its Python example; the README stays a landing page."""

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


def python_example() -> str:
    text = README.read_text()
    block = re.search(r"<!-- python:start -->\s*```python\n(.*?)```\s*<!-- python:end -->", text, re.S)
    assert block, "README lost its Python example block"
    return block.group(1)


def test_readme_is_a_landing_page():
    lines = README.read_text().split("\n")
    assert len(lines) <= 200, f"README has {len(lines)} lines; details belong in docs/"
    head = "\n".join(lines[:10])
    assert "make demo" in head and "make test" in head
    assert len(python_example().strip().split("\n")) <= 20


def _need_packaged_model():
    pytest.importorskip("transformers")
    try:
        from updatescope.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
    except Exception as exc:  # the packaged model is part of `make` set-up
        pytest.skip(f"packaged SmolLM2 not installed: {exc}")


def test_quickstart_runs(tmp_path, monkeypatch, capsys):
    _need_packaged_model()
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


def test_python_example_runs(tmp_path, monkeypatch, capsys):
    """The README's Python block, run as written on the files the quickstart exports."""
    _need_packaged_model()
    monkeypatch.chdir(tmp_path)
    for line in quickstart_lines():
        argv = shlex.split(line)
        if argv[1] == "domains" and "--export" in argv:
            assert main(argv[1:]) == 0
    capsys.readouterr()
    exec(compile(python_example(), "README.md", "exec"), {"__name__": "readme_example"})
    firsts = [ln.split()[0] for ln in capsys.readouterr().out.split("\n") if ln.strip()]
    assert sorted(w for w in firsts if w in ("http", "space")) == ["http", "space"]
    for name in ("email", "http", "space"):
        assert (tmp_path / f"{name}.safetensors").stat().st_size > 100_000
