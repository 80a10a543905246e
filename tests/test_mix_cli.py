"""docs/guide-mix.md's worked example runs as written (through main(), on the packaged SmolLM2)."""

import json
import re
import shlex
from pathlib import Path

import pytest

from updatescope.cli import main

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide-mix.md"


def example_lines():
    block = re.search(
        r"<!-- mix-example:start -->\s*```bash\n(.*?)```\s*<!-- mix-example:end -->", GUIDE.read_text(), re.S
    )
    assert block, "docs/guide-mix.md lost its example block"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_guide_says_the_gain_is_not_yet_measured():
    assert "Not yet measured" in GUIDE.read_text()


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
