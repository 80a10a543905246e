"""The data people have: tables of examples in JSONL/JSON/CSV/parquet/arrow files or a
``datasets.save_to_disk`` folder, turned into what the capture counts.

Three column layouts (``Columns``):
  * ``text``: one document per row; every next-token target is counted;
  * ``prompt`` + ``completion``: the prompt's tokens then the completion's; only targets
    inside the completion are counted (the loss a fine-tune on completions would see);
  * ``messages``: a chat (list of {"role", "content"}) rendered with the tokenizer's chat
    template; only the tokens of assistant turns are counted.
Files without a column option keep the plain-text / JSONL-``text`` rules of ``textfiles``.

Reading and validation happen before any model loads (``read_table``): a missing column,
a non-string value, an empty table or an unreadable file is one InputError naming the file
and row.  JSONL, JSON and CSV need only the standard library; parquet, ``.arrow`` files and
dataset folders are read with the ``datasets`` library (extra ``hf``), offline only.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from updatescope.data.textfiles import check_inputs, check_string, parse_json, read_input_bytes
from updatescope.errors import InputError, MissingExtraError

__all__ = ["Columns", "TABLE_SUFFIXES", "check_row", "is_table_input", "read_table", "read_examples", "to_examples"]

TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow")


@dataclass(frozen=True)
class Columns:
    """Which columns hold the examples (at most one layout; see the module docstring)."""

    text: str | None = None
    prompt: str | None = None
    completion: str | None = None
    messages: str | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) != (self.completion is None):
            raise InputError("--prompt-column and --completion-column go together")
        layouts = [x for x in (self.text, self.prompt, self.messages) if x is not None]
        if len(layouts) > 1:
            raise InputError("choose one of --text-column, --prompt-column/--completion-column, --messages-column")
        for v in (self.text, self.prompt, self.completion, self.messages):
            if v is not None and not v.strip():
                raise InputError("column names must not be empty")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v for v in (self.text, self.prompt, self.completion, self.messages) if v is not None)

    @property
    def layout(self) -> str:
        return "messages" if self.messages else "prompt-completion" if self.prompt else "text"

    def describe(self) -> str:
        """For the signature's metadata: the layout, the columns and what was counted."""
        counted = {"text": "all tokens", "prompt-completion": "completion tokens", "messages": "assistant-turn tokens"}[
            self.layout
        ]
        return f"{self.layout}:{','.join(self.names) or 'text'} ({counted})"


def _text(path: Path) -> str:
    try:
        return read_input_bytes(path).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"data file is not UTF-8 text (bad byte at offset {exc.start}): {path}") from None


def _rows_json(path: Path) -> list[Any]:
    raw = _text(path)
    if path.suffix.lower() == ".json":
        try:
            obj = parse_json(raw, str(path))
        except InputError:
            obj = None  # JSON-lines content in a .json file, as `datasets` also accepts
        if obj is not None:
            if isinstance(obj, dict) and len(obj) == 1 and isinstance(next(iter(obj.values())), list):
                obj = next(iter(obj.values()))  # {"data": [...]}
            if not isinstance(obj, list):
                raise InputError(f"{path}: expected a JSON list of objects, got a {type(obj).__name__}")
            return obj
    rows = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if line.strip():
            rows.append(parse_json(line, f"{path}:{lineno}"))
    return rows


def _rows_csv(path: Path) -> list[Any]:
    """Rows as dicts keyed by the header.  Every row must have exactly the header's fields: a
    row with more would export a column named ``None``, one with fewer ``None`` values, and a
    repeated header name would keep only its last column; each is refused naming file and
    row (0-based, as the other tables; blank lines are skipped) and its line."""
    reader = csv.reader(io.StringIO(_text(path), newline=""))
    header = next(reader, None)
    if header is None:
        return []
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise InputError(f"{path}: the header names column(s) {', '.join(map(repr, repeated))} more than once")
    rows: list[Any] = []
    for fields in reader:
        if not fields:
            continue  # a blank line
        if len(fields) != len(header):
            raise InputError(
                f"{path}: row {len(rows)} (line {reader.line_num}) has {len(fields)} field(s), the header "
                f"has {len(header)}"
            )
        rows.append(dict(zip(header, fields)))
    return rows


