"""Generated blocks of the Markdown docs: the machinery every ``docs/*_table.py`` shares.

A generated block is

    <!-- generated: KIND RECORD -->
    ...
    <!-- end generated -->

where KIND names a table function of the script that owns the document and RECORD a JSON
record ``docs/results/RECORD.json`` (several joined by ``+`` for kinds that read several).
:func:`regenerate` re-renders every block of a text; :func:`run` gives each script the same
command line: ``--write`` rewrites its documents, ``--check`` exits 1 naming the stale ones
(the docs tests call it), no flag prints the regenerated first document.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
BEGIN = re.compile(r"^<!-- generated: ([\w-]+) ([\w.+-]+) -->$")
END = "<!-- end generated -->"


def load(record: str, results: Path = RESULTS) -> dict:
    """The record ``results/RECORD.json`` with its file name under ``_file``."""
    rec = json.loads((results / f"{record}.json").read_text())
    rec["_file"] = f"{record}.json"
    return rec


def regenerate(text: str, render: Callable[[str, str], list[str]]) -> str:
    """``text`` with the lines of every block replaced by ``render(kind, record)``."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        while i < len(lines) and lines[i] != END:
            i += 1
        if i == len(lines):
            raise SystemExit(f"unterminated generated block {m.group(1)} {m.group(2)}")
        out.extend(render(m.group(1), m.group(2)))
        out.append(END)
        i += 1
    return "\n".join(out)


def run(argv: Sequence[str], docs: Sequence[Path], render: Callable[[str, str], list[str]], script: str) -> int:
    """``--write`` / ``--check`` / print for the documents a script owns."""
    stale = []
    for doc in docs:
        old = doc.read_text()
        new = regenerate(old, render)
        if "--write" in argv:
            doc.write_text(new)
        elif "--check" in argv:
            if new != old:
                stale.append(doc)
        else:
            print(new)
            return 0
    for doc in stale:
        print(f"{doc}: generated blocks differ from docs/results/*.json; run python {script} --write", file=sys.stderr)
    return 1 if stale else 0


def strip(text: str) -> str:
    """``text`` without its generated blocks (markers included): what was written by hand."""
    return "\n".join(_outside(text.split("\n")))


def _outside(lines: list[str]) -> list[str]:
    out, inside = [], False
    for line in lines:
        if BEGIN.match(line):
            inside = True
        elif inside and line == END:
            inside = False
        elif not inside:
            out.append(line)
    return out


def blocks(text: str) -> list[tuple[str, str]]:
    """(kind, record) of every generated block of ``text``, in order."""
    return [(m.group(1), m.group(2)) for m in map(BEGIN.match, text.split("\n")) if m]
