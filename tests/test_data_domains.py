"""Built-in domains: enough families, disjoint and deterministic splits, real text."""

from __future__ import annotations

import hashlib

import pytest

from updatescope.data import demo_domains, domain_digest, list_domains, load_domain
from updatescope.data import domains as dom
from updatescope.errors import InputError


def test_registry_shape():
    infos = list_domains()
    names = [i.name for i in infos]
    assert len(names) == len(set(names)) >= 24
    assert len({i.family for i in infos}) >= 4
    assert {i.name for i in list_domains("code")} <= set(names)
    with pytest.raises(InputError, match="unknown domain family"):
        list_domains("poetry")
    with pytest.raises(InputError, match="unknown domain"):
        load_domain("nope")
    with pytest.raises(InputError, match="unknown split"):
        load_domain("code_email", split="test")


@pytest.mark.parametrize("name", ["code_email", "wiki_people", "news_lee", "smiles_nci_tpsa_high", "num_stocks"])
def test_splits_disjoint_and_nonempty(name):
    splits = {s: load_domain(name, s) for s in ("train", "sketch", "eval")}
    sets = {s: set(v) for s, v in splits.items()}
    assert all(splits[s] for s in splits)
    assert not sets["train"] & sets["sketch"]
    assert not sets["train"] & sets["eval"]
    assert not sets["sketch"] & sets["eval"]
    # no unit repeats inside a split either
    assert all(len(v) == len(sets[s]) for s, v in splits.items())


def test_deterministic_and_independent_of_cache():
    a = load_domain("code_asyncio", "eval")
    dom._split_units.cache_clear()
    b = load_domain("code_asyncio", "eval")
    assert a == b
    assert domain_digest("code_asyncio", "eval") == domain_digest("code_asyncio", "eval")
    assert domain_digest("code_asyncio", "eval") != domain_digest("code_asyncio", "sketch")
    # split membership is a function of the text alone
    for doc in a[:20]:
        pct = int(hashlib.sha256(doc.encode()).hexdigest()[:8], 16) % 100
        assert 70 <= pct < 100


def test_max_chars_prefix():
    full = load_domain("wiki_people", "sketch")
    small = load_domain("wiki_people", "sketch", max_chars=5000)
    assert small == full[: len(small)] and sum(map(len, small)) <= 5000
    tiny = load_domain("wiki_people", "sketch", max_chars=10)
    assert len(tiny) == 1 and len(tiny[0]) == 10


def test_every_domain_has_text():
    for info in list_domains():
        for split in ("train", "sketch", "eval"):
            chars = sum(map(len, load_domain(info.name, split)))
            # experiment domains hold >= 30k chars per split; the small SMILES/stock/review
            # sources are at least 8k (several thousand tokens); the 12 one-collection NCI bins
            # (~400 molecules each) at least 1.5k, above the --quick sketch/eval token caps
            floor = 1500 if info.family == "smiles_nci" else 8000
            assert chars >= floor, (info.name, split, chars)


def test_content_looks_right():
    code = "\n".join(load_domain("code_email", "sketch", max_chars=20000))
    assert "def " in code or "class " in code
    wiki = "\n".join(load_domain("wiki_countries", "sketch", max_chars=20000))
    assert "{{" not in wiki and "[[" not in wiki and "<ref" not in wiki
    smiles = load_domain("smiles_nci_tpsa_low", "sketch")[0].split("\n")
    assert all(" " not in s and s for s in smiles)


def test_demo_domains():
    demo = demo_domains()
    assert len(demo) >= 8
    fams = {i.name: i.family for i in list_domains()}
    assert len({fams[n] for n in demo}) >= 4
    for name, docs in demo.items():
        assert docs and 3000 <= sum(map(len, docs)) <= 12000, name


def test_unknown_domains_are_named_in_one_line():
    from updatescope.data.domains import check_known_domains, list_domains

    names = [d.name for d in list_domains()]
    check_known_domains(names)  # every built-in domain passes
    with pytest.raises(InputError, match=r"unknown domains \['nope', 'also_not'\]: see `updatescope domains`"):
        check_known_domains([names[0], "nope", "also_not"])
