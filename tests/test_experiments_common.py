"""Result-record helpers: portable benchmark configs, atomic JSON, environment record."""

import argparse
import json
import os

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic


def test_portable_config_drops_machine_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = tmp_path / "benchmarks" / "results" / "x.json"
    outside = tmp_path.parent / "elsewhere" / "y.json"
    args = argparse.Namespace(out=str(inside), peer=str(outside), threads=2, name="rel/path.json")
    cfg = portable_config(args)
    assert cfg == {
        "out": os.path.join("benchmarks", "results", "x.json"),
        "peer": "y.json",
        "threads": 2,
        "name": "rel/path.json",
    }


def test_portable_command_drops_machine_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    peer = tmp_path.parent / "scratch" / "PEER" / "bin" / "python"
    out = tmp_path / "benchmarks" / "results" / "r.json"
    cmd = portable_command("benchmarks/b.py", ["--peer-python", str(peer), "--out", str(out), "--threads", "2"])
    assert cmd == "python benchmarks/b.py --peer-python PEER/bin/python --out benchmarks/results/r.json --threads 2"
    assert str(tmp_path) not in cmd
    assert portable_command("b.py", ["--out", "/r.json"]) == "python b.py --out r.json"  # short paths: no root


def test_write_json_atomic_and_env(tmp_path):
    out = tmp_path / "deep" / "r.json"
    write_json_atomic({"a": 1, "env": env_info()}, out)
    rec = json.loads(out.read_text())
    assert rec["a"] == 1 and "torch" in rec["env"] and "git_dirty" in rec["env"]
    assert not list(out.parent.glob("*.tmp"))


def test_atomic_writes_get_the_usual_file_mode(tmp_path):
    from updatescope.records import write_text_atomic

    out = tmp_path / "r.txt"
    write_text_atomic("x", out)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert (out.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777)
    assert out.read_text() == "x" and not list(tmp_path.glob(".*.tmp"))
