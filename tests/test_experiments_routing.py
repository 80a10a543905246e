"""routing: an end-to-end tiny run (every router, the PEFT folder check, Arrow through its
package, the verdict block) and the pieces it is built from."""

from __future__ import annotations

import pytest

from _tiny_lm import loader, reproduce


@pytest.fixture
def tiny(monkeypatch):
    from updatescope.data import domains
    from updatescope.experiments import heads

    monkeypatch.setattr(heads, "load_model", loader(vocab_size=128, hidden=16))
    vocab = {
        "code_asyncio": "def await async loop task return",
        "wiki_people": "born died married king queen poet",
        "news_lee": "minister police report said today government",
        "code_http": "request response header status get post",
    }

    def load(name, split="sketch", max_chars=None):
        words = vocab[name].split()
        return [" ".join(words[(i + j) % len(words)] for j in range(14)) + f" {name}{i}" for i in range(12)]

    class Info:
        def __init__(self, name):
            self.name = name

    monkeypatch.setattr(domains, "load_domain", load)
    monkeypatch.setattr(domains, "list_domains", lambda family=None: [Info(n) for n in vocab])


SETTINGS = {
    "library": ["code_asyncio", "wiki_people", "news_lee"],
    "outside": ["code_http"],
    "train_tokens": 64,
    "requests_per_domain": 3,
    "request_tokens": 10,
    "sketch_dim": 64,
    "lora": {"steps": 2, "batch": 4, "n_last": 1, "seq_len": 32},
    "arrow_top_k": 2,
    "n_boot": 50,
}


def test_tiny_run_scores_every_router_and_states_the_verdicts(tiny, tmp_path):
    rec = reproduce("routing", tmp_path, SETTINGS)
    m = rec["metrics"]
    assert len(rec["config"]["preregistration_sha256"]) == 64
    assert m["powered"] is False
    assert m["regime"]["adapter_folder_max_loss_difference"] <= 1e-3
    n = 4 * 3
    assert len(m["requests"]["domains"]) == n
    for r in ("fisher", "error", "activation", "embedding"):
        assert len(m["choices"][r]) == n and all(0 <= c < 3 for c in m["choices"][r])
    s = m["summary"]
    assert s["all"]["n_requests"] == n and s["in_library"]["n_requests"] == 9 and s["outside"]["n_requests"] == 3
    for r in ("fisher", "embedding", "arrow", "uniform_merge", "base", "random", "oracle"):
        assert s["all"][r]["oracle_gap"] >= -1e-12  # nothing routes below the oracle
    assert s["all"]["oracle"]["oracle_gap"] == pytest.approx(0.0)
    assert "own" in s["in_library"] and "own" not in s["outside"]
    comps = m["verdicts"]["comparisons"]
    assert [c["comparison"] for c in comps] == [
        "FisherSketch vs embedding centroid",
        "FisherSketch vs PEFT Arrow",
        "FisherSketch vs error-only",
        "FisherSketch vs activation-only",
        "FisherSketch vs uniform merge",
    ]
    assert all(c["word"] in ("better", "worse", "no difference") and c["family_size"] == 5 for c in comps)


def test_routed_loss_uses_each_routers_choice():
    import numpy as np

    from updatescope.experiments.routing.config import RoutingConfig
    from updatescope.experiments.routing.runner import evaluate

    cfg = RoutingConfig(library=("code_asyncio", "wiki_people"), outside=("code_http",), gt_seeds=1, arrow_top_k=1)
    doms = ["code_asyncio", "wiki_people", "code_http"]
    counts = np.array([2.0, 2.0, 2.0])
    loss = np.array([[1.0, 3.0], [4.0, 2.0], [6.0, 8.0]])  # summed: per token /2
    seed = {
        "loss": loss,
        "base": np.array([5.0, 5.0, 5.0]),
        "uniform_merge": np.array([2.0, 3.0, 7.0]),
        "arrow": np.array([1.0, 2.0, 6.0]),
    }
    choice = np.array([1, 1, 0])
    ev = evaluate(cfg, doms, counts, [seed], {r: choice for r in ("fisher", "error", "activation", "embedding")})
    assert ev["routed_loss"]["fisher"] == [1.5, 1.0, 3.0]
    assert ev["routed_loss"]["oracle"] == [0.5, 1.0, 3.0]
    assert ev["routed_loss"]["random"] == [1.0, 1.5, 3.5]
    assert ev["oracle_hit"]["fisher"] == [0.0, 1.0, 1.0]
    assert ev["own_hit"]["fisher"] == [0.0, 1.0, None]
    assert np.isnan(ev["routed_loss"]["own"][2])


def test_config_refuses_overlap_and_small_libraries():
    from updatescope.errors import InputError
    from updatescope.experiments.routing.config import RoutingConfig

    with pytest.raises(InputError, match="both in and outside"):
        RoutingConfig(library=("a", "b"), outside=("b",))
    with pytest.raises(InputError, match="at least 2"):
        RoutingConfig(library=("a",), outside=())
    with pytest.raises(InputError, match="arrow_top_k"):
        RoutingConfig(library=("a", "b"), outside=(), arrow_top_k=3)


