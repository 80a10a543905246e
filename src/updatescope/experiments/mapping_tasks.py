"""Input classes and answer words of the coupling-dark task families, for any experiment.

An example is ``"{text}\\n{cue}"`` followed by one answer word; a *mapping* sends each input
class to an answer word (:func:`updatescope.experiments.mappings.mappings_for`), so two
mappings of one family share their inputs and differ only in their outputs.  The classes are
short texts the package carries (Python source lines, licence sentences, digit strings, news,
reviews, Python documentation).  These are ``coupling-dark``'s classes (its runner imports them
from here), so that other experiments can build such tasks without importing another
experiment's folder.  Torch-free.
"""

from __future__ import annotations

import re
from typing import Any

from updatescope.errors import InputError

__all__ = ["CLASSES", "FAMILIES", "class_texts", "word_ids", "prompt", "solved_sequence"]

#: input classes :func:`class_texts` can draw examples of
CLASSES = ("python", "licence", "digits", "news", "reviews", "docs")
#: prompt families: cue -> answer words (coupling-dark's families)
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
    """``n`` distinct short examples of input class ``name``, drawn with ``seed``."""
    import numpy as np

    from updatescope.data import _sources as src

    if name not in CLASSES:
        raise InputError(f"unknown input class {name!r}; available: {', '.join(CLASSES)}")
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
    """The token id of each answer word (with its leading space); each must be one token."""
    out = []
    for w in words:
        ids = tok(" " + w, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise InputError(f"answer word {w!r} is {len(ids)} tokens for this tokenizer; need exactly one")
        out.append(int(ids[0]))
    return out


def prompt(text: str, cue: str) -> str:
    """The prompt of one example; its answer word is the next token."""
    return f"{text}\n{cue}"


def solved_sequence(tok: Any, examples: list[tuple[str, int]], cue: str) -> tuple[list[int], list[int]]:
    """Examples ``(text, answer id)`` one after another, each prompt followed by its answer and
    every later example on a new line (special tokens only at the start) -> (token ids, index of
    each answer token).  A caller poses the last example as a query by leaving out ``ids[-1]``."""
    ids: list[int] = []
    answers = []
    for j, (text, ans) in enumerate(examples):
        ids += tok(("" if j == 0 else "\n") + prompt(text, cue), add_special_tokens=j == 0)["input_ids"]
        answers.append(len(ids))
        ids.append(int(ans))
    return ids, answers
