"""Ranking a signature bank for a target: a fast scan of every entry, then the full
alignment of the short list (``select.rank.rank_sources``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from updatescope.errors import InputError
from updatescope.select.rank import check_rank_by, rank_sources
from updatescope.signatures.bank import SignatureBank, check_target, fisher_scores
from updatescope.sketch.signature import Signature

__all__ = ["query", "top_order"]


def top_order(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first, NaN last.  (n,) -> (k,)"""
    key = np.where(np.isfinite(scores), -scores, np.inf)
    k = min(k, len(key))
    part = np.argpartition(key, k - 1)[:k] if k < len(key) else np.arange(len(key))
    return part[np.argsort(key[part], kind="stable")]


def query(
    bank: SignatureBank, target: Signature, top: int | None = 10, *, target_name: str = "target", by: str = "fisher"
) -> Any:
    """Ranking (``select.rank.Ranking``) of the ``top`` best entries for ``target`` (None: all),
    ordered by ``by`` (``constants.RANK_BY``).

    By the joint alignment (the default), stage 1 ranks every entry by ``fisher_scores`` (one
    product with the bank's matrix of joint vectors) and stage 2 computes the full
    ``alignment`` of the short list with ``rank_sources`` (the regime diagnosis is over that
    list).  By a marginal there is no such scan (the matrix holds the joint vectors only), so
    every entry's full alignment is computed: exact, and slower on large banks.  An entry
    holding the target's own state is skipped, as in ``rank``.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise InputError(f"top must be a positive integer, got {top!r}")
    check_rank_by(by)
    if len(bank) == 0:
        raise InputError(f"the bank is empty: {bank.path}")
    k = len(bank) if top is None else top
    if by == "fisher":
        idx = top_order(fisher_scores(bank, target), min(len(bank), k + 1))  # one spare: the target may be in it
    else:
        check_target(bank, target)
        idx = np.arange(len(bank))
    entries = {bank.rows[i]["name"]: bank.signature(int(i)) for i in idx}
    ranking = rank_sources(target, entries, target_name=target_name, by=by)
    if len(ranking.rows) > k:
        from dataclasses import replace

        ranking = replace(ranking, rows=ranking.rows[:k])
    return ranking
