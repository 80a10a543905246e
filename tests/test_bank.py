"""Signature bank: query equals pairwise alignment, config refusal, append, dedup, CLI."""

import json
import math

import numpy as np
import pytest
import torch

import updatescope as us
from updatescope.cli import main
from updatescope.errors import IncompatibleSignatureError, SignatureFileError
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.select.bank_query import query
from updatescope.signatures.bank import create_bank, dedup, fisher_scores, open_bank

M = 256


@pytest.fixture(scope="module")
def family():
    fam = HeadTaskFamily(act_dim=16, out_dim=64)
    sigs = {
        f"c{c}b{b}": us.FisherSketch(16, 64, sketch_dim=M, seed=0)
        .update_logits(*fam.sample(c, b, 300, seed=10 * c + b))
        .signature(name=f"c{c}b{b}")
        for c in range(3)
        for b in range(3)
    }
    target = us.FisherSketch(16, 64, sketch_dim=M, seed=0).update_logits(*fam.sample(0, 0, 300, seed=99)).signature()
    return sigs, target


def _bank(tmp_path, sigs):
    return create_bank(tmp_path / "bank", next(iter(sigs.values())).config).append(list(sigs.values()), list(sigs))


def test_query_equals_pairwise_alignment_for_every_entry(tmp_path, family):
    sigs, target = family
    bank = _bank(tmp_path, sigs)
    ranking = query(open_bank(tmp_path / "bank"), target, top=None)
    assert len(ranking.rows) == len(sigs)
    for row in ranking.rows:
        al = us.alignment(sigs[row.source], target)
        for k in ("fisher", "activation", "error", "coupling", "fisher_se", "activation_se", "error_se", "coupling_se"):
            assert getattr(row, k) == getattr(al, k), (row.source, k)  # rebuilt signatures are bit-identical
        assert row.trusted == al.trusted
    # stage 1: the one matrix product equals alignment's fisher up to float32 rounding
    scores = fisher_scores(bank, target)
    exact = np.array([us.alignment(sigs[n], target).fisher for n in bank.names])
    np.testing.assert_allclose(scores, exact, rtol=1e-5, atol=1e-6)
    # rows ordered by fisher; the label-block structure puts b0 sources first
    assert {r.source for r in ranking.rows[:3]} == {"c0b0", "c1b0", "c2b0"}
    top2 = query(bank, target, top=2)
    assert [r.source for r in top2.rows] == [r.source for r in ranking.rows[:2]]
    # by a marginal: every entry's full alignment, in that marginal's order (the same as rank)
    for by in ("error", "activation"):
        got = query(bank, target, top=4, by=by)
        ref = us.rank_sources(target, sigs, by=by)
        assert got.by == by and [r.source for r in got.rows] == [r.source for r in ref.rows[:4]]
        assert [getattr(r, by) for r in got.rows] == [getattr(r, by) for r in ref.rows[:4]]
    with pytest.raises(us.InputError, match="rank by 'coupling'"):
        query(bank, target, by="coupling")


def test_signature_round_trip_and_cheap_append(tmp_path, family):
    sigs, _ = family
    names = list(sigs)
    bank = create_bank(tmp_path / "bank", sigs[names[0]].config).append([sigs[names[0]]], [names[0]])
    size = (tmp_path / "bank" / "vectors.f32").stat().st_size
    # an interrupted append leaves junk beyond the committed rows: the next append cuts it off
    with open(tmp_path / "bank" / "vectors.f32", "ab") as fh:
        fh.write(b"junk")
    open_bank(tmp_path / "bank").append([sigs[n] for n in names[1:]], names[1:])
    bank = open_bank(tmp_path / "bank")
    assert len(bank) == len(sigs) and (tmp_path / "bank" / "vectors.f32").stat().st_size == size * len(sigs)
    for i, n in enumerate(names):
        s = bank.signature(i)
        assert s.same_state(sigs[n]) and s.config == sigs[n].config and dict(s.meta) == dict(sigs[n].meta)
    assert bank.rows[3]["tokens"] == sigs[names[3]].count


