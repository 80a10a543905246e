"""``select`` at scale: the streamed pool reader against the in-memory one, the top-k heap
against a full sort, chunked scoring against whole-pool scoring, 2 torchrun ranks against one
process (the same bytes), and an interrupted run resumed from its checkpoint (the same bytes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from updatescope.cli import main
from updatescope.data.formats import Columns
from updatescope.data.stream import iter_pool
from updatescope.errors import InputError
from updatescope.pipeline import Corpus
from updatescope.select.topk import TopK

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- top-k heap
def test_topk_equals_a_stable_sort_of_the_whole_stream_with_ties():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 6, (200,), generator=g).double().tolist()  # many ties
    scores[17] = float("nan")
    for k in (1, 7, 50, 300):
        heap = TopK(k).update_many((s, i, f"doc{i}") for i, s in enumerate(scores))
        ref = sorted((i for i, s in enumerate(scores) if s == s), key=lambda i: (-scores[i], i))[:k]
        assert [i for _, i, _ in heap.best()] == ref
        assert [p for _, _, p in heap.best()] == [f"doc{i}" for i in ref]
        # any split of the stream, merged, is the heap of the whole; the inputs are unchanged
        a = TopK(k).update_many((s, i, None) for i, s in enumerate(scores) if i % 3 == 0)
        b = TopK(k).update_many((s, i, None) for i, s in enumerate(scores) if i % 3)
        before = [x[:2] for x in a.best()]
        assert [i for _, i, _ in a.merge(b).best()] == ref
        assert [x[:2] for x in a.best()] == before
    # negative control: the second half of the stream does not hold the whole stream's top 5
    half = TopK(5).update_many((s, i, None) for i, s in enumerate(scores[100:], 100))
    assert [i for _, i, _ in half.best()] != [
        i for _, i, _ in TopK(5).update_many((s, i, None) for i, s in enumerate(scores)).best()
    ]
    with pytest.raises(InputError, match="positive"):
        TopK(0)
    with pytest.raises(InputError, match="different k"):
        TopK(2).merge(TopK(3))


def test_chunks_of_a_round_are_shared_by_size():
    from updatescope.pipeline.select_stream import assign_chunks

    costs = [1067, 642, 728, 697, 1062, 569, 5, 300]
    owners = assign_chunks(costs, 2)
    load = [sum(c for c, o in zip(costs, owners) if o == r) for r in range(2)]
    assert abs(load[0] - load[1]) <= max(costs[6:])  # within the smallest chunks' size
    assert owners == assign_chunks(list(costs), 2)  # the same on every rank
    # round-robin (the negative control) is far less even here
    rr = [sum(costs[r::2]) for r in range(2)]
    assert abs(rr[0] - rr[1]) > 2 * abs(load[0] - load[1])
    for world in (1, 3, 8):
        assert sorted(set(assign_chunks(costs, world))) == list(range(world))  # every rank gets a chunk
    assert assign_chunks([0, 0, 0], 2) == [0, 1, 0]


# ---------------------------------------------------------------------------- streamed reader
def _streamed(paths, columns=None):
    return [(s, r, d) for s, r, d in iter_pool(paths, columns)]


def _in_memory(paths, columns=None):
    c = Corpus.from_files(paths, columns)
    return [(s, r, d) for (s, r), d in zip(c.origin, c.documents)]


def test_streamed_pool_equals_the_in_memory_corpus(tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"first doc\r\nsecond\rthird line\n\n\n")  # CRLF, a lone CR, trailing blank lines
    paras = tmp_path / "paras.txt"
    paras.write_text("\nblock one\nstill one\n\n  \nblock two\n")
    jl = tmp_path / "docs.jsonl"
    jl.write_text('{"text": "a b"}\n\n{"text": "  "}\n{"text": "c d", "x": 1}\n')
    for paths in ([lines], [paras], [jl], [lines, jl, paras]):
        assert _streamed(paths) == _in_memory(paths)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"p": "q1", "c": "a1", "id": 3}\n\n{"p": "q2", "c": "", "id": 4}\n')
    cols = Columns(prompt="p", completion="c")
    assert _streamed([rows], cols) == _in_memory([rows], cols)
    csv = tmp_path / "t.csv"
    csv.write_text("text,id\nx y,1\nz,2\n")
    assert _streamed([csv]) == _in_memory([csv])
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    table = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": f"doc {i}", "n": i} for i in range(2500)]), table)
    assert _streamed([table]) == _in_memory([table])  # more rows than one record batch
    # the same one-line errors, naming file and line
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    with pytest.raises(InputError, match="bad.jsonl:2: JSONL line has no 'text' field"):
        _streamed([bad])
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"abc\x00def\n")
    with pytest.raises(InputError, match="binary"):
        _streamed([binary])
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(InputError, match="offset 6"):
        _streamed([latin])
    with pytest.raises(InputError, match="row 1 has no column 'c'"):
        rows.write_text('{"p": "q1", "c": "a1"}\n{"p": "q2"}\n')
        _streamed([rows], cols)


def test_streamed_reader_equals_the_in_memory_one_on_random_files(tmp_path):
    """Random text and JSONL files built from the awkward pieces (CR, CRLF, BOM, blank and
    whitespace-only lines, bad JSON, wrong types): the same documents and rows, or an error
    for both (a file with two problems may be reported at a different one: the stream stops
    at the first in file order)."""
    import random

    rng = random.Random(0)
    text_pieces = ["a", "b c", " ", "\t", "\n", "\r\n", "\r", "\n\n", "  \n", "x\ty", "é", "\ufeff"]
    json_pieces = ['{"text": "a b"}', '{"text": "  "}', '{"text": 3}', "{bad", "", "  ", '{"txt": 1}', "[1]"]

    def outcome(f):
        try:
            return ("ok", f())
        except InputError as exc:
            return ("error", str(exc))

    for t in range(400):
        if t % 2:
            p = tmp_path / f"f{t}.txt"
            p.write_bytes(("\ufeff" * (t % 4 == 1) + "".join(rng.choices(text_pieces, k=rng.randint(0, 12)))).encode())
            cases = [None]
        else:
            p = tmp_path / f"f{t}.jsonl"
            lines = rng.choices(json_pieces, k=rng.randint(0, 6))
            p.write_bytes((rng.choice(["\n", "\r\n"]).join(lines) + rng.choice(["", "\n"])).encode())
            cases = [None, Columns(text="text")]
        for cols in cases:
            a, b = outcome(lambda: _streamed([p], cols)), outcome(lambda: _in_memory([p], cols))
            assert a[0] == b[0], (p.read_bytes(), cols, a, b)
            if a[0] == "ok" or cols is None:
                assert a == b, (p.read_bytes(), cols, a, b)


# ---------------------------------------------------------------------------- CLI
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    import updatescope as us
    from test_cli import _save_tiny
    from test_distributed import write_docs
    from updatescope.models.hf import load_causal_lm
    from updatescope.pipeline import SketchOptions, sketch_corpus

    root = tmp_path_factory.mktemp("select_scale")
    model = _save_tiny(root / "tiny", 0)
    pool = write_docs(root / "pool.jsonl", 45, 30, seed=0)
    m, tok = load_causal_lm(str(model))
    target_docs = [json.loads(x)["text"] for x in write_docs(root / "t.jsonl", 10, 30, seed=1).read_text().splitlines()]
    target = root / "t.safetensors"
    us.save_signature(sketch_corpus(m, tok, target_docs, SketchOptions(sketch_dim=64), progress=False), target)
    return model, pool, target


def _argv(files, out, *extra):
    model, pool, target = files
    return [
        "select",
        "--model",
        str(model),
        "--data",
        str(pool),
        "--target",
        str(target),
        "--top",
        "6",
        "--out",
        str(out),
        "--quiet",
        "--token-budget",
        "64",
        *map(str, extra),
    ]


def _with(argv, flag, value=None):
    """``argv`` with ``flag`` set to ``value`` (replaced when present, else appended)."""
    argv = list(argv)
    if flag in argv and value is not None:
        argv[argv.index(flag) + 1] = str(value)
    else:
        argv += [flag] if value is None else [flag, str(value)]
    return argv


def _run_one(argv):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun rank runs (OMP_NUM_THREADS=1): the same kernels
    try:
        return main(argv)
    finally:
        torch.set_num_threads(threads)


def _outputs(out):
    return out.read_bytes(), out.with_name(out.name.rsplit(".", 1)[0] + ".scores.jsonl").read_bytes()


def test_chunked_scores_equal_whole_pool_scores(files, tmp_path):
    """Chunks change only which documents share a batch: every score agrees with the scores of
    the whole pool in one call, the score file keeps pool order, and only the kept documents
    carry a rank."""
    from updatescope.models.hf import load_causal_lm
    from updatescope.pipeline import score_documents
    from updatescope.signatures.io import load_signature

    model, pool, target = files
    m, tok = load_causal_lm(str(model))
    ref = score_documents(m, tok, Corpus.from_files([pool]), load_signature(target), token_budget=64, progress=False)
    out = tmp_path / "top.jsonl"
    assert _run_one(_argv(files, out, "--chunk-docs", 7)) == 0
    rows = [json.loads(x) for x in _outputs(out)[1].decode().splitlines()]
    assert [r["index"] for r in rows] == list(range(45))
    got = torch.tensor([float("nan") if r["score"] is None else r["score"] for r in rows], dtype=torch.float64)
    torch.testing.assert_close(got, ref.score, rtol=1e-4, atol=1e-6, equal_nan=True)
    assert [r["tokens"] for r in rows] == ref.tokens.tolist()
    top = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in top] == ref.order().tolist()[:6]
    assert sorted((r["rank"], r["index"]) for r in rows if r["rank"] is not None) == [
        (r["rank"], r["index"]) for r in top
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no partial or temporary file left


def test_by_a_marginal_keeps_the_top_of_that_column_and_the_same_score_file(files, tmp_path):
    joint = tmp_path / "joint.jsonl"
    assert _run_one(_argv(files, joint, "--chunk-docs", 7)) == 0
    rows = [json.loads(x) for x in _outputs(joint)[1].decode().splitlines()]
    for by in ("error", "activation"):
        out = tmp_path / f"{by}.jsonl"
        assert _run_one(_argv(files, out, "--chunk-docs", 7, "--by", by)) == 0
        want = sorted((r for r in rows if r[by] is not None), key=lambda r: (-r[by], r["index"]))[:6]
        top = [json.loads(x) for x in out.read_text().splitlines()]
        assert [r["index"] for r in top] == [r["index"] for r in want]
        assert [r["rank"] for r in top] == list(range(1, 7))
        mine = [json.loads(x) for x in _outputs(out)[1].decode().splitlines()]
        drop = lambda r: {k: v for k, v in r.items() if k != "rank"}  # noqa: E731
        assert [drop(r) for r in mine] == [drop(r) for r in rows]  # the same scores; only the ranks move
    # negative control: on this pool the error-only top 6 is not the joint top 6
    assert [json.loads(x)["index"] for x in (tmp_path / "error.jsonl").read_text().splitlines()] != [
        json.loads(x)["index"] for x in joint.read_text().splitlines()
    ]


def test_resume_after_an_interrupt_gives_the_same_bytes(files, tmp_path, monkeypatch, capsys):
    import updatescope.pipeline.select_stream as ss

    whole = tmp_path / "whole.jsonl"
    assert _run_one(_argv(files, whole, "--chunk-docs", 4)) == 0
    out = tmp_path / "part.jsonl"
    real, calls = ss._score_chunk, []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 7:  # the 7th chunk: after the checkpoints at 8 and 20 documents
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(ss, "_score_chunk", interrupted)
    assert _run_one(_argv(files, out, "--chunk-docs", 4, "--checkpoint-every", 10)) == 130
    monkeypatch.setattr(ss, "_score_chunk", real)
    ckpt = tmp_path / "part.jsonl.ckpt"
    state = json.loads(ckpt.read_text())
    assert state["next_chunk"] == 5 and len(state["heap"]) == 6 and not out.exists()
    capsys.readouterr()
    # a flag that changes the outputs is refused, and so is a changed pool: one line, exit 2,
    # before the model loads (the model path is gone)
    model, pool, target = files
    for flag, value in (("--token-budget", "32"), ("--top", "5"), ("--min-tokens", "3"), ("--by", "error")):
        argv = _with(_argv(files, out, "--chunk-docs", 4, "--resume"), flag, value)
        assert _run_one(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "different run" in err, err
    changed = tmp_path / "pool.jsonl"
    text = pool.read_text().splitlines()
    changed.write_text("\n".join([*text[:-1], json.dumps({"text": "a changed last document"})]) + "\n")
    argv = _with(_argv(files, out, "--chunk-docs", 4, "--resume"), "--data", changed)
    assert _run_one(_with(argv, "--model", tmp_path / "no-model")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the pool changed" in err, err
    # resumed with the run's own flags: the bytes of the uninterrupted run, in one process and
    # on 2 torchrun ranks (a checkpoint does not depend on the number of ranks)
    partial = tmp_path / ".part.scores.jsonl.partial"
    saved = {p: p.read_bytes() for p in (ckpt, partial)}
    assert _run_one(_argv(files, out, "--chunk-docs", 4, "--resume")) == 0
    assert _outputs(out) == _outputs(whole)
    assert not ckpt.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    for p, data in saved.items():
        p.write_bytes(data)
    out.unlink()
    r = _torchrun(tmp_path, _argv(files, out, "--chunk-docs", 4, "--resume"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _outputs(out) == _outputs(whole)
    assert not ckpt.exists() and not partial.exists()


def test_bad_input_one_line(files, tmp_path, capsys):
    model, pool, target = files
    cases = [
        (["--top", "46"], "larger than the pool (45 documents)"),
        (["--resume", None], "no checkpoint"),
        (["--chunk-docs", "0"], "--chunk-docs must be a positive integer"),
    ]
    for (flag, value), needle in cases:
        argv = _with(_argv(files, tmp_path / "o.jsonl"), flag, value)
        assert main(_with(argv, "--model", tmp_path / "no-model")) == 2  # refused before the model loads
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, (flag, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- torchrun
def _torchrun(cwd, argv, nproc=2, pythonpath=None):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": pythonpath or str(ROOT / "src"),
    }
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "UPDATESCOPE_DEBUG"):
        env.pop(k, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "updatescope",
    ]
    return subprocess.run([*cmd, *map(str, argv)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_torchrun_two_ranks_equal_one_process(files, tmp_path):
    """9 chunks of 5 over 2 ranks (the last round has one chunk): the top-k and the score file
    are the bytes of one process; a parquet export as well."""
    pytest.importorskip("pyarrow")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert _run_one(_argv(files, one, "--chunk-docs", 5)) == 0
    r = _torchrun(tmp_path, _argv(files, two, "--chunk-docs", 5))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "on 2 ranks" in r.stdout and r.stdout.count("wrote ") == 1  # rank 0 alone speaks and writes
    assert _outputs(one) == _outputs(two)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "one.jsonl",
        "one.scores.jsonl",
        "two.jsonl",
        "two.scores.jsonl",
    ]


def test_torchrun_bad_input_one_line_exit_2(files, tmp_path):
    from test_reliability_torchrun import _one_line_exit_2

    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = [
        (_argv(files, "top.jsonl", "--chunk-docs", 45), "fewer than the 2 ranks: a rank would have no chunk"),
        (_argv(files, "afile/top.jsonl"), "is a file, not a folder"),
        (_argv(files, "top.jsonl", "--top", 50), "larger than the pool"),
    ]
    for argv, needle in cases:
        r = _torchrun(tmp_path, argv)
        _one_line_exit_2(r, needle)
        assert not r.stdout.strip()
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_memory_is_bounded_by_a_chunk_and_the_heap_not_the_pool(files, tmp_path):
    """Python memory at the peak (tracemalloc) hardly moves for a pool 10× larger: the documents,
    scores and rows of the pool are never all held.  Each document carries a 4 KB word (one
    unknown token for the tiny tokenizer), so holding the pool would cost its bytes: the
    negative control, reading the larger pool into memory, grows by at least that much.  The
    allowance covers what the forward passes leave in torch's and transformers' own caches."""
    import tracemalloc

    from updatescope.models.hf import load_causal_lm
    from updatescope.pipeline.select_stream import SelectOptions, scan_pool, select_pool
    from updatescope.signatures.io import load_signature

    model, _, target = files
    m, tok = load_causal_lm(str(model))
    sig = load_signature(target)
    g = torch.Generator().manual_seed(0)
    peaks, read = {}, {}
    for n in (150, 1500):
        pool = tmp_path / f"pool{n}.jsonl"
        with open(pool, "w") as fh:
            for i in range(n):
                filler = "".join(chr(97 + int(c)) for c in torch.randint(0, 26, (4096,), generator=g))
                fh.write(json.dumps({"text": f"the a of {i} to and in {filler}"}) + "\n")
        options = SelectOptions(top=5, chunk_docs=50, token_budget=256)
        scan = scan_pool([pool], None, chunk_docs=50)
        tracemalloc.start()
        sel = select_pool(m, tok, [pool], None, sig, options, scan, scores=tmp_path / f"s{n}.jsonl")
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert sel.documents == n and len(sel.top) == 5
        tracemalloc.start()
        docs = Corpus.from_files([pool]).documents
        read[n] = tracemalloc.get_traced_memory()[0]  # held (the reader's peak is its read buffer)
        tracemalloc.stop()
        del docs
    added = 1350 * 4096  # bytes of text the larger pool adds
    assert read[1500] - read[150] > added, read
    assert peaks[1500] - peaks[150] < added / 5, peaks


def test_torchrun_error_on_one_rank_mid_run_stops_both(files, tmp_path):
    """Rank 1 fails on its second chunk while rank 0 waits at the round's gather: both leave
    at once, rank 0 prints rank 1's line, and no output, partial or temporary file is left."""
    from test_reliability_torchrun import _one_line_exit_2

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    import updatescope.pipeline.select_stream as ss\n"
        "    from updatescope.errors import InputError\n"
        "    real, calls = ss._score_chunk, []\n"
        "    def failing(*a, **k):\n"
        "        calls.append(1)\n"
        "        if len(calls) == 2:\n"
        "            raise InputError('refused on rank 1 only')\n"
        "        return real(*a, **k)\n"
        "    ss._score_chunk = failing\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    env_path = os.pathsep.join([str(hook), str(ROOT / "src")])
    r = _torchrun(work, _argv(files, "top.jsonl", "--chunk-docs", 5), pythonpath=env_path)
    _one_line_exit_2(r, "refused on rank 1 only")
    assert sorted(p.name for p in work.iterdir()) == []
