"""Document scores: exact identity with the pool's cross term, the Gram-identity oracle on
tiny cases (float64), the model path against per-document streams, and the CLI export."""

import json
import math

import pytest
import torch

import updatescope as us
from updatescope.cli import main
from updatescope.pipeline import score_documents
from updatescope.select.documents import score_streams, target_directions
from updatescope.sketch.config import SketchConfig

D, K = 3, 4


def _docs(g, lengths):
    return [
        (
            torch.randn(n, D, generator=g, dtype=torch.float64),
            torch.softmax(torch.randn(n, K, generator=g, dtype=torch.float64), 1)
            - torch.eye(K, dtype=torch.float64)[torch.randint(0, K, (n,), generator=g)],
        )
        for n in lengths
    ]


def _oracle(doc, target):
    """Exact (1/n_D)(1/n_T) Σ_{t,j} (a_t·a_j)²(e_t·e_j)² / ‖F_T‖², with the unbiased (no self-pairs)
    target norm, all by materialised Gram matrices."""
    (a, e), (at, et) = doc, target
    cross = ((a @ at.T).square() * (e @ et.T).square()).mean()
    gt = (at @ at.T).square() * (et @ et.T).square()
    n = at.shape[0]
    return float(cross / ((gt.sum() - gt.diagonal().sum()) / (n * (n - 1))))


def test_scores_sum_to_the_pool_alignment_exactly():
    """n_D·score summed over the pool / N · ‖μ_T‖ / ‖μ_pool‖ is the pool's fisher alignment (same basis)."""
    g = torch.Generator().manual_seed(0)
    cfg = SketchConfig(D, K, sketch_dim=64, seed=3)
    docs, (target,) = _docs(g, [5, 1, 9, 17, 2]), _docs(g, [40])
    t_sig = us.FisherSketch(config=cfg).update(*target).signature()
    res = score_streams(cfg, docs, t_sig)
    pool = (
        us.FisherSketch(config=cfg).update(torch.cat([a for a, _ in docs]), torch.cat([e for _, e in docs])).signature()
    )
    n = pool.count
    via_docs = float((res.score * res.tokens).sum()) / n * math.sqrt(float(t_sig.sq_norm()[0] / pool.sq_norm()[0]))
    assert via_docs == pytest.approx(us.alignment(pool, t_sig).fisher, rel=1e-10)
    for k, name in ((1, "activation"), (2, "error")):  # the marginal scores obey the same identity
        col = res.activation if k == 1 else res.error
        via = float((col * res.tokens).sum()) / n * math.sqrt(float(t_sig.sq_norm()[k] / pool.sq_norm()[k]))
        assert via == pytest.approx(getattr(us.alignment(pool, t_sig), name), rel=1e-10)
    assert (
        res.short.tolist() == [True, True, True, False, True]
        and math.isnan(float(res.se[1]))
        and not math.isnan(float(res.se[0]))
    )


def test_scores_match_the_exact_per_document_oracle():
    """Averaged over independent bases, each document's score matches the Gram-identity value
    within 4 standard errors of that average (measured from the spread over seeds)."""
    g = torch.Generator().manual_seed(1)
    docs, (target,) = _docs(g, [6, 12, 20]), _docs(g, [30])
    exact = torch.tensor([_oracle(doc, target) for doc in docs], dtype=torch.float64)

    # identity check of the oracle itself against the library's exact reference:
    # exact fisher = <F_D, F_T> / (‖F_D‖ ‖F_T‖) = oracle · ‖F_T‖ / ‖F_D‖
    def u_norm(a, e):
        gram = (a @ a.T).square() * (e @ e.T).square()
        return math.sqrt(float(gram.sum() - gram.diagonal().sum()) / (a.shape[0] * (a.shape[0] - 1)))

    ex = us.exact_alignment(*docs[0], *target)
    assert ex.fisher == pytest.approx(_oracle(docs[0], target) * u_norm(*target) / u_norm(*docs[0]), rel=1e-10)
    runs = torch.stack(
        [
            score_streams(
                SketchConfig(D, K, sketch_dim=1024, seed=s),
                docs,
                us.FisherSketch(D, K, sketch_dim=1024, seed=s).update(*target).signature(),
            ).score
            for s in range(12)
        ]
    )
    mean, se = runs.mean(0), runs.std(0) / math.sqrt(runs.shape[0])
    assert torch.all((mean - exact).abs() <= 4 * se + 1e-3 * exact.abs()), (mean, exact, se)
    # negative control: a different target gives different exact scores, beyond that noise
    (other,) = _docs(g, [30])
    wrong = torch.tensor([_oracle(doc, other) for doc in docs], dtype=torch.float64)
    assert torch.any((mean - wrong).abs() > 8 * se)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from test_cli import _save_tiny
    from updatescope.models.hf import load_causal_lm

    path = _save_tiny(tmp_path_factory.mktemp("tiny"), 0)
    return path, *load_causal_lm(str(path))


