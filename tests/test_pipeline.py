"""The pipeline layer: files or lists -> one typed corpus -> tokenised once -> capture -> sketch.

Checks that the corpus keeps where each document came from, that every document is
tokenised exactly once per run (also with a token cap), that the token budget only batches
(head and network sketches alike), that the options are validated before any model loads,
and that select's exported (source, index) finds each document's row in its file."""

import json

import pytest
import torch

from updatescope.cli import main
from updatescope.data.formats import Columns
from updatescope.errors import InputError
from updatescope.pipeline import Corpus, SketchOptions, sketch_corpus, sketch_network_corpus


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from test_cli import _save_tiny
    from updatescope.models.hf import load_causal_lm

    path = _save_tiny(tmp_path_factory.mktemp("pipe") / "tiny", 0)
    model, tok = load_causal_lm(path)
    return path, model, tok


def _docs(n=20, seed=0, length=30):
    g = torch.Generator().manual_seed(seed)
    words = "def return class import self if else x y z ( ) : = + the a of to and".split()
    return [" ".join(words[int(i)] for i in torch.randint(0, len(words), (length,), generator=g)) for _ in range(n)]


def test_corpus_from_files_keeps_file_and_row(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("first doc\n\n\nsecond doc here\nthird\n")  # blank lines: paragraphs
    jl = tmp_path / "b.jsonl"
    jl.write_text('{"text": "x y"}\n\n{"text": "  "}\n{"text": "z"}\n')
    c = Corpus.from_files([txt, jl])
    assert c.documents == ("first doc", "second doc here\nthird", "x y", "z")
    assert c.origin == ((str(txt), 0), (str(txt), 3), (str(jl), 0), (str(jl), 3))
    assert c.columns is None and c.description == "a.txt,b.jsonl"
    lines = tmp_path / "c.txt"
    lines.write_text("one\n   \ntwo\n")
    assert Corpus.from_files([lines]).origin == ((str(lines), 0), (str(lines), 2))
    table = tmp_path / "t.csv"
    table.write_text("p,c\nhello,world\nfoo,bar\n")
    t = Corpus.from_files([table], Columns(prompt="p", completion="c"))
    assert t.columns.layout == "prompt-completion" and t.origin == ((str(table), 0), (str(table), 1))
    assert t.text(1) == "foobar"


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"sketch_dim": 100}, "sketch_dim"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"act_map": "nope"}, "act_map"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"token_budget": True}, "token_budget"),
        ({"dtype": "int8"}, "dtype"),
        ({"chunk_len": 1}, "chunk_len"),
    ],
)
def test_options_are_checked_before_any_model(kwargs, word):
    with pytest.raises(InputError, match=word):
        SketchOptions(**kwargs)


def test_empty_or_mistyped_inputs_are_refused():
    with pytest.raises(InputError, match="empty"):
        Corpus.from_texts([])
    with pytest.raises(InputError, match="text 1"):
        Corpus.from_texts(["fine", 3.5])
    with pytest.raises(InputError, match="surrogate"):
        Corpus.from_texts(["bad \ud800"])


class _CountingTokenizer:
    """Wraps a tokenizer and counts how often each text is tokenised."""

    def __init__(self, tok):
        self.tok, self.calls = tok, {}

    def __call__(self, text, **kw):
        self.calls[text] = self.calls.get(text, 0) + 1
        return self.tok(text, **kw)

    def __getattr__(self, name):
        return getattr(self.tok, name)


@pytest.mark.parametrize("max_tokens", [None, 100])
def test_each_document_is_tokenised_once(tiny, max_tokens):
    _, model, tok = tiny
    docs = _docs(40)
    counting = _CountingTokenizer(tok)
    opts = SketchOptions(sketch_dim=64, max_tokens=max_tokens, token_budget=64)
    sig = sketch_corpus(model, counting, Corpus.from_texts(docs), opts, progress=False, fingerprint="fp")
    assert set(counting.calls.values()) == {1} and len(counting.calls) == len(set(docs))
    assert sig.count == (max_tokens or sum(len(tok(d)["input_ids"]) - 1 for d in docs))


