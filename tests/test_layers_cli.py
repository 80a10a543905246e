"""``sketch --layers`` writes a network signature; ``rank`` / ``inspect`` read it and show the
per-layer view; mixing head and network signatures, and patterns matching nothing, are
one-line errors (the latter before any forward pass)."""

import json

import pytest
import torch

from updatescope.cli import main

pytest.importorskip("transformers")
M = 256


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from test_cli import _save_tiny

    d = tmp_path_factory.mktemp("layers")
    model = _save_tiny(d / "model", 0)
    g = torch.Generator().manual_seed(0)
    code = "def return class import self if else x y z ( ) : = +".split()
    prose = "the a of to and in is it for on with as at by".split()
    data = {}
    for name, words in (("code", code), ("code2", code), ("prose", prose)):
        docs = [" ".join(words[int(i)] for i in torch.randint(0, len(words), (30,), generator=g)) for _ in range(12)]
        data[name] = d / f"{name}.txt"
        data[name].write_text("\n".join(docs))
    return d, model, data


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _sketch(capsys, setup, name, *extra):
    d, model, data = setup
    out = d / f"{name}{'-'.join(['', *map(str, extra)]).replace('*', 'x').replace('/', '_')}.safetensors"
    if not out.exists():
        rc, _, err = _run(
            capsys,
            "sketch",
            "--model",
            model,
            "--data",
            data[name],
            "--out",
            out,
            "--sketch-dim",
            M,
            "--quiet",
            "--name",
            name,
            *extra,
        )
        assert rc == 0, err
    return out


def test_sketch_layers_equals_the_api_on_whole_documents(setup, capsys):
    """The CLI's batches (chunked, padded, packed) give the state of the library fed one
    document per batch: same samples, same features, up to float32 rounding."""
    from updatescope.models.hf import load_causal_lm
    from updatescope.network import load_network_signature, network_config, sketch_layers

    d, model_path, data = setup
    path = _sketch(capsys, setup, "code", "--layers", "model.layers.0.mlp.*")
    sk = load_network_signature(path)
    assert sk.config.names == (
        "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.up_proj",
        "model.layers.0.mlp.down_proj",
        "lm_head",
    )  # the head is always included
    assert sk.meta["name"] == "code" and sk.meta["data"] == "code.txt" and sk.meta["fingerprint"]
    model, tok = load_causal_lm(str(model_path))
    cfg = network_config(model, list(sk.config.names), sketch_dim=M)
    batches = [{"input_ids": torch.tensor([tok(t)["input_ids"]])} for t in data["code"].read_text().splitlines()]
    ref = sketch_layers(model, cfg, batches)
    assert ref.count == sk.count == sum(b["input_ids"].shape[1] - 1 for b in batches)  # every next token
    torch.testing.assert_close(sk._sums.sum(0), ref._sums.sum(0), rtol=1e-4, atol=1e-6)
    # --max-tokens cuts exactly
    cut = load_network_signature(_sketch(capsys, setup, "code", "--layers", "lm_head", "--max-tokens", 100))
    assert cut.count == 100 and cut.config.names == ("lm_head",)


def test_rank_and_inspect_show_the_per_layer_view(setup, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    sig = {n: _sketch(capsys, setup, n, "--layers", "model.layers.0.mlp.*") for n in ("code", "code2", "prose")}
    rc, out, err = _run(capsys, "rank", "--target", sig["code"], sig["prose"], sig["code2"], "--json")
    assert rc == 0, err
    res = json.loads(out)
    assert res["kind"] == "network" and res["layers"][-1] == "lm_head"
    assert [r["source"] for r in res["rows"]] == ["code2", "prose"]  # same domain first
    rc, _, err = _run(capsys, "rank", "--target", sig["code"], sig["prose"], "--by", "error")
    assert rc == 2 and err.count("\n") == 1 and "network signatures rank by their full alignment" in err, err
    for r in res["rows"]:
        assert (
            len(r["profile"]) == 4
            and {"full", "block_diagonal", "profile_cosine", "offdiag_share_source", "discrepancy"} <= set(r)
            and r["se"]["full"] > 0
        )
    rc, out, err = _run(
        capsys, "rank", "--target", sig["code"], sig["prose"], sig["code2"], "--report", tmp_path / "rep"
    )
    assert rc == 0 and "per-block alignment" in out and "block-diag" in out and "report:" in out
    page = (tmp_path / "rep" / "index.html").read_text()
    assert (tmp_path / "rep" / "alignment_vs_layer.png").exists() and "Alignment vs layer" in page
    assert page.count("data:image/png;base64,") == 1 and "off-diagonal share" in page
    # inspect: a network file and a head file together; per-layer energy shares + cross-layer share = 1
    head = _sketch(capsys, setup, "code")
    rc, out, err = _run(capsys, "inspect", sig["code"], head, "--json")
    assert rc == 0, err
    rows = {r.get("kind", "head"): r for r in json.loads(out)}
    net = rows["network"]
    assert [x["name"] for x in net["layers"]][-1] == "lm_head" and net["count"] > 300
    assert sum(x["energy_share"] for x in net["layers"]) + net["offdiag_share"] == pytest.approx(1.0)
    assert rows["head"]["count"] == net["count"]  # the head sketch counts the same tokens
    rc, out, _ = _run(capsys, "inspect", sig["code"])
    assert rc == 0 and "model.layers.0.mlp.up_proj" in out and "off-diagonal" in out


def test_mixing_kinds_and_bad_patterns_are_one_line_errors(setup, capsys, monkeypatch):
    d, model, data = setup
    net = _sketch(capsys, setup, "code", "--layers", "model.layers.0.mlp.*")
    head = _sketch(capsys, setup, "prose")
    for argv in (("rank", "--target", net, head), ("rank", "--target", head, net)):
        rc, _, err = _run(capsys, *argv)
        assert rc == 2 and err.count("\n") == 1 and "head signature" in err and "network signature" in err, err

    import updatescope.network as network

    def no_pass(*a, **k):
        raise AssertionError("a forward pass started")

    monkeypatch.setattr(network, "sketch_layers", no_pass)
    out = d / "bad.safetensors"
    for layers, says in ((["model.layers.9.*"], "model.layers.9.*"), (["lm_head", "nope"], "nope")):
        rc, _, err = _run(
            capsys,
            "sketch",
            "--model",
            model,
            "--data",
            data["code"],
            "--out",
            out,
            "--quiet",
            "--sketch-dim",
            M,
            "--layers",
            *layers,
        )
        assert rc == 2 and err.count("\n") == 1 and says in err and "model.layers.0" in err, err
    rc, _, err = _run(
        capsys,
        "sketch",
        "--model",
        model,
        "--data",
        data["code"],
        "--out",
        out,
        "--quiet",
        "--layers",
        "lm_head",
        "--resume",
    )
    assert rc == 2 and err.count("\n") == 1 and "--layers" in err
    assert not out.exists()
