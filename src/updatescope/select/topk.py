"""The k best documents of a stream: a bounded heap with a deterministic tie-break.

Order: a higher score first; equal scores by the lower global index (the document that
comes first in the pool), which is the order of ``DocumentScores.order`` (a stable sort of
the whole pool).  Undefined (NaN) scores are never kept.  The heap keeps k entries, so the
memory of a selection over a pool of any size is k payloads; two heaps over disjoint parts
of a pool merge into the heap of the whole (``merge``), whatever the split.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from updatescope.errors import InputError

__all__ = ["TopK"]


@dataclass
class TopK:
    """The ``k`` best ``(score, index, payload)`` seen so far.  ``update`` adds in place and
    returns self; ``merge`` returns a new heap; ``best`` lists the kept entries best first."""

    k: int
    _heap: list[tuple[float, int, Any]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise InputError(f"k must be a positive integer, got {self.k!r}")

    def __len__(self) -> int:
        return len(self._heap)

    def update(self, score: float, index: int, payload: Any = None) -> TopK:
        """Offer one document; kept when it beats the worst kept one (or the heap is not full)."""
        score = float(score)
        if not math.isfinite(score):
            return self
        # min-heap on (score, -index): the root is the worst kept entry (lowest score, and of
        # equal scores the highest index); the payload never takes part in the comparison
        entry = (score, -int(index), _Payload(payload))
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, entry)
        elif entry[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, entry)
        return self

    def update_many(self, items: Iterable[tuple[float, int, Any]]) -> TopK:
        for score, index, payload in items:
            self.update(score, index, payload)
        return self

    def merge(self, other: TopK) -> TopK:
        """The heap of both streams (a new object; both inputs unchanged).  Same k required."""
        if other.k != self.k:
            raise InputError(f"cannot merge top-k heaps of different k: {self.k} and {other.k}")
        out = TopK(self.k)
        for s, neg, p in (*self._heap, *other._heap):
            out.update(s, -neg, p.value)
        return out

    def best(self) -> list[tuple[float, int, Any]]:
        """``(score, index, payload)`` of the kept entries, best first."""
        return [(s, -neg, p.value) for s, neg, p in sorted(self._heap, key=lambda e: (-e[0], -e[1]))]


class _Payload:
    """A payload that never compares (heap entries compare by score and index only)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value