def _rows_datasets(path: Path) -> list[Any]:
    try:
        import datasets
    except ImportError as exc:
        raise MissingExtraError("datasets", "hf") from exc
    try:
        if path.is_dir():
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if len(ds) != 1:
                    raise InputError(
                        f"{path}: a dataset with several splits ({', '.join(ds)}); give the folder of one split"
                    )
                ds = next(iter(ds.values()))
        elif path.suffix.lower() == ".parquet":
            # pyarrow (a dependency of datasets) reads the file in place; Dataset.from_parquet
            # would first copy it into the datasets cache
            import pyarrow.parquet as pq

            return pq.read_table(str(path)).to_pylist()
        else:
            ds = datasets.Dataset.from_file(str(path))
    except InputError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(f"cannot read {path} with datasets: {first}") from None
    return ds.to_list()


def read_table(path: str | Path, columns: Columns) -> list[dict[str, Any]]:
    """Rows of one table file or dataset folder, each checked to hold ``columns`` with
    the right types (strings; a list of role/content messages for ``messages``)."""
    (path,) = check_inputs([path], allow_dir=True)  # regular file or folder, readable, size-capped
    suffix = path.suffix.lower()
    if path.is_dir():
        rows = _rows_datasets(path)
    elif suffix in (".jsonl", ".json"):
        rows = _rows_json(path)
    elif suffix == ".csv":
        try:
            rows = _rows_csv(path)
        except csv.Error as exc:
            raise InputError(f"cannot read CSV {path}: {exc}") from None
    elif suffix in (".parquet", ".arrow"):
        rows = _rows_datasets(path)
    else:
        raise InputError(
            f"{path}: column options need a table ({', '.join(TABLE_SUFFIXES)} or a datasets "
            "folder); plain text files have no columns"
        )
    if not rows:
        raise InputError(f"data table is empty: {path}")
    for i, row in enumerate(rows):
        rows[i] = check_row(row, i, path, columns)
    return rows


def check_row(row: Any, i: int, path: Path, columns: Columns) -> dict[str, Any]:
    """Row ``i`` of table ``path`` checked to hold ``columns`` with the right types; -> the row
    (for a messages layout, a dict that remembers where it came from)."""
    if not isinstance(row, dict):
        raise InputError(f"{path}: row {i} is a {type(row).__name__}, not an object")
    if columns.messages is not None:
        row = _Row(row)
        row.where = f"{path}: row {i}"
    for name in columns.names or ("text",):
        if name not in row:
            have = ", ".join(sorted(map(str, row)))[:120]
            raise InputError(f"{path}: row {i} has no column {name!r} (columns: {have})")
        value = row[name]
        if name == columns.messages:
            _check_messages(value, path, i, name)
        elif not isinstance(value, str):
            raise InputError(f"{path}: row {i} column {name!r} must be a string, got {type(value).__name__}")
        else:
            check_string(value, f"{path}: row {i} column {name!r}")
    return row


def _check_messages(value: Any, path: Path, i: int, name: str) -> None:
    if not isinstance(value, list) or not value:
        raise InputError(f"{path}: row {i} column {name!r} must be a non-empty list of messages")
    for turn in value:
        if not (isinstance(turn, dict) and isinstance(turn.get("role"), str) and isinstance(turn.get("content"), str)):
            raise InputError(f"{path}: row {i} column {name!r}: each message needs string 'role' and 'content'")
        check_string(turn["role"], f"{path}: row {i} column {name!r}")
        check_string(turn["content"], f"{path}: row {i} column {name!r}")
    if not any(t["role"] == "assistant" for t in value):
        raise InputError(f"{path}: row {i} column {name!r} has no assistant turn to count")
    first = next(t["role"] for t in value if t["role"] != "system")
    if first != "user":
        raise InputError(
            f"{path}: row {i} column {name!r}: the first turn after any system turns is {first!r}, not "
            "'user' (an assistant turn answers a prompt)"
        )


