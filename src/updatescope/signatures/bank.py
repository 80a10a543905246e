"""A bank of signatures: rank thousands of corpora against a target by one matrix product.

A bank is a folder of four files, all rows in the same order:

- ``bank.json``   header: format, version, the one ``SketchConfig`` of every entry, and the
                  committed row count ``n`` (written last, atomically: the commit point);
- ``rows.jsonl``  one metadata line per entry: name, tokens (sample count), the two half
                  counts, fingerprint, free-form signature metadata;
- ``vectors.f32`` (n, m) float32, little-endian: ``Signature.vector()`` of each entry, the
                  joint mean embedding divided by its unbiased norm, so that
                  ``vectors @ target.vector()`` is the estimated fisher alignment of every
                  entry with the target (16 KB a row at m = 4096);
- ``state.f64``   (n, 6m + 6G) float64: each entry's full state (``sums`` (2, 3, m) then
                  ``diag`` (2, 3, G)), from which the entry's ``Signature`` is rebuilt
                  bit for bit.

Appending writes at the end of the three data files and then rewrites the small header, so
it costs O(new rows); bytes beyond the committed row count (an interrupted append) are cut
off by the next append and never read.  Every file is memory-mapped, never loaded whole.

Writers take an exclusive ``fcntl.flock`` on ``bank.lock`` in the folder for the whole
append (read the header, write the rows, rename the new header into place), so two appends
started together are serialised: both entries are kept (or a duplicate is refused), and the
header, written to a new file and renamed, is the one commit point a reader ever sees.

Integrity: each row records the sha256 of its vector row and of its state row; the header
records the sha256 of the committed ``rows.jsonl`` bytes and a sha256 of its own fields.
Opening checks the header and the rows (one hash of ``rows.jsonl``); ``query`` and ``dedup``
check every vector row before answering (``verify_vectors``: one streaming sha256 pass over
``vectors.f32``, ``_SCAN_ROWS`` rows in memory at a time, about a second per GB); a state row
is checked each time it is read (192 KiB per listed entry at m = 4096).  A damaged file is a
one-line ``SignatureFileError`` naming it, never a changed answer.

Duplicates: two entries are "the same signature" when their state rows (the sums and the
diagonals, float64) are identical bit for bit; the sha256 of the state row is that key, so
the same file given twice, under another spelling of its path, through a symlink or as a
byte-identical copy is refused naming both.

``query`` is two stages.  (1) The fisher estimate of every entry, by one (chunked) matrix
product of the memory-mapped vectors with the target's vector: equal to
``alignment(entry, target).fisher`` up to float32 rounding (tested).  (2) For the best
``top`` entries, the full ``alignment`` (activation, error, coupling, standard errors,
warnings) on the rebuilt signatures through ``rank_sources``: exactly the values ``rank``
prints.  The activation/error values and standard errors need each entry's per-half,
per-block state (192 KiB at m = 4096), which is why they are computed for the short list
only: stage 1 reads 16 KB per entry, stage 2 reads 192 KiB per listed entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.errors import IncompatibleSignatureError, InputError, SignatureFileError
from updatescope.records import write_text_atomic
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.signature import N_BLOCKS, Signature

__all__ = [
    "SignatureBank",
    "DuplicatePair",
    "create_bank",
    "open_bank",
    "build_bank",
    "fisher_scores",
    "check_target",
    "dedup",
    # the file layout, for tools that write rows in bulk (benchmarks/bank_query.py)
    "row_sha",
    "rows_sha",
    "row_line",
    "write_header",
]

FORMAT = "updatescope-bank"
FORMAT_VERSION = 2  # 2: row and header checksums (version 1 banks have none and are refused)
_HEADER, _ROWS, _VECTORS, _STATE = "bank.json", "rows.jsonl", "vectors.f32", "state.f64"
_LOCK = "bank.lock"
LOCK_TIMEOUT_S = 120.0  # how long an append waits for another one to finish before refusing
_NAME_PREFIX = '{"name": '
_DECODER = json.JSONDecoder()
_SCAN_ROWS = 8192  # vector rows per matmul step of the scan: 32 MiB at m = 4096


class _Rows(Sequence[dict]):
    """The metadata table, parsed one row at a time on first access: opening a bank of 100k
    entries then costs one read and a split, and a query parses only the rows it lists."""

    def __init__(self, lines: list[str]) -> None:
        self._items: list[Any] = list(lines)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        item = self._items[i]
        if isinstance(item, str):
            item = self._items[i] = json.loads(item)
        return item

    def extend(self, rows: Iterable[dict]) -> None:
        self._items.extend(rows)

    def digest(self, i: int, key: str) -> str | None:
        """Row i's ``sha256_vector`` or ``sha256_state`` without parsing the row.  Top-level
        keys after the name are sorted, so these two follow ``meta``: the last occurrence of
        the key is the row's own (a key of that name inside ``meta`` comes earlier)."""
        item = self._items[i]
        if isinstance(item, str):
            mark = f'"{key}": "'
            k = item.rfind(mark)
            return item[k + len(mark) : k + len(mark) + 64] if k >= 0 else None
        return item.get(key)

    def name(self, i: int) -> str:
        """Row i's name without parsing the row: lines start with the name (``row_line``)."""
        item = self._items[i]
        if isinstance(item, str) and item.startswith(_NAME_PREFIX):
            return _DECODER.raw_decode(item, len(_NAME_PREFIX))[0]
        return self[i]["name"]


