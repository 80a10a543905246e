"""Read the user's corpus files: plain text or JSONL with a ``text`` field.

Rule for plain text (``mode="auto"``, the default):
  * a file containing at least one blank line is a sequence of **paragraph documents**
    separated by blank lines (lines inside a block are joined with their newlines kept);
  * otherwise every non-empty line is one document (the common one-example-per-line file).
  ``mode="lines"``, ``"paragraphs"`` or ``"file"`` (the whole file is one document) force a
  rule. For a causal LM the choice only decides where context restarts; long documents are
  chunked to the model's context length by the capture step either way.
Files ending in ``.jsonl`` (or ``mode="jsonl"``) hold one JSON object per non-empty line,
each with a string field ``text`` (other fields are ignored).

Every problem the user can cause is one InputError line naming the file (and line):
missing path, a folder, an empty file, a binary or non-UTF-8 file, bad JSON, no ``text``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from updatescope.errors import InputError

__all__ = ["read_documents", "read_corpus", "MODES"]

MODES = ("auto", "lines", "paragraphs", "file", "jsonl")
_BLANK = re.compile(r"\n(?:[ \t]*\n)+")


def _read_text(path: Path) -> str:
    if not path.exists():
        raise InputError(f"data file not found: {path}")
    if path.is_dir():
        raise InputError(f"data path is a folder, not a file: {path}")
    raw = path.read_bytes()
    if not raw.strip():
        raise InputError(f"data file is empty: {path}")
    if b"\x00" in raw[:65536]:
        raise InputError(f"data file looks binary (NUL bytes): {path}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"data file is not UTF-8 text (bad byte at offset {exc.start}): {path}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl(text: str, path: Path) -> list[str]:
    docs: list[str] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or "text" not in obj:
            raise InputError(f"{path}:{lineno}: JSONL line has no 'text' field")
        value = obj["text"]
        if not isinstance(value, str):
            raise InputError(f"{path}:{lineno}: 'text' must be a string, got {type(value).__name__}")
        if value.strip():
            docs.append(value)
    return docs


def read_documents(path: str | Path, mode: str = "auto") -> list[str]:
    """Documents of one file, in file order, empty ones dropped (rule in the module docstring).

    Raises InputError when the file yields no document at all.
    """
    if mode not in MODES:
        raise InputError(f"unknown text mode {mode!r}: choose one of {', '.join(MODES)}")
    path = Path(path).expanduser()
    text = _read_text(path)
    if mode == "jsonl" or (mode == "auto" and path.suffix.lower() == ".jsonl"):
        docs = _jsonl(text, path)
    elif mode == "file":
        docs = [text.strip("\n")]
    elif mode == "paragraphs" or (mode == "auto" and _BLANK.search(text.strip("\n"))):
        docs = [block.strip("\n") for block in _BLANK.split(text)]
    else:
        docs = [line for line in text.split("\n")]
    docs = [d for d in docs if d.strip()]
    if not docs:
        raise InputError(f"data file has no documents: {path}")
    return docs


def read_corpus(paths: Iterable[str | Path], mode: str = "auto") -> list[str]:
    """Concatenated documents of several files, in the order given."""
    docs: list[str] = []
    count = 0
    for p in paths:
        docs.extend(read_documents(p, mode))
        count += 1
    if count == 0:
        raise InputError("no data files given")
    return docs