class _Row(dict):
    """A table row (a plain dict to every reader) that remembers its file and row number,
    so that an error found later, when the tokenizer renders it, can name both."""

    where: str = ""


def _where(row: Any, i: int) -> str:
    return getattr(row, "where", "") or f"row {i}"


def is_table_input(paths: Sequence[str | Path], columns: Columns) -> bool:
    """Whether ``paths`` are read as tables (a column option, or a table suffix other than
    JSONL, or a datasets folder) rather than by the plain-text / JSONL-``text`` rules."""
    tables = (".csv", ".json", ".parquet", ".arrow")
    return bool(columns.names) or any(Path(p).is_dir() or Path(p).suffix.lower() in tables for p in paths)


def read_examples(paths: Sequence[str | Path], columns: Columns) -> list[dict[str, Any]]:
    """Rows of all tables, in the order given (validated; nothing is tokenised yet)."""
    rows: list[dict[str, Any]] = []
    for p in check_inputs(paths, allow_dir=True):  # all checked, duplicates refused, before any is read
        rows.extend(read_table(p, columns))
    return rows


def _ids(tokenizer: Any, text: str, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def _chat_ids(tokenizer: Any, messages: list[dict[str, str]], **kw: Any) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, **kw)
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(v) for v in out]


def to_examples(
    rows: Sequence[dict[str, Any]], columns: Columns, tokenizer: Any, *, keep_empty: bool = False
) -> tuple[list[Any], list[Any] | None]:
    """(texts, positions) for ``capture_causal_lm``: strings and no positions for ``text``;
    token-id lists with the counted target indices for the other layouts.  Rows with nothing
    to count are dropped, unless ``keep_empty`` (one example per row, in row order: what
    per-row scores need), when they are kept with an empty position list."""
    if columns.layout == "text":
        name = columns.text or "text"
        return [r[name] for r in rows if keep_empty or r[name].strip()], None
    texts: list[Any] = []
    positions: list[Any] = []
    for i, r in enumerate(rows):
        if columns.layout == "prompt-completion":
            head = _ids(tokenizer, r[columns.prompt], True)
            ids = head + _ids(tokenizer, r[columns.completion], False)
            pos = list(range(max(len(head), 1), len(ids)))
        else:
            if getattr(tokenizer, "chat_template", None) is None:
                raise InputError("--messages-column: the tokenizer has no chat template")
            msgs = r[columns.messages]
            try:
                ids = _chat_ids(tokenizer, msgs)
                pos = []
                for t, turn in enumerate(msgs):
                    if turn["role"] != "assistant":
                        continue
                    # the assistant's tokens: after the prompt that asks for this turn, up to the turn's end
                    start = len(_chat_ids(tokenizer, msgs[:t], add_generation_prompt=True))
                    stop = len(_chat_ids(tokenizer, msgs[: t + 1]))
                    if ids[:stop] != _chat_ids(tokenizer, msgs[: t + 1]):
                        raise InputError(f"{_where(r, i)}: the chat template does not render turns as prefixes")
                    pos.extend(range(max(start, 1), stop))
            except InputError:
                raise
            except Exception as exc:  # the template's own refusal (jinja raise_exception, ValueError)
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
                raise InputError(f"{_where(r, i)}: the tokenizer's chat template refuses this chat: {first}") from None
        if pos or keep_empty:  # a row whose completion tokenises to nothing counts no target
            texts.append(ids)
            positions.append(pos)
    if not any(positions):
        raise InputError("no row has a token to count (empty completions or assistant turns)")
    return texts, positions
