"""Checks and output shared by the CLI's commands: output paths tested before any work, strict
JSON on stdout.  A one-line ``UpdatescopeError`` for everything a user can get wrong."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from updatescope.errors import InputError, UpdatescopeError


def print_json(obj: Any) -> None:
    """Strict JSON on stdout: non-finite numbers are written as null."""
    from updatescope.records import to_json

    print(to_json(obj, strict=True))


def check_writable_folder(folder: Path) -> None:
    """UpdatescopeError unless ``folder`` is an existing folder this process can create files in
    (probed with a real temporary file, so read-only mounts are caught as well)."""
    import tempfile

    if folder.exists() and not folder.is_dir():
        raise UpdatescopeError(f"output folder {folder} is a file, not a folder")
    if not folder.is_dir():
        raise UpdatescopeError(f"output folder does not exist: {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UpdatescopeError(f"output folder is not writable: {folder}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".updatescope-probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UpdatescopeError(
            f"output folder is not writable ({exc.strerror or type(exc).__name__}): {folder}"
        ) from None


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file (resolved path, or device and inode: symlinks, hard links)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_out_file(path: str, *, inputs: Sequence[str] = ()) -> Path:
    """The output file of a command, checked before any work: not a folder or a device, not
    one of the inputs, in an existing writable folder."""
    out = Path(path)
    if out.is_dir():
        raise UpdatescopeError(f"--out is a folder: {out}")
    if out.exists() and not out.is_file():
        raise UpdatescopeError(f"--out exists and is not a regular file (a device, pipe or socket): {out}")
    check_writable_folder(out.parent if str(out.parent) else Path("."))
    for item in inputs:
        if same_path(Path(item), out):
            raise UpdatescopeError(f"--out {out} is also an input ({item}); refusing to overwrite it")
    return out


def check_out_folder(path: str, *, inputs: Sequence[str] = ()) -> Path:
    """An output folder (created by the command if missing), checked before any work: not a
    file, not one of the inputs, and its nearest existing ancestor is a writable folder."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UpdatescopeError(f"--out must be a folder, and {out} is a file")
    for item in inputs:
        if same_path(Path(item), out):
            raise UpdatescopeError(f"--out {out} is also an input ({item})")
    base = out
    while not base.exists() and base != base.parent:
        base = base.parent  # the first folder that exists is where the new ones are created
    check_writable_folder(base if str(base) else Path("."))
    return out


def positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise UpdatescopeError(f"{name} must be a positive integer, got {value}")


def check_report(path: str | None, *, inputs: Sequence[str] = ()) -> Path | None:
    """The --report folder, checked before any work (and the plotting extra with it): a new
    or empty folder, or one updatescope wrote a report into before (its marker file,
    ``report.html.REPORT_MARKER``); any other non-empty folder is refused, so a page that is
    not ours (an ``index.html`` of a site, a notebook's output) is never overwritten."""
    if path is None:
        return None
    out = check_out_folder(path, inputs=inputs)
    from updatescope.report.html import check_report_folder

    check_report_folder(out)
    from updatescope.report.figures import pyplot

    pyplot()  # MissingExtraError naming the extra, before the work starts
    return out


def sig_name(path: str, sig: Any) -> str:
    return sig.meta.get("name") or Path(path).name.split(".")[0]


def unique_names(paths: Sequence[str], loader: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in paths:
        sig = loader(p)
        name = sig_name(p, sig)
        out[p if name in out else name] = sig
    return out


def add_column_arguments(parser: Any) -> None:
    """The table column options shared by ``sketch`` and ``select`` (``data.formats.Columns``)."""
    parser.add_argument("--text-column", default=None, help="column of documents in a table (default 'text')")
    parser.add_argument("--prompt-column", default=None, help="with --completion-column: count completion tokens only")
    parser.add_argument("--completion-column", default=None)
    parser.add_argument(
        "--messages-column",
        default=None,
        help="chat column rendered with the tokenizer's chat template; counts assistant turns only",
    )


def signature_kind(path: str) -> str:
    """'network' or 'head', read from the file's metadata ``format``.  A file whose header
    cannot be read counts as 'head', so the head loader names what is wrong with it; so does
    a path that is not a regular file, which is never opened here (a FIFO would block)."""
    import stat

    from updatescope.network.io import NETWORK_FORMAT

    try:
        if not stat.S_ISREG(Path(path).stat().st_mode):
            return "head"
    except OSError:
        return "head"
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as fh:
            fmt = (fh.metadata() or {}).get("format")
    except Exception:  # missing, corrupt, foreign: the loader reports it in one line
        return "head"
    return "network" if fmt == NETWORK_FORMAT else "head"


def one_kind(paths: Sequence[str]) -> str:
    """The common kind of signature files; a one-line error when head and network mix."""
    kinds = {p: signature_kind(p) for p in paths}
    if len(set(kinds.values())) > 1:
        head = next(p for p in paths if kinds[p] == "head")
        net = next(p for p in paths if kinds[p] == "network")
        raise InputError(
            f"cannot compare a head signature ({head}) with a network signature ({net}): "
            "sketch both with --layers, or both without"
        )
    return kinds[paths[0]]


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks after the input gate
    (``inputs.check_inputs``: a regular file within the size cap, so a FIFO or a device is
    refused in one line, never opened)."""
    import hashlib

    from updatescope.inputs import check_inputs

    (checked,) = check_inputs([path])
    h = hashlib.sha256()
    with checked.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
