"""A signature path that is not a regular file (a FIFO) is refused in one line by every verb
that reads signatures, and never opened: opening a FIFO for reading blocks until a writer
comes, so each run is done in a thread and a hang fails the test instead of stalling it."""

import os
import threading

import pytest
import torch

import updatescope as us
from updatescope.cli import main


@pytest.fixture(scope="module")
def sigs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sigpaths")
    g = torch.Generator().manual_seed(0)
    out = {}
    for name in ("a", "b", "c"):
        a, e = torch.randn(40, 8, generator=g), torch.randn(40, 16, generator=g)
        out[name] = us.save_signature(
            us.FisherSketch(8, 16, sketch_dim=64).update(a, e).signature(), root / f"{name}.st"
        )
    os.mkfifo(root / "fifo.safetensors")
    out["fifo"] = root / "fifo.safetensors"
    return {k: str(v) for k, v in out.items()}


@pytest.mark.parametrize(
    "argv",
    [
        ["rank", "--target", "fifo", "a", "b"],
        ["rank", "--target", "a", "fifo", "b"],
        ["inspect", "fifo"],
        ["mix", "--target", "a", "fifo", "b"],
        ["plan", "--tasks", "a", "fifo", "c"],
    ],
)
def test_a_fifo_signature_is_refused_without_being_opened(sigs, argv, capsys):
    result = {}
    run = threading.Thread(target=lambda: result.update(rc=main([sigs.get(x, x) for x in argv])), daemon=True)
    run.start()
    run.join(60)
    assert not run.is_alive(), f"{argv[0]} blocked on a FIFO"
    err = capsys.readouterr().err
    assert result["rc"] == 2 and len(err.strip().splitlines()) == 1 and "regular file" in err, err
