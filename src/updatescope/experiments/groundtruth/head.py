"""Head-only fine-tuning ground truth: the output head trained on cached head inputs.

The backbone is frozen, so its activations are fixed and captured once: the full output
head ``W`` (K×d; for SmolLM2 the tied embedding matrix, untied here) is trained by Adam on
the source's train split; transfer to a target is the reduction of the target's held-out
mean cross-entropy against the base head — the setting paper A's head Fisher describes
literally.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from updatescope.experiments.groundtruth import minibatch_indices
from updatescope.experiments.heads import logits_of

__all__ = ["mean_loss", "trainable_rows", "finetune_head", "transfer_matrix"]


@torch.no_grad()
def mean_loss(w: Tensor, b: Tensor | None, acts: Tensor, labels: Tensor, chunk: int = 512) -> float:
    """Mean next-token cross-entropy of the head on (acts, labels), in nats."""
    tot = 0.0
    for i in range(0, acts.shape[0], chunk):
        z = logits_of(w, b, acts[i : i + chunk])
        tot += float(F.cross_entropy(z, labels[i : i + chunk], reduction="sum"))
    return tot / max(1, acts.shape[0])


def trainable_rows(
    w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]], extra: int = 512, chunk: int = 256
) -> Tensor:
    """The head rows fine-tuning may change: every label token of every task, plus the
    ``extra`` tokens with the largest total base probability over all tasks' inputs.

    One row set for all sources, so the parameterisation favours no source.  Rows outside
    it get gradient ``p_k a`` with ``p_k`` tiny under the base model; freezing them is what
    makes head fine-tuning affordable on a CPU (cost n·|R|·d per step instead of n·K·d,
    the softmax still runs over all K).  -> sorted int64 row ids.
    """
    k = w0.shape[0]
    mass = torch.zeros(k, dtype=torch.float64)
    labels = []
    for t in tasks.values():
        a = t["acts"]
        for i in range(0, a.shape[0], chunk):
            mass += torch.softmax(logits_of(w0, b0, a[i : i + chunk]), -1).sum(0).double()
        labels.append(t["labels"])
    top = torch.topk(mass, min(extra, k)).indices
    return torch.unique(torch.cat([top, *labels]))


def _logits_rows(z0: Tensor, acts: Tensor, rows: Tensor, dw: Tensor) -> Tensor:
    """Base logits (n, K) plus the trained rows' change acts ΔW_Rᵀ in columns ``rows``."""
    return z0.index_add(1, rows, acts @ dw.T)


def finetune_head(
    w0: Tensor,
    b0: Tensor | None,
    acts: Tensor,
    labels: Tensor,
    *,
    steps: int,
    lr: float,
    batch: int,
    seed: int = 0,
    rows: Tensor | None = None,
    z0: Tensor | None = None,
) -> Tensor:
    """Head-only fine-tuning: Adam on ΔW_R (|R|×d) for ``steps`` minibatch steps.  -> ΔW_R.

    Cross-entropy of ``(W0 + ΔW) a + b0`` on (acts, labels) where ΔW is zero outside the
    rows ``rows`` (default: all K rows); the softmax always runs over the full vocabulary.
    Minibatches of ``batch`` rows are drawn without replacement within an epoch from a
    generator seeded by ``seed`` (full batch when ``batch >= n``).  The bias, if any, stays
    frozen.  Adam (β = 0.9, 0.999, no weight decay) because that is how heads are
    fine-tuned in practice; its per-coordinate scaling is also why transfer is not simply
    first-order gradient alignment.  ``z0`` (n, K): precomputed base logits of ``acts``.
    """
    n = acts.shape[0]
    rows = torch.arange(w0.shape[0]) if rows is None else rows
    dw = torch.zeros(rows.numel(), w0.shape[1], requires_grad=True)
    opt = torch.optim.Adam([dw], lr=lr)
    for idx in minibatch_indices(n, batch, steps, seed):
        with torch.no_grad():
            base = z0[idx] if z0 is not None else logits_of(w0, b0, acts[idx])
        loss = F.cross_entropy(_logits_rows(base, acts[idx], rows, dw), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return dw.detach()


@torch.no_grad()
def _loss_rows(
    w0: Tensor, b0: Tensor | None, task: Mapping[str, Tensor], rows: Tensor, dw: Tensor, chunk: int = 512
) -> float:
    acts, labels = task["acts"], task["labels"]
    tot = 0.0
    for i in range(0, acts.shape[0], chunk):
        base = task["z0"][i : i + chunk] if "z0" in task else logits_of(w0, b0, acts[i : i + chunk])
        tot += float(
            F.cross_entropy(_logits_rows(base, acts[i : i + chunk], rows, dw), labels[i : i + chunk], reduction="sum")
        )
    return tot / max(1, acts.shape[0])


def transfer_matrix(
    w0: Tensor,
    b0: Tensor | None,
    train: Mapping[str, Mapping[str, Tensor]],
    evals: Mapping[str, Mapping[str, Tensor]],
    *,
    steps: int,
    lr: float,
    batch: int,
    seed: int = 0,
    extra_rows: int | None = 512,
    max_cached_logits: int = 2**28,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Ground truth: fine-tune on each source's train split, evaluate every target's eval split.

    -> {"base_loss": {t: L0}, "loss": {t: {s: L}}, "transfer": {t: {s: L0 − L}}, "rows": |R|}
    (nats; transfer > 0 = the source helped the target).  Trainable rows: see
    :func:`trainable_rows` (``extra_rows=None``: the full head).  Base logits are cached
    when all splits together hold at most ``max_cached_logits`` floats.  Self-transfer
    (s = t) is kept in ``transfer`` for reference; the selection metrics never use it.
    """
    names = list(train)
    rows = torch.arange(w0.shape[0]) if extra_rows is None else trainable_rows(w0, b0, train, extra=extra_rows)
    total = sum(int(d["acts"].shape[0]) for d in (*train.values(), *evals.values())) * w0.shape[0]
    if total <= max_cached_logits:
        train = {n: {**d, "z0": logits_of(w0, b0, d["acts"])} for n, d in train.items()}
        evals = {n: {**d, "z0": logits_of(w0, b0, d["acts"])} for n, d in evals.items()}
    empty = torch.zeros(rows.numel(), w0.shape[1])
    base = {t: _loss_rows(w0, b0, evals[t], rows, empty) for t in names}
    loss: dict[str, dict[str, float]] = {t: {} for t in names}
    for k, s in enumerate(names):
        t0 = time.perf_counter()
        dw = finetune_head(
            w0,
            b0,
            train[s]["acts"],
            train[s]["labels"],
            steps=steps,
            lr=lr,
            batch=batch,
            seed=seed + k,
            rows=rows,
            z0=train[s].get("z0"),
        )
        for t in names:
            loss[t][s] = _loss_rows(w0, b0, evals[t], rows, dw)
        if log:
            log(f"fine-tuned on {s}: own eval loss {base[s]:.3f} -> {loss[s][s]:.3f} ({time.perf_counter() - t0:.1f}s)")
    transfer = {t: {s: base[t] - loss[t][s] for s in names} for t in names}
    return {"base_loss": base, "loss": loss, "transfer": transfer, "rows": int(rows.numel())}
