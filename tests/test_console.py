"""Terminal tables: readable at 80 columns, and text from files is never read as markup."""

import pytest
from rich.console import Console

from updatescope.report.console import print_method_table, print_ranking
from updatescope.select.rank import Ranking, RankRow


def _ranking(name="code", note="error geometry limits it"):
    rows = tuple(
        RankRow(
            source=f"{name}-{i}",
            fisher=0.5 - 0.1 * i,
            activation=0.9,
            error=0.6,
            coupling=1.0,
            fisher_se=0.01,
            activation_se=0.01,
            error_se=0.02,
            coupling_se=0.05,
            n_source=1000,
            trusted=True,
            note=note,
        )
        for i in range(3)
    )
    return Ranking(target="prose", rows=rows, regime="separable", explanation="both marginals vary")


def _render(width, ranking):
    console = Console(width=width, record=True, color_system=None)
    print_ranking(ranking, console)
    return console.export_text()


def test_notes_stay_readable_at_80_columns():
    text = _render(80, _ranking())
    assert all(len(line) <= 80 for line in text.splitlines())
    assert text.count("error geometry limits it") == 3  # each note on one line, not wrapped word by word
    wide = _render(160, _ranking())
    assert wide.count("error geometry limits it") == 3


@pytest.mark.parametrize("hostile", ["[/bold]", "[red]x[/red]", "\x1b[31mred\x1b[0m", "[link=http://x]y[/link]"])
def test_names_from_files_are_not_markup(hostile):
    text = _render(160, _ranking(name=hostile, note=hostile))
    assert "\x1b" not in text
    if not hostile.startswith("\x1b"):
        assert hostile in text  # shown literally


def test_method_table_handles_missing_values():
    console = Console(width=80, record=True, color_system=None)
    head = {
        "fisher": {
            "top1": 0.5,
            "oracle_normalised": None,
            "regret_mean": float("nan"),
            "regret_max": 0.1,
            "spearman": 0.3,
        },
        "logme": {"error": "cannot [b]run[/b]"},
    }
    print_method_table(head, {"leep": "too few examples"}, console)
    text = console.export_text()
    assert "n/a" in text and "cannot [b]run[/b]" in text and "leep: cannot run: too few examples" in text
