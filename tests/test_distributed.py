"""Sharded sketching: deterministic shards, an exact all-reduce, and `updatescope sketch`
under torchrun (2 gloo ranks on CPU) giving the same file bytes as one process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from updatescope.distributed import all_reduce_sketch, fold, gather_slots, resolve_device, shard_range
from updatescope.errors import InputError
from updatescope.signatures.io import load_signature
from updatescope.sketch.fishersketch import FisherSketch

ROOT = Path(__file__).resolve().parents[1]


def test_shard_range_partitions_in_order():
    for n in (0, 1, 5, 16, 17):
        for world in (1, 2, 3, 7):
            parts = [shard_range(n, r, world) for r in range(world)]
            assert [i for p in parts for i in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(InputError):
        shard_range(4, 2, 2)


def test_fold_of_slots_equals_one_stream():
    g = torch.Generator().manual_seed(0)
    a, e = torch.randn(23, 6, generator=g, dtype=torch.float64), torch.randn(23, 4, generator=g, dtype=torch.float64)
    like = FisherSketch(6, 4, 64, 3)
    cuts = [0, 5, 5, 12, 23]  # odd-sized, and an empty slot
    slots = {i: FisherSketch(6, 4, 64, 3).update(a[cuts[i] : cuts[i + 1]], e[cuts[i] : cuts[i + 1]]) for i in range(4)}
    got = fold(gather_slots(slots, 4, like), like=like)  # no process group: a local fold
    whole = FisherSketch(6, 4, 64, 3).update(a, e)
    assert torch.equal(got._counts, whole._counts)
    torch.testing.assert_close(got._sums, whole._sums, rtol=1e-12, atol=1e-12)
    with pytest.raises(InputError):
        gather_slots({4: slots[0]}, 4, like)
    same = all_reduce_sketch(slots[0])  # no group: a copy, input untouched
    assert torch.equal(same._sums, slots[0]._sums) and same is not slots[0]


def test_device_flag_validation():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda")
    with pytest.raises(InputError, match="unknown device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no CUDA device"):
            resolve_device("cuda:0")


def test_cli_cuda_absent_one_line(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from updatescope.cli import main

    data = tmp_path / "d.txt"
    data.write_text("a b c\n")
    rc = main(
        [
            "sketch",
            "--model",
            str(tmp_path / "no-model"),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "o.safetensors"),
            "--device",
            "cuda",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "no CUDA device" in err and len(err.strip().splitlines()) == 1


def write_docs(path, n_docs, max_words, seed):
    """JSONL of ``n_docs`` random documents of 3..max_words words of the tiny test vocabulary."""
    from test_cli import WORDS

    g = torch.Generator().manual_seed(seed)
    docs = [
        " ".join(WORDS[int(i)] for i in torch.randint(0, len(WORDS), (int(n),), generator=g))
        for n in torch.randint(3, max_words, (n_docs,), generator=g)
    ]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


def _args(model, data, out, extra=()):
    return [
        "sketch",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(out),
        "--sketch-dim",
        "64",
        "--quiet",
        "--token-budget",
        "64",
        "--name",
        "corpus",
        *extra,
    ]


def _sketch_in_process(model, data, out, extra=()):
    from updatescope.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun rank runs (OMP_NUM_THREADS=1): the same GEMM kernels
    try:
        assert main(_args(model, data, out, extra)) == 0
    finally:
        torch.set_num_threads(threads)


def _torchrun(model, data, out, nproc, extra=()):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "updatescope",
        *_args(model, data, out, extra),
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_torchrun_two_ranks_equal_one_process(tmp_path):
    from test_cli import _save_tiny

    model = _save_tiny(tmp_path / "tiny", 0)
    data = write_docs(tmp_path / "docs.jsonl", 37, 40, seed=0)
    one, two = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    _sketch_in_process(model, data, one, ["--max-tokens", "500"])
    out = _torchrun(model, data, two, 2, ["--max-tokens", "500"])
    assert "on 2 ranks" in out
    s1, s2 = load_signature(one), load_signature(two)
    assert s1.count == s2.count == 500
    assert torch.equal(s1.counts, s2.counts)  # halves exact
    assert torch.equal(s1.sums, s2.sums) and torch.equal(s1.diag, s2.diag)
    assert one.read_bytes() == two.read_bytes()  # the same file, byte for byte
