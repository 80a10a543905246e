"""Contrast datasets for steering: positive and negative prompts, paired or labelled."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError

__all__ = ["ContrastPairs", "load_pairs"]


@dataclass(frozen=True)
class ContrastPairs:
    """Prompts showing the behaviour (positives) and prompts not showing it (negatives).

    ``paired`` is True when positives[i] and negatives[i] are two versions of one prompt
    (CAA's A/B pairs); labelled data gives unpaired sets of any sizes.  CAA only needs the
    two means, so both kinds work; pairing matters for the shuffle and split controls.
    """

    positives: tuple[str, ...]
    negatives: tuple[str, ...]
    paired: bool = False

    def __post_init__(self) -> None:
        for name in ("positives", "negatives"):
            items = getattr(self, name)
            if not items:
                raise InputError(f"contrast set has no {name}")
            if any(not isinstance(t, str) or not t for t in items):
                raise InputError(f"every one of the {name} must be a non-empty string")
        if self.paired and len(self.positives) != len(self.negatives):
            raise InputError(
                f"paired contrast set has {len(self.positives)} positives but {len(self.negatives)} negatives"
            )

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]]) -> ContrastPairs:
        """From (positive, negative) tuples."""
        items = list(pairs)
        if not items:
            raise InputError("no contrast pairs given")
        return cls(tuple(p for p, _ in items), tuple(n for _, n in items), paired=True)

    @classmethod
    def from_labels(cls, prompts: Sequence[str], labels: Sequence[int]) -> ContrastPairs:
        """From prompts with 0/1 labels (1 = positive)."""
        if len(prompts) != len(labels):
            raise InputError(f"{len(prompts)} prompts but {len(labels)} labels")
        ints = []
        for y in labels:
            try:  # accepts int, bool, numpy and 0-d torch integers; refuses 0.5 and "1"
                ints.append(operator.index(y))
            except TypeError:
                ints.append(-1)
            if ints[-1] not in (0, 1):
                raise InputError(f"labels must be 0 or 1, got {y!r}")
        pos = tuple(p for p, y in zip(prompts, ints) if y == 1)
        neg = tuple(p for p, y in zip(prompts, ints) if y == 0)
        return cls(pos, neg, paired=False)

    def __len__(self) -> int:
        return len(self.positives) + len(self.negatives)

    def prompts_and_labels(self) -> tuple[list[str], list[int]]:
        """All prompts, positives first, with their 0/1 labels."""
        return (list(self.positives) + list(self.negatives), [1] * len(self.positives) + [0] * len(self.negatives))

    def split(self, fraction: float = 0.5, seed: int = 0) -> tuple[ContrastPairs, ContrastPairs]:
        """Two disjoint random parts (pairs stay together); the first holds ``fraction``."""
        if not 0.0 < fraction < 1.0:
            raise InputError(f"split fraction must be in (0, 1), got {fraction}")
        g = torch.Generator().manual_seed(seed)
        if self.paired:
            perm = torch.randperm(len(self.positives), generator=g).tolist()
            k = round(fraction * len(perm))
            if not 0 < k < len(perm):
                raise InputError(f"cannot split {len(perm)} pairs with fraction {fraction}")
            take = lambda idx: ContrastPairs(
                tuple(self.positives[i] for i in idx),  # noqa: E731
                tuple(self.negatives[i] for i in idx),
                True,
            )
            return take(perm[:k]), take(perm[k:])
        parts: list[list[tuple[str, ...]]] = []
        for items in (self.positives, self.negatives):
            perm = torch.randperm(len(items), generator=g).tolist()
            k = round(fraction * len(perm))
            if not 0 < k < len(perm):
                raise InputError(f"cannot split {len(perm)} prompts with fraction {fraction}")
            parts.append([tuple(items[i] for i in perm[:k]), tuple(items[i] for i in perm[k:])])
        return (ContrastPairs(parts[0][0], parts[1][0]), ContrastPairs(parts[0][1], parts[1][1]))

    def shuffled(self, seed: int = 0) -> ContrastPairs:
        """Negative control: the same prompts with labels permuted at random (same set sizes)."""
        prompts, labels = self.prompts_and_labels()
        g = torch.Generator().manual_seed(seed)
        perm = torch.randperm(len(labels), generator=g).tolist()
        return ContrastPairs.from_labels(prompts, [labels[i] for i in perm])


def load_pairs(path: str | Path) -> ContrastPairs:
    """Read a JSONL file: each line ``{"positive": ..., "negative": ...}`` (pairs) or
    ``{"prompt": ..., "label": 0|1}`` (labelled).  All lines must use the same form.

    The file goes through the data readers' checks (``data.textfiles``): a regular,
    readable, size-capped file (a FIFO, folder or device is refused unread), UTF-8 text,
    JSON without hostile nesting or over-long numbers, and strings without lone surrogates;
    each failure is one InputError naming the file (and line)."""
    from updatescope.inputs import check_string, parse_json, read_input_bytes

    path = Path(path)
    try:
        raw = read_input_bytes(path)
    except InputError as exc:  # the shared check's words, under this reader's heading
        raise InputError(f"cannot read contrast pairs: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: contrast pairs are not UTF-8 text (bad byte at offset {exc.start})") from None
    lines = text.splitlines()
    pairs: list[tuple[str, str]] = []
    prompts: list[str] = []
    labels: list[int] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{no}: not valid JSON ({exc.msg})") from None
        except (RecursionError, ValueError):  # deep nesting, over-long integers: the shared refusal
            row = parse_json(line, f"{path}:{no}")
        if not isinstance(row, dict):
            raise InputError(f"{path}:{no}: expected a JSON object")
        if "positive" in row and "negative" in row:
            pos, neg = row["positive"], row["negative"]
            if not (isinstance(pos, str) and isinstance(neg, str) and pos and neg):
                raise InputError(f"{path}:{no}: 'positive' and 'negative' must be non-empty strings")
            pairs.append((check_string(pos, f"{path}:{no}"), check_string(neg, f"{path}:{no}")))
        elif "prompt" in row and "label" in row:
            prompt, label = row["prompt"], row["label"]
            if not isinstance(prompt, str) or not prompt:
                raise InputError(f"{path}:{no}: 'prompt' must be a non-empty string")
            if not isinstance(label, int) or label not in (0, 1):  # bools pass: True == 1
                raise InputError(f"{path}:{no}: 'label' must be 0 or 1, got {label!r}")
            prompts.append(check_string(prompt, f"{path}:{no}"))
            labels.append(int(label))
        else:
            raise InputError(f"{path}:{no}: needs fields 'positive'/'negative' or 'prompt'/'label', got {sorted(row)}")
        if pairs and prompts:
            raise InputError(f"{path}:{no}: mixes pair lines and labelled lines")
    if not pairs and not prompts:
        raise InputError(f"{path}: no contrast pairs in the file")
    return ContrastPairs.from_pairs(pairs) if pairs else ContrastPairs.from_labels(prompts, labels)
