"""The built-in text of ``sentiment-steering``: neutral news openings to continue, and the
labelled movie-review polarity sentences that CAA, the gradient step and the trained judge
learn from.  Both ship with gensim's test data (no download)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from updatescope.errors import InputError

__all__ = ["polarity_sentences", "news_sentences", "neutral_openings", "split_prompts"]

_LABEL = re.compile(r"^__label__(pos|neg)\s+(.*)$")


def polarity_sentences() -> tuple[list[str], list[str]]:
    """(positive, negative) sentences of gensim's ``pang_lee_polarity.cor`` (100 each), in file order."""
    from updatescope.data._sources import gensim_file

    try:
        text = gensim_file("pang_lee_polarity.cor").read_text(encoding="cp1252", errors="replace")
    except FileNotFoundError:
        raise InputError("the polarity sentences need gensim: pip install 'updatescope[data]'") from None
    pos: list[str] = []
    neg: list[str] = []
    for line in text.split("\n"):
        m = _LABEL.match(line.strip())
        if m and m.group(2).strip():
            (pos if m.group(1) == "pos" else neg).append(m.group(2).strip())
    return pos, neg


def news_sentences() -> list[str]:
    """Sentences of gensim's Lee news corpus (background and test documents), in file order."""
    from updatescope.data._sources import gensim_file

    out: list[str] = []
    for name in ("lee_background.cor", "lee.cor"):
        try:
            text = gensim_file(name).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            raise InputError("the news prompts need gensim: pip install 'updatescope[data]'") from None
        for doc in text.split("\n"):
            out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+", doc) if s.strip())
    return out


def neutral_openings(
    sentences: list[str],
    compound: Callable[[str], float],
    words: tuple[int, int],
    tol: float,
    seed: int,
) -> list[str]:
    """The first k words of each sentence (k drawn in ``words`` from ``seed``, one draw per
    sentence in order) whose VADER ``compound`` is within ``tol`` of 0, and whose sentence is
    longer than the opening (so there is something to continue); duplicates dropped, order kept."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out = []
    for s in sentences:
        k = rng.randint(words[0], words[1])
        toks = s.split()
        if len(toks) <= k:
            continue
        opening = " ".join(toks[:k])
        if opening in seen or abs(compound(opening)) > tol:
            continue
        seen.add(opening)
        out.append(opening)
    return out


def split_prompts(openings: list[str], n_select: int, n_test: int, seed: int) -> tuple[list[str], list[str]]:
    """Disjoint (select, test) prompt lists drawn from a seeded shuffle of ``openings``."""
    if n_select + n_test > len(openings):
        raise InputError(
            f"n_select + n_test = {n_select + n_test} but only {len(openings)} neutral openings exist; "
            f"lower them or widen neutral_tol"
        )
    order = list(openings)
    random.Random(seed).shuffle(order)
    return order[:n_select], order[n_select : n_select + n_test]
