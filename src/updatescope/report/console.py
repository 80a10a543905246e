"""Every table updatescope prints to a terminal (rich), readable at 80 columns.

Rich shrinks columns to fit the terminal; long free text (notes, explanations) then wraps a
word per line.  So the wide, wrapping columns are only shown when the terminal has room,
and otherwise move below the table as numbered notes.  Text that comes from files (names,
paths, metadata) is escaped, so it is never read as rich markup.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "fmt",
    "make_console",
    "print_ranking",
    "print_method_table",
    "print_correlation_table",
    "print_best_sources",
    "print_rows",
    "WIDE",
]

#: terminal width from which the free-text columns stay inside the table
WIDE = 120


def fmt(x: Any, se: Any = None, digits: int = 3) -> str:
    """``0.123 ± 0.004``; ``n/a`` for None or non-finite values."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    s = f"{float(x):.{digits}f}"
    if se is not None and isinstance(se, (int, float)) and math.isfinite(se):
        s += f" ± {float(se):.{digits}f}"
    return s


def make_console(console: Any = None) -> Any:
    from rich.console import Console

    return console if console is not None else Console()


def _printable(text: str) -> str:
    """Control and format characters (ANSI escapes, bidi overrides, NUL) shown as ``\\xNN``
    / ``\\uNNNN`` instead of acting on the terminal."""
    return "".join(
        ch
        if unicodedata.category(ch) not in ("Cc", "Cf") or ch == "\t"
        else (f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}")
        for ch in text
    )


def _esc(text: Any) -> str:
    """Text from files, safe for a rich console: printable, and never read as markup."""
    from rich.markup import escape

    return escape(_printable(str(text)))


def _table(title: str, columns: Sequence[str], right: Iterable[str] = ()) -> Any:
    from rich.table import Table

    t = Table(title=_esc(title), title_justify="left")
    right = set(right)
    for col in columns:
        t.add_column(col, justify="right" if col in right else "left", overflow="fold")
    return t


def print_rows(
    title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], console: Any = None, right: Iterable[str] = ()
) -> None:
    """A plain table of strings (escaped)."""
    console = make_console(console)
    t = _table(title, columns, right)
    for row in rows:
        t.add_row(*(_esc(v) for v in row))
    console.print(t)


def print_ranking(ranking: Any, console: Any = None) -> None:
    """The ranked table for one target.  On terminals narrower than :data:`WIDE` the coupling
    and sample-count columns are dropped, values print as ``0.457±0.060`` and the notes move
    below the table, so every cell fits on one line at 80 columns."""
    console = make_console(console)
    wide = console.width >= WIDE
    sep = " ± " if wide else "±"
    cols = ["rank", "source", "fisher", "activation-only", "error-only"]
    cols += ["coupling", "n", "note"] if wide else []
    order = "" if ranking.by == "fisher" else f" — ranked by {ranking.by}-only"
    t = _table(f"sources for target '{ranking.target}'{order} — regime: {ranking.regime}", cols, right=("rank", "n"))
    notes = []
    for i, r in enumerate(ranking.rows, 1):
        cells = [
            str(i),
            _esc(r.source),
            *(
                fmt(v, s).replace(" ± ", sep)
                for v, s in ((r.fisher, r.fisher_se), (r.activation, r.activation_se), (r.error, r.error_se))
            ),
        ]
        if wide:
            cells += [fmt(r.coupling, r.coupling_se), str(r.n_source), _esc(r.note)]
        elif r.note:
            notes.append(f"  {i}. {_esc(r.note)}")
        t.add_row(*cells)
    console.print(t)
    for line in notes:
        console.print(line)
    for name, why in dict(getattr(ranking, "skipped", {})).items():
        console.print(f"  not ranked: {_esc(name)} ({_esc(why)})")
    console.print(f"  {_esc(ranking.explanation)}")


def print_method_table(head: Mapping[str, Mapping[str, Any]], cannot: Mapping[str, str], console: Any = None) -> None:
    """Selection metrics per method (top-1, oracle-normalised transfer, regret, Spearman)."""
    console = make_console(console)
    t = _table(
        "methods",
        ["method", "top1", "oracle", "regret", "max regret", "spearman"],
        right=("top1", "oracle", "regret", "max regret", "spearman"),
    )
    extra = []
    for method, h in head.items():
        if "error" in h:
            extra.append(f"  {_esc(method)}: error: {_esc(h['error'])}")
            continue
        t.add_row(
            _esc(method),
            fmt(h["top1"]),
            fmt(h["oracle_normalised"]),
            fmt(h["regret_mean"]),
            fmt(h["regret_max"]),
            fmt(h["spearman"]),
        )
    console.print(t)
    for method, why in cannot.items():
        extra.append(f"  {_esc(method)}: cannot run: {_esc(why)}")
    for line in extra:
        console.print(line)


def print_correlation_table(
    tests: Mapping[str, Mapping[str, Any]], cannot: Mapping[str, str], console: Any = None
) -> None:
    """Pooled Spearman, its p-values and the per-target mean, per method."""
    console = make_console(console)
    t = _table(
        "correlation with transfer",
        ["method", "rho", "p", "p_perm", "per-target rho"],
        right=("rho", "p", "p_perm", "per-target rho"),
    )
    for m, tst in tests.items():
        pl, pt = tst["pooled"], tst["per_target"]
        p = "n/a" if not math.isfinite(pl["p"]) else f"{pl['p']:.3g}"
        pp = "n/a" if not math.isfinite(pl["p_perm"]) else f"{pl['p_perm']:.3g}"
        t.add_row(_esc(m), fmt(pl["rho"]), p, pp, fmt(pt["mean"]))
    console.print(t)
    for m, why in cannot.items():
        console.print(f"  {_esc(m)}: cannot run: {_esc(why)}")


def print_best_sources(rankings: Sequence[Any], console: Any = None) -> None:
    """One line per target: the best source by fisher and the picks of the marginals."""
    console = make_console(console)
    rows = []
    for rk in rankings:
        if not rk.rows:
            continue
        best = rk.rows[0]
        act = max(rk.rows, key=lambda r: r.activation if math.isfinite(r.activation) else -math.inf).source
        err = max(rk.rows, key=lambda r: r.error if math.isfinite(r.error) else -math.inf).source
        rows.append((rk.target, best.source, fmt(best.fisher), act, err, rk.regime))
    print_rows(
        "best source per target",
        ["target", "best (fisher)", "fisher", "activation-only's pick", "error-only's pick", "regime"],
        rows,
        console,
        right=("fisher",),
    )
