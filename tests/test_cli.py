"""End-to-end CLI through main([...]): sketch + rank + inspect on a tiny saved Llama model,
and one-line errors with a non-zero exit and no half-written output on bad input."""

import json

import pytest
import torch

from updatescope.cli import main

WORDS = (
    "the a of to and in is it for on with as at by def return class import self if else for while "
    "x y z 0 1 2 3 4 5 6 7 8 9 ( ) : = + - * , . C O N c1 ccc"
).split()


def _save_tiny(path, seed):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return (_save_tiny(tmp_path_factory.mktemp("tiny0"), 0), _save_tiny(tmp_path_factory.mktemp("tiny1"), 1))


@pytest.fixture
def corpora(tmp_path):
    g = torch.Generator().manual_seed(0)

    def write(name, words, n_docs=30, jsonl=False):
        docs = [
            " ".join(words[int(i)] for i in torch.randint(0, len(words), (40,), generator=g)) for _ in range(n_docs)
        ]
        p = tmp_path / name
        p.write_text("\n".join(json.dumps({"text": d}) for d in docs) if jsonl else "\n".join(docs))
        return p

    code = "def return class import self if else x y z ( ) : = +".split()
    prose = "the a of to and in is it for on with as at by".split()
    return {
        "code": write("code.txt", code),
        "code2": write("code2.jsonl", code, jsonl=True),
        "prose": write("prose.txt", prose),
    }


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_sketch_rank_inspect(models, corpora, tmp_path, capsys):
    sigs = {}
    for name in ("code", "code2", "prose"):
        sigs[name] = tmp_path / f"{name}.safetensors"
        rc, out, err = _run(
            capsys,
            "sketch",
            "--model",
            models[0],
            "--data",
            corpora[name],
            "--out",
            sigs[name],
            "--sketch-dim",
            256,
            "--quiet",
            "--max-tokens",
            800,
        )
        assert rc == 0, err
        assert "wrote" in out
    rc, out, _ = _run(capsys, "rank", "--target", sigs["code"], sigs["prose"], sigs["code2"], "--json")
    assert rc == 0
    ranking = json.loads(out)
    assert [r["source"] for r in ranking["rows"]] == ["code2", "prose"]
    assert ranking["target"] == "code"
    rc, out, _ = _run(capsys, "rank", "--target", sigs["code"], sigs["prose"], sigs["code2"])
    assert rc == 0 and "code2" in out and "regime" in out
    for by in ("error", "activation"):
        rc, out, _ = _run(capsys, "rank", "--target", sigs["code"], sigs["prose"], sigs["code2"], "--by", by, "--json")
        rows = json.loads(out)["rows"]
        assert rc == 0 and json.loads(out)["by"] == by
        assert [r[by] for r in rows] == sorted((r[by] for r in rows), reverse=True)
    rc, out, _ = _run(capsys, "rank", "--target", sigs["code"], sigs["prose"], sigs["code2"], "--by", "error")
    assert rc == 0 and "ranked by error-only" in out
    rc, out, _ = _run(capsys, "inspect", sigs["code"], "--json")
    info = json.loads(out)[0]
    assert info["count"] == 800 and info["config"]["act_dim"] == 16 and info["config"]["out_dim"] == 64
    assert len(info["config"]["fingerprint"]) == 16


@pytest.mark.parametrize("case", ["empty", "binary", "missing", "no-model", "bad-jsonl", "out-dir-missing"])
def test_sketch_bad_input_one_line(models, corpora, tmp_path, capsys, case):
    data, model, out = corpora["code"], models[0], tmp_path / "o.safetensors"
    if case == "empty":
        data = tmp_path / "empty.txt"
        data.write_text("")
    elif case == "binary":
        data = tmp_path / "bin.txt"
        data.write_bytes(b"\x00\x01\x02\xff" * 100)
    elif case == "missing":
        data = tmp_path / "nope.txt"
    elif case == "no-model":
        model = tmp_path / "no-model"
    elif case == "bad-jsonl":
        data = tmp_path / "bad.jsonl"
        data.write_text('{"txt": "x"}\n')
    elif case == "out-dir-missing":
        out = tmp_path / "missing-dir" / "o.safetensors"
    rc, outs, err = _run(
        capsys, "sketch", "--model", model, "--data", data, "--out", out, "--quiet", "--sketch-dim", 64
    )
    assert rc != 0
    assert err.startswith("updatescope: error:") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not out.exists()


def test_rank_refuses_other_model_and_corrupt(models, corpora, tmp_path, capsys):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    for sig, model in ((a, models[0]), (b, models[1])):
        assert (
            _run(
                capsys,
                "sketch",
                "--model",
                model,
                "--data",
                corpora["code"],
                "--out",
                sig,
                "--quiet",
                "--sketch-dim",
                64,
                "--max-tokens",
                200,
            )[0]
            == 0
        )
    rc, _, err = _run(capsys, "rank", "--target", a, b)
    assert rc == 2 and "fingerprint differs" in err and err.count("\n") == 1
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(a.read_bytes()[:100])
    rc, _, err = _run(capsys, "rank", "--target", a, bad)
    assert rc == 2 and "corrupt" in err and err.count("\n") == 1
    rc, _, err = _run(capsys, "inspect", tmp_path / "missing.safetensors")
    assert rc == 2 and "not found" in err


