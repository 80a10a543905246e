"""Sentiment text and the pieces built on it, shared by ``sentiment-steering`` and
``steering-shadow``: the labelled movie-review polarity sentences and the neutral news
openings (both ship with gensim's test data, no download), the VADER judge, the per-sentence
token-mean residuals that CAA averages, and the one-step shift (the pushforward of one
gradient step).  Both runners import them from here, so neither imports the other's folder.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from updatescope.errors import InputError, MissingExtraError

__all__ = [
    "SPLITS",
    "polarity_sentences",
    "news_sentences",
    "neutral_openings",
    "split_prompts",
    "Vader",
    "first_dropped",
    "token_means",
    "sentence_nll",
    "class_step",
    "one_step_shift",
]

SPLITS = 3  # random split-half draws of CAA's sentences

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


class Vader:
    """VADER's compound score of a text, in [-1, 1] (0: no sentiment words)."""

    def __init__(self) -> None:
        try:
            from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
        except ImportError:
            raise MissingExtraError("vadersentiment", "judge") from None
        self._analyzer = SentimentIntensityAnalyzer()

    def compound(self, text: str) -> float:
        if not isinstance(text, str):
            raise InputError(f"VADER scores text, got {type(text).__name__}")
        return float(self._analyzer.polarity_scores(text)["compound"])

    def scores(self, texts: Sequence[str]) -> list[float]:
        return [self.compound(t) for t in texts]


def first_dropped(weights: Tensor, mask: Tensor) -> Tensor:
    """``weights`` with each row's first real token (its first position where ``mask`` is 1,
    any padding side) set to 0.  (n, T), (n, T) -> (n, T).  Raises when a row would keep no
    token."""
    real = mask.bool()
    if bool((real.sum(1) < 2).any()):
        raise InputError("leaving out the first token needs every row to have >= 2 real tokens")
    first = real & (real.long().cumsum(1) == 1)
    return weights.masked_fill(first, 0)


@torch.no_grad()
def token_means(
    model: Any, ids: Tensor, mask: Tensor, weights: Tensor, layers: list[int], bs: int, skip_first: bool = False
) -> Tensor:
    """Weighted mean over tokens of decoder-layer outputs.  ids, mask, weights (n, T) ->
    (len(layers), n, d) float64.  Positions come from the mask (left padding allowed).
    ``skip_first``: each row's first real token gets weight 0 (:func:`first_dropped`) -- in
    SmolLM2 its residual is a massive activation, hundreds of times the others' norm."""
    from updatescope.steering.positions import layer_outputs_hooked

    if skip_first:
        weights = first_dropped(weights, mask)
    out = []
    with layer_outputs_hooked(model, layers) as got:
        for s in range(0, ids.shape[0], bs):
            m, w = mask[s : s + bs], weights[s : s + bs].double()
            pos = (m.long().cumsum(1) - 1).clamp(min=0)
            model(input_ids=ids[s : s + bs], attention_mask=m, position_ids=pos, use_cache=False)
            out.append(torch.stack([(got[x].double() * w[..., None]).sum(1) / w.sum(1, keepdim=True) for x in layers]))
    return torch.cat(out, dim=1)


@torch.no_grad()
def sentence_nll(model: Any, ids: Tensor, mask: Tensor, bs: int) -> tuple[Tensor, Tensor]:
    """Summed next-token NLL of each right-padded sentence, and its number of target tokens.
    ids, mask (n, T) -> ((n,) float64, (n,) float64)."""
    sums, counts = [], []
    for s in range(0, ids.shape[0], bs):
        i, m = ids[s : s + bs], mask[s : s + bs]
        logits = model(input_ids=i, attention_mask=m, use_cache=False).logits
        lp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, i[:, 1:, None])[..., 0]
        w = m[:, 1:].double()
        sums.append(-(lp * w).sum(1))
        counts.append(w.sum(1))
    return torch.cat(sums), torch.cat(counts)


def class_step(model: Any, tok: Any, sentences: list[str]) -> tuple[dict[str, Tensor], Tensor, Tensor]:
    """One gradient step δθ = -∇ LM loss (learning rate 1, every token of ``sentences``), with
    the sentences' ids and mask (right padding).  -> (δθ, ids, mask)."""
    from updatescope.constants import IGNORE_INDEX
    from updatescope.steering import encode_prompts, gradient_step

    s_ids, s_mask = encode_prompts(tok, sentences, side="right")
    labels = s_ids.masked_fill(s_mask == 0, IGNORE_INDEX)
    return gradient_step(model, s_ids, labels, s_mask, lr=1.0), s_ids, s_mask


def one_step_shift(
    model: Any, step: tuple[dict[str, Tensor], Tensor, Tensor], n_pushforward: int, bs: int, skip_first: bool = False
) -> Tensor:
    """The activation shift of one gradient step (``class_step``'s (δθ, ids, mask)), pushed
    forward exactly (forward AD, every token) through the first ``n_pushforward`` of its
    sentences and averaged over tokens, then sentences.  -> (Lyr, d) float64.
    ``skip_first``: the token average leaves out each sentence's first token (the step itself
    still learns from every token)."""
    from updatescope.steering import pushforward

    delta, s_ids, s_mask = step
    p_ids, p_mask = s_ids[:n_pushforward], s_mask[:n_pushforward]
    shift = pushforward(model, delta, p_ids, p_mask, position="all", batch_size=bs).double()
    if skip_first:
        first_dropped(p_mask, p_mask)  # refuses a one-token sentence
        # the shift is linear in the tokens it averages: n * mean(all) - first = sum of the rest.
        # One more forward-AD pass at position 0; the float32 rounding of the first token's
        # share of mean(all) is ~1e-7 of its (large) norm, small against the rest's sum
        first = pushforward(model, delta, p_ids, p_mask, position=0, batch_size=bs).double()
        n = p_mask.sum(1).double()[None, :, None]  # (1, n, 1)
        shift = (shift * n - first) / (n - 1)
    return shift.mean(1)  # (Lyr, d)