def test_budget_only_batches_the_head_and_network_sketches(tiny):
    _, model, tok = tiny
    corpus = Corpus.from_texts(_docs(12, length=50))
    sigs = [
        sketch_corpus(model, tok, corpus, SketchOptions(sketch_dim=64, token_budget=b), progress=False)
        for b in (16, 1024)
    ]
    assert sigs[0].count == sigs[1].count
    torch.testing.assert_close(sigs[0].sums, sigs[1].sums, rtol=1e-9, atol=1e-9)
    nets = [
        sketch_network_corpus(
            model, tok, corpus, ["model.layers.0.mlp.*"], SketchOptions(sketch_dim=64, token_budget=b), progress=False
        )
        for b in (16, 1024)
    ]
    s0, s1 = (n.state_dict() for n in nets)
    assert nets[0].count == nets[1].count
    # float32 features, different batch shapes: the sums agree to float32 rounding, not to 60%
    torch.testing.assert_close(s0["sums"], s1["sums"], rtol=1e-4, atol=1e-6)


def test_cli_layers_with_a_small_budget_equal_the_default(tiny, tmp_path, capsys):
    path, _, _ = tiny
    data = tmp_path / "d.txt"
    data.write_text("\n".join(_docs(10, length=60)))
    outs = []
    for budget in ("24", "1024"):
        out = tmp_path / f"n{budget}.safetensors"
        argv = ["sketch", "--model", str(path), "--data", str(data), "--out", str(out), "--quiet"]
        argv += ["--sketch-dim", "64", "--layers", "model.layers.0.mlp.*", "--token-budget", budget]
        assert main(argv) == 0, capsys.readouterr().err
        outs.append(out)
    from updatescope.network import load_network_signature

    a, b = (load_network_signature(o).state_dict() for o in outs)
    torch.testing.assert_close(a["sums"], b["sums"], rtol=1e-4, atol=1e-6)


def test_select_index_is_the_row_in_the_file(tiny, tmp_path, capsys):
    path, model, tok = tiny
    import updatescope as us

    docs = _docs(8, seed=3)
    pool = tmp_path / "pool.txt"
    pool.write_text("\n\n".join(docs))  # paragraphs: document k starts on line 2k
    target = tmp_path / "t.safetensors"
    us.save_signature(sketch_corpus(model, tok, docs[:4], SketchOptions(sketch_dim=64), progress=False), target)
    out = tmp_path / "top.jsonl"
    argv = ["select", "--model", str(path), "--data", str(pool), "--target", str(target), "--top", "8"]
    assert main([*argv, "--out", str(out), "--quiet", "--json"]) == 0, capsys.readouterr().err
    lines = pool.read_text().split("\n")
    for row in map(json.loads, out.read_text().splitlines()):
        assert lines[row["index"]] == row["text"]
    capsys.readouterr()
    for bad, word in ((["--out", str(tmp_path / "top.csv")], "suffix"), (["--top", "9", "--out", str(out)], "larger")):
        rc = main([*argv[:-2], *(["--top", "8"] if "--top" not in bad else []), *bad, "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and word in err


def test_bucketing_by_length_keeps_each_documents_score_and_cuts_padding(tiny):
    from updatescope.pipeline import score_documents
    from updatescope.pipeline.score import length_order, padded_ratio

    _, model, tok = tiny
    lengths = [3, 60, 8, 45, 2, 30, 5, 50, 12, 1, 40, 6]
    docs = [d for n, seed in zip(lengths, range(12)) for d in _docs(1, seed=seed, length=n)]
    target = sketch_corpus(model, tok, docs[:6], SketchOptions(sketch_dim=64), progress=False)
    plain, bucketed = (
        score_documents(model, tok, docs, target, token_budget=96, progress=False, bucket=b) for b in (False, True)
    )
    torch.testing.assert_close(bucketed.tokens, plain.tokens)
    for field in ("score", "se", "activation", "error"):
        torch.testing.assert_close(
            getattr(bucketed, field), getattr(plain, field), rtol=1e-4, atol=1e-7, equal_nan=True
        )
    tokens = Corpus.from_texts(docs).tokenise(tok, keep_empty=True)
    entries = list(range(len(docs)))
    before = padded_ratio(tokens, entries, chunk_len=64, token_budget=96)
    after = padded_ratio(tokens, length_order(tokens, entries), chunk_len=64, token_budget=96)
    assert 1.0 <= after < before
