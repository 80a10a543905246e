"""The layer tables of docs/architecture.md, generated from the import-linter contracts in
pyproject.toml, so the page says exactly what `lint-imports` checks.

    python docs/architecture_table.py [--write | --check]

Blocks: ``<!-- generated: layers contracts -->`` (the layers, top to bottom) and
``<!-- generated: forbidden contracts -->`` (the forbidden imports).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _blocks import run  # noqa: E402

PYPROJECT = HERE.parent / "pyproject.toml"
DOC = HERE / "architecture.md"


def contracts(path: Path = PYPROJECT) -> list[dict]:
    """The contracts of ``[tool.importlinter]``, in file order."""
    return tomllib.loads(path.read_text())["tool"]["importlinter"]["contracts"]


def _names(modules: str) -> str:
    return ", ".join(f"`{m.strip().removeprefix('updatescope.')}`" for m in modules.split("|"))


def layers_table(cs: list[dict]) -> list[str]:
    out = []
    for c in cs:
        if c["type"] != "layers":
            continue
        out += [
            f"Contract `{c['id']}` — {c['name']}. A layer may import the layers below it, never one above; "
            "the packages of one layer do not import each other.",
            "",
            "| layer (top first) | packages |",
            "|---|---|",
        ]
        out += [f"| {i} | {_names(layer)} |" for i, layer in enumerate(c["layers"], 1)]
    return out


def forbidden_table(cs: list[dict]) -> list[str]:
    out = ["| contract | these | never import |", "|---|---|---|"]
    for c in cs:
        if c["type"] == "forbidden":
            these, never = _names("|".join(c["source_modules"])), _names("|".join(c["forbidden_modules"]))
            out.append(f"| `{c['id']}` | {these} | {never} |")
        elif c["type"] == "independence":
            out.append(f"| `{c['id']}` | {_names('|'.join(c['modules']))} | each other |")
    return out


def render(kind: str, record: str) -> list[str]:
    if record != "contracts":
        raise SystemExit(f"architecture blocks read the contracts, not {record!r}")
    cs = contracts()
    if kind == "layers":
        return layers_table(cs)
    if kind == "forbidden":
        return forbidden_table(cs)
    raise SystemExit(f"unknown architecture block {kind!r}")


if __name__ == "__main__":
    raise SystemExit(run(sys.argv[1:], [DOC], render, "docs/architecture_table.py"))