def test_bank_refuses_other_config_and_duplicates(tmp_path, family):
    sigs, target = family
    bank = _bank(tmp_path, sigs)
    other_seed = (
        us.FisherSketch(16, 64, sketch_dim=M, seed=1).update(torch.randn(10, 16), torch.randn(10, 64)).signature()
    )
    with pytest.raises(IncompatibleSignatureError) as exc:
        bank.append([other_seed], ["x"])
    assert exc.value.field == "seed"
    cfg = target.config
    other_model = (
        us.FisherSketch(config=type(cfg)(**{**cfg.to_dict(), "fingerprint": "abc"}))
        .update(torch.randn(10, 16), torch.randn(10, 64))
        .signature()
    )
    with pytest.raises(IncompatibleSignatureError, match="fingerprint"):
        bank.append([other_model], ["y"])
    with pytest.raises(us.InputError, match="fingerprint"):
        query(bank, other_model)
    with pytest.raises(us.InputError, match="already has"):
        bank.append([target], ["c0b0"])
    assert len(open_bank(tmp_path / "bank")) == len(sigs)  # refused appends wrote nothing


def test_dedup_finds_halves_of_one_corpus_not_different_corpora(tmp_path):
    fam = HeadTaskFamily(act_dim=16, out_dim=64)

    def sig(c, b, seed):
        return (
            us.FisherSketch(16, 64, sketch_dim=M, seed=0).update_logits(*fam.sample(c, b, 400, seed=seed)).signature()
        )

    sigs = {"a1": sig(0, 0, 1), "a2": sig(0, 0, 2), "b": sig(1, 1, 3), "c": sig(2, 2, 4)}
    pairs = dedup(_bank(tmp_path, sigs))
    assert [(p.first, p.second) for p in pairs] == [("a1", "a2")]  # negative control: b, c are not duplicates


def test_cli_index_build_query_dedup(tmp_path, family, capsys):
    sigs, target = family
    d = tmp_path / "sigs"
    d.mkdir()
    for n, s in sigs.items():
        us.save_signature(s, d / f"{n}.safetensors")
    us.save_signature(target, tmp_path / "t.safetensors")
    assert main(["index", "build", str(d), "--out", str(tmp_path / "bank")]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "index",
                "query",
                str(tmp_path / "bank"),
                "--target",
                str(tmp_path / "t.safetensors"),
                "--top",
                "3",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 3 and out["entries"] == len(sigs)
    assert math.isclose(out["rows"][0]["fisher"], us.alignment(sigs[out["rows"][0]["source"]], target).fisher)
    assert main(["index", "query", str(tmp_path / "bank"), "--target", str(tmp_path / "t.safetensors")]) == 0
    capsys.readouterr()
    bank_args = ["index", "query", str(tmp_path / "bank"), "--target", str(tmp_path / "t.safetensors")]
    assert main([*bank_args, "--by", "error", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    errors = [r["error"] for r in out["rows"]]
    assert out["by"] == "error" and errors == sorted(errors, reverse=True)
    assert main(["index", "dedup", str(tmp_path / "bank"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"entries": len(sigs), "duplicates": []}
    # append to the bank, then bad input: one line, exit 2
    assert main(["index", "build", str(tmp_path / "t.safetensors"), "--out", str(tmp_path / "bank"), "--append"]) == 0
    assert len(open_bank(tmp_path / "bank")) == len(sigs) + 1
    capsys.readouterr()
    odd = us.FisherSketch(16, 64, sketch_dim=M, seed=5).update(torch.randn(8, 16), torch.randn(8, 64)).signature()
    us.save_signature(odd, tmp_path / "odd.safetensors")
    for argv in (
        ["index", "build", str(d), str(tmp_path / "odd.safetensors"), "--out", str(tmp_path / "b2")],
        ["index", "build", str(d), "--out", str(tmp_path / "bank")],
        ["index", "query", str(tmp_path / "nope"), "--target", str(tmp_path / "t.safetensors")],
        ["index", "query", str(tmp_path / "bank"), "--target", str(tmp_path / "odd.safetensors")],
        ["index", "query", str(tmp_path / "bank"), "--target", str(tmp_path / "odd.safetensors"), "--by", "error"],
        ["index", "query", str(tmp_path / "bank"), "--target", str(tmp_path / "t.safetensors"), "--top", "0"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("updatescope: error:"), err
    assert not (tmp_path / "b2").exists()  # refused before anything was written


def test_damaged_bank_is_refused(tmp_path, family):
    sigs, target = family
    _bank(tmp_path, sigs)
    with open(tmp_path / "bank" / "state.f64", "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(SignatureFileError, match="shorter"):
        open_bank(tmp_path / "bank")
