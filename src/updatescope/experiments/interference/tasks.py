"""Digit tasks in families that share their inputs and differ in their outputs.

A sequence is ``[FAMILY, x_1 .. x_L, SEP, y_1 .. y_L]`` as in the synthetic lab
(:mod:`updatescope.locallinear.synthetic`), but the first token names the task's *family*,
not the task: the two tasks of a family see the same token and the same digits ``x`` (drawn
from the family's stream, so on every split the inputs are identical) and must answer with
different ``y``.  Training on one task of a family therefore asks the model to overwrite
the other's answers on the very same inputs (the "share inputs, differ in outputs" pairs);
tasks of different families differ in their first token and in their maps.

Vocabulary: digits 0-9, ``SEP`` = 10, family tokens 11, 12, ...
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from updatescope.errors import InputError

__all__ = ["FAMILIES", "TASK_FAMILY", "SEP", "FamilyTasks", "task_names"]

SEP = 10
_FAMILY0 = 11

#: family -> its two tasks (the first is the family's plain map, the second its relabelled variant)
FAMILIES: dict[str, tuple[str, str]] = {
    "copy": ("copy", "copy-perm"),
    "reverse": ("reverse", "reverse-comp"),
    "sort": ("sort-asc", "sort-desc"),
    "shift": ("shift-pos", "shift-5"),
    "roll": ("roll-right", "roll-left"),
}
TASK_FAMILY: dict[str, str] = {t: f for f, ts in FAMILIES.items() for t in ts}


def task_names(families: tuple[str, ...]) -> tuple[str, ...]:
    """The tasks of ``families``, family by family."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise InputError(f"unknown task families {unknown}; available: {', '.join(FAMILIES)}")
    return tuple(t for f in families for t in FAMILIES[f])


def answers(task: str, x: Tensor) -> Tensor:
    """Answer digits of ``task`` for inputs ``x`` (n, L) int64 -> (n, L)."""
    pos = torch.arange(1, x.shape[1] + 1)
    table = {
        "copy": lambda: x.clone(),
        "copy-perm": lambda: (3 * x + 7) % 10,
        "reverse": lambda: x.flip(1),
        "reverse-comp": lambda: 9 - x.flip(1),
        "sort-asc": lambda: x.sort(dim=1).values,
        "sort-desc": lambda: x.sort(dim=1, descending=True).values,
        "shift-pos": lambda: (x + pos) % 10,
        "shift-5": lambda: (x + 5) % 10,
        "roll-right": lambda: x.roll(1, dims=1),
        "roll-left": lambda: x.roll(-1, dims=1),
    }
    if task not in table:
        raise InputError(f"unknown task {task!r}; available: {', '.join(table)}")
    return table[task]()


class FamilyTasks:
    """Deterministic batches of the tasks of ``families``: every batch is a pure function of
    ``(seed, split, family, index)``, so the two tasks of a family share their inputs.

    Splits ``train``, ``sketch`` and ``eval`` use disjoint seed streams; ``eval`` ignores
    ``seed`` (every replicate is judged on the same examples, so the evaluation bootstrap
    can resample examples jointly over replicates)."""

    _SPLITS = {"train": 0, "sketch": 1, "eval": 2}

    def __init__(self, families: tuple[str, ...], seq_len: int, seed: int) -> None:
        self.families = tuple(families)
        self.tasks = task_names(self.families)
        self.seq_len = seq_len
        self.seed = seed

    @property
    def vocab(self) -> int:
        return _FAMILY0 + len(self.families)

    def family(self, task: str) -> str:
        if task not in self.tasks:
            raise InputError(f"unknown task {task!r}; available: {', '.join(self.tasks)}")
        return TASK_FAMILY[task]

    def inputs(self, family: str, index: int, split: str, n: int) -> Tensor:
        """Digits (n, L) of ``family``'s stream."""
        if split not in self._SPLITS:
            raise InputError(f"unknown split {split!r}; expected one of {sorted(self._SPLITS)}")
        seed = 0 if split == "eval" else self.seed
        key = ((seed * 7 + self._SPLITS[split]) * 13 + list(FAMILIES).index(family)) * 1_000_003 + index
        g = torch.Generator().manual_seed(key % (2**63 - 1))
        return torch.randint(0, 10, (n, self.seq_len), generator=g)

    def batch(self, task: str, index: int, split: str, n: int) -> Tensor:
        """Token sequences (n, 2L + 2), int64."""
        fam = self.family(task)
        x = self.inputs(fam, index, split, n)
        head = torch.full((n, 1), _FAMILY0 + self.families.index(fam), dtype=torch.long)
        sep = torch.full((n, 1), SEP, dtype=torch.long)
        return torch.cat([head, x, sep, answers(task, x)], dim=1)

    def answer_logits(self, model: nn.Module, seq: Tensor) -> Tensor:
        """(n, 2L + 2) -> (n, L, vocab): the logits at the answer positions."""
        return model(seq[:, :-1])[:, self.seq_len + 1 :]

    def loss(self, model: nn.Module, seq: Tensor) -> Tensor:
        """Mean cross-entropy over the answer digits of ``seq`` (n, 2L + 2)."""
        logits = self.answer_logits(model, seq)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, self.seq_len + 2 :].reshape(-1))

    @torch.no_grad()
    def example_losses(self, model: nn.Module, task: str, n: int) -> Tensor:
        """Per-example mean answer cross-entropy on the first ``n`` eval examples: (n,) float64."""
        seq = self.batch(task, 0, "eval", n)
        logits = self.answer_logits(model, seq)
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), seq[:, self.seq_len + 2 :], reduction="none")
        return ce.mean(1).to(torch.float64)