def _pool():
    g = torch.Generator().manual_seed(0)
    code = "def return class import self if else x y z ( ) : = +".split()
    prose = "the a of to and in is it for on with as at by".split()
    docs = []
    for i in range(12):
        words = code if i % 2 else prose
        n = 3 if i == 4 else 25 + 3 * i
        docs.append(" ".join(words[int(j)] for j in torch.randint(0, len(words), (n,), generator=g)))
    return docs, code, prose


def test_model_scores_equal_per_document_streams(tiny):
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.models.hf import head_fingerprint
    from updatescope.pipeline import SketchOptions, sketch_corpus

    _, model, tok = tiny
    docs, _, _ = _pool()
    target = sketch_corpus(model, tok, docs[1::2], SketchOptions(sketch_dim=256), progress=False)
    res = score_documents(model, tok, docs, target, token_budget=128, progress=False)
    cfg = SketchConfig(16, 64, 256, 0, fingerprint=head_fingerprint(model, tok))
    streams = []
    for d in docs:  # one document at a time: no batching across documents
        ((a, z, y),) = [tuple(b) for b in capture_causal_lm(model, [d], tok, progress=False)]
        streams.append((a, torch.softmax(z, 1) - torch.nn.functional.one_hot(y, 64).float()))
    ref = score_streams(cfg, streams, target)
    torch.testing.assert_close(res.score, ref.score, rtol=1e-4, atol=1e-6)
    assert res.tokens.tolist() == ref.tokens.tolist() and res.short.tolist() == [False] * 4 + [True] + [False] * 7
    # target = the code half: code documents (odd) score above prose documents
    assert float(res.score[1::2].min()) > float(res.score[0::2].max())
    assert torch.all(target_directions(target).isfinite())
    # a target of another model (model fingerprint, widths) is refused before any forward pass;
    # the basis (seed, sketch_dim, maps) is taken from the target
    from dataclasses import replace

    for field, value in (("fingerprint", "0123456789abcdef"), ("act_dim", 17)):
        alien = replace(target, config=replace(target.config, **{field: value}))
        with pytest.raises(us.IncompatibleSignatureError, match=field):
            score_documents(model, tok, docs, alien, progress=False)


