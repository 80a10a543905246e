"""Natural domain shift on SmolLM2-135M: rank candidate sources for each target domain.

Domains come from ``updatescope.data.domains`` (code by stdlib module family, Wikipedia
topics, prose, SMILES, numeric tables).  Each domain's three hash splits are disjoint:
``sketch`` feeds the selection methods, ``train`` the fine-tuning, ``eval`` the held-out
loss.  Activations (head inputs) are captured once per split and cached.

Ground truth (``ground_truth`` in the config), both from actual fine-tuning on the source's
train split, transfer = the target's eval-split mean cross-entropy under the base model minus
under the fine-tuned one (nats, > 0 = the source helped):

- ``"lora"`` (default): LoRA adapters (``peft``, rank 8, attention and MLP projections) on the
  last ``n_last`` decoder blocks, trained by Adam for a fixed number of minibatch steps, head
  frozen (:func:`groundtruth.lora.transfer_matrix`).  Features move, as in practical fine-tuning.  The frozen
  blocks' output is captured once per split, so each step runs only the adapted blocks and
  the head — exact, not an approximation.
- ``"head"``: the output head W (49,152×576, the tied embedding matrix, untied for training)
  trained by Adam on cached head inputs with the backbone frozen (:func:`groundtruth.head.transfer_matrix`) —
  the setting paper A's head Fisher describes literally.

Every ground truth is repeated for ``gt_seeds`` fine-tuning seeds (:mod:`groundtruth.seeds`):
transfer = the mean, with its SE and the per-seed tables, from which the noise ceiling is
measured (:func:`scoring.truth_noise`).

Every target is scored against every other domain as a candidate source (leave the target
out) — or, with ``candidates = k`` (the paper's shape: every built-in domain,
``domains = "all"``, 24 candidates per target), against a seeded random ``k`` of them, and
only those pairs are fine-tuned and evaluated — by every method in :func:`scoring.score_methods`
and the trivial baselines (same family, easiness = −base loss on the source, source size); metrics from
``select.metrics.summarise``, within-family metrics and paired bootstrap differences
(:func:`scoring.paired_comparisons`).
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from updatescope.experiments import Result, config_record, heads, scoring, selection
from updatescope.experiments.configs import SelectionConfig
from updatescope.experiments.plotting import plot_selection
from updatescope.report import console

NAME = "source-selection"


def run(cfg: SelectionConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    domains = list(cfg.domains)
    families = {d: selection.family_of(d) for d in domains}
    log = functools.partial(print, flush=True)

    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    if cfg.budget_only:  # the probe alone: nothing else is captured or fine-tuned
        budget = selection.choose_budget(model, tok, fp, domains, cfg, log)
        log(f"budget probe only: {budget['chosen']} LoRA steps chosen; no ground truth measured")
        return Result(
            NAME,
            config_record(cfg, families=families, lora_steps_chosen=budget["chosen"]),
            {"n_domains": len(domains), "n_families": len(set(families.values())), "budget": budget},
            time.perf_counter() - t0,
        )
    wanted = cfg.tokens.used() if cfg.ground_truth == "head" else {"sketch": cfg.tokens.sketch}
    data = selection.capture_domains(model, tok, fp, domains, wanted, log)
    candidates = selection.candidate_sets(domains, cfg.candidates, cfg.seed)
    budget = selection.choose_budget(model, tok, fp, domains, cfg, log) if cfg.budget_grid else None
    gt = selection.ground_truth(
        model,
        tok,
        fp,
        w0,
        b0,
        domains,
        cfg,
        log,
        data=data,
        candidates=candidates,
        steps=None if budget is None else budget["chosen"],
    )
    del model
    sc, by_method, head = selection.score_and_evaluate(
        w0,
        b0,
        data["sketch"],
        gt["transfer"],
        fp=fp,
        cfg=cfg,
        log=log,
        groups=families,
        per_source=selection.trivial_values(w0, b0, data["sketch"], gt),
    )
    console.print_method_table(head, sc["cannot_run"])
    noise = scoring.truth_noise(gt, groups=families, seed=cfg.seed)
    paired = scoring.paired_comparisons(by_method, seed=cfg.seed)

    # does the best source share the target's family? (how much structure the truth has)
    same_family_best = {}
    for t, row in gt["transfer"].items():
        best = max((s for s in row if s != t), key=lambda s: row[s])
        same_family_best[t] = families[best] == families[t]

    title = (
        f"natural shift, SmolLM2-135M, {len(domains)} domains"
        + (f" ({cfg.candidates} candidates per target)" if cfg.candidates else "")
        + f", {cfg.ground_truth} fine-tuning ground truth"
    )
    metrics = {
        "n_domains": len(domains),
        "n_families": len(set(families.values())),
        "candidates": candidates,
        "budget": budget,
        "tokens_captured": {s: {d: int(v["labels"].numel()) for d, v in data[s].items()} for s in data},
        "ground_truth": gt,
        "best_source_same_family": same_family_best,
        **scoring.method_metrics(sc, by_method, head, paired, noise),
    }
    return Result(
        NAME,
        config_record(cfg, families=families, **({} if budget is None else {"lora_steps_used": budget["chosen"]})),
        metrics,
        time.perf_counter() - t0,
        figures={
            "source_selection.png": lambda path: plot_selection(
                head, gt["transfer"], sc["scores"]["fisher"], path, title
            )
        },
    )
