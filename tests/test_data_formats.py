"""Tables people have (JSONL/JSON/CSV/parquet/arrow/datasets folder) with column options:
every format reads the same rows, completion-only and assistant-only positions are exact,
and bad input is one InputError line."""

import csv
import json

import pytest
import torch

from updatescope.cli import main
from updatescope.data.formats import Columns, read_examples, read_table, to_examples
from updatescope.errors import InputError
from updatescope.signatures.io import load_signature

ROWS = [
    {"doc": "def x ( ) : return 1", "q": "the a of", "a": "x = 1 + 2", "id": 1},
    {"doc": "class C : y = 3", "q": "to and in", "a": "return self", "id": 2},
    {"doc": "import z if x else y", "q": "is it for", "a": "( 4 * 5 )", "id": 3},
]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is fastest on a busy machine
    yield
    torch.set_num_threads(threads)


def _write_all(tmp_path, rows):
    """The same rows in every supported format -> {format: path}."""
    out = {"jsonl": tmp_path / "t.jsonl", "json": tmp_path / "t.json", "csv": tmp_path / "t.csv"}
    out["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    out["json"].write_text(json.dumps(rows))
    with out["csv"].open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(rows)
    out["parquet"] = tmp_path / "t.parquet"
    ds.to_parquet(str(out["parquet"]))
    out["folder"] = tmp_path / "saved"
    ds.save_to_disk(str(out["folder"]))
    out["arrow"] = next(out["folder"].glob("*.arrow"))  # a bare arrow file
    return out


def test_every_format_reads_the_same_rows(tmp_path):
    paths = _write_all(tmp_path, ROWS)
    cols = Columns(prompt="q", completion="a")
    for fmt, p in paths.items():
        got = read_table(p, cols)
        assert [(r["q"], r["a"]) for r in got] == [(r["q"], r["a"]) for r in ROWS], fmt
    assert len(read_examples([paths["csv"], paths["parquet"]], Columns(text="doc"))) == 6


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "no column 'body'"),
        ("nonstring", "must be a string, got int"),
        ("empty", "empty"),
        ("json_dict", "expected a JSON list"),
        ("badjson", "invalid JSON"),
        ("plain", "need a table"),
        ("nochat", "no assistant turn"),
        ("both", "choose one"),
        ("half", "go together"),
    ],
)
def test_bad_input_is_one_line(tmp_path, case, needle):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    cols = Columns(text="doc")
    if case == "missing":
        cols = Columns(text="body")
    elif case == "nonstring":
        cols = Columns(text="id")
    elif case == "empty":
        p = tmp_path / "e.csv"
        p.write_text("doc\n")
    elif case == "json_dict":
        p = tmp_path / "t.json"
        p.write_text('{"a": 1, "b": 2}')
    elif case == "badjson":
        p.write_text('{"doc": "x"}\n{oops\n')
    elif case == "plain":
        p = tmp_path / "t.txt"
        p.write_text("x y\n")
    elif case == "nochat":
        p.write_text(json.dumps({"m": [{"role": "user", "content": "hi"}]}) + "\n")
        cols = Columns(messages="m")
    with pytest.raises(InputError, match=needle) as err:
        if case == "both":
            Columns(text="doc", messages="m")
        elif case == "half":
            Columns(prompt="q")
        else:
            read_table(p, cols)
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from test_cli import _save_tiny

    path = _save_tiny(tmp_path_factory.mktemp("fmt"), 0)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}"
    )
    tok.save_pretrained(path)
    return path, tok


def test_completion_and_assistant_positions(tiny):
    _, tok = tiny
    texts, pos = to_examples(ROWS, Columns(prompt="q", completion="a"), tok)
    for ids, p, r in zip(texts, pos, ROWS):
        n_prompt = len(tok(r["q"])["input_ids"])
        assert ids[n_prompt:] == tok(r["a"], add_special_tokens=False)["input_ids"]
        assert p == list(range(n_prompt, len(ids)))  # exactly the completion's tokens
    chat = [
        {
            "m": [
                {"role": "user", "content": "the a"},
                {"role": "assistant", "content": "x = 1"},
                {"role": "user", "content": "of"},
                {"role": "assistant", "content": "return"},
            ]
        }
    ]
    (ids,), (p,) = to_examples(chat, Columns(messages="m"), tok)
    vocab = {v: k for k, v in tok.get_vocab().items()}
    assert [vocab[ids[i]] for i in p] == ["x", "=", "1", ".", "return", "."]  # assistant turns only


def test_cli_parquet_prompt_completion(tiny, tmp_path, capsys):
    model, tok = tiny
    paths = _write_all(tmp_path, ROWS * 4)
    outs = {}
    for fmt in ("jsonl", "parquet", "folder"):
        outs[fmt] = tmp_path / f"{fmt}.safetensors"
        assert (
            main(
                [
                    "sketch",
                    "--model",
                    str(model),
                    "--data",
                    str(paths[fmt]),
                    "--out",
                    str(outs[fmt]),
                    "--prompt-column",
                    "q",
                    "--completion-column",
                    "a",
                    "--sketch-dim",
                    "64",
                    "--quiet",
                ]
            )
            == 0
        )
    sigs = {k: load_signature(v) for k, v in outs.items()}
    n_completion = 4 * sum(len(tok(r["a"], add_special_tokens=False)["input_ids"]) for r in ROWS)
    assert sigs["jsonl"].count == n_completion
    assert sigs["jsonl"].meta["columns"] == "prompt-completion:q,a (completion tokens)"
    for k in ("parquet", "folder"):
        assert torch.equal(sigs[k].sums, sigs["jsonl"].sums)
    full = tmp_path / "full.safetensors"
    assert (
        main(
            [
                "sketch",
                "--model",
                str(model),
                "--data",
                str(paths["csv"]),
                "--out",
                str(full),
                "--text-column",
                "doc",
                "--sketch-dim",
                "64",
                "--quiet",
            ]
        )
        == 0
    )
    assert load_signature(full).count != n_completion  # negative control: another column, other tokens
    capsys.readouterr()
    rc = main(
        [
            "sketch",
            "--model",
            str(model),
            "--data",
            str(paths["csv"]),
            "--out",
            str(tmp_path / "x.st"),
            "--text-column",
            "nope",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "no column 'nope'" in err and len(err.strip().splitlines()) == 1