def test_truth_store_reads_a_finished_seed_back_and_refills_a_missing_adapter(tiny, tmp_path, monkeypatch):
    """Domains design with ``truth_store``: one file per (seed, adapter) and one per seed for
    the whole library; a rerun reads every seed back without training (same truth, same
    verdicts), a seed missing one adapter file is trained again and only that file written,
    and a file of another configuration is refused in one line."""
    import gzip
    import json

    from updatescope.errors import InputError
    from updatescope.experiments.routing import runner

    store = tmp_path / "store"
    settings = {**SETTINGS, "gt_seeds": 2, "truth_store": str(store)}
    first = reproduce("routing", tmp_path / "a", settings)
    files = sorted(p.relative_to(store).as_posix() for p in store.rglob("*.json.gz"))
    seeds = [f["seed"] for f in first["metrics"]["seeds"]]
    want = [f"seed{s}/{n}.json.gz" for s in seeds for n in ("_library", *SETTINGS["library"])]
    assert files == sorted(want)
    assert not any(f["from_truth_store"] for f in first["metrics"]["seeds"])

    def no_training(*a, **k):
        raise AssertionError("a stored seed was trained again")

    with monkeypatch.context() as m:
        m.setattr(runner, "library_seed", no_training)
        again = reproduce("routing", tmp_path / "b", settings)
    assert all(f["from_truth_store"] for f in again["metrics"]["seeds"])
    for k in ("truth", "verdicts", "summary"):
        assert again["metrics"][k] == first["metrics"][k]
    assert again["metrics"]["regime"] == first["metrics"]["regime"]

    gone = store / f"seed{seeds[1]}" / f"{SETTINGS['library'][1]}.json.gz"
    kept = {p: p.read_bytes() for p in store.rglob("*.json.gz") if p != gone}
    gone.unlink()
    refill = reproduce("routing", tmp_path / "c", settings)
    assert [f["from_truth_store"] for f in refill["metrics"]["seeds"]] == [True, False]
    assert gone.exists() and all(p.read_bytes() == b for p, b in kept.items())
    assert refill["metrics"]["truth"]["loss_by_seed"] == first["metrics"]["truth"]["loss_by_seed"]

    rec = json.loads(gzip.decompress(gone.read_bytes()))
    rec["key"] = "0" * 64
    gone.write_bytes(gzip.compress(json.dumps(rec).encode()))
    with pytest.raises(InputError, match="computed for another configuration"):
        reproduce("routing", tmp_path / "d", settings)


def test_requests_take_later_windows_only_for_a_domain_short_of_documents(monkeypatch):
    """Amendment 3: opening windows first, in document order; a short domain adds the second
    windows of its documents, then the third; one that still falls short is refused."""
    from updatescope.data import domains
    from updatescope.errors import InputError
    from updatescope.experiments.routing.config import RoutingConfig
    from updatescope.experiments.routing.runner import build_requests

    n = 8  # tokens per request
    lengths = {"long": [20, 8, 16, 16, 24], "short": [36, 8, 16], "outside": [8, 24, 8, 8, 8]}
    words: list[str] = []  # token id = index of the word, so every id says where it came from

    def load(name, split="eval", max_chars=None):
        return [" ".join(f"{name}:{i}:{t}" for t in range(m)) for i, m in enumerate(lengths[name])]

    def tok(text, add_special_tokens=True):
        out = []
        for w in text.split():
            if w not in words:
                words.append(w)
            out.append(words.index(w))
        return {"input_ids": out}

    monkeypatch.setattr(domains, "load_domain", load)
    cfg = RoutingConfig(
        library=("long", "short"), outside=("outside",), request_tokens=n, requests_per_domain=4, arrow_top_k=1
    )
    ids, doms = build_requests(cfg, tok)
    assert doms == ["long"] * 4 + ["short"] * 4 + ["outside"] * 4
    assert all(len(r) == n for r in ids)
    starts = [words[r[0]] for r in ids]
    # each request is one contiguous window of one document
    assert all(words[r[-1]].rsplit(":", 1)[0] == words[r[0]].rsplit(":", 1)[0] for r in ids)
    # "long" has 5 documents of >= 8 tokens: the opening windows of its first 4, as before
    assert starts[:4] == ["long:0:0", "long:1:0", "long:2:0", "long:3:0"]
    # "short" has 3: their openings, then the second window of its first document
    assert starts[4:8] == ["short:0:0", "short:1:0", "short:2:0", "short:0:8"]
    assert starts[8:] == ["outside:0:0", "outside:1:0", "outside:2:0", "outside:3:0"]
    lengths["short"] = [12, 8, 4]
    with pytest.raises(InputError, match="domain short: 2 disjoint windows of 8 tokens"):
        build_requests(cfg, tok)