def test_model_scores_with_positions_equal_the_counted_rows(tiny):
    """Scores over chosen targets (a completion's tokens) equal the streams of those rows."""
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.models.hf import head_fingerprint
    from updatescope.pipeline import SketchOptions, sketch_corpus

    _, model, tok = tiny
    docs, _, _ = _pool()
    target = sketch_corpus(model, tok, docs[1::2], SketchOptions(sketch_dim=256), progress=False)
    # the second half of each document's targets; document 4 (3 words) keeps one, and an
    # empty position list counts nothing (undefined score, flagged short)
    lengths = [len(tok(d)["input_ids"]) for d in docs]
    positions = [list(range(n // 2, n)) for n in lengths]
    positions[7] = []
    res = score_documents(model, tok, docs, target, token_budget=96, progress=False, positions=positions)
    cfg = SketchConfig(16, 64, 256, 0, fingerprint=head_fingerprint(model, tok))
    streams = []
    for d, pos in zip(docs, positions):
        got = [tuple(b) for b in capture_causal_lm(model, [d], tok, positions=[pos], progress=False)]
        if not got:
            streams.append((torch.zeros(0, 16), torch.zeros(0, 64)))
            continue
        ((a, z, y),) = got
        streams.append((a, torch.softmax(z, 1) - torch.nn.functional.one_hot(y, 64).float()))
    ref = score_streams(cfg, streams, target)
    torch.testing.assert_close(res.score, ref.score, rtol=1e-4, atol=1e-6, equal_nan=True)
    assert res.tokens.tolist() == [len(p) for p in positions]
    assert bool(res.short[7]) and not torch.isfinite(res.score[7])
    with pytest.raises(us.InputError, match="positions"):
        score_documents(model, tok, docs, target, progress=False, positions=positions[:3])


def test_cli_select_writes_topk_and_scores(tiny, tmp_path, capsys):
    from updatescope.pipeline import SketchOptions, sketch_corpus

    path, model, tok = tiny
    docs, _, _ = _pool()
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    us.save_signature(
        sketch_corpus(model, tok, docs[1::2], SketchOptions(sketch_dim=256), progress=False), tmp_path / "t.safetensors"
    )
    out = tmp_path / "subset.jsonl"
    assert (
        main(
            [
                "select",
                "--model",
                str(path),
                "--data",
                str(pool),
                "--target",
                str(tmp_path / "t.safetensors"),
                "--top",
                "4",
                "--out",
                str(out),
                "--quiet",
                "--token-budget",
                "128",
            ]
        )
        == 0
    )
    top = [json.loads(x) for x in out.read_text().splitlines()]
    scores = [json.loads(x) for x in (tmp_path / "subset.scores.jsonl").read_text().splitlines()]
    assert len(top) == 4 and len(scores) == len(docs)
    assert [r["rank"] for r in top] == [1, 2, 3, 4] and all(r["index"] % 2 == 1 for r in top)
    assert [r["text"] for r in top] == [docs[r["index"]] for r in top]  # the export round-trips
    # the exported file is itself a valid pool: select can read it back
    from updatescope.data.textfiles import read_documents

    assert read_documents(out) == [r["text"] for r in top]
    assert scores[4]["short"] and sorted(r["score"] for r in scores)[-1] == top[0]["score"]
    capsys.readouterr()
    bad = [
        ["--top", "0"],
        ["--target", str(pool)],
        ["--data", str(tmp_path / "missing.txt")],
        ["--out", str(tmp_path / "no" / "x.jsonl")],
    ]
    for change in bad:
        argv = {
            "--model": str(path),
            "--data": str(pool),
            "--target": str(tmp_path / "t.safetensors"),
            "--top": "4",
            "--out": str(tmp_path / "s2.jsonl"),
        }
        argv.update(dict(zip(change[::2], change[1::2])))
        rc = main(["select", *[x for kv in argv.items() for x in kv], "--quiet"])
        err = capsys.readouterr().err
        assert rc == 2 and err.count("\n") == 1 and err.startswith("updatescope: error:"), (change, err)
    assert not (tmp_path / "s2.jsonl").exists()


def test_cli_select_tables_export_parquet_and_datasets(tiny, tmp_path, capsys):
    """Rows of a table are scored one by one (completion tokens only with prompt/completion
    columns) and the top rows come back with every column of the pool plus the scores."""
    datasets = pytest.importorskip("datasets")
    import pyarrow.parquet as pq

    from updatescope.pipeline import SketchOptions, sketch_corpus

    path, model, tok = tiny
    docs, _, _ = _pool()
    rows = [
        {"id": i, "prompt": "the a of", "completion": " " + d, "origin": "code" if i % 2 else "prose"}
        for i, d in enumerate(docs)
    ]
    rows[3]["completion"] = ""  # nothing to count: undefined score, never exported
    pool = tmp_path / "pool.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(pool))
    sig = tmp_path / "t.safetensors"
    us.save_signature(sketch_corpus(model, tok, docs[1::2], SketchOptions(sketch_dim=256), progress=False), sig)
    base = [
        "select",
        "--model",
        str(path),
        "--target",
        str(sig),
        "--top",
        "3",
        "--quiet",
        "--prompt-column",
        "prompt",
        "--completion-column",
        "completion",
    ]
    out = tmp_path / "top.parquet"
    assert main([*base, "--data", str(pool), "--out", str(out)]) == 0
    top = pq.read_table(out).to_pylist()
    assert [r["rank"] for r in top] == [1, 2, 3] and all(r["origin"] == "code" for r in top)
    assert all(r["completion"] == rows[r["id"]]["completion"] and r["index"] == r["id"] for r in top)
    scores = [json.loads(x) for x in (tmp_path / "top.scores.jsonl").read_text().splitlines()]
    assert len(scores) == len(rows) and scores[3]["tokens"] == 0 and scores[3]["score"] is None
    # completion tokens only: fewer counted tokens than the whole row
    n_prompt = len(tok("the a of")["input_ids"])
    assert scores[0]["tokens"] == len(tok("the a of" + rows[0]["completion"])["input_ids"]) - n_prompt
    # a datasets folder in, a datasets folder out (chosen from the name without suffix)
    folder = tmp_path / "pool_ds"
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    out_ds = tmp_path / "subset"
    assert main([*base, "--data", str(folder), "--out", str(out_ds)]) == 0
    got = datasets.load_from_disk(str(out_ds))
    assert got["id"] == [r["id"] for r in top] and got["score"] == [r["score"] for r in top]
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    capsys.readouterr()
    # a pool column the export would overwrite is refused before the model loads
    clash = tmp_path / "clash.jsonl"
    clash.write_text("".join(json.dumps({"text": d, "score": 1}) + "\n" for d in docs))
    rc = main(
        [
            "select",
            "--model",
            str(tmp_path / "no-model"),
            "--target",
            str(sig),
            "--top",
            "3",
            "--quiet",
            "--data",
            str(clash),
            "--text-column",
            "text",
            "--out",
            str(tmp_path / "c.jsonl"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "'score'" in err and err.count("\n") == 1
    # a non-empty folder is not a datasets export target
    rc = main([*base, "--data", str(folder), "--out", str(out_ds)])
    err = capsys.readouterr().err
    assert rc == 2 and "not empty" in err
