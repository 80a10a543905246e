"""``--report DIR`` never overwrites what updatescope did not write: a non-empty folder
without the report marker is refused with one line before any work (``rank``, ``select``,
``index query``), while a folder that updatescope wrote a report into may be written again."""

import pytest
import torch

from updatescope.cli import main
from updatescope.report.html import REPORT_MARKER
from updatescope.signatures.io import save_signature
from updatescope.sketch.fishersketch import FisherSketch

pytest.importorskip("matplotlib")

PAGE = "<html>my own page</html>"


def _sig(path, seed):
    g = torch.Generator().manual_seed(seed)
    a, e = torch.randn(30, 8, generator=g, dtype=torch.float64), torch.randn(30, 5, generator=g, dtype=torch.float64)
    save_signature(FisherSketch(8, 5, 64, 0).update(a, e).signature(name=path.stem), path)
    return path


@pytest.fixture
def files(tmp_path):
    sigs = [_sig(tmp_path / f"s{i}.safetensors", i) for i in range(3)]
    bank = tmp_path / "bank"
    assert main(["index", "build", str(sigs[1]), str(sigs[2]), "--out", str(bank)]) == 0
    pool = tmp_path / "pool.txt"
    pool.write_text("the a of\nto and in\n")
    return sigs, bank, pool


def _commands(files, rep):
    sigs, bank, pool = files
    return {
        "rank": ["rank", "--target", sigs[0], sigs[1], sigs[2], "--report", rep],
        "index query": ["index", "query", bank, "--target", sigs[0], "--report", rep],
        "select": [
            "select",
            "--model",
            "smollm2",
            "--data",
            pool,
            "--target",
            sigs[0],
            "--top",
            "1",
            "--out",
            rep.parent / "top.jsonl",
            "--report",
            rep,
        ],
    }


@pytest.mark.parametrize("command", ["rank", "index query", "select"])
@pytest.mark.parametrize("foreign", ["index.html", "notes.txt"])
def test_foreign_folder_is_refused_before_any_work(tmp_path, files, capsys, command, foreign):
    rep = tmp_path / "site"
    rep.mkdir()
    (rep / foreign).write_text(PAGE)
    capsys.readouterr()
    rc = main([str(a) for a in _commands(files, rep)[command]])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("updatescope: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "not written by updatescope" in err and str(rep) in err and foreign in err
    assert sorted(p.name for p in rep.iterdir()) == [foreign] and (rep / foreign).read_text() == PAGE
    assert not (tmp_path / "top.jsonl").exists()  # select refused before its work (and its model)


@pytest.mark.parametrize("command", ["rank", "index query"])
def test_updatescope_report_folder_may_be_written_again(tmp_path, files, capsys, command):
    rep = tmp_path / "rep"
    argv = [str(a) for a in _commands(files, rep)[command]]
    assert main(argv) == 0  # a new folder
    assert (rep / REPORT_MARKER).is_file() and (rep / "index.html").is_file()
    (rep / "index.html").write_text("stale")
    assert main(argv) == 0  # ours: written again
    assert (rep / "index.html").read_text() != "stale"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*argv[:-1], str(empty)]) == 0  # an empty folder is fine too
    capsys.readouterr()


def test_write_report_itself_refuses_a_foreign_index(tmp_path):
    from updatescope.errors import UpdatescopeError
    from updatescope.report.html import write_report

    (tmp_path / "index.html").write_text(PAGE)
    with pytest.raises(UpdatescopeError, match="not written by updatescope"):
        write_report(tmp_path, title="t", meta={})
    assert (tmp_path / "index.html").read_text() == PAGE
