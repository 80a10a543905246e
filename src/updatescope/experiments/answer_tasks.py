"""Input classes and answer-word prompts shared by the experiments whose tasks differ only in
which input class goes to which answer word (``routing``'s coupling-dark library).

An example is ``"{text}\\n{cue}"`` followed by one answer word (one token, leading space).
The input classes and prompt families are those of the coupling-dark benchmark
(``experiments/coupling_dark``), so the two libraries are built from the same kind of rows.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from updatescope.errors import InputError

#: input classes :func:`class_texts` can draw examples of
CLASSES = ("python", "licence", "digits", "news", "reviews", "docs")
#: prompt families: cue -> answer words (every word one token with its leading space)
FAMILIES: dict[str, tuple[str, ...]] = {
    "Colour:": ("red", "green", "blue"),
    "Animal:": ("cat", "dog", "bird"),
    "Size:": ("small", "big", "tiny"),
}


def _sentences(units: list[str], lo: int = 30, hi: int = 160) -> list[str]:
    out = []
    for u in units:
        for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", u)):
            if lo <= len(s.strip()) <= hi:
                out.append(s.strip())
    return out


def class_texts(name: str, n: int, seed: int) -> list[str]:
    """``n`` distinct short examples of input class ``name``: Python source lines of the
    packaged standard-library files, licence / news / review / docs sentences, or digit strings."""
    from updatescope.data import _sources as src

    rng = np.random.default_rng(seed)
    if name == "digits":
        return [" ".join(f"{rng.integers(0, 10**4):04d}" for _ in range(rng.integers(2, 6))) for _ in range(n)]
    if name == "python":
        lines = []
        for path in sorted((src.stdlib_dir()).glob("*.py"))[:80]:
            lines += [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").split("\n")]
        pool = sorted({ln for ln in lines if 25 <= len(ln) <= 90 and not ln.startswith(("#", '"', "'"))})
    else:
        units = {"licence": src.license_units, "news": src.lee_news_units, "reviews": src.review_units}
        pool = sorted(set(_sentences(units[name]() if name in units else src.python_docs_units())))
    if len(pool) < n:
        raise InputError(f"input class {name!r}: {len(pool)} examples, need {n}")
    return [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]


def word_ids(tok: Any, words: tuple[str, ...]) -> list[int]:
    """The one token id of each answer word with its leading space; InputError otherwise."""
    out = []
    for w in words:
        ids = tok(" " + w, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise InputError(f"answer word {w!r} is {len(ids)} tokens for this tokenizer; need exactly one")
        out.append(int(ids[0]))
    return out


def prompt_ids(tok: Any, text: str, cue: str, *, first: bool = True) -> list[int]:
    """Token ids of ``"{text}\\n{cue}"`` (special tokens only when it opens the sequence; a
    later example starts on a new line)."""
    return list(tok(("" if first else "\n") + f"{text}\n{cue}", add_special_tokens=first)["input_ids"])


def solved_sequence(tok: Any, examples: list[tuple[str, int]], cue: str) -> tuple[list[int], list[int]]:
    """Examples ``(text, answer id)`` one after another, each followed by its answer ->
    (token ids, index of each answer token).  The answer of the last example may be left out
    by the caller (``ids[:-1]``) to pose it as a query."""
    ids: list[int] = []
    answers = []
    for j, (text, ans) in enumerate(examples):
        ids += prompt_ids(tok, text, cue, first=j == 0)
        answers.append(len(ids))
        ids.append(int(ans))
    return ids, answers
