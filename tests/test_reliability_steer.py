"""``steer`` inputs keep the one-line promise (through ``main(argv)``, and a subprocess for
real command-line bytes): pairs and prompt files go through the data readers' checks
(hostile JSON, lone surrogates, bytes that are not UTF-8, paths that are not regular files),
a ``--prompt`` that is not UTF-8 is refused, and a ``--scale`` that overflows the residual
stream ends in one line naming the scale and layer instead of an empty continuation."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import _save_tiny
from updatescope.cli import main

NO_MODEL = "no-such-model-folder"  # every refusal below comes before the model is looked up


def _bad(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("updatescope: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    assert NO_MODEL not in err, err  # refused before the model
    return err


def _hostile(tmp_path):
    """name -> (path, words the refusal must contain)."""
    cases = {}

    def write(name, data):
        p = tmp_path / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        return p

    cases["deep"] = (write("deep.jsonl", "[" * 100_000 + "]" * 100_000 + "\n"), "nested too deeply")
    cases["digits"] = (write("digits.jsonl", '{"prompt": "x", "label": ' + "9" * 5000 + "}\n"), "cannot be read")
    cases["surrogate"] = (write("sur.jsonl", '{"positive": "a\\ud800", "negative": "b"}\n'), "lone surrogate")
    cases["prompt surrogate"] = (write("sur2.jsonl", '{"prompt": "\\udfff", "label": 1}\n'), "lone surrogate")
    cases["latin-1"] = (write("latin.jsonl", b'{"positive": "caf\xe9", "negative": "b"}\n'), "not UTF-8")
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    cases["folder"] = (folder, "folder")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    cases["fifo"] = (fifo, "not a regular file")
    cases["device"] = (Path("/dev/null"), "not a regular file")
    return cases


def test_pairs_file_classes_are_one_line(tmp_path, capsys):
    from updatescope.errors import InputError
    from updatescope.steering.pairs import load_pairs

    for name, (path, words) in _hostile(tmp_path).items():
        err = _bad(
            capsys, "steer", "build", "--model", NO_MODEL, "--pairs", path, "--layer", "0", "--out", "v.safetensors"
        )
        assert words in err and str(path) in err, (name, err)
        with pytest.raises(InputError, match=words):  # the library reader too (no CLI pre-check)
            load_pairs(path)
    assert not Path("v.safetensors").exists()


def test_prompt_file_classes_are_one_line(tmp_path, capsys):
    for name, (path, _words) in _hostile(tmp_path).items():
        if name == "digits":
            path.write_text('{"prompt": ' + "9" * 5000 + "}\n")
        err = _bad(
            capsys, "steer", "apply", "--model", NO_MODEL, "--vector", "v.safetensors", "--scale", "1", "--data", path
        )
        assert str(path) in err, (name, err)


def test_prompt_that_is_not_utf8(tmp_path, capsys):
    prompt = os.fsdecode(b"caf\xe9 au lait")  # what Python makes of these argv bytes (surrogateescape)
    err = _bad(
        capsys, "steer", "apply", "--model", NO_MODEL, "--vector", "v.safetensors", "--scale", "1", "--prompt", prompt
    )
    assert "--prompt is not valid UTF-8" in err and "0xe9" in err
    # the real command line: bytes in argv
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), *sys.path])}
    argv = [sys.executable.encode(), b"-m", b"updatescope", b"steer", b"apply", b"--model", NO_MODEL.encode()]
    argv += [b"--vector", b"v.safetensors", b"--scale", b"1", b"--prompt", b"caf\xe9"]
    proc = subprocess.run(argv, env=env, capture_output=True, timeout=300, cwd=tmp_path)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2 and err.count("\n") == 1 and "not valid UTF-8" in err, err


@pytest.mark.parametrize("scale", ["inf", "-inf", "nan", "1e400"])
def test_scale_that_is_not_finite_is_refused_before_the_model(capsys, scale):
    err = _bad(
        capsys, "steer", "apply", "--model", NO_MODEL, "--vector", "v.safetensors", f"--scale={scale}", "--prompt", "x"
    )
    assert "--scale" in err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model = _save_tiny(tmp_path_factory.mktemp("steer_tiny"), 0)
    d = tmp_path_factory.mktemp("steer_vec")
    pairs = d / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"positive": f"the a of {w}", "negative": f"the a to {w}"}) for w in "xyz12"))
    vec = d / "v.safetensors"
    assert (
        main(["steer", "build", "--model", str(model), "--pairs", str(pairs), "--layer", "0", "--out", str(vec)]) == 0
    )
    return model, vec


@pytest.mark.parametrize("scale", ["1e30", "-1e37", "1e300"])
def test_scale_that_overflows_stops_with_one_line(tiny, capsys, scale):
    model, vec = tiny
    capsys.readouterr()
    rc = main(
        ["steer", "apply", "--model", str(model), "--vector", str(vec), f"--scale={scale}", "--prompt", "the a of"]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and not out, (out, err)
    assert err.startswith("updatescope: error:") and err.count("\n") == 1, err
    assert f"{float(scale):g}" in err and "layer 0" in err and "overflows" in err


def test_large_finite_scale_still_generates(tiny, capsys):
    model, vec = tiny
    capsys.readouterr()
    rc = main(
        ["steer", "apply", "--model", str(model), "--vector", str(vec), "--scale", "1000", "--prompt", "the a of"]
    )
    out, err = capsys.readouterr()
    assert rc == 0 and not err, err
