"""``experiments.caching.stored_json``: a kept result reads back exactly, other inputs miss,
and a file that is not what it claims is refused with one line."""

import gzip
import json
import math
import os

import pytest

from updatescope.errors import InputError
from updatescope.experiments.caching import stored_json


def test_a_kept_result_reads_back_as_it_was_first_returned(tmp_path):
    calls = []

    def build():
        calls.append(1)
        return {"x": [0.1, 1 / 3, float("nan")], "t": ("a", "é\u2028")}

    first = stored_json(tmp_path, "pass", {"layer": 2, "scale": 0.25}, build)
    again = stored_json(tmp_path, "pass", {"scale": 0.25, "layer": 2}, build)  # key order does not matter
    assert len(calls) == 1 and len(list(tmp_path.iterdir())) == 1
    assert first["x"][:2] == [0.1, 1 / 3] and math.isnan(again["x"][2]) and again["t"] == ["a", "é\u2028"]
    assert json.dumps(first) == json.dumps(again)  # a resumed run records the same as the first
    # other parts name another file, computed afresh
    stored_json(tmp_path, "pass", {"layer": 3, "scale": 0.25}, build)
    assert len(calls) == 2 and len(list(tmp_path.iterdir())) == 2
    # no directory: nothing kept
    assert stored_json(None, "pass", {}, lambda: [1]) == [1]


def test_a_damaged_or_foreign_file_is_refused_and_kept(tmp_path):
    stored_json(tmp_path, "pass", {"a": 1}, lambda: [1])
    (path,) = tmp_path.iterdir()
    path.write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a readable stored result"):
        stored_json(tmp_path, "pass", {"a": 1}, lambda: [1])
    path.write_bytes(gzip.compress(json.dumps({"kind": "pass", "key_parts": {"a": 2}, "result": [2]}).encode()))
    with pytest.raises(InputError, match="not this run's"):
        stored_json(tmp_path, "pass", {"a": 1}, lambda: [1])
    assert path.read_bytes().startswith(b"\x1f\x8b")  # nothing overwritten
    path.unlink()
    path.mkdir()
    with pytest.raises(InputError, match="not a regular file"):
        stored_json(tmp_path, "pass", {"a": 1}, lambda: [1])


def test_an_interrupted_build_leaves_no_file(tmp_path):
    def build():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stored_json(tmp_path / "new", "pass", {"a": 1}, build)
    assert not (tmp_path / "new").exists() or not os.listdir(tmp_path / "new")
