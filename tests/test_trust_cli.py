"""The one-line promise through ``main(argv)``: every input a user can get wrong is refused
with exit 2 and one line on stderr, no traceback, no output file (nor a temporary one), and
nothing is silently changed.  One test per class of input:

  * inputs that are not regular finite files (FIFO, device, over the size cap, unreadable,
    the same file twice by path, symlink or hard link);
  * text the JSON reader or the tokenizer cannot take (lone surrogates, deep nesting,
    over-long integers), refused before the model loads;
  * output paths (an input, a file as parent, a read-only folder, a device/FIFO, demo --out FILE);
  * flags that would change results (--token-budget only batches; runs that cannot fit).
"""

import os

import pytest
import torch

import updatescope.inputs as inputs
from test_cli import corpora, models  # noqa: F401  (fixtures)
from updatescope.cli import main
from updatescope.signatures.io import load_signature, save_signature
from updatescope.sketch.fishersketch import FisherSketch


def _refused(capsys, *argv, code=2):
    """Run ``main``; assert one-line refusal with ``code``; return the stderr line."""
    rc = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert rc == code, err
    assert err.startswith("updatescope: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def _no_output(folder, *names):
    for n in names:
        assert not (folder / n).exists(), n
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]  # no half-written temp file


def _sig_file(path, seed=0):
    g = torch.Generator().manual_seed(seed)
    a, e = torch.randn(20, 8, generator=g, dtype=torch.float64), torch.randn(20, 5, generator=g, dtype=torch.float64)
    save_signature(FisherSketch(8, 5, 64, 0).update(a, e).signature(name=path.stem), path)
    return path


@pytest.fixture
def deny_read(monkeypatch):
    """Make ``path`` unreadable: mode 000, and (as root, who reads through any mode) an
    ``os.access`` that says so, as the kernel would for anyone else."""

    def deny(path):
        path.chmod(0)
        if os.geteuid() == 0:
            real = os.access
            monkeypatch.setattr(
                os,
                "access",
                lambda p, mode, *a, **k: False if os.fspath(p) == os.fspath(path) else real(p, mode, *a, **k),
            )
        return path

    yield deny


# ---------------------------------------------------------------- inputs that are not regular finite files
@pytest.mark.parametrize(
    "kind", ["fifo", "device", "too-big", "unreadable", "fifo-table", "fifo-select", "fifo-prompts"]
)
def test_non_regular_or_unbounded_inputs_are_refused(
    kind,
    models,
    corpora,
    tmp_path,
    capsys,
    monkeypatch,  # noqa: F811
    deny_read,
):
    out = tmp_path / "o.safetensors"
    extra: list = []
    if kind.startswith("fifo"):
        data = tmp_path / ("pipe.jsonl" if kind == "fifo-table" else "pipe.txt")
        os.mkfifo(data)  # opening it for reading would block forever: it must never be opened
        extra = ["--text-column", "text"] if kind == "fifo-table" else []
        want = "not a regular file"
    elif kind == "device":
        data, want = "/dev/zero", "not a regular file"
    elif kind == "too-big":
        data = corpora["code"]
        monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 100)
        want = "above the limit of 100"
    else:
        data = tmp_path / "locked.txt"
        data.write_text("the a of\n")
        data, want = deny_read(data), "permission denied"
    if kind == "fifo-select":
        target = _sig_file(tmp_path / "t.safetensors")
        err = _refused(
            capsys,
            "select",
            "--model",
            tmp_path / "no-model",
            "--data",
            data,
            "--target",
            target,
            "--top",
            1,
            "--out",
            tmp_path / "s.jsonl",
            "--quiet",
        )
    elif kind == "fifo-prompts":
        err = _refused(
            capsys,
            "steer",
            "apply",
            "--model",
            tmp_path / "no-model",
            "--vector",
            tmp_path / "v.safetensors",
            "--scale",
            1,
            "--data",
            data,
        )
    else:
        # the model path does not exist: the data must be refused before the model is looked at
        err = _refused(
            capsys,
            "sketch",
            "--model",
            tmp_path / "no-model",
            "--data",
            data,
            "--out",
            out,
            "--quiet",
            "--sketch-dim",
            64,
            *extra,
        )
    assert want in err and "no-model" not in err
    _no_output(tmp_path, "o.safetensors", "s.jsonl")


@pytest.fixture
def unreadable_data(tmp_path, deny_read):
    p = tmp_path / "locked.txt"
    p.write_text("the a of to\n")
    return deny_read(p)


