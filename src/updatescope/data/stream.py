"""The documents of a pool, one at a time: what ``select`` reads when the pool is larger than memory.

``iter_pool`` yields ``(source, row, document)`` in the order and with the row numbers that
``pipeline.Corpus.from_files`` gives, under the same rules and checks (``textfiles`` for plain
text and JSONL-``text`` files, ``formats`` for tables), but without holding the pool:

* JSONL (the ``text`` rule or a table with column options) and plain text with one document
  per line are read line by line;
* parquet files are read one record batch at a time;
* plain text in paragraphs or as one document, JSON lists, CSV, ``.arrow`` files and
  datasets folders are read one file at a time (the file whole, as their readers do).

So memory is bounded by the largest file of the last kind, and by one line or one record
batch otherwise.  Every path is checked (``inputs.check_inputs``) before the first is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from updatescope.data.formats import Columns, check_row, is_table_input, read_table
from updatescope.data.textfiles import MODES, read_document_rows
from updatescope.errors import InputError
from updatescope.inputs import check_inputs, check_string, parse_json

__all__ = ["iter_pool", "PARQUET_BATCH_ROWS"]

PARQUET_BATCH_ROWS = 1024
_NUL_WINDOW = 65536  # the text reader refuses NUL bytes in a file's first 64 KiB
_BLANK_LINE = re.compile(r"[ \t]*")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(0-based line, text) of a UTF-8 file, lines split as ``textfiles`` does (CRLF and lone
    CR are line ends); one physical line is decoded at a time."""
    lineno, offset = 0, 0
    with open(path, "rb") as fh:
        for k, raw in enumerate(fh):
            if offset < _NUL_WINDOW and b"\x00" in raw[: _NUL_WINDOW - offset]:
                raise InputError(f"data file looks binary (NUL bytes): {path}")
            try:
                text = raw.decode("utf-8-sig" if k == 0 else "utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"data file is not UTF-8 text (bad byte at offset {offset + exc.start}): {path}"
                ) from None
            offset += len(raw)
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            parts = text.split("\n")
            if parts[-1] == "":
                parts.pop()  # the line's own end
            for part in parts:
                yield lineno, part
                lineno += 1


def _has_blank_line(path: Path) -> bool:
    """The paragraph rule of ``textfiles``: after the file's leading and trailing empty lines,
    a line of spaces and tabs only that has a line before it and one after it."""
    started = candidate = False
    for _, line in _lines(path):
        if candidate and line != "":
            return True  # a later line: the blank one separates two blocks
        if started and _BLANK_LINE.fullmatch(line):
            candidate = True
        started = started or line != ""
    return False


def _only_whitespace(path: Path) -> bool:
    with open(path, "rb") as fh:
        return all(not block.strip() for block in iter(lambda: fh.read(1 << 20), b""))


def _jsonl_text(path: Path) -> Iterator[tuple[int, str]]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno + 1}"
        obj = parse_json(line, where)
        if not isinstance(obj, dict) or "text" not in obj:
            raise InputError(f"{where}: JSONL line has no 'text' field")
        value = obj["text"]
        if not isinstance(value, str):
            raise InputError(f"{where}: 'text' must be a string, got {type(value).__name__}")
        check_string(value, where)
        if value.strip():
            yield lineno, value


def _text_rows(path: Path, mode: str) -> Iterator[tuple[int, Any]]:
    if path.stat().st_size == 0:
        raise InputError(f"data file is empty: {path}")
    if mode == "jsonl" or (mode == "auto" and path.suffix.lower() == ".jsonl"):
        rows: Any = _jsonl_text(path)
    elif mode == "lines" or (mode == "auto" and not _has_blank_line(path)):
        rows = ((i, line) for i, line in _lines(path) if line.strip())
    else:  # paragraphs, or the whole file: read the file as textfiles does
        rows = iter(read_document_rows(path, mode))
    n = 0
    for row in rows:
        n += 1
        yield row
    if n == 0:
        what = "is empty" if _only_whitespace(path) else "has no documents"
        raise InputError(f"data file {what}: {path}")


def _table_rows(path: Path, columns: Columns) -> Iterator[tuple[int, Any]]:
    suffix = path.suffix.lower()
    if path.is_file() and suffix == ".jsonl":

        def raw() -> Iterator[Any]:
            for lineno, line in _lines(path):
                if line.strip():
                    yield parse_json(line, f"{path}:{lineno + 1}")
    elif path.is_file() and suffix == ".parquet":

        def raw() -> Iterator[Any]:
            try:
                import pyarrow.parquet as pq
            except ImportError as exc:
                from updatescope.errors import MissingExtraError

                raise MissingExtraError("datasets", "hf") from exc
            try:
                batches = pq.ParquetFile(str(path)).iter_batches(batch_size=PARQUET_BATCH_ROWS)
                for batch in batches:
                    yield from batch.to_pylist()
            except InputError:
                raise
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                raise InputError(f"cannot read {path} with datasets: {first}") from None
    else:
        yield from enumerate(read_table(path, columns))
        return
    n = 0
    for i, row in enumerate(raw()):
        yield i, check_row(row, i, path, columns)
        n = i + 1
    if n == 0:
        raise InputError(f"data table is empty: {path}")


def iter_pool(
    paths: Sequence[str | Path], columns: Columns | None = None, mode: str = "auto"
) -> Iterator[tuple[str, int, Any]]:
    """``(source, row, document)`` of every document of the files, in order (module docstring).

    Documents are strings (plain text, JSONL-``text``) or table rows (dicts) when ``columns``
    names a layout or a file is a table; the choice is ``Corpus.from_files``'s
    (``formats.is_table_input``).  Every problem is one InputError naming the file (and row).
    """
    if mode not in MODES:
        raise InputError(f"unknown text mode {mode!r}: choose one of {', '.join(MODES)}")
    columns = columns or Columns()
    paths = list(paths)
    if not paths:
        raise InputError("no data files given")
    table = is_table_input(paths, columns)
    for path in check_inputs(paths, allow_dir=table):
        rows = _table_rows(path, columns) if table else _text_rows(path, mode)
        for row, doc in rows:
            yield str(path), row, doc
