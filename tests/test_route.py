"""The adapter router (``pipeline.Router``, ``select.route``, ``updatescope route``) on a tiny
random Llama: its bank product equals per-adapter document scoring, it sends each domain's
requests to that domain's adapter, it flags indistinguishable adapters, it sets adapters and
weighted combinations on a real ``PeftModel``, and every bad input is one line, exit 2."""

import json
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from updatescope.cli import main
from updatescope.errors import InputError

peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

CODE = "def return class import self if else x y z ( ) : = +".split()
PROSE = "the a of to and in is it for on with as at by".split()
NUMS = "0 1 2 3 4 5 6 7 8 9 C O N c1 ccc".split()
M = 1024  # sketch size: small enough to be quick, large enough that in-domain gaps are many SEs


def _save_tiny(path, seed, hidden=16):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1}
    for w in CODE + PROSE + NUMS:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=hidden,
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


def _docs(words, n, length, seed):
    g = torch.Generator().manual_seed(seed)
    return [" ".join(words[int(i)] for i in torch.randint(0, len(words), (length,), generator=g)) for _ in range(n)]


def _adapter(model_path, folder, seed, sig=None):
    """A LoRA adapter with random (nonzero) weights on a fresh copy of the model, saved as a
    PEFT folder, with ``sig`` as its signature.safetensors."""
    from updatescope.pipeline import load_model
    from updatescope.signatures.io import save_signature

    model, _ = load_model(str(model_path))
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    pm = peft.get_peft_model(model, cfg)
    pm.save_pretrained(folder)
    if sig is not None:
        save_signature(sig, folder / "signature.safetensors")
    return folder


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """Two saved models, two domain signatures (code, prose), adapters for them, request files."""
    from updatescope.pipeline import Corpus, SketchOptions, load_model, sketch_corpus

    root = tmp_path_factory.mktemp("route")
    model_path = _save_tiny(root / "model", 0)
    other_path = _save_tiny(root / "other", 1)
    model, tok = load_model(str(model_path))
    opts = SketchOptions(sketch_dim=M)
    sigs = {
        name: sketch_corpus(model, tok, Corpus.from_texts(_docs(words, 20, 40, s)), opts, progress=False)
        for name, words, s in (("code", CODE, 1), ("prose", PROSE, 2))
    }
    adapters = {n: _adapter(model_path, root / "adapters" / n, i, sigs[n]) for i, n in enumerate(sigs)}
    requests = root / "requests.jsonl"
    reqs = _docs(CODE, 3, 60, 11) + _docs(PROSE, 3, 60, 12)
    requests.write_text("".join(json.dumps({"text": t}) + "\n" for t in reqs))
    return {
        "root": root,
        "model_path": model_path,
        "other_path": other_path,
        "model": model,
        "tok": tok,
        "sigs": sigs,
        "adapters": adapters,
        "requests": requests,
        "texts": reqs,
        "opts": opts,
    }


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


U32 = 2.0**-24  # float32 unit roundoff


def _float32_term_bound(f, v):
    """Per token, a bound on |float32(f·v32) − f·v| for float32 features f (n, m) and float64
    directions v (A, m): v rounded to float32 (u each) and an m-term float32 inner product
    (γ_m = m·u / (1 − m·u), any summation order), both relative to Σ_j |f_j v_j|.  -> (n, A)"""
    m = f.shape[1]
    gamma = m * U32 / (1 - m * U32)
    return (gamma + U32) * (f.abs().to(torch.float64) @ v.abs().T)


def _se_bound(bound):
    """A bound on the change of sd/√n of n values when each moves by at most bound_t (n,...):
    the centred vector moves by at most ‖bound‖, so sd by at most ‖bound‖/√(n − 1)."""
    n = bound.shape[0]
    return bound.square().sum(0).sqrt() / (n - 1) ** 0.5 / n**0.5


