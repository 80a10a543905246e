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

Every file is read through the gates of :mod:`updatescope.inputs` (``check_inputs``,
``read_input_bytes``, ``parse_json``, ``check_string``; re-exported here).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from updatescope.errors import InputError
from updatescope.inputs import MAX_INPUT_BYTES, check_inputs, check_string, parse_json, read_input_bytes

__all__ = [
    "read_documents",
    "read_corpus",
    "MODES",
    "MAX_INPUT_BYTES",
    "check_inputs",
    "read_input_bytes",
    "parse_json",
    "check_string",
]

MODES = ("auto", "lines", "paragraphs", "file", "jsonl")
_BLANK = re.compile(r"\n(?:[ \t]*\n)+")


def _read_text(path: Path) -> str:
    raw = read_input_bytes(path)
    if not raw.strip():
        raise InputError(f"data file is empty: {path}")
    if b"\x00" in raw[:65536]:
        raise InputError(f"data file looks binary (NUL bytes): {path}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"data file is not UTF-8 text (bad byte at offset {exc.start}): {path}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl(text: str, path: Path) -> list[tuple[int, str]]:
    docs: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{lineno}")
        if not isinstance(obj, dict) or "text" not in obj:
            raise InputError(f"{path}:{lineno}: JSONL line has no 'text' field")
        value = obj["text"]
        if not isinstance(value, str):
            raise InputError(f"{path}:{lineno}: 'text' must be a string, got {type(value).__name__}")
        check_string(value, f"{path}:{lineno}")
        if value.strip():
            docs.append((lineno - 1, value))
    return docs


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """Blank-line separated blocks with the 0-based line each starts on."""
    out, start = [], 0
    for sep in [*_BLANK.finditer(text), None]:
        stop = len(text) if sep is None else sep.start()
        block = text[start:stop]
        line = text.count("\n", 0, start) + len(block) - len(block.lstrip("\n"))
        out.append((line, block.strip("\n")))
        if sep is not None:
            start = sep.end()
    return out


def read_document_rows(path: str | Path, mode: str = "auto") -> list[tuple[int, str]]:
    """``(row, document)`` of one file in file order, empty documents dropped: ``row`` is the
    0-based line the document starts on (its line for one-per-line text and JSONL, its first
    line for paragraphs, 0 for a whole file), so a document can be found in its file again.

    Raises InputError when the file yields no document at all.
    """
    if mode not in MODES:
        raise InputError(f"unknown text mode {mode!r}: choose one of {', '.join(MODES)}")
    path = Path(path).expanduser()
    text = _read_text(path)
    if mode == "jsonl" or (mode == "auto" and path.suffix.lower() == ".jsonl"):
        docs = _jsonl(text, path)
    elif mode == "file":
        docs = [(0, text.strip("\n"))]
    elif mode == "paragraphs" or (mode == "auto" and _BLANK.search(text.strip("\n"))):
        docs = _paragraphs(text)
    else:
        docs = list(enumerate(text.split("\n")))
    docs = [(i, d) for i, d in docs if d.strip()]
    if not docs:
        raise InputError(f"data file has no documents: {path}")
    return docs


def read_documents(path: str | Path, mode: str = "auto") -> list[str]:
    """Documents of one file, in file order, empty ones dropped (rule in the module docstring).

    Raises InputError when the file yields no document at all.
    """
    return [doc for _, doc in read_document_rows(path, mode)]


def read_corpus(paths: Iterable[str | Path], mode: str = "auto") -> list[str]:
    """Concatenated documents of several files, in the order given (all files are checked,
    and duplicates refused, before the first is read)."""
    docs: list[str] = []
    for p in check_inputs(paths):
        docs.extend(read_documents(p, mode))
    return docs
