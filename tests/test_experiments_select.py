"""The ``select`` experiment: config checks, a tiny end-to-end run with its truth store, DSIR
through its package, the verdict rule, and the per-example gradient baseline against
autograd on a tiny Llama."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from _tiny_lm import TINY_LORA, WordTokenizer, reproduce, tiny_llama
from updatescope.errors import InputError, MissingExtraError
from updatescope.experiments import heads
from updatescope.experiments.configs import LoRAConfig
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.select_evidence import runner as select_evidence
from updatescope.experiments.select_evidence import selectors
from updatescope.experiments.select_evidence.config import SelectEvidenceConfig
from updatescope.experiments.select_evidence.dsir import dsir_scores
from updatescope.experiments.select_evidence.verdicts import COMPARISONS as VERDICT_COMPARISONS
from updatescope.experiments.select_evidence.verdicts import final_word, selection_verdicts
from updatescope.select.baselines import gradient_cosine_scores, project_rows

VOCAB = {
    "a": "alpha beta gamma delta",
    "b": "one two three four",
    "c": "red green blue cyan",
    "d": "north south east west",
}


def _texts(name, split, n_docs, doc_chars):
    words = VOCAB[name[-1]].split()
    salt = {"sketch": 0, "train": 1, "eval": 2}[split]
    n = 40 if n_docs is None else n_docs
    docs = [" ".join(words[(i * 7 + j + salt) % 4] for j in range(12 + i % 3))[:doc_chars] for i in range(n)]
    return docs if n_docs is None else docs[: min(n_docs, 40)]


# ------------------------------------------------------------------------------ config
def test_defaults_are_valid_and_quick_is_small():
    full, quick = SelectEvidenceConfig.defaults(False, 3), SelectEvidenceConfig.defaults(True, 3)
    assert full.seed == quick.seed == 3 and quick.quick and not full.quick
    # the full design: >= 2,000 documents from >= 10 domains, >= 6 targets, 5% and 20%, >= 3 seeds
    assert full.n_pool >= 2000 and len(full.pool) >= 10 and len(full.targets) >= 6
    assert set(full.budgets) == {0.05, 0.2} and full.seeds >= 3
    assert quick.seeds >= 3 and quick.n_pool <= 240 and len(quick.budgets) == 1 and len(quick.targets) == 2
    assert full.k(0.2) == round(0.2 * full.n_pool) and full.steps(full.k(0.2)) == -(-full.k(0.2) // full.lora.batch)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"targets": ("reviews",)}, "targets"),
        ({"targets": ()}, "targets"),
        ({"budgets": (1.5,)}, "budget"),
        ({"budgets": (0.1, 0.1)}, "budgets"),
        ({"budgets": ()}, "budgets"),
        ({"budgets": (1e-6,)}, "keeps no document"),
        ({"seeds": 2}, "seeds"),
        ({"pool": ("wiki_people",), "targets": ("wiki_people",)}, "pool"),
        ({"proj_dim": 0}, "proj_dim"),
        ({"epochs": 0}, "epochs"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"dsir_min_length": -1}, "dsir_min_length"),
        ({"dsir_buckets": 0}, "dsir_buckets"),
        ({"doc_chars": 5}, "doc_chars"),
        ({"truth_store": " "}, "truth_store"),
        ({"sketch_dim": 3}, "sketch"),
    ],
)
def test_bad_configs_are_refused(change, words):
    with pytest.raises(InputError, match=words):
        dataclasses.replace(SelectEvidenceConfig(), **change)


def test_a_config_asking_for_more_documents_than_exist_is_refused(monkeypatch):
    monkeypatch.setattr(select_evidence, "load_texts", _texts)  # 40 pieces per domain split
    cfg = SelectEvidenceConfig(pool=("dom_a", "dom_b"), targets=("dom_a",), docs_per_domain=30, budgets=(0.2,))
    # the oracle needs 30 + 12 train pieces of the target, there are 40
    with pytest.raises(InputError, match=r"dom_a/train has 40 < 42"):
        select_evidence.check_available(cfg)
    select_evidence.check_available(dataclasses.replace(cfg, docs_per_domain=20, target_docs=10, eval_docs=10))


def test_pieces_cut_documents_and_drop_a_short_tail(monkeypatch):
    from updatescope.data import domains

    monkeypatch.setattr(domains, "load_domain", lambda name, split: ["x" * 24, "y" * 15])
    # 24 = 10 + 10 + 4 (a tail under half a piece: dropped); 15 = 10 + 5 (half a piece: kept)
    assert select_evidence.load_texts("any", "train", None, 10) == ["x" * 10, "x" * 10, "y" * 10, "y" * 5]
    assert select_evidence.load_texts("any", "train", 2, 10) == ["x" * 10, "x" * 10]


# --------------------------------------------------------------------- tiny end to end
@pytest.fixture
def tiny(monkeypatch, tmp_path):
    from _tiny_lm import loader

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(heads, "load_model", loader(vocab_size=64))
    monkeypatch.setattr(select_evidence, "load_texts", _texts)
    return tmp_path


TINY = {
    "pool": ["dom_a", "dom_b", "dom_c", "dom_d"],
    "targets": ["dom_a", "dom_c"],
    "docs_per_domain": 4,
    "doc_chars": 200,
    "target_docs": 3,
    "eval_docs": 3,
    "budgets": [0.25],
    "sketch_dim": 64,
    "proj_dim": 32,
    "warmup_steps": 2,
    "dsir_buckets": 512,
    "n_boot": 200,
    "lora": {**TINY_LORA, "steps": 1},
}


def test_select_tiny_run_and_resume_from_the_truth_store(tiny, monkeypatch):
    store = tiny / "truth"
    rec = reproduce("select", tiny / "out", {**TINY, "truth_store": str(store)})
    m = rec["metrics"]
    assert m["n_pool"] == 16 and sorted(m["origin"]) == sorted(sum(([d] * 4 for d in TINY["pool"]), []))
    assert m["budgets"] == {"0.25": 4} and set(m["methods"]) == set(select_evidence.METHODS)
    for t in ("dom_a", "dom_c"):
        for name in select_evidence.METHODS:
            vals = m["reduction"][t][name]["0.25"]
            assert len(vals) == 3 and all(math.isfinite(v) for v in vals)
            if name not in ("random", "oracle"):
                sel = m["selected"][t][name]["0.25"]
                sc = m["scores"][t][name]
                assert len(set(sel)) == 4  # the top-k of a score is the k highest scores
                assert min(sc[i] for i in sel) >= max(s for i, s in enumerate(sc) if i not in sel)
        # the oracle trains on the target's own train pieces after the pool's
        assert m["selected"][t]["oracle"]["0.25"] == [0, 1, 2, 3] and m["targets"][t]["oracle_docs"] == 4
    fs = m["methods"]["fisher"]["by_budget"]["0.25"]
    want = sum(m["origin"][i] == t for t in ("dom_a", "dom_c") for i in m["selected"][t]["fisher"]["0.25"]) / 8
    assert fs["own_domain_fraction"] == pytest.approx(want)
    assert m["methods"]["oracle"]["by_budget"]["0.25"]["own_domain_fraction"] == 1.0
    assert m["methods"]["per_example_gradient"]["cost"]["bytes_per_doc"] == 8 * 32
    assert m["methods"]["dsir"]["cost"]["bytes_per_doc"] == 8 * 512
    for meth in m["methods"].values():
        assert meth["cost"]["seconds"] >= 0 and meth["cost"]["peak_bytes"] >= 0
    rows = m["verdicts"]["comparisons"]
    assert [r["comparison"] for r in rows] == [c[0] for c in VERDICT_COMPARISONS]
    assert all(r["n_units"] == 6 and r["verdict"] in ("better", "worse", "no difference") for r in rows)
    assert m["finetuning"]["count"] == 2 * len(select_evidence.METHODS) * 3 == m["finetuning"]["computed"]
    assert (tiny / "out" / "select.png").is_file()
    fits = [p for p in store.rglob("*.json.gz") if "scores" not in p.relative_to(store).parts]
    assert len(fits) == m["finetuning"]["count"]
    # every group of scores is kept too: FisherSketch and DSIR per target, the two head-input
    # baselines together, the per-example gradients
    assert len(list((store / "scores").glob("*.json.gz"))) == 2 + 1 + 2 + 1
    assert not any(meth["cost"].get("stored") for meth in m["methods"].values())
    # a second sitting reads every score and fine-tuning from the store: same numbers and
    # costs, nothing computed, and no block input captured (a real pool's take hours)
    captured = []
    real = selectors.document_blocks
    monkeypatch.setattr(selectors, "document_blocks", lambda *a, **k: captured.append(1) or real(*a, **k))
    again = reproduce("select", tiny / "again", {**TINY, "truth_store": str(store)})
    a = again["metrics"]
    assert a["reduction"] == m["reduction"] and a["finetuning"]["computed"] == 0 and not captured
    assert a["scores"] == m["scores"] and a["selected"] == m["selected"] and a["pool_tokens"] == m["pool_tokens"]
    for name, meth in a["methods"].items():
        first = {k: v for k, v in m["methods"][name]["cost"].items() if k != "stored"}
        assert {k: v for k, v in meth["cost"].items() if k != "stored"} == first
        assert bool(meth["cost"].get("stored")) is (name in selectors.SCORED)
    # a fine-tuning claimed by another live process sharing the store is not run here: the run
    # waits for its result to be saved, then records the same numbers
    from _claims import held_by_another_process
    from updatescope.experiments.groundtruth import lora as lora_gt
    from updatescope.experiments.groundtruth import store as st

    fit = sorted(fits)[0]
    claim = fit.parent / f".{fit.name[: -len('.json.gz')]}.claim"
    monkeypatch.setattr(lora_gt, "CLAIM_POLL", 0.05)
    asked = []
    real_claim = st.claim_file
    monkeypatch.setattr(st, "claim_file", lambda path: asked.append(path) or real_claim(path))
    with held_by_another_process(claim, fit, tiny / "kept.json.gz", asked):
        shared = reproduce("select", tiny / "shared", {**TINY, "truth_store": str(store)})
    assert asked and shared["metrics"]["finetuning"]["computed"] == 0
    assert shared["metrics"]["reduction"] == m["reduction"] and not claim.exists()
    # a store of another recipe is refused, naming the file
    with pytest.raises(InputError, match="truth store"):
        reproduce("select", tiny / "other", {**TINY, "truth_store": str(store), "lora": {**TINY["lora"], "lr": 2e-2}})


# ---------------------------------------------------------------------------- DSIR
def test_dsir_ranks_a_document_with_the_target_ngrams_above_an_unrelated_one():
    pytest.importorskip("data_selection")
    target = ["the river runs north past the old mill", "the old mill stands by the river bank"]
    pool = [
        "import os\nimport sys\nprint(sys.argv)",
        "the river bank by the old mill was flooded",
        "quarterly revenue grew fast while shares fell sharply today",
        "",
        "blue sky",
    ]
    scores, dropped = dsir_scores(pool, target, num_buckets=1000, min_length=1)
    # the weight sums over n-grams (not normalised by length): compare documents of 9-10 words
    assert scores[1] > scores[0] and scores[1] > scores[2]
    assert math.isnan(scores[3]) and dropped == 1 and math.isfinite(scores[4])  # below min_length: no score, counted
    # the package's own length filter, raised: the short documents lose their score
    s5, d5 = dsir_scores(pool, target, num_buckets=1000, min_length=6)
    assert d5 == 2 and math.isnan(s5[4]) and s5[1] == pytest.approx(scores[1])  # the fit is the same
    assert select_evidence.top_k(torch.from_numpy(s5), 2)[0] == 1  # short documents filtered: the match first


def test_missing_dsir_package_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "data_selection":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingExtraError, match=r"updatescope\[dsir\]"):
        dsir_scores(["a b"], ["a b"])


# ------------------------------------------------------------------------- verdicts
def _reduction(delta_by_target, seeds=(0, 1, 2)):
    """Per target, FisherSketch at 1.0 + delta + small seed noise, the baselines at 1.0."""
    out = {}
    for i, (t, delta) in enumerate(delta_by_target.items()):
        base = [1.0 + 0.01 * ((i + s) % 3) for s in seeds]
        out[t] = {n: {0.05: list(base)} for n in ("random", "dsir", "embedding", "per_example_gradient")}
        out[t]["fisher"] = {0.05: [b + delta for b in base]}
    return out


@pytest.mark.parametrize("sign, word", [(1, "better"), (-1, "worse")])
def test_verdicts_follow_the_sign_and_flip(sign, word):
    targets = {f"t{i}": sign * (0.05 + 0.01 * i) for i in range(6)}
    v = selection_verdicts(_reduction(targets), [0, 1, 2], n_boot=500)
    assert [r["verdict"] for r in v["comparisons"]] == [word] * 4
    assert all(r["n_units"] == 18 and r["n_targets"] == 6 for r in v["comparisons"])


def test_a_win_on_one_target_only_is_not_a_verdict():
    # one target carries the whole difference: the unit test is significant, the bootstrap
    # clustered by target is not, so the rule says no difference
    targets = {f"t{i}": (0.5 if i == 0 else 0.0) for i in range(6)}
    red = _reduction(targets)
    for i in range(1, 6):  # tiny ties broken both ways on the other targets
        red[f"t{i}"]["fisher"][0.05] = [
            x + (1e-3 if (i + j) % 2 else -1e-3) for j, x in enumerate(red[f"t{i}"]["fisher"][0.05])
        ]
    v = selection_verdicts(red, [0, 1, 2], n_boot=500)
    assert all(r["verdict"] == "no difference" for r in v["comparisons"])
    assert final_word("better", [0.1, 0.2]) == "better" and final_word("better", [-0.1, 0.2]) == "no difference"
    assert final_word("worse", [-0.2, -0.1]) == "worse" and final_word("worse", None) == "no difference"
    assert final_word("no difference", [0.1, 0.2]) == "no difference"


# ------------------------------------------------------------ per-example gradients
def _tiny_tail(n_docs):
    model, tok = tiny_llama(vocab_size=64, hidden=16, seed=1), WordTokenizer(64)
    docs = [" ".join(VOCAB["abc"[i % 3]].split()[(i + j) % 4] for j in range(5 + 2 * i)) for i in range(n_docs)]
    parts = [lora_gt.capture_block_inputs(model, tok, [d], n_last=1, fp="t", seq_len=64, use_cache=False) for d in docs]
    # two warm-up steps so both LoRA factors have a non-zero gradient
    tail = lora_gt.finetune_lora(
        model,
        selectors.stack_parts(parts),
        n_last=1,
        r=2,
        alpha=4,
        lr=5e-2,
        steps=2,
        batch=2,
        seed=0,
        targets=("q_proj", "v_proj"),
    )
    return tail, tok, docs, parts


def test_document_gradients_match_autograd_on_the_full_sequence():
    tail, tok, docs, parts = _tiny_tail(4)
    params = [p for n, p in tail.named_parameters() if "lora_" in n]
    got = selectors.document_gradients(tail, parts)
    assert got.shape == (4, sum(p.numel() for p in params))
    for i, d in enumerate(docs):
        # oracle: the whole model on the token ids (embedding included, no padding, no cached
        # block inputs), mean next-token cross-entropy of this document alone
        ids = torch.tensor(tok(d)["input_ids"])[None]
        logits = tail(input_ids=ids).logits[0, :-1]
        loss = F.cross_entropy(logits, ids[0, 1:])
        want = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)]).double()
        assert want.norm() > 0
        torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-6)
    # identity projection keeps the exact gradients; the cosine is the plain cosine
    assert torch.equal(project_rows(got, None, 0), got)
    cos = gradient_cosine_scores(project_rows(got, None, 0), got[:2])
    mu = got[:2].mean(0)
    torch.testing.assert_close(cos, (got @ mu) / (got.norm(dim=1) * mu.norm()))


def test_projection_is_one_seeded_matrix_and_preserves_inner_products_in_expectation():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, generator=g, dtype=torch.float64)
    # the projection is x R / sqrt(p) for one R, whatever the block size used to draw it
    r = project_rows(torch.eye(50, dtype=torch.float64), 16, seed=7, block=50)
    torch.testing.assert_close(project_rows(x, 16, seed=7, block=50), x @ r, rtol=1e-12, atol=1e-12)
    assert set((r * 4).round().unique().tolist()) == {-1.0, 1.0}
    assert not torch.equal(project_rows(x, 16, seed=8), project_rows(x, 16, seed=7))
    # E<Px, Py> = <x, y>: the mean over 400 seeds lies within 4 measured SEs of the truth
    exact = float(x[0] @ x[1])
    vals = torch.tensor(
        [float(project_rows(x[:2], 16, seed=s)[0] @ project_rows(x[:2], 16, seed=s)[1]) for s in range(400)],
        dtype=torch.float64,
    )
    se = float(vals.std()) / math.sqrt(400)
    assert abs(float(vals.mean()) - exact) < 4 * se


def test_batched_document_blocks_equal_one_capture_per_document():
    model, tok = tiny_llama(vocab_size=64, hidden=16, seed=2), WordTokenizer(64)
    docs = ["alpha beta gamma", "one two three four five six", "red green"]
    got = selectors.document_blocks(model, tok, docs, n_last=1, fp="t", seq_len=32)
    for d, part in zip(docs, got):
        one = lora_gt.capture_block_inputs(model, tok, [d], n_last=1, fp="t", seq_len=32, use_cache=False)
        for k in ("labels", "mask"):
            assert torch.equal(part[k], one[k])
        torch.testing.assert_close(part["hidden"], one["hidden"], rtol=1e-5, atol=1e-6)
    # a document longer than seq_len makes several chunks: captured one document at a time
    texts = [" ".join(["w"] * 40), "a b"]
    long = selectors.document_blocks(model, tok, texts, n_last=1, fp="t", seq_len=16)
    assert long[0]["labels"].shape[0] == 3 and long[1]["labels"].shape[0] == 1
    # the counted targets, known from the chunks alone, with no forward pass
    for group, seq_len in ((docs, 32), (texts, 16)):
        parts = selectors.document_blocks(model, tok, group, n_last=1, fp="t", seq_len=seq_len)
        assert selectors.block_tokens(tok, group, seq_len) == [int((p["labels"] != -100).sum()) for p in parts]
    # PoolBlocks captures a document when first asked for it, and only then
    pb = selectors.PoolBlocks(model, tok, docs, n_last=1, fp="t", seq_len=32)
    assert not pb.kept
    two = pb[[2, 0]]
    assert sorted(pb.kept) == [0, 2] and torch.equal(two[0]["labels"], got[2]["labels"])
    assert pb[[0]][0] is two[1]


def test_top_k_puts_undefined_scores_last():
    s = torch.tensor([0.1, float("nan"), 0.9, 0.5])
    assert selectors.top_k(s, 3) == [2, 3, 0]


def test_stack_parts_pads_to_one_width():
    a = {"hidden": torch.ones(1, 3, 2), "labels": torch.zeros(1, 3, dtype=torch.long), "mask": torch.ones(1, 3)}
    b = {"hidden": torch.ones(2, 5, 2), "labels": torch.zeros(2, 5, dtype=torch.long), "mask": torch.ones(2, 5)}
    out = selectors.stack_parts([a, b])
    assert out["hidden"].shape == (3, 5, 2) and (out["labels"][0, 3:] == -100).all() and (out["mask"][0, 3:] == 0).all()


def test_lora_config_of_quick_defaults_is_a_lora_config():
    assert isinstance(SelectEvidenceConfig.defaults(True).lora, LoRAConfig)