def test_demo_synthetic_writes_report(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    rc, out, _ = _run(capsys, "demo", "--synthetic", "--out", tmp_path / "rep", "--quiet")
    assert rc == 0
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "What the numbers mean" in html and "data:image/png;base64" in html
    summary = json.loads((tmp_path / "rep" / "ranking.json").read_text())
    # the synthetic family's label block decides: a same-block source ranks first for each target
    for rk in summary["rankings"]:
        assert rk["rows"][0]["source"].split("-")[1] == rk["target"].split("-")[1]


def test_unknown_experiment_and_domain(capsys, tmp_path):
    rc, _, err = _run(capsys, "reproduce", "nope", "--out", tmp_path / "x.json")
    assert rc == 2 and "unknown experiment" in err
    rc, _, err = _run(capsys, "domains", "--export", "nope", "--out", tmp_path / "x.jsonl")
    assert rc == 2 and "unknown domain" in err
    assert not (tmp_path / "x.jsonl").exists()


def test_reproduce_settings_are_checked(capsys, tmp_path):
    out = tmp_path / "x.json"
    rc, _, err = _run(capsys, "reproduce", "verbalizer", "--quick", "--set", "ground_truht=head", "--out", out)
    assert rc == 2 and "unknown setting 'ground_truht'" in err and "ground_truth" in err
    rc, _, err = _run(capsys, "reproduce", "source-selection", "--set", "lora.learning_rate=1", "--out", out)
    assert rc == 2 and "unknown setting 'lora.learning_rate'" in err
    rc, _, err = _run(capsys, "reproduce", "source-selection", "--set", "ground_truth=lorra", "--out", out)
    assert rc == 2 and "ground_truth" in err and "lorra" in err
    rc, _, err = _run(capsys, "reproduce", "recovery", "--set", "lab.recover_lr=fast", "--out", out)
    assert rc == 2 and "lab.recover_lr" in err
    rc, _, err = _run(capsys, "reproduce", "smiles", "--set", "noequals", "--out", out)
    assert rc == 2 and "KEY=VALUE" in err
    assert not out.exists()
    assert all(e.count("\n") <= 1 for e in [err])


def test_parse_settings():
    from updatescope.errors import InputError
    from updatescope.experiments.settings import parse_settings

    s = parse_settings(["ground_truth=head", "lora.lr=3e-4", 'lora.targets=["q_proj"]', "domains=null"])
    assert s == {"ground_truth": "head", "lora": {"lr": 3e-4, "targets": ["q_proj"]}, "domains": None}
    with pytest.raises(InputError, match="conflicts"):
        parse_settings(["lora.lr=1", "lora=2"])


def test_sketch_map_choice_recorded_and_checked(models, corpora, tmp_path, capsys):
    fold, auto = tmp_path / "fold.safetensors", tmp_path / "auto.safetensors"
    assert (
        _run(
            capsys,
            "sketch",
            "--model",
            models[0],
            "--data",
            corpora["code"],
            "--out",
            fold,
            "--quiet",
            "--sketch-dim",
            64,
            "--max-tokens",
            200,
            "--act-map",
            "fold",
            "--error-map",
            "fold",
        )[0]
        == 0
    )
    assert (
        _run(
            capsys,
            "sketch",
            "--model",
            models[0],
            "--data",
            corpora["prose"],
            "--out",
            auto,
            "--quiet",
            "--sketch-dim",
            64,
            "--max-tokens",
            200,
        )[0]
        == 0
    )
    rc, out, _ = _run(capsys, "inspect", fold, "--json")
    cfg = json.loads(out)[0]["config"]
    assert (cfg["act_map"], cfg["error_map"]) == ("fold", "fold")
    rc, _, err = _run(capsys, "rank", "--target", auto, fold)
    assert rc != 0 and "act_map" in err and err.count("\n") == 1


def test_countsketch_is_announced_where_it_is_chosen(models, corpora, tmp_path, capsys):
    out = tmp_path / "cs.safetensors"
    rc, _, err = _run(
        capsys,
        "sketch",
        "--model",
        models[0],
        "--data",
        corpora["code"],
        "--out",
        out,
        "--quiet",
        "--sketch-dim",
        64,
        "--max-tokens",
        200,
        "--error-map",
        "countsketch",
    )
    assert rc == 0 and "countsketch" in err and "never marked trusted" in err
    rc, _, err = _run(
        capsys,
        "sketch",
        "--model",
        models[0],
        "--data",
        corpora["code"],
        "--out",
        tmp_path / "auto.safetensors",
        "--quiet",
        "--sketch-dim",
        64,
        "--max-tokens",
        200,
    )
    assert rc == 0 and "countsketch" not in err
