"""CSV rows that do not match the header: refused in one line naming file, row and line, before
the model loads, through `sketch` and `select` (the model named here does not exist, so an
error found after loading would say so instead), and never exported as a column named
``None`` or as ``None`` values."""

import json

import pytest

from updatescope.cli import main
from updatescope.data.formats import Columns, read_table
from updatescope.errors import InputError

GOOD = "text,label\nalpha beta,a\ngamma delta,b\n"
RAGGED = {
    "more fields": (
        "text,label\nalpha beta,a\ngamma delta,b,extra\n",
        "row 1 (line 3) has 3 field(s), the header has 2",
    ),
    "fewer fields": ("text,label\nalpha beta\ngamma delta,b\n", "row 0 (line 2) has 1 field(s), the header has 2"),
    "empty trailing field": ("text,label\nalpha beta,a,\n", "row 0 (line 2) has 3 field(s)"),
    "after a blank line": ("text,label\nalpha beta,a\n\ngamma,b,c\n", "row 1 (line 4) has 3 field(s)"),
    "quoted newline": ('text,label\n"alpha\nbeta",a,x\n', "row 0 (line 3) has 3 field(s)"),
    "repeated header": ("text,text\nalpha,beta\n", "'text' more than once"),
}


def test_reader_keeps_matching_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(GOOD + "\n")  # a blank line at the end is no row
    assert read_table(p, Columns(text="text")) == [
        {"text": "alpha beta", "label": "a"},
        {"text": "gamma delta", "label": "b"},
    ]


@pytest.mark.parametrize("case", sorted(RAGGED))
def test_reader_refuses_ragged_rows(tmp_path, case):
    content, needle = RAGGED[case]
    p = tmp_path / "t.csv"
    p.write_text(content)
    with pytest.raises(InputError) as info:
        read_table(p, Columns(text="text"))
    msg = str(info.value)
    assert str(p) in msg and needle in msg and "\n" not in msg


def _one_line(capsys, *needles):
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("updatescope: error:"), cap.err
    for n in needles:
        assert n in lines[0], cap.err
    assert not cap.out


@pytest.mark.parametrize("case", ["more fields", "fewer fields"])
@pytest.mark.parametrize("columns", [[], ["--text-column", "text"]])
def test_sketch_and_select_refuse_before_the_model(tmp_path, capsys, case, columns):
    content, needle = RAGGED[case]
    pool = tmp_path / "pool.csv"
    pool.write_text(content)
    target = tmp_path / "target.safetensors"
    target.write_bytes(b"not read: the pool is refused first")
    before = sorted(p.name for p in tmp_path.iterdir())
    model = str(tmp_path / "no-such-model")
    sketch = ["sketch", "--model", model, "--data", str(pool), "--out", str(tmp_path / "o.safetensors"), "--quiet"]
    assert main([*sketch, *columns]) == 2
    _one_line(capsys, str(pool), needle)
    select = ["select", "--model", model, "--data", str(pool), "--target", str(target), "--top", "1"]
    assert main([*select, "--out", str(tmp_path / "top.jsonl"), "--quiet", *columns]) == 2
    _one_line(capsys, str(pool), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temporary file


def test_select_exports_no_none_column(tmp_path, capsys):
    """The export of a well-formed CSV pool has the header's columns and the score columns only."""
    from test_cli import _save_tiny

    model = _save_tiny(tmp_path / "tiny", 0)
    pool = tmp_path / "pool.csv"
    pool.write_text("text,label\n" + "".join(f"alpha beta gamma delta {i},x{i}\n" for i in range(4)))
    target = tmp_path / "t.safetensors"
    base = ["--model", str(model), "--data", str(pool), "--quiet", "--text-column", "text"]
    assert main(["sketch", *base, "--out", str(target), "--sketch-dim", "64"]) == 0
    out = tmp_path / "top.jsonl"
    assert main(["select", *base, "--target", str(target), "--top", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2
    for r in rows:
        assert "None" not in r and None not in (r["text"], r["label"])
        assert {"text", "label", "score", "index"} <= set(r)
