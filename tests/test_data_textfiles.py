"""Reading user corpus files: the documented splitting rule and one-line errors."""

from __future__ import annotations

import json

import pytest

from updatescope.data import read_corpus, read_documents
from updatescope.errors import InputError


def test_lines_paragraphs_file_and_jsonl(tmp_path):
    lines = tmp_path / "a.txt"
    lines.write_text("first doc\nsecond doc\n\n", encoding="utf-8")  # trailing blank line only
    assert read_documents(lines) == ["first doc", "second doc"]
    paras = tmp_path / "b.txt"
    paras.write_text("para one\nstill one\n\n  \npara two\n", encoding="utf-8")
    assert read_documents(paras) == ["para one\nstill one", "para two"]
    assert read_documents(paras, mode="lines") == ["para one", "still one", "para two"]
    assert read_documents(paras, mode="file") == ["para one\nstill one\n\n  \npara two"]
    js = tmp_path / "c.jsonl"
    js.write_text(json.dumps({"text": "x y", "id": 1}) + "\n\n" + json.dumps({"text": "z"}) + "\n", encoding="utf-8")
    assert read_documents(js) == ["x y", "z"]
    assert read_corpus([lines, js]) == ["first doc", "second doc", "x y", "z"]
    crlf = tmp_path / "d.txt"
    crlf.write_bytes("\ufeffone\r\ntwo\r\n".encode("utf-8"))
    assert read_documents(crlf) == ["one", "two"]


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "empty"),
        (b"  \n\n", "empty"),
        (b"abc\x00def", "binary"),
        (b"caf\xe9 latin-1", "not UTF-8"),
    ],
)
def test_bad_plain_files(tmp_path, content, match):
    p = tmp_path / "bad.txt"
    p.write_bytes(content)
    with pytest.raises(InputError, match=match) as err:
        read_documents(p)
    assert "\n" not in str(err.value)


def test_bad_jsonl_and_paths(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"text": "ok"}\n{"body": "no text"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"x.jsonl:2: .*no 'text'"):
        read_documents(p)
    p.write_text('{"text": "ok"}\n{not json\n', encoding="utf-8")
    with pytest.raises(InputError, match=r":2: invalid JSON"):
        read_documents(p)
    p.write_text('{"text": 3}\n', encoding="utf-8")
    with pytest.raises(InputError, match="must be a string"):
        read_documents(p)
    with pytest.raises(InputError, match="not found"):
        read_documents(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="folder"):
        read_documents(tmp_path)
    with pytest.raises(InputError, match="unknown text mode"):
        read_documents(p, mode="csv")
    with pytest.raises(InputError, match="no data files"):
        read_corpus([])
