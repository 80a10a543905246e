"""Ground truth over several fine-tuning seeds: the mean transfer, its standard error, and
the per-seed tables the noise ceiling is measured from.

One fine-tuning run gives one draw of the transfer table: the LoRA initialisation and the
minibatch order move each value by about as much as neighbouring sources differ inside a
family.  So every (target, source) value is averaged over ``n`` seeds and its standard
error (sd over seeds / √n, ddof = 1) is kept beside it; ``select.metrics.noise_ceiling``
turns the per-seed tables into what a perfect predictor could reach at this noise level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from updatescope.select.metrics import mean_and_se

__all__ = ["SEED_STRIDE", "gt_seed", "over_seeds"]

#: fine-tuning seed j of a run with base seed s is s + SEED_STRIDE · j; each runner adds the
#: source's index (< SEED_STRIDE) to that, so no two (seed, source) fine-tunings share a seed
#: and seed 0 of a run reproduces the single-seed tables recorded before multi-seed truth.
SEED_STRIDE = 1000


def gt_seed(base: int, j: int) -> int:
    return base + SEED_STRIDE * j


def over_seeds(
    run_one: Callable[[int], dict[str, Any]], base_seed: int, n: int, log: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run ``run_one(seed)`` (-> a transfer-matrix record with "transfer" and "loss", as
    :func:`.lora.transfer_matrix` / :func:`.head.transfer_matrix` return) for ``n`` seeds.

    -> the first run's record with "transfer" and "loss" replaced by their means over seeds,
    plus "transfer_se", "loss_by_seed", "transfer_by_seed", "train_loss_by_seed" (when the
    runs report one) and "seeds"; "eval_sequences" (when every run keeps them) with the
    per-sequence losses averaged over seeds and "eval_sequences_by_seed" (each seed's
    {t: {s: [...]}}), and "finetune_seconds" summed over every
    fine-tuning of every seed.  The base loss does not depend on the seed.
    """
    seeds = [gt_seed(base_seed, j) for j in range(n)]
    runs = []
    for j, s in enumerate(seeds):
        if log:
            log(f"ground truth: fine-tuning seed {j + 1}/{n} (seed {s})")
        runs.append(run_one(s))
    transfer, se = mean_and_se([r["transfer"] for r in runs])
    loss, _ = mean_and_se([r["loss"] for r in runs])
    out = {
        **runs[0],
        "transfer": transfer,
        "transfer_se": se,
        "loss": loss,
        "seeds": seeds,
        "transfer_by_seed": [r["transfer"] for r in runs],
        "loss_by_seed": [r["loss"] for r in runs],
    }
    if all("eval_sequences" in r for r in runs):
        # per-sequence eval losses averaged over seeds: the eval bootstrap of the mean table
        seq0 = runs[0]["eval_sequences"]
        out["eval_sequences"] = {
            **seq0,
            "loss": {
                t: {
                    s: [sum(r["eval_sequences"]["loss"][t][s][i] for r in runs) / len(runs) for i in range(len(v))]
                    for s, v in row.items()
                }
                for t, row in seq0["loss"].items()
            },
        }
        # and each seed's own: the ceiling resamples seeds and eval sequences together
        out["eval_sequences_by_seed"] = [r["eval_sequences"]["loss"] for r in runs]
    if all("finetune_seconds" in r for r in runs):
        out["finetune_seconds"] = sum(sum(r["finetune_seconds"].values()) for r in runs)
    if all("train_loss" in r for r in runs):
        out["train_loss_by_seed"] = [r["train_loss"] for r in runs]
        out.pop("train_loss", None)
    return out
