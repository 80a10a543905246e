"""Untrusted input, read safely: the one gate every reader of user files goes through.

``check_inputs`` ``stat``-s each path *before* it is opened, so a FIFO, ``/dev/zero`` or
another device is refused instead of hanging or reading without end; files above
``MAX_INPUT_BYTES`` are refused (and reads stop there, should the file grow); an unreadable
file says "permission denied"; and the same file given twice (again, through a symlink or a
hard link: same device and inode) is refused with both names, since its documents would be
counted twice.  ``parse_json`` turns everything ``json`` can raise on hostile text (deep
nesting, over-long integers) into one line, and ``check_string`` refuses lone surrogates,
which no tokenizer can encode.  Torch-free; used by the data readers, signature banks and
steering pair files alike.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from updatescope.errors import InputError

__all__ = ["MAX_INPUT_BYTES", "check_inputs", "read_input_bytes", "parse_json", "check_string"]

#: Largest input file read (bytes).  Files are read whole, so this bounds memory; corpora
#: beyond it are split into shards (sketch them separately and ``updatescope merge``).
MAX_INPUT_BYTES = 4 << 30


def _check_one(path: Path, allow_dir: bool) -> os.stat_result:
    """stat ``path`` without opening it; InputError unless it is a readable regular file
    (or, with ``allow_dir``, a folder) within the size limit."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"data file not found: {path}") from None
    except PermissionError:
        raise InputError(f"data file cannot be read (permission denied): {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read data file ({exc.strerror or type(exc).__name__}): {path}") from None
    if stat.S_ISDIR(st.st_mode):
        if not allow_dir:
            raise InputError(f"data path is a folder, not a file: {path}")
    elif not stat.S_ISREG(st.st_mode):
        raise InputError(f"data path is not a regular file (a pipe, device or socket): {path}")
    elif st.st_size > MAX_INPUT_BYTES:
        raise InputError(
            f"data file is {st.st_size:,} bytes, above the limit of {MAX_INPUT_BYTES:,}; split it "
            f"into shards and merge their signatures: {path}"
        )
    if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)):
        raise InputError(f"data file cannot be read (permission denied): {path}")
    return st


def check_inputs(paths: Iterable[str | os.PathLike], *, allow_dir: bool = False) -> list[Path]:
    """Every input path checked before any is opened (see the module docstring); returns
    them as Paths.  The same file twice (by device and inode) is refused naming both."""
    out: list[Path] = []
    seen: dict[tuple[int, int], Path] = {}
    for p in paths:
        path = Path(p).expanduser()
        st = _check_one(path, allow_dir)
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise InputError(f"{path} and {seen[key]} are the same file; its data would be counted twice")
        seen[key] = path
        out.append(path)
    if not out:
        raise InputError("no data files given")
    return out


def read_input_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of one checked input file, never more than ``MAX_INPUT_BYTES``."""
    (path,) = check_inputs([path])
    try:
        # O_NONBLOCK: should the path have become a FIFO since the check, open does not wait
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InputError(f"data path is not a regular file (a pipe, device or socket): {path}")
            raw = fh.read(MAX_INPUT_BYTES + 1)
    except PermissionError:
        raise InputError(f"data file cannot be read (permission denied): {path}") from None
    except OSError as exc:
        raise InputError(f"cannot read data file ({exc.strerror or type(exc).__name__}): {path}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise InputError(f"data file grew beyond the limit of {MAX_INPUT_BYTES:,} bytes while read: {path}")
    return raw


def parse_json(text: str, where: str) -> Any:
    """``json.loads`` with every failure on hostile text as one InputError naming ``where``:
    syntax errors, nesting deeper than the parser's stack (RecursionError) and integers
    longer than Python converts (ValueError)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: invalid JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"{where}: JSON value cannot be read ({str(exc).splitlines()[0][:120]})") from None


def check_string(value: str, where: str) -> str:
    """``value`` unless it holds a lone surrogate (a JSON escape such as "\\ud800" that is
    not valid Unicode text, so no tokenizer can encode it)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"{where}: text holds an invalid character (lone surrogate "
            f"U+{ord(value[exc.start]):04X} at offset {exc.start})"
        ) from None
    return value
