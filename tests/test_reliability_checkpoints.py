"""Checkpoint paths and files of `sketch --checkpoint-every/--resume`: one line, exit 2, never a
hang, and before the model loads wherever the file alone shows the problem (the model named
in those tests does not exist, so an error found after loading would say so instead).  A
resume with any flag that changes the sums is refused naming the flags that must match."""

import os
import shutil
import threading

import pytest
import torch

from test_resume import _argv, _one_thread, setup  # noqa: F401  (fixtures of the resume tests)
from updatescope.cli import main
from updatescope.errors import InputError
from updatescope.pipeline.checkpoint import check_checkpoint_path, checkpoint_path, save_checkpoint
from updatescope.sketch.fishersketch import FisherSketch


def _main_within(argv, seconds=60):
    """main(argv), failing the test instead of hanging (the call runs in a daemon thread)."""
    result = []
    t = threading.Thread(target=lambda: result.append(main(argv)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"hung: {argv}"
    return result[0]


def _one_line(capsys, *needles):
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("updatescope: error:"), cap.err
    for n in needles:
        assert n in lines[0], cap.err
    return lines[0]


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def _no_model_argv(tmp_path, out, *extra):
    data = tmp_path / "d.txt"
    if not data.exists():
        data.write_text("alpha beta gamma\n")
    model = str(tmp_path / "no-such-model")
    return ["sketch", "--model", model, "--data", str(data), "--out", str(out), "--quiet", *extra]


def test_check_checkpoint_path_kinds(tmp_path):
    check_checkpoint_path(tmp_path / "absent.ckpt")  # absent: fine (a new run writes it)
    regular = tmp_path / "r.ckpt"
    regular.write_bytes(b"anything")
    check_checkpoint_path(regular)  # a regular file is overwritten by a run without --resume
    fifo = tmp_path / "f.ckpt"
    os.mkfifo(fifo)
    folder = tmp_path / "d.ckpt"
    folder.mkdir()
    device = tmp_path / "null.ckpt"
    device.symlink_to(os.devnull)
    for bad in (fifo, folder, device):
        for resume in (False, True):
            with pytest.raises(InputError, match="not a regular file"):
                check_checkpoint_path(bad, resume=resume)
    with pytest.raises(InputError, match="not a readable sketch checkpoint"):
        check_checkpoint_path(regular, resume=True)


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
@pytest.mark.parametrize("flags", [["--resume"], ["--checkpoint-every", "4"], ["--checkpoint-every", "4", "--resume"]])
def test_checkpoint_path_that_is_not_a_file(tmp_path, capsys, kind, flags):
    out = tmp_path / "o.safetensors"
    ckpt = checkpoint_path(out)
    if kind == "fifo":
        os.mkfifo(ckpt)
    elif kind == "folder":
        ckpt.mkdir()
    else:
        ckpt.symlink_to(os.devnull)
    argv = _no_model_argv(tmp_path, out, *flags)
    before = _files(tmp_path)
    assert _main_within(argv) == 2  # a FIFO is never opened: no hang
    _one_line(capsys, str(ckpt), "not a regular file")
    assert _files(tmp_path) == before


def _valid_checkpoint(path):
    sk = FisherSketch(6, 4, 64, 0).update(
        torch.randn(5, 6, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    )
    save_checkpoint(path, sk, 1, "k" * 64)
    return path.read_bytes()


def _damaged(kind, good):
    from safetensors.torch import save

    if kind == "empty":
        return b""
    if kind == "random bytes":
        return bytes(range(256)) * 8
    if kind == "text":
        return b'{"not": "a checkpoint"}\n'
    if kind == "truncated header":
        return good[:20]
    if kind == "another format":  # a valid safetensors file that is not a checkpoint
        return save({"x": torch.zeros(3)}, metadata={"format": "something-else"})
    if kind == "no run key":
        return save(
            {k: torch.zeros(2) for k in ("sums", "diag", "counts")},
            metadata={"format": "updatescope-sketch-checkpoint"},
        )
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["empty", "random bytes", "text", "truncated header", "another format", "no run key"])
def test_damaged_checkpoint_refused_before_the_model(tmp_path, capsys, kind):
    out = tmp_path / "o.safetensors"
    ckpt = checkpoint_path(out)
    ckpt.write_bytes(_damaged(kind, _valid_checkpoint(tmp_path / "good.bin")))
    (tmp_path / "good.bin").unlink()
    argv = _no_model_argv(tmp_path, out, "--checkpoint-every", "4", "--resume")
    before = _files(tmp_path)
    assert main(argv) == 2
    _one_line(capsys, str(ckpt), "checkpoint")
    assert _files(tmp_path) == before  # the checkpoint is kept, nothing else written


def _interrupted_checkpoint(model, data, tmp_path, monkeypatch):
    """A checkpoint of a run killed after its first save (the default flags of _argv)."""
    import updatescope.pipeline.checkpoint as checkpoint

    real = checkpoint.save_checkpoint

    def save_then_die(path, sk, nxt, key):
        real(path, sk, nxt, key)
        raise KeyboardInterrupt

    out = tmp_path / "first.safetensors"
    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    assert main(_argv(model, data, out, "--checkpoint-every", "16")) == 130
    monkeypatch.setattr(checkpoint, "save_checkpoint", real)
    assert not out.exists()
    return checkpoint_path(out).read_bytes()


def test_truncated_checkpoint_after_load_is_one_line(setup, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Bytes cut from the tensors' end: the header may still parse, and the load after the model
    has loaded refuses it in one line (no traceback, no output)."""
    model, data = setup
    good = _interrupted_checkpoint(model, data, tmp_path, monkeypatch)
    capsys.readouterr()
    for cut in (1, 64, len(good) // 2):
        out = tmp_path / f"cut{cut}.safetensors"
        checkpoint_path(out).write_bytes(good[:-cut])
        assert main(_argv(model, data, out, "--checkpoint-every", "16", "--resume")) == 2
        _one_line(capsys, str(checkpoint_path(out)), "checkpoint")
        assert not out.exists()


CHANGED = {
    "--dtype": ["--dtype", "bfloat16"],
    "--max-tokens": ["--max-tokens", "300"],
    "--sketch-dim": ["--sketch-dim", "128"],
    "--seed": ["--seed", "1"],
    "--act-map": ["--act-map", "srht"],
    "--token-budget": ["--token-budget", "128"],
}


@pytest.fixture(scope="module")
def interrupted(setup, tmp_path_factory):  # noqa: F811
    """One checkpoint of an interrupted run, shared by the flag cases."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("interrupted")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, data = setup
        return _interrupted_checkpoint(model, data, root, mp)
    finally:
        mp.undo()
        torch.set_num_threads(threads)


@pytest.mark.parametrize("flag", sorted(CHANGED))
def test_resume_with_another_flag_is_refused_naming_it(setup, interrupted, tmp_path, capsys, flag):  # noqa: F811
    model, data = setup
    out = tmp_path / "o.safetensors"
    checkpoint_path(out).write_bytes(interrupted)
    argv = _argv(model, data, out, "--checkpoint-every", "16", "--resume")
    argv += CHANGED[flag]  # argparse: the last value given wins
    assert main(argv) == 2
    line = _one_line(capsys, "different run", flag)
    assert "--resume" in line
    assert not out.exists() and checkpoint_path(out).read_bytes() == interrupted  # kept for a correct resume
    assert _files(tmp_path) == [checkpoint_path(out).name]


def test_resume_with_the_same_flags_still_works(setup, interrupted, tmp_path, capsys):  # noqa: F811
    model, data = setup
    out, plain = tmp_path / "o.safetensors", tmp_path / "plain.safetensors"
    checkpoint_path(out).write_bytes(interrupted)
    assert main(_argv(model, data, out, "--checkpoint-every", "16", "--resume")) == 0
    assert main(_argv(model, data, plain)) == 0
    capsys.readouterr()
    assert out.read_bytes() == plain.read_bytes() and not checkpoint_path(out).exists()
    shutil.rmtree(tmp_path, ignore_errors=True)