def test_unreadable_inputs_say_permission_denied(unreadable_data, tmp_path, capsys, deny_read):
    err = _refused(
        capsys,
        "sketch",
        "--model",
        tmp_path / "no-model",
        "--data",
        unreadable_data,
        "--out",
        tmp_path / "o.safetensors",
        "--quiet",
    )
    assert "permission denied" in err
    sig = deny_read(_sig_file(tmp_path / "s.safetensors"))
    for argv in (("inspect", sig), ("rank", "--target", _sig_file(tmp_path / "t.safetensors"), sig)):
        err = _refused(capsys, *argv)
        assert "permission denied" in err and "corrupt" not in err


@pytest.mark.parametrize("how", ["same-path", "symlink", "hardlink", "dot-path"])
def test_duplicated_inputs_are_refused_naming_both(how, corpora, tmp_path, capsys):  # noqa: F811
    first = corpora["code"]
    second = {
        "same-path": first,
        "symlink": tmp_path / "alias.txt",
        "hardlink": tmp_path / "hard.txt",
        "dot-path": tmp_path / "." / first.name,
    }[how]
    if how == "symlink":
        second.symlink_to(first)
    elif how == "hardlink":
        os.link(first, second)
    for extra in ([], ["--text-column", "text"]):  # text reader and table reader share the check
        data = [first, second] if not extra else [corpora["code2"], corpora["code2"]]
        err = _refused(
            capsys,
            "sketch",
            "--model",
            tmp_path / "no-model",
            "--data",
            *data,
            "--out",
            tmp_path / "o.safetensors",
            "--quiet",
            *extra,
        )
        assert "same file" in err and "counted twice" in err
        assert str(data[0]) in err and str(data[1]) in err or how == "same-path"
    _no_output(tmp_path, "o.safetensors")


# ---------------------------------------------------------------- text the JSON reader or the tokenizer cannot take
@pytest.mark.parametrize(
    "case", ["surrogate", "surrogate-table", "surrogate-messages", "deep", "deep-table", "huge-int", "huge-int-table"]
)
def test_hostile_json_is_refused_before_the_model_loads(case, tmp_path, capsys):
    path = tmp_path / ("data.json" if case.endswith("table") else "data.jsonl")
    extra = ["--text-column", "text"] if case.endswith("table") else []
    if case.startswith("surrogate"):
        line = '{"text": "ok \\ud800 here"}'
        if case == "surrogate-messages":
            line = '{"m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\\udfff"}]}'
            extra = ["--messages-column", "m"]
        want = "lone surrogate"
    elif case.startswith("deep"):
        line, want = '{"text": "x", "n": ' + "[" * 200_000 + "]" * 200_000 + "}", "nested too deeply"
    else:
        line, want = '{"text": "x", "n": ' + "9" * 5000 + "}", "cannot be read"
    path.write_text(("[" + line + "]") if path.suffix == ".json" and not case.startswith("deep") else line + "\n")
    # a missing model: the refusal must come from reading the data, before any model is loaded
    err = _refused(
        capsys,
        "sketch",
        "--model",
        tmp_path / "no-model",
        "--data",
        path,
        "--out",
        tmp_path / "o.safetensors",
        "--quiet",
        *extra,
    )
    assert want in err and str(path) in err
    _no_output(tmp_path, "o.safetensors")