def test_bank_product_equals_per_adapter_document_scores(lib):
    """The joint score and its error are exactly the document score's; the activation and
    error scores come from float32 per-token products, within that rounding's bound."""
    from updatescope.pipeline import Router, score_documents
    from updatescope.pipeline.score import _tokens, token_features

    router = Router(lib["model"], lib["tok"], lib["sigs"])
    scores = router.score(lib["texts"])
    assert scores.score.shape == (6, 2)
    tokens = _tokens(lib["texts"], router.tokenizer, None)
    counted = tokens.counted()
    args = (router.model, router.tokenizer, tokens)
    kw = dict(token_budget=router.token_budget)
    per_doc = [
        torch.cat([f.clone() for f in token_features(*args, [i], router.config, router.head, **kw)])
        for i in range(len(counted))
    ]
    for a, name in enumerate(router.names):
        ref = score_documents(lib["model"], lib["tok"], lib["texts"], lib["sigs"][name], progress=False)
        for got, want in ((scores.score, ref.score), (scores.se, ref.se)):
            torch.testing.assert_close(got[:, a], want, rtol=1e-9, atol=1e-12)
        for k, field in ((1, "activation"), (2, "error")):
            bound = torch.stack([_float32_term_bound(f[:, k], router.bank[a : a + 1, k]).mean() for f in per_doc])
            diff = (getattr(scores, field)[:, a] - getattr(ref, field)).abs()
            assert (diff <= bound + 1e-15).all() and bound.max() < 1e-3 * getattr(ref, field).abs().max()
    assert torch.equal(scores.tokens, ref.tokens)


def test_features_are_the_same_bits_whatever_the_chunk_rows(lib):
    """The router makes errors and features a few rows at a time (``chunk_rows``): every row's
    features are the same bits as ``token_features``' (the documents' scoring) at any chunking."""
    from updatescope.pipeline import Router
    from updatescope.pipeline.score import _tokens, token_features

    router = Router(lib["model"], lib["tok"], lib["sigs"])
    assert router.chunk_rows >= 1
    tokens = _tokens(lib["texts"], router.tokenizer, None)
    keep = list(range(len(lib["texts"])))
    args = (router.model, router.tokenizer, tokens, keep, router.config, router.head)
    want = torch.cat([f.clone() for f in token_features(*args, token_budget=router.token_budget)])
    assert want.shape[0] > 3
    for rows in (router.chunk_rows, 1, 3):
        router.chunk_rows = rows
        got = torch.cat([f.clone() for f in router._features(tokens, keep, progress=False)])
        assert torch.equal(got, want), rows


def test_each_domain_goes_to_its_own_adapter_and_only_shared_signatures_are_flagged(lib):
    from updatescope.pipeline import Corpus, Router, sketch_corpus

    nums = sketch_corpus(
        lib["model"], lib["tok"], Corpus.from_texts(_docs(NUMS, 20, 40, 3)), lib["opts"], progress=False
    )
    router = Router(lib["model"], lib["tok"], {**lib["sigs"], "nums": nums})
    texts = lib["texts"] + _docs(NUMS, 3, 60, 13)
    choices = router.route(texts)
    assert [c.adapters[0] for c in choices] == ["code"] * 3 + ["prose"] * 3 + ["nums"] * 3
    assert not any(c.ambiguous for c in choices)  # gaps are many paired SEs here
    assert all(c.paired and c.gap > 2 * c.gap_se for c in choices)
    # negative control: a third adapter with the code adapter's own signature cannot be told apart
    twin = Router(lib["model"], lib["tok"], {**lib["sigs"], "code_twin": lib["sigs"]["code"]})
    both = twin.route(lib["texts"])
    assert [c.ambiguous for c in both] == [True] * 3 + [False] * 3
    assert all(c.gap == 0 for c in both[:3])


