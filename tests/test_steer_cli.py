"""`updatescope steer build|apply` through main([...]) on tiny saved Llama models."""

import json

import pytest

from test_cli import _save_tiny
from updatescope.cli import main
from updatescope.steering import load_vector


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return (_save_tiny(tmp_path_factory.mktemp("steer0"), 0), _save_tiny(tmp_path_factory.mktemp("steer1"), 1))


@pytest.fixture
def pairs(tmp_path):
    p = tmp_path / "pairs.jsonl"
    rows = [{"positive": f"the a of {w}", "negative": f"the a to {w}"} for w in ("x", "y", "z", "1", "2")]
    p.write_text("\n".join(json.dumps(r) for r in rows))
    return p


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _bad(capsys, *argv):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("updatescope: error:"), err
    return err


def test_build_then_apply(models, pairs, tmp_path, capsys):
    vec = tmp_path / "v.safetensors"
    rc, out, err = _run(capsys, "steer", "build", "--model", models[0], "--pairs", pairs, "--layer", "0", "--out", vec)
    assert rc == 0, err
    v = load_vector(vec)
    assert v.layers == (0,) and v.method == "caa" and v.dim == 16 and float(v.vectors.norm()) > 0
    rc, out, err = _run(
        capsys,
        "steer",
        "apply",
        "--model",
        models[0],
        "--vector",
        vec,
        "--scale",
        "0",
        "--prompt",
        "the a of",
        "--max-new-tokens",
        "3",
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)["results"]
    assert len(res) == 1 and res[0]["base"] == res[0]["steered"]  # scale 0 changes nothing
    data = tmp_path / "prompts.txt"
    data.write_text("the a of\nx y z\n")
    rc, out, err = _run(
        capsys,
        "steer",
        "apply",
        "--model",
        models[0],
        "--vector",
        vec,
        "--scale",
        "50",
        "--data",
        data,
        "--max-new-tokens",
        "4",
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)["results"]
    assert [r["prompt"] for r in res] == ["the a of", "x y z"]
    # a huge push changes at least one greedy continuation
    assert any(r["base"] != r["steered"] for r in res)


def test_bad_input_is_refused_before_loading(models, pairs, tmp_path, capsys):
    vec = tmp_path / "v.safetensors"
    assert _run(capsys, "steer", "build", "--model", models[0], "--pairs", pairs, "--layer", "0", "--out", vec)[0] == 0
    _bad(
        capsys,
        "steer",
        "build",
        "--model",
        models[0],
        "--pairs",
        tmp_path / "none.jsonl",
        "--layer",
        "0",
        "--out",
        tmp_path / "w.safetensors",
    )
    _bad(
        capsys,
        "steer",
        "build",
        "--model",
        models[0],
        "--pairs",
        pairs,
        "--layer",
        "5",
        "--out",
        tmp_path / "w.safetensors",
    )  # 1-layer model
    _bad(
        capsys,
        "steer",
        "build",
        "--model",
        models[0],
        "--pairs",
        pairs,
        "--layer",
        "0",
        "--out",
        tmp_path / "nodir" / "w.safetensors",
    )
    _bad(
        capsys,
        "steer",
        "build",
        "--model",
        tmp_path / "nomodel",
        "--pairs",
        pairs,
        "--layer",
        "0",
        "--out",
        tmp_path / "w.safetensors",
    )
    base = ["steer", "apply", "--model", models[0], "--vector", vec, "--prompt", "the a"]
    _bad(capsys, *base, "--scale", "nan")
    _bad(capsys, *base, "--scale", "1", "--max-new-tokens", "0")
    _bad(capsys, *base, "--scale", "1", "--positions", "middle")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a file")
    _bad(capsys, "steer", "apply", "--model", models[0], "--vector", junk, "--scale", "1", "--prompt", "the")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    _bad(capsys, "steer", "apply", "--model", models[0], "--vector", vec, "--scale", "1", "--data", empty)
    # a vector made on one model is refused on another
    err = _bad(capsys, "steer", "apply", "--model", models[1], "--vector", vec, "--scale", "1", "--prompt", "the")
    assert "made for model" in err
    with pytest.raises(SystemExit) as exc:  # --prompt and --data together: argparse says no
        main(
            [
                "steer",
                "apply",
                "--model",
                str(models[0]),
                "--vector",
                str(vec),
                "--scale",
                "1",
                "--prompt",
                "a",
                "--data",
                str(empty),
            ]
        )
    assert exc.value.code == 2
