"""User errors under torchrun (2 gloo ranks on CPU): every rank checks, one line in all, exit 2.

torchrun itself exits 1 whenever a rank exits non-zero and prints its own ``ChildFailedError``
traceback and failure table (``torch.distributed.launcher.api.launch_agent`` raises it for
any failed worker; no launcher option changes that).  What updatescope controls, and these
tests check: the ranks exit 2 (the table's root cause is ``exitcode  : 2``; a rank is at most
stopped by torchrun's SIGTERM after rank 0 has printed), stderr holds exactly one
``updatescope: error:`` line and it is the first line, and no output or temporary file is
left.  Errors found after the model loads on one rank only do not leave the other waiting
in a collective.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from test_cli import _save_tiny
    from test_distributed import write_docs

    root = tmp_path_factory.mktemp("torchrun")
    return _save_tiny(root / "tiny", 0), write_docs(root / "docs.jsonl", 12, 20, seed=0)


def _torchrun(cwd, argv, pythonpath=()):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([*map(str, pythonpath), str(ROOT / "src")]),
    }
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "UPDATESCOPE_DEBUG"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "updatescope"]
    return subprocess.run([*cmd, *map(str, argv)], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _one_line_exit_2(r, needle):
    """torchrun failed because the ranks exited 2, and updatescope said why in one line, first."""
    lines = r.stderr.splitlines()
    ours = [x for x in lines if x.startswith("updatescope:")]  # torchrun's table says "updatescope FAILED"
    assert len(ours) == 1 and needle in ours[0], r.stderr[-3000:]
    assert lines[0] == ours[0], r.stderr[-3000:]  # before torchrun's own report
    assert r.returncode == 1 and "ChildFailedError" in r.stderr  # torchrun's, whatever the ranks exit with
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", r.stderr)
    assert codes and set(codes) <= {"2", "-15"} and "2" in codes, r.stderr[-3000:]  # 2, or stopped by torchrun
    root_cause = r.stderr.split("Root Cause", 1)[1]
    assert re.search(r"exitcode\s*:\s*2\b", root_cause), r.stderr[-3000:]
    assert "Traceback" not in r.stderr.split("updatescope: error:", 1)[0]  # no rank's traceback


def _no_output(folder, before):
    assert sorted(p.name for p in folder.iterdir()) == before


def _sketch(model, data, out, *extra):
    return ["sketch", "--model", model, "--data", data, "--out", out, "--sketch-dim", "64", "--quiet", *extra]


def test_bad_flag_missing_file_and_unwritable_out(files, tmp_path):
    model, data = files
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (_sketch(model, data, "o.safetensors", "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
        (_sketch(model, tmp_path / "missing.jsonl", "o.safetensors"), "not found"),
        (_sketch(model, data, "afile/o.safetensors"), "is a file, not a folder"),
    ]
    for argv, needle in cases:
        r = _torchrun(tmp_path, argv)
        _one_line_exit_2(r, needle)
        assert not r.stdout.strip()
        _no_output(tmp_path, before)


def test_error_after_load_on_one_rank_does_not_hang(files, tmp_path):
    """Rank 1 fails after the model has loaded while rank 0 goes on to the all-reduce: both
    leave at once (one agreement collective), rank 0 prints rank 1's line, nothing is written."""
    model, data = files
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    import updatescope.pipeline.head as head\n"
        "    from updatescope.errors import InputError\n"
        "    def refuse(*a, **k):\n"
        "        raise InputError('refused on rank 1 only')\n"
        "    head.check_memory = refuse\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    r = _torchrun(work, _sketch(model, data, "o.safetensors", "--token-budget", "64"), pythonpath=[hook])
    _one_line_exit_2(r, "refused on rank 1 only")
    _no_output(work, [])


@pytest.mark.parametrize("rank", [0, 1])
def test_without_a_launcher_store_rank_0_speaks(tmp_path, capsys, monkeypatch, rank):
    """RANK/WORLD_SIZE set by another launcher (no torchrun store to agree through): rank 0
    prints the line, the others print nothing, every rank exits 2 (in-process, no group)."""
    from updatescope.cli import main

    for k in ("TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", str(rank))
    missing = str(tmp_path / "missing.jsonl")
    runs = [
        (["sketch", "--model", "m", "--data", missing, "--out", str(tmp_path / "o.safetensors")], "not found"),
        (
            ["select", "--model", "m", "--data", missing, "--target", missing, "--top", "1", "--out", "t.jsonl"],
            "not found",
        ),
    ]
    for argv, needle in runs:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [] if rank else (len(err) == 1 and err[0].startswith("updatescope: error:") and needle in err[0])
    with pytest.raises(SystemExit) as info:
        main([*runs[0][0], "--no-such-flag"])
    assert info.value.code == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert not cap.out and (lines == [] if rank else lines == [lines[0]] and "--no-such-flag" in lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