@pytest.mark.parametrize(
    ("counts", "step", "group"),
    [
        ([5, 0, 1, 9, 3, 12, 2], 4, 7),  # requests split across batches and groups
        ([4, 4, 4, 0, 4, 2, 2, 7, 1, 1], 64, 1000),  # one batch: runs of equal lengths, one block each
        ([3, 3, 3, 3, 3, 3], 6, 5),  # runs cut by the batches and the groups
    ],
)
@pytest.mark.parametrize("kernel", ["onednn", "blas"])
def test_large_bank_path_matches_the_exact_path_on_its_candidates(counts, step, group, kernel):
    """CandidateAccumulator (bank scores from mean features, errors for the candidates only)
    against RouteAccumulator's per-token terms for every adapter: same scores for every
    adapter, same se / activation / error / paired gap errors on the candidates, NaN elsewhere,
    the same choices; groups split across batches, requests with 0 or 1 counted tokens, and
    consecutive requests of one length (scored as one batched block); with either float32
    ranking kernel."""
    from updatescope.select.route import CandidateAccumulator, RouteAccumulator, _onednn, bank_terms

    if kernel == "onednn" and _onednn() is None:
        pytest.skip("this PyTorch has no oneDNN")

    g = torch.Generator().manual_seed(0)
    a, m, c = 40, 24, 6
    bank = torch.randn(a, 3, m, generator=g, dtype=torch.float64)
    feats = torch.randn(sum(counts), 3, m, generator=g, dtype=torch.float32)
    names = [f"a{i}" for i in range(a)]
    ex = RouteAccumulator(names, counts)
    ca = CandidateAccumulator(names, counts, bank, candidates=c, group_tokens=group, kernel=kernel)
    assert ca.joint.kernel == kernel
    for s in range(0, feats.shape[0], step):
        ex.update(bank_terms(feats[s : s + step], bank))
        ca.update(feats[s : s + step])
    want, got = ex.compute(), ca.compute()
    close = dict(rtol=1e-12, atol=1e-12, equal_nan=True)
    owner = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    # outside the candidates, the float32 ranking's values
    torch.testing.assert_close(got.score, want.score, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert got.candidates.shape == (len(counts), c) and got.cross.shape == (len(counts), c, c)
    for d, n in enumerate(counts):
        cand = got.candidates[d]
        if n == 0:
            assert (cand == -1).all() and got.score[d].isnan().all()
            continue
        assert torch.equal(cand, torch.argsort(-want.score[d], stable=True)[:c])  # the best c
        rest = torch.ones(a, dtype=torch.bool)
        rest[cand] = False
        for field in ("score", "se", "activation", "error"):
            if field == "se":  # from float32 per-token terms: within that rounding's bound
                bound = _float32_term_bound(feats[owner == d, 0], bank[cand, 0])
                if n > 1:
                    assert ((got.se[d, cand] - want.se[d, cand]).abs() <= _se_bound(bound) + 1e-15).all()
                else:
                    assert got.se[d, cand].isnan().all() and want.se[d, cand].isnan().all()
            else:
                torch.testing.assert_close(getattr(got, field)[d, cand], getattr(want, field)[d, cand], **close)
            if field != "score":
                assert getattr(got, field)[d, rest].isnan().all()
        for x, y in ((0, 1), (1, 4), (0, c - 1)):
            gw, pw = want.gap_se(d, int(cand[x]), int(cand[y]))
            gg, pg = got.gap_se(d, int(cand[x]), int(cand[y]))
            assert pw and pg
            if n > 1:  # the difference's terms move by at most the sum of the two bounds
                pair = bound[:, [x, y]].sum(1, keepdim=True)
                assert abs(gg - gw) <= float(_se_bound(pair)) + 1e-15
            else:
                assert gw != gw and gg != gg
    for x, y in zip(want.choose(2), got.choose(2)):
        assert (x.adapters, x.ambiguous, x.paired) == (y.adapters, y.ambiguous, y.paired)
        assert x.gap == pytest.approx(y.gap, rel=1e-9, nan_ok=True)
    with pytest.raises(RuntimeError, match="counted tokens"):
        CandidateAccumulator(names, [2], bank).update(feats[:3])
    with pytest.raises(InputError, match="ranking copy"):
        CandidateAccumulator(names, [2], bank, joint=bank[:-1, 0].float())


@pytest.mark.parametrize("per", [1, 2])
def test_large_bank_gathers_a_slice_of_requests_at_a_time(monkeypatch, per):
    """A group of many requests is re-scored ``GATHER_BYTES`` of candidate directions at a time:
    the same scores, candidates and errors as with the whole group gathered at once."""
    from updatescope.select import route

    g = torch.Generator().manual_seed(3)
    a, m, c = 30, 16, 4
    bank = torch.randn(a, 3, m, generator=g, dtype=torch.float64)
    counts = [4, 4, 4, 0, 4, 2, 2, 7, 1, 1, 3, 3]
    feats = torch.randn(sum(counts), 3, m, generator=g, dtype=torch.float32)
    names = [f"a{i}" for i in range(a)]

    def run():
        acc = route.CandidateAccumulator(names, counts, bank, candidates=c, group_tokens=10**6)
        return acc.update(feats).compute()

    whole = run()
    monkeypatch.setattr(route, "GATHER_BYTES", per * c * m * 8)
    sliced = run()
    assert torch.equal(whole.candidates, sliced.candidates)
    for field in ("score", "activation", "error", "se", "cross"):
        torch.testing.assert_close(
            getattr(sliced, field), getattr(whole, field), rtol=1e-12, atol=1e-12, equal_nan=True
        )


def test_large_bank_choice_follows_exact_scores_below_float32_resolution():
    """The coarse float32 ranking cannot tell apart directions that differ below its rounding;
    the candidates are re-ordered by their exact scores, so the choice and the gap are the exact
    path's.  Twins (identical directions) keep bank order, also beyond the
    candidates."""
    from updatescope.select.route import CandidateAccumulator, RouteAccumulator, bank_terms

    g = torch.Generator().manual_seed(1)
    m = 16
    base = torch.randn(3, m, generator=g, dtype=torch.float64)
    feats = torch.randn(8, 3, m, generator=g, dtype=torch.float32)
    sign = 1.0 if float(feats[:, 0].to(torch.float64).mean(0) @ base[0]) > 0 else -1.0
    # adapter 3 beats 2 by 1e-12 of its score (2 and 3 are one float32 direction); 4..9 are twins of 0
    bank = torch.randn(10, 3, m, generator=g, dtype=torch.float64) * 0.01
    bank[2] = base * sign
    bank[3] = base * sign * (1 + 1e-12)
    bank[4:] = bank[0]
    names = [f"a{i}" for i in range(10)]
    assert torch.equal(bank[2, 0].float(), bank[3, 0].float())
    ex = RouteAccumulator(names, [8])
    ca = CandidateAccumulator(names, [8], bank, candidates=3)
    ex.update(bank_terms(feats, bank))
    ca.update(feats)
    want, got = ex.compute(), ca.compute()
    assert got.candidates[0, :2].tolist() == [3, 2]
    for x, y in zip(want.choose(2), got.choose(2)):
        assert x.adapters == y.adapters == ("a3", "a2")
        assert x.gap == pytest.approx(y.gap, rel=1e-6) and x.gap > 0
        # (the paired error of a 1e-12 gap is below what sums of products resolve: not compared)
        assert y.paired
    twins = torch.randn(1, 3, m, generator=g, dtype=torch.float64).expand(20, 3, m).contiguous()
    tw = CandidateAccumulator([f"t{i}" for i in range(20)], [8], twins, candidates=4)
    tw.update(feats)
    out = tw.compute()
    assert out.candidates[0].tolist() == [0, 1, 2, 3]
    (c,) = out.choose(1)
    assert c.adapters == ("t0",) and c.gap == 0 and c.ambiguous


def test_router_switches_to_the_large_bank_path_beyond_its_limit(lib):
    from updatescope.pipeline import Router

    sigs = {**lib["sigs"], "code_twin": lib["sigs"]["code"]}
    small = Router(lib["model"], lib["tok"], sigs)
    large = Router(lib["model"], lib["tok"], sigs, paired_limit=2, candidates=2)
    want, got = small.score(lib["texts"]), large.score(lib["texts"])
    assert want.candidates is None and got.candidates is not None
    torch.testing.assert_close(got.score, want.score, rtol=1e-5, atol=1e-6)  # float32 ranking
    for d, cand in enumerate(got.candidates):  # exact on the candidates
        torch.testing.assert_close(got.score[d, cand], want.score[d, cand], rtol=1e-9, atol=1e-12)
    # the third-best adapter is outside every request's 2 candidates: its se is not computed
    assert (got.se.isnan().sum(dim=1) == 1).all()
    assert [(c.adapters, c.ambiguous) for c in small.route(lib["texts"])] == [
        (c.adapters, c.ambiguous) for c in large.route(lib["texts"])
    ]
    with pytest.raises(InputError, match="candidates"):
        Router(lib["model"], lib["tok"], sigs, candidates=1)


def test_top_k_weights_follow_positive_scores():
    from updatescope.select.route import route_weights

    idx, w = route_weights(torch.tensor([0.2, 0.6, -0.1], dtype=torch.float64), 2)
    assert idx == [1, 0] and w == pytest.approx([0.75, 0.25])
    idx, w = route_weights(torch.tensor([-0.2, -0.6, -0.1], dtype=torch.float64), 2)
    assert idx == [2, 0] and w == pytest.approx([0.5, 0.5])
    idx, w = route_weights(torch.tensor([0.5, -0.3, float("nan")], dtype=torch.float64), 3)
    assert idx == [0, 1, 2] and w == pytest.approx([1.0, 0.0, 0.0])


def test_apply_sets_the_adapter_or_a_cached_weighted_combination(lib):
    from updatescope.pipeline import Router, load_model
    from updatescope.select.route import RouteChoice

    base, tok = load_model(str(lib["model_path"]))
    pm = peft.PeftModel.from_pretrained(base, str(lib["adapters"]["code"]), adapter_name="code")
    pm.load_adapter(str(lib["adapters"]["prose"]), adapter_name="prose")
    router = Router(lib["model"], lib["tok"], lib["sigs"], top_k=2)
    assert router.apply(pm, RouteChoice(("prose",), (1.0,), 1.0, 0.1, True, False)) == "prose"
    assert pm.active_adapter == "prose"
    choice = RouteChoice(("code", "prose"), (0.7, 0.3), 0.1, 0.1, True, True)
    name = router.apply(pm, choice)
    assert name.startswith("routed_") and pm.active_adapter == name
    n_adapters = len(pm.peft_config)
    assert router.apply(pm, choice) == name and len(pm.peft_config) == n_adapters  # cached
    layer = pm.base_model.model.model.layers[0].self_attn.q_proj
    want = 0.7 * layer.get_delta_weight("code") + 0.3 * layer.get_delta_weight("prose")
    torch.testing.assert_close(layer.get_delta_weight(name), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(Exception, match="no adapter named"):
        router.apply(pm, "missing")
    # the router's scores come from the base model whatever adapter is active
    assert router.apply(pm, "code") == "code" and pm.active_adapter == "code"


def test_route_cli_writes_one_line_per_request_and_applies(lib, tmp_path, capsys):
    out = tmp_path / "routed.jsonl"
    a = lib["adapters"]
    rc, stdout, err = _run(
        capsys, "route", "--model", lib["model_path"], "--adapters", a["code"], a["prose"],
        "--data", lib["requests"], "--out", out, "--top-k", "2", "--apply", "--quiet", "--json",
    )  # fmt: skip
    assert rc == 0, err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(6))
    assert all(r["source"] == str(lib["requests"]) for r in rows)
    assert [r["adapters"][0] for r in rows] == ["code"] * 3 + ["prose"] * 3
    for r in rows:
        assert set(r["scores"]) == {"code", "prose"} and sum(r["weights"]) == pytest.approx(1.0)
        assert r["ambiguous"] is False and r["loss"] is not None and r["base_loss"] is not None
        assert r["loss"] != r["base_loss"]  # the adapter (random, nonzero) changes the prediction
    assert json.loads(stdout[stdout.index("[") :])[0]["adapters"] == rows[0]["adapters"]


def _bad(lib, tmp_path, case):
    """argv of one bad-input class, and what the one-line error must say."""
    a, root = lib["adapters"], tmp_path
    base = ["route", "--model", lib["model_path"], "--data", lib["requests"], "--out", root / "o.jsonl", "--quiet"]
    two = ["--adapters", a["code"], a["prose"]]

    def copy(src, name):
        dst = root / name
        shutil.copytree(src, dst)
        return dst

    if case == "other-base":
        d = copy(a["code"], "ad_x")
        cfg = json.loads((d / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = str(lib["other_path"])
        (d / "adapter_config.json").write_text(json.dumps(cfg))
        return [*base, "--adapters", d, a["prose"]], "trained on"
    if case == "shapes":
        from safetensors.torch import save_file

        d = copy(a["code"], "ad_wide")
        cfg = json.loads((d / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = None
        (d / "adapter_config.json").write_text(json.dumps(cfg))
        save_file(
            {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(2, 32)},
            str(d / "adapter_model.safetensors"),
        )
        return [*base, "--adapters", d, a["prose"]], "does not fit"
    if case == "other-model-sig":
        from updatescope.pipeline import load_model, sketch_corpus
        from updatescope.pipeline.corpus import Corpus
        from updatescope.signatures.io import save_signature

        d = copy(a["code"], "ad_y")
        m2, t2 = load_model(str(lib["other_path"]))
        sig = sketch_corpus(m2, t2, Corpus.from_texts(_docs(CODE, 4, 20, 3)), lib["opts"], progress=False)
        save_signature(sig, d / "signature.safetensors")
        e = copy(a["prose"], "ad_z")
        sig = sketch_corpus(m2, t2, Corpus.from_texts(_docs(PROSE, 4, 20, 3)), lib["opts"], progress=False)
        save_signature(sig, e / "signature.safetensors")
        return [*base, "--adapters", d, e], "not made with this model"
    if case == "other-basis":
        from updatescope.pipeline import SketchOptions, sketch_corpus
        from updatescope.pipeline.corpus import Corpus
        from updatescope.signatures.io import save_signature

        d = copy(a["code"], "ad_seed")
        docs = Corpus.from_texts(_docs(CODE, 4, 20, 3))
        sig = sketch_corpus(lib["model"], lib["tok"], docs, SketchOptions(sketch_dim=M, seed=5), progress=False)
        save_signature(sig, d / "signature.safetensors")
        return [*base, "--adapters", d, a["prose"]], "seed"
    if case == "network-sig":
        from safetensors.torch import save_file

        from updatescope.network.io import NETWORK_FORMAT

        d = copy(a["code"], "ad_net")
        save_file({"x": torch.zeros(1)}, str(d / "signature.safetensors"), metadata={"format": NETWORK_FORMAT})
        return [*base, "--adapters", d, a["prose"]], "network (layer) signature"
    if case == "no-signature":
        d = copy(a["code"], "ad_nosig")
        (d / "signature.safetensors").unlink()
        return [*base, "--adapters", d, a["prose"]], "has no signature"
    if case == "same-path":
        return [*base, "--adapters", a["code"], str(a["code"]) + "/", a["prose"]], "same folder"
    if case == "symlink":
        link = root / "link"
        os.symlink(a["code"], link)
        return [*base, "--adapters", a["code"], link], "same folder"
    if case == "same-content":
        return [*base, "--adapters", a["code"], copy(a["code"], "ad_copy")], "identical weights"
    if case == "empty-request":
        p = root / "req.jsonl"
        p.write_text(json.dumps({"text": "def x"}) + "\n" + json.dumps({"text": "  "}) + "\n")
        return [*base[:4], p, *base[5:], *two], "empty request"
    if case == "empty-file":
        p = root / "req.txt"
        p.write_text("")
        return [*base[:4], p, *base[5:], *two], "empty"
    if case == "top-k-zero":
        return [*base, *two, "--top-k", "0"], "--top-k"
    if case == "top-k-large":
        return [*base, *two, "--top-k", "3"], "larger than the library"
    if case == "not-peft":
        d = root / "plain"
        d.mkdir()
        (d / "weights.bin").write_bytes(b"x")
        return [*base, "--adapters", d, a["prose"]], "not a PEFT adapter folder"
    raise AssertionError(case)


BAD = [
    "other-base",
    "shapes",
    "other-model-sig",
    "other-basis",
    "network-sig",
    "no-signature",
    "same-path",
    "symlink",
    "same-content",
    "empty-request",
    "empty-file",
    "top-k-zero",
    "top-k-large",
    "not-peft",
]


AFTER_LOAD = {"shapes", "other-model-sig"}  # need the loaded model's layers / fingerprint


@pytest.mark.parametrize("case", BAD)
def test_route_bad_input_one_line_exit_2_nothing_written(lib, tmp_path, capsys, monkeypatch, case):
    argv, says = _bad(lib, tmp_path, case)
    if case not in AFTER_LOAD:  # refused before the model loads: loading it would be a failure

        def no_load(*a, **k):
            raise RuntimeError("the model was loaded")

        monkeypatch.setattr("updatescope.pipeline.load_model", no_load)
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, (case, out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and says in lines[0], (case, err)
    assert not (tmp_path / "o.jsonl").exists()


GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide-route.md"


def test_guide_states_what_is_measured_from_the_record():
    """The guide's evidence comes from the routing record through generated blocks, says which
    variant ran, and names the routers users have."""
    text = GUIDE.read_text()
    assert "<!-- generated: routingverdicts routing_" in text and "<!-- generated: routingguide routing_" in text
    assert "Arrow" in text and "embedding" in text
    full = "<!-- generated: routingverdicts routing_full -->"
    quick = "<!-- generated: routingverdicts routing_quick -->"
    if full in text:  # the powered record is shown first, and the prose says so
        assert quick not in text or text.index(full) < text.index(quick)
        assert "powered run (the full library, three adapter-training seeds) comes first" in " ".join(text.split())
        assert "Only the quick variant has run so far" not in " ".join(text.split())
        assert "Not yet run: the full domain library" not in text
    elif quick in text:
        assert "Only the quick variant has run so far" in " ".join(text.split())


def test_guide_example_runs(lib, tmp_path, monkeypatch, capsys):
    """docs/guide-route.md's worked example, as written, on the tiny model in place of SmolLM2."""
    block = re.search(
        r"<!-- route-example:start -->\s*```python\n(.*?)```\s*```bash\n(.*?)```\s*<!-- route-example:end -->",
        GUIDE.read_text(),
        re.S,
    )
    assert block, "docs/guide-route.md lost its example blocks"
    model = str(lib["model_path"])
    monkeypatch.chdir(tmp_path)
    code = block.group(1)
    assert 'MODEL = "smollm2"' in code
    exec(compile(code.replace('MODEL = "smollm2"', f"MODEL = {model!r}"), "guide-route.md", "exec"), {})
    for line in block.group(2).splitlines():
        if not line.strip():
            continue
        argv = [model if a == "smollm2" else a for a in shlex.split(line)]
        assert argv[0] == "updatescope"
        rc = main(argv[1:] + (["--quiet"] if argv[1] in ("sketch", "route") else []))
        out, err = capsys.readouterr()
        assert rc == 0, f"{line}: {err}"
    rows = [json.loads(r) for r in (tmp_path / "routed.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(6))
    assert all(r["adapters"][0] in {"http", "space"} and r["loss"] is not None for r in rows)


def test_best_is_the_stable_descending_order_of_the_finite_scores():
    """``_best`` (the candidates of a large bank) equals ``argsort(-scores, stable=True)[:, :c]``
    with non-finite scores last: on distinct scores, on ties inside the top c and at its edge,
    and on NaN and infinite scores."""
    from updatescope.select.route import _best

    g = torch.Generator().manual_seed(3)
    distinct = torch.randn(6, 50, generator=g, dtype=torch.float64)
    tied = torch.randint(0, 5, (6, 50), generator=g).to(torch.float64)  # ties everywhere, edges included
    inner = distinct.clone()
    inner[:, 7] = inner[:, 3] = inner.max() + 1  # a tie among the best, not at the edge
    odd = distinct.clone()
    odd[0, :4] = float("nan")
    odd[1, 10] = float("inf")
    odd[2, 11] = -float("inf")
    for scores in (distinct, tied, inner, odd, distinct.float(), distinct.T.contiguous().T):
        key = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -torch.inf))
        for c in (2, 5, 16):
            assert torch.equal(_best(scores, c), torch.argsort(-key, dim=1, stable=True)[:, :c])


def test_coarse_ranking_over_bank_blocks_is_the_float32_product():
    """``bank_choice`` reads the float32 ranking copy ``RANK_ROWS`` rows at a time: on a bank of
    a few blocks and a partial one, its scores are the one-product float32 scores within float32
    rounding of |mean||v| per entry, and its candidates are ``_best`` of them."""
    from updatescope.select.route import RANK_ROWS, _best, bank_choice

    g = torch.Generator().manual_seed(4)
    a, m = 2 * RANK_ROWS + 37, 64
    joint = torch.randn(a, m, generator=g)
    means = torch.randn(5, m, generator=g, dtype=torch.float64)
    scores, cand = bank_choice(means, joint, 8)
    assert scores.shape == (5, a) and scores.dtype == torch.float64
    whole = means.float() @ joint.T
    bound = 8 * torch.finfo(torch.float32).eps * m * (means.norm(dim=1)[:, None] * joint.double().norm(dim=1))
    assert bool(((scores - whole.double()).abs() <= bound).all())
    assert torch.equal(cand, _best(scores, 8))


def test_ranking_kernels_agree_within_float32_rounding(monkeypatch):
    """The oneDNN ranking copy (packed) and the BLAS one give every adapter's score within
    float32 rounding of |mean||v| of the float64 product, for any group size (including one
    request and more than the packing's ``RANK_BATCH``), and per-token products within the same
    bound; bad kernels and shapes are one-line errors."""
    from updatescope.select import route
    from updatescope.select.route import RANK_BATCH, RANK_ROWS, RankingBank, _best, _onednn, bank_choice

    if _onednn() is None:
        pytest.skip("this PyTorch has no oneDNN")
    g = torch.Generator().manual_seed(5)
    a, m = RANK_ROWS + 77, 96
    joint = torch.randn(a, m, generator=g, dtype=torch.float64)
    banks = {k: RankingBank(joint, k) for k in ("onednn", "blas")}
    assert RankingBank(joint).kernel == "onednn" and len(banks["blas"]) == a
    eps = torch.finfo(torch.float32).eps
    for groups in (1, 7, RANK_BATCH + 3):
        means = torch.randn(groups, m, generator=g, dtype=torch.float64)
        exact = means @ joint.T
        bound = 8 * eps * m * (means.norm(dim=1)[:, None] * joint.norm(dim=1))
        for rank in banks.values():
            scores, cand = bank_choice(means, rank, 8)
            assert scores.shape == (groups, a) and scores.dtype == torch.float64
            assert bool(((scores - exact).abs() <= bound).all())
            assert torch.equal(cand, _best(scores, 8))
    feats = torch.randn(3, 11, m, generator=g)
    dirs = joint[:12].float().view(3, 4, m)
    want = torch.bmm(feats.double(), dirs.double().transpose(1, 2))
    tb = 8 * eps * m * (feats.double().norm(dim=2)[..., None] * dirs.double().norm(dim=2)[:, None, :])
    for rank in banks.values():
        got = rank.products(feats, dirs)
        assert got.shape == (3, 11, 4) and got.dtype == torch.float32
        assert bool(((got.double() - want).abs() <= tb).all())
    with pytest.raises(InputError, match="kernel must be one of"):
        RankingBank(joint, "fast")
    monkeypatch.setattr(route, "_onednn", lambda: None)  # a PyTorch without oneDNN: BLAS, or one line
    assert RankingBank(joint).kernel == "blas"
    with pytest.raises(InputError, match="oneDNN ranking kernel needs"):
        RankingBank(joint, "onednn")
    with pytest.raises(InputError, match=r"\(A, m\)"):
        RankingBank(joint[None])