class SignatureBank:
    """An open bank (see the module docstring).  ``len(bank)`` entries of one ``config``."""

    def __init__(self, path: Path, config: SketchConfig, rows: _Rows, rows_bytes: int = 0) -> None:
        self.path, self.config, self.rows = path, config, rows
        self._rows_bytes = rows_bytes  # committed size of rows.jsonl
        self._vectors_checked = -1  # rows of vectors.f32 verified so far (verify_vectors)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def names(self) -> list[str]:
        return [self.rows.name(i) for i in range(len(self.rows))]

    @property
    def width(self) -> int:
        """float64 values per row of the state file (sums and diagonal blocks)."""
        return 6 * self.config.sketch_dim + 6 * N_BLOCKS

    @property
    def rows_bytes(self) -> int:
        """Committed size of the rows file (bytes beyond it belong to no entry)."""
        return self._rows_bytes

    def vectors(self) -> np.ndarray:
        """(n, m) float32, memory-mapped read-only."""
        return _memmap(self.path / _VECTORS, np.float32, (len(self), self.config.sketch_dim))

    def signature(self, i: int) -> Signature:
        """Entry i rebuilt as the Signature it was appended from (same state, config, metadata)."""
        if not 0 <= i < len(self):
            raise InputError(f"bank entry {i} out of range (the bank has {len(self)})")
        m = self.config.sketch_dim
        row = np.array(_memmap(self.path / _STATE, np.float64, (len(self), self.width))[i])
        r = self.rows[i]
        if row_sha(row) != r.get("sha256_state"):
            raise SignatureFileError(
                f"bank file {_STATE} is damaged: row {i} ({r['name']!r}) does not match its checksum: {self.path}"
            )
        state = torch.from_numpy(row)
        return Signature(
            self.config,
            state[: 6 * m].view(2, 3, m).clone(),
            state[6 * m :].view(2, 3, N_BLOCKS).clone(),
            torch.tensor(r["counts"], dtype=torch.int64),
            dict(r.get("meta", {})),
        )

    def verify_vectors(self) -> None:
        """Check every committed row of ``vectors.f32`` against its recorded sha256.

        Cost: one sequential read and sha256 of the file (n·m·4 bytes, about a second per GB),
        ``_SCAN_ROWS`` rows in memory at a time; done once per open bank.  SignatureFileError
        naming the file and the first damaged row."""
        if self._vectors_checked == len(self):
            return
        mm = self.vectors()
        for start in range(0, len(self), _SCAN_ROWS):
            block = np.ascontiguousarray(mm[start : start + _SCAN_ROWS])
            for k in range(block.shape[0]):
                i = start + k
                if row_sha(block[k]) != self.rows.digest(i, "sha256_vector"):
                    raise SignatureFileError(
                        f"bank file {_VECTORS} is damaged: row {i} ({self.rows.name(i)!r}) does not match "
                        f"its checksum: {self.path}"
                    )
        self._vectors_checked = len(self)

    def content_keys(self) -> dict[str, str]:
        """{state sha256: entry name} of every entry: the duplicate key (module docstring)."""
        return {self.rows.digest(i, "sha256_state"): self.rows.name(i) for i in range(len(self))}

    def append(self, sigs: Sequence[Signature], names: Sequence[str] | None = None) -> SignatureBank:
        """Add signatures (same config as the bank, else IncompatibleSignatureError naming the
        field); names must be new, and so must contents (an entry with the same state bit for
        bit is refused naming both).  Writes only the new rows and the header, holding the
        bank's lock; refused when another process appended since this bank was opened.
        Returns self."""
        with _locked(self.path):
            return self._append(sigs, names)

    def _append(self, sigs: Sequence[Signature], names: Sequence[str] | None) -> SignatureBank:
        sigs = list(sigs)
        names = [_default_name(s, len(self) + k) for k, s in enumerate(sigs)] if names is None else list(names)
        if len(names) != len(sigs):
            raise InputError(f"{len(sigs)} signatures but {len(names)} names")
        taken = set(self.names)
        for s, name in zip(sigs, names):
            if not isinstance(s, Signature):
                raise InputError(f"a bank holds Signature objects, got {type(s).__name__}")
            self.config.check_compatible(s.config)  # IncompatibleSignatureError naming the field
            if name in taken:
                raise InputError(f"the bank already has an entry named {name!r}")
            taken.add(name)
        if not sigs:
            return self
        on_disk = _read_header(self.path)
        if int(on_disk.get("n", -1)) != len(self) or int(on_disk.get("rows_bytes", -1)) != self._rows_bytes:
            raise InputError(f"the bank was changed by another process since it was opened; open it again: {self.path}")
        m, n = self.config.sketch_dim, len(self)
        vec = np.stack([s.vector().numpy() for s in sigs]).astype("<f4")
        state = np.stack([_state_row(s) for s in sigs])
        keys = self.content_keys()
        for k, name in enumerate(names):
            key = row_sha(state[k])
            if key in keys:
                raise InputError(
                    f"{name!r} is the same signature as {keys[key]!r} (identical sketch state, bit for bit); "
                    "a bank holds each signature once"
                )
            keys[key] = name
        rows = [
            {
                "name": name,
                "tokens": s.count,
                "counts": [int(c) for c in s.counts.tolist()],
                "fingerprint": s.config.fingerprint,
                "meta": dict(s.meta),
                "sha256_vector": row_sha(vec[k]),
                "sha256_state": row_sha(state[k]),
            }
            for k, (s, name) in enumerate(zip(sigs, names))
        ]
        _append_bytes(self.path / _VECTORS, n * m * 4, vec.tobytes())
        _append_bytes(self.path / _STATE, n * self.width * 8, state.tobytes())
        text = "".join(row_line(r) for r in rows).encode("utf-8")
        _append_bytes(self.path / _ROWS, self._rows_bytes, text)
        self.rows.extend(rows)
        self._rows_bytes += len(text)
        write_header(self.path, self.config, len(self.rows), self._rows_bytes, rows_sha(self.path, self._rows_bytes))
        return self


