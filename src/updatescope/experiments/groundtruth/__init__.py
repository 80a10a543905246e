"""Ground truth from actual fine-tuning: the output head alone (:mod:`.head`) or LoRA
adapters on the last decoder blocks (:mod:`.lora`)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

__all__ = ["minibatch_indices"]


def minibatch_indices(n: int, batch: int, steps: int, seed: int) -> Iterator[torch.Tensor]:
    """Row indices of ``steps`` minibatches of ``batch`` rows out of ``n``: without replacement
    within an epoch, reshuffled (generator seeded by ``seed``) when an epoch runs out; the
    full batch every step when ``batch >= n``.  Every fine-tuning ground truth draws its
    minibatches here, so a seed means the same batches for the head and for LoRA."""
    g = torch.Generator().manual_seed(seed)
    order, pos = torch.randperm(n, generator=g), 0
    for _ in range(steps):
        if batch >= n:
            yield torch.arange(n)
            continue
        if pos + batch > n:
            order, pos = torch.randperm(n, generator=g), 0
        yield order[pos : pos + batch]
        pos += batch
