"""Resumable sketching: a run stopped mid-way and resumed from its checkpoint writes the same
bytes as an uninterrupted run; checkpoints are refused for a different run."""

import json

import pytest
import torch

from updatescope.cli import main
from updatescope.errors import InputError
from updatescope.pipeline import SketchOptions, segment_ranges, sketch_corpus


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread (two threads on a busy 2-core machine spend
    their time synchronising); restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from test_cli import _save_tiny
    from test_distributed import write_docs

    root = tmp_path_factory.mktemp("resume")
    return _save_tiny(root / "tiny", 0), write_docs(root / "docs.jsonl", 70, 30, seed=1)


def _argv(model, data, out, *extra):
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
        "c",
        *extra,
    ]


def test_kill_and_resume_equals_uninterrupted(setup, tmp_path, monkeypatch, capsys):
    model, data = setup
    plain, full, resumed = (tmp_path / f"{n}.safetensors" for n in ("plain", "full", "resumed"))
    assert main(_argv(model, data, plain)) == 0
    assert main(_argv(model, data, full, "--checkpoint-every", "16")) == 0
    assert not (tmp_path / "full.safetensors.ckpt").exists()  # a finished run removes its checkpoint
    assert plain.read_bytes() == full.read_bytes()  # checkpointing does not change the result

    saved = []
    import updatescope.pipeline.checkpoint as checkpoint

    real = checkpoint.save_checkpoint

    def save_then_die(path, sk, nxt, key):
        real(path, sk, nxt, key)
        saved.append(nxt)
        if len(saved) == 2:
            raise KeyboardInterrupt  # killed right after the second checkpoint

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_then_die)
    assert main(_argv(model, data, resumed, "--checkpoint-every", "16")) == 130
    assert not resumed.exists() and (tmp_path / "resumed.safetensors.ckpt").exists()
    monkeypatch.setattr(checkpoint, "save_checkpoint", real)
    assert main(_argv(model, data, resumed, "--checkpoint-every", "16", "--resume")) == 0
    assert resumed.read_bytes() == full.read_bytes()  # bit for bit
    capsys.readouterr()


def test_resume_skips_done_segments_and_checks_the_run(setup, tmp_path):
    from updatescope.models.hf import load_causal_lm

    model_dir, data = setup
    model, tok = load_causal_lm(model_dir)
    texts = [json.loads(x)["text"] for x in data.read_text().splitlines()]
    ck = tmp_path / "run.ckpt"
    opts = SketchOptions(sketch_dim=64, token_budget=64)
    kw = dict(progress=False, checkpoint=ck, checkpoint_every=16)
    whole = sketch_corpus(model, tok, texts, opts, **kw)
    done = []

    def stop_after_two(s):
        done.append(s)
        if len(done) == 2:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        sketch_corpus(model, tok, texts, opts, on_segment=stop_after_two, **kw)
    again = []
    sig = sketch_corpus(model, tok, texts, opts, resume=True, on_segment=again.append, **kw)
    assert again[0] == 2 and len(again) == len(segment_ranges(len(texts))) - 2  # nothing redone
    assert torch.equal(sig.sums, whole.sums) and torch.equal(sig.counts, whole.counts)
    with pytest.raises(InputError, match="different run"):
        sketch_corpus(model, tok, texts[:-1], opts, resume=True, **kw)
    # every option that changes the sums is part of the run's key
    for changed in (
        {"sketch_dim": 128},
        {"seed": 1},
        {"max_tokens": 500},
        {"dtype": "bfloat16"},
        {"chunk_len": 32},
        {"act_map": "srht"},
        {"token_budget": 128},
    ):
        with pytest.raises(InputError, match="different run"):
            sketch_corpus(model, tok, texts, SketchOptions(**{**opts.to_dict(), **changed}), resume=True, **kw)


def test_resume_without_checkpoint_is_one_line(setup, tmp_path, capsys):
    model, data = setup
    rc = main(_argv(model, data, tmp_path / "x.safetensors", "--resume"))
    err = capsys.readouterr().err
    assert rc == 2 and "no checkpoint" in err and len(err.strip().splitlines()) == 1