def _state_row(sig: Signature) -> np.ndarray:
    """The entry's state as stored in ``state.f64``: sums then diag, float64 little-endian."""
    return torch.cat((sig.sums.reshape(-1), sig.diag.reshape(-1))).numpy().astype("<f8")


def row_sha(row: np.ndarray) -> str:
    """sha256 of one row's little-endian bytes (the bytes as stored in the bank's files)."""
    return hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest()


def rows_sha(path: Path, nbytes: int) -> str:
    h = hashlib.sha256()
    with open(path / _ROWS, "rb") as fh:
        left = nbytes
        while left > 0:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


_locks_held: dict[str, int] = {}


@contextlib.contextmanager
def _locked(path: Path, timeout: float | None = None):
    """Exclusive ``flock`` on ``path/bank.lock`` (re-entrant within one process); waits up to
    ``LOCK_TIMEOUT_S`` for another writer, then refuses with one line."""
    import fcntl

    key = os.path.realpath(path)
    if _locks_held.get(key):
        _locks_held[key] += 1
        try:
            yield
        finally:
            _locks_held[key] -= 1
        return
    try:
        fd = os.open(Path(path) / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise InputError(f"cannot lock the bank ({exc.strerror or type(exc).__name__}): {path}") from None
    try:
        deadline = time.monotonic() + (LOCK_TIMEOUT_S if timeout is None else timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InputError(f"the bank is being written by another process (locked): {path}") from None
                time.sleep(0.05)
        _locks_held[key] = 1
        try:
            yield
        finally:
            _locks_held.pop(key, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _default_name(sig: Signature, index: int) -> str:
    return sig.meta.get("name") or f"entry{index}"


def row_line(row: Mapping[str, Any]) -> str:
    """One JSON line, the name first (read back without parsing the row), the rest sorted."""
    rest = json.dumps({k: v for k, v in row.items() if k != "name"}, sort_keys=True, ensure_ascii=True)
    return _NAME_PREFIX + json.dumps(row["name"], ensure_ascii=True) + (", " + rest[1:] if rest != "{}" else "}") + "\n"


def _append_bytes(path: Path, committed: int, data: bytes) -> None:
    """Cut the file to its committed size (drops an interrupted append), then append."""
    with open(path, "r+b" if path.exists() else "w+b") as fh:
        fh.truncate(committed)
        fh.seek(committed)
        fh.write(data)


def _header_sha(header: Mapping[str, Any]) -> str:
    body = {k: v for k, v in header.items() if k != "header_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def write_header(path: Path, config: SketchConfig, n: int, rows_bytes: int, rows_sha256: str) -> None:
    """The commit point: a new header file renamed over the old one."""
    header: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "n": n,
        "rows_bytes": rows_bytes,
        "rows_sha256": rows_sha256,
    }
    header["header_sha256"] = _header_sha(header)
    write_text_atomic(json.dumps(header, sort_keys=True, indent=1) + "\n", path / _HEADER)


def _read_header(path: Path) -> dict[str, Any]:
    """The parsed header, checked against its own checksum; ValueError when it is not valid."""
    from updatescope.inputs import parse_json

    raw = (path / _HEADER).read_bytes()
    if len(raw) > 1 << 20:
        raise ValueError(f"{_HEADER} is {len(raw):,} bytes, not a bank header")
    try:
        header = parse_json(raw.decode("utf-8"), _HEADER)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"format {str(header.get('format') if isinstance(header, dict) else None)[:40]!r}")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(f"format version {str(version)[:20]} is not one this updatescope reads")
    if version < FORMAT_VERSION:
        raise ValueError(
            f"format version {version} has no checksums; rebuild the bank from its signature files with index build"
        )
    if header.get("header_sha256") != _header_sha(header):
        raise ValueError(f"{_HEADER} does not match its checksum (damaged)")
    return header


def _memmap(path: Path, dtype: Any, shape: tuple[int, int]) -> np.ndarray:
    if shape[0] == 0:
        return np.zeros(shape, dtype=dtype)
    need = shape[0] * shape[1] * np.dtype(dtype).itemsize
    if not path.exists() or path.stat().st_size < need:
        raise SignatureFileError(
            f"bank file {path.name} is shorter than its {shape[0]} rows (damaged bank): {path.parent}"
        )
    return np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r", shape=shape)


def create_bank(path: str | os.PathLike, config: SketchConfig) -> SignatureBank:
    """A new empty bank folder at ``path`` (must not exist; its parent must)."""
    path = Path(path)
    if path.exists():
        raise InputError(f"bank folder already exists: {path} (open it to append)")
    if not path.parent.is_dir():
        raise InputError(f"output folder does not exist: {path.parent}")
    try:
        path.mkdir()  # atomic: of two builds into one new folder, one gets here
    except FileExistsError:
        raise InputError(f"bank folder already exists: {path} (open it to append)") from None
    for name in (_ROWS, _VECTORS, _STATE, _LOCK):
        (path / name).touch()
    write_header(path, config, 0, 0, hashlib.sha256().hexdigest())
    return SignatureBank(path, config, _Rows([]), 0)


def open_bank(path: str | os.PathLike) -> SignatureBank:
    """Open a bank folder; SignatureFileError (one line) when it is not a valid bank."""
    path = Path(path)
    if not (path / _HEADER).is_file():
        raise SignatureFileError(f"not a signature bank (no {_HEADER}): {path}")
    try:
        header = _read_header(path)
        config = SketchConfig.from_dict(header["config"])
        n, rows_bytes = int(header["n"]), int(header["rows_bytes"])
        with open(path / _ROWS, "rb") as fh:
            text = fh.read(rows_bytes)
        if len(text) == rows_bytes and hashlib.sha256(text).hexdigest() != header["rows_sha256"]:
            raise ValueError(f"{_ROWS} does not match its checksum (damaged)")
        rows = _Rows(text.decode("utf-8").splitlines())
        if len(text) != rows_bytes or len(rows) != n:
            raise ValueError(f"{_ROWS} holds {len(rows)} of the {n} committed rows")
    except (OSError, ValueError, KeyError, TypeError, StopIteration, InputError) as exc:
        raise SignatureFileError(
            f"not a readable signature bank ({str(exc)[:200] or type(exc).__name__}): {path}"
        ) from None
    bank = SignatureBank(path, config, rows, rows_bytes)
    bank.vectors()  # checks the data files cover every committed row
    _memmap(path / _STATE, np.float64, (n, bank.width))
    return bank


def _signature_files(inputs: Iterable[str | os.PathLike]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = sorted(p.glob("*.safetensors"))
            if not found:
                raise InputError(f"no *.safetensors signature files in folder {p}")
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise InputError(f"signature file or folder not found: {p}")
    if not files:
        raise InputError("no signature files given")
    return files


def build_bank(inputs: Iterable[str | os.PathLike], out: str | os.PathLike, *, append: bool = False) -> SignatureBank:
    """Bank of the signature files (or folders of ``*.safetensors``) in ``inputs``.

    Every file is loaded and checked against the first one's config before anything is
    written.  Names: the signature's ``name`` metadata, else the file stem; a clash falls
    back to the path.  The same signature twice (module docstring: identical state, so also
    the same file under another path, a symlink or a copy) is refused naming both.
    ``append=True`` adds to an existing bank, holding its lock from reading the bank to
    committing the new rows, so concurrent appends are serialised.
    """
    from updatescope.signatures.io import load_signature

    files = _signature_files(inputs)
    loaded: list[tuple[Path, Signature, str]] = []
    first: SketchConfig | None = None
    seen: dict[str, Path] = {}
    for f in files:
        sig = load_signature(f)
        if first is None:
            first = sig.config
        try:
            first.check_compatible(sig.config)
        except IncompatibleSignatureError as exc:
            raise InputError(f"{f}: {exc}") from None
        key = row_sha(_state_row(sig))
        if key in seen:
            raise InputError(
                f"{f} and {seen[key]} hold the same signature (identical sketch state, bit for bit); "
                "give each signature once"
            )
        seen[key] = f
        loaded.append((f, sig, key))
    assert first is not None
    out = Path(out)
    if not append:
        with _locked_new(out, first) as bank:
            return _add(bank, loaded)
    if not (out / _HEADER).is_file():
        raise SignatureFileError(f"not a signature bank (no {_HEADER}): {out}")
    with _locked(out):
        bank = open_bank(out)
        try:
            bank.config.check_compatible(first)
        except IncompatibleSignatureError as exc:
            raise InputError(f"{loaded[0][0]}: {exc}") from None
        return _add(bank, loaded)


@contextlib.contextmanager
def _locked_new(out: Path, config: SketchConfig):
    """A new bank, locked; removed again when filling it fails (no half-made bank is left)."""
    import shutil

    bank = create_bank(out, config)
    try:
        with _locked(out):
            yield bank
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def _add(bank: SignatureBank, loaded: Sequence[tuple[Path, Signature, str]]) -> SignatureBank:
    """Append the loaded files to an open, locked bank: names and contents must be new."""
    taken = set(bank.names)
    keys = bank.content_keys()
    sigs, names = [], []
    for f, sig, key in loaded:
        if key in keys:
            raise InputError(
                f"{f} is the same signature as the bank's entry {keys[key]!r} (identical sketch state, "
                f"bit for bit): {bank.path}"
            )
        name = sig.meta.get("name") or f.name.split(".")[0]
        if name in taken:
            name = str(f)
        if name in taken:
            raise InputError(f"the bank already has an entry named {name!r}: {bank.path}")
        taken.add(name)
        sigs.append(sig)
        names.append(name)
    return bank.append(sigs, names)


def fisher_scores(bank: SignatureBank, target: Signature) -> np.ndarray:
    """Estimated fisher alignment of every entry with ``target``: ``vectors @ target.vector()``.

    -> (n,) float64 (NaN where an entry's or the target's norm estimate is not positive).
    One matmul per ``_SCAN_ROWS`` rows of the memory-mapped matrix: memory O(rows·m).
    """
    check_target(bank, target)
    bank.verify_vectors()
    v = target.vector().to(torch.float32)
    mm = bank.vectors()
    out = np.empty(len(bank), dtype=np.float64)
    for i in range(0, len(bank), _SCAN_ROWS):
        block = _rows(mm, i)
        out[i : i + block.shape[0]] = (block @ v).double().numpy()
    return out


def _rows(mm: np.ndarray, start: int) -> torch.Tensor:
    """Rows [start, start + _SCAN_ROWS) of a read-only memory map as a tensor, without a copy
    (only read: torch's warning about non-writable arrays does not apply)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(np.ascontiguousarray(mm[start : start + _SCAN_ROWS]))


def check_target(bank: SignatureBank, target: Signature) -> None:
    """One line (InputError) unless ``target`` is a signature of this bank's model and basis."""
    if not isinstance(target, Signature):
        raise InputError(f"the target must be a Signature, got {type(target).__name__}")
    try:
        bank.config.check_compatible(target.config)
    except IncompatibleSignatureError as exc:
        raise InputError(f"the target does not fit this bank: {exc}") from None


@dataclass(frozen=True)
class DuplicatePair:
    """Two entries whose fisher and activation alignments are both within 2·se (or ``tol``) of 1."""

    first: str
    second: str
    fisher: float
    fisher_se: float
    activation: float
    activation_se: float

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


def dedup(bank: SignatureBank, *, screen: float = 0.8, tol: float = 0.02) -> list[DuplicatePair]:
    """Near-duplicate corpora in a bank, most similar first.

    Screening: pairs whose vector product (the fisher estimate) is at least ``screen``, by
    one (chunked) Gram product of the vectors, O(n²·m) time, O(rows·n) memory.  Each
    screened pair is then confirmed with the full ``alignment``: a duplicate when fisher
    and activation are both ≥ 1 − max(2·se, tol) (i.e. consistent with 1 within the
    ≈95% interval; values above 1 mean "as aligned as two halves of one corpus").
    """
    from updatescope.sketch.align import alignment

    if not isinstance(screen, (int, float)) or not 0 < screen <= 1:
        raise InputError(f"screen must be in (0, 1], got {screen}")
    if not isinstance(tol, (int, float)) or not 0 <= tol < 1:  # NaN fails both comparisons
        raise InputError(f"tol must be a finite number in [0, 1), got {tol}")
    bank.verify_vectors()
    mm = bank.vectors()
    n = len(bank)
    pairs: list[tuple[int, int]] = []
    for i in range(0, n, _SCAN_ROWS):
        a = _rows(mm, i)
        for j in range(i, n, _SCAN_ROWS):
            b = a if j == i else _rows(mm, j)
            hit = torch.nonzero(torch.nan_to_num(a @ b.T, nan=-1.0) >= screen).tolist()
            pairs.extend((i + r, j + c) for r, c in hit if i + r < j + c)
    out = []
    for p, q in pairs:
        al = alignment(bank.signature(p), bank.signature(q))
        ok = all(
            math.isfinite(v) and v >= 1 - max(2 * se if math.isfinite(se) else math.inf, tol)
            for v, se in ((al.fisher, al.fisher_se), (al.activation, al.activation_se))
        )
        if ok:
            out.append(
                DuplicatePair(
                    bank.rows[p]["name"], bank.rows[q]["name"], al.fisher, al.fisher_se, al.activation, al.activation_se
                )
            )
    out.sort(key=lambda d: -d.fisher)
    return out