# ---------------------------------------------------------------- output paths
@pytest.mark.parametrize(
    "case",
    [
        "sketch",
        "select",
        "merge",
        "steer",
        "index",
        "domains-parent-file",
        "parent-is-file",
        "read-only",
        "fifo-out",
        "demo-file",
        "demo-under-file",
    ],
)
def test_bad_output_paths_are_refused_before_work(case, corpora, tmp_path, capsys, monkeypatch):  # noqa: F811
    data = corpora["code"]
    before = data.read_bytes()
    sig_a, sig_b = _sig_file(tmp_path / "a.safetensors"), _sig_file(tmp_path / "b.safetensors", 1)
    no_model = tmp_path / "no-model"
    sk = ["sketch", "--model", no_model, "--quiet", "--data", data, "--out"]
    if case == "sketch":
        argv, want = [*sk, tmp_path / "." / data.name], "is also an input"
    elif case == "select":
        argv, want = (
            ["select", "--model", no_model, "--data", data, "--target", sig_a, "--top", 1, "--out", data],
            "is also an input",
        )
    elif case == "merge":
        argv, want = ["merge", sig_a, sig_b, "--out", sig_b], "is also an input"
    elif case == "steer":
        pairs = tmp_path / "pairs.jsonl"
        pairs.write_text('{"positive": "the a", "negative": "of to"}\n')
        argv, want = (
            ["steer", "build", "--model", no_model, "--pairs", pairs, "--layer", 0, "--out", pairs],
            "is also an input",
        )
    elif case == "index":
        argv, want = ["index", "build", tmp_path, "--append", "--out", tmp_path], "is also an input"
    elif case == "domains-parent-file":
        argv, want = ["domains", "--export", "python", "--out", data / "x.jsonl"], "is a file"
    elif case == "parent-is-file":
        argv, want = [*sk, data / "o.safetensors"], "is a file"
    elif case == "read-only":
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        if os.geteuid() == 0:  # root writes through any mode: report the folder as the kernel would to others
            real = os.access
            monkeypatch.setattr(
                os, "access", lambda p, m, *a, **k: False if os.fspath(p) == os.fspath(ro) else real(p, m, *a, **k)
            )
        argv, want = [*sk, ro / "o.safetensors"], "not writable"
    elif case == "fifo-out":
        os.mkfifo(tmp_path / "out.pipe")
        argv, want = [*sk, tmp_path / "out.pipe"], "not a regular file"
    elif case == "demo-file":
        argv, want = ["demo", "--synthetic", "--quiet", "--out", data], "is a file"
    else:
        argv, want = ["demo", "--synthetic", "--quiet", "--out", data / "rep"], "is a file"
    err = _refused(capsys, *argv)
    assert want in err
    assert data.read_bytes() == before  # the input is untouched
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp or probe file
    assert load_signature(sig_b).count == 20


# ---------------------------------------------------------------- flags that would change results
def test_token_budget_only_batches(models, corpora, tmp_path, capsys):  # noqa: F811
    """A budget far below the document length (8 tokens for 40-token documents) gives the same
    sums as the default: it groups chunks into passes and never cuts the documents."""
    sigs = {}
    for budget in (8, 1024):
        out = tmp_path / f"b{budget}.safetensors"
        rc = main(
            [
                str(a)
                for a in (
                    "sketch",
                    "--model",
                    models[0],
                    "--data",
                    corpora["code"],
                    "--out",
                    out,
                    "--sketch-dim",
                    64,
                    "--quiet",
                    "--token-budget",
                    budget,
                    "--name",
                    "c",
                )
            ]
        )
        assert rc == 0, capsys.readouterr().err
        sigs[budget] = load_signature(out)
    assert sigs[8].count == sigs[1024].count == 30 * 39
    torch.testing.assert_close(sigs[8].sums, sigs[1024].sums, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(sigs[8].diag, sigs[1024].diag, rtol=1e-5, atol=1e-8)
    # and a budget that is no budget is refused by the library as well as the CLI
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.errors import InputError

    with pytest.raises(InputError, match="token_budget must be a positive integer"):
        next(capture_causal_lm(torch.nn.Linear(2, 2), [[1, 2, 3]], token_budget=0, progress=False))
    err = _refused(
        capsys,
        "sketch",
        "--model",
        models[0],
        "--data",
        corpora["code"],
        "--out",
        tmp_path / "z.safetensors",
        "--quiet",
        "--token-budget",
        -5,
    )
    assert "--token-budget" in err and "-5" in err


def test_run_that_cannot_fit_is_refused_with_the_number(models, corpora, tmp_path, capsys, monkeypatch):  # noqa: F811
    import updatescope.devices as devices

    monkeypatch.setattr(devices, "available_memory", lambda device: 1 << 20)  # 1 MiB free
    err = _refused(
        capsys,
        "sketch",
        "--model",
        models[0],
        "--data",
        corpora["code"],
        "--out",
        tmp_path / "o.safetensors",
        "--quiet",
        "--sketch-dim",
        65536,
        "--act-map",
        "dense",
    )
    assert "needs at least" in err and "GiB" in err and "sketch_dim 65536" in err
    _no_output(tmp_path, "o.safetensors")
    # the estimate is a bound the real run respects: with the true free memory a small run proceeds
    monkeypatch.undo()
    assert (
        main(
            [
                str(a)
                for a in (
                    "sketch",
                    "--model",
                    models[0],
                    "--data",
                    corpora["code"],
                    "--out",
                    tmp_path / "o.safetensors",
                    "--quiet",
                    "--sketch-dim",
                    64,
                )
            ]
        )
        == 0
    )
