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
and the trivial baselines (same family, easiness = −base loss on the source, source size), plus
the baselines the pre-registration names (:func:`derived_scores`: one SMILES family label, the
family label with ties broken by CKA, the coupling-free product of marginals); metrics from
``select.metrics.summarise``, within-family metrics and paired bootstrap differences
(:func:`scoring.paired_comparisons`), and the pre-registered verdicts (PREREGISTRATION.md beside
this file; :func:`preregistered_verdicts`).

The noise ceiling counts both noises of the truth, fine-tuning seeds and the finite eval sample
(:func:`scoring.seed_and_eval_ceiling`).  With ``truth_store`` every (source, seed) fine-tuning
is kept in that directory as it finishes (:mod:`groundtruth.store`), so a long run can be
finished in several sittings on other machines.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from updatescope.experiments import Result, config_record, heads, mappings, scoring, selection
from updatescope.experiments.configs import SelectionConfig
from updatescope.experiments.plotting import plot_selection
from updatescope.report import console

NAME = "source-selection"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
#: the pre-registered comparisons (name, first method, second method), one Holm family
PRESPECIFIED: tuple[tuple[str, str, str], ...] = (
    ("A_F - Scov(Gamma_e)", "fisher", "error"),
    ("A_F - product of marginals", "fisher", "product"),
    ("A_F - CKA", "fisher", "cka"),
    ("A_F - one SMILES family label", "fisher", "family1"),
)
#: paired bootstrap differences reported besides scoring.PAIRED
EXTRA_PAIRS = (
    ("fisher", "error"),
    ("fisher", "product"),
    ("fisher", "family1"),
    ("fisher", "family_cka"),
    ("exact_fisher", "exact_error"),
    ("exact_fisher", "exact_product"),
)
#: a run is "powered" (PREREGISTRATION.md) with at least this many targets, seeds and eval tokens
POWERED = {"targets": 40, "gt_seeds": 3, "eval_tokens": 6400}


def one_smiles_family(families: Mapping[str, str]) -> dict[str, str]:
    """The family labels with both SMILES collections (``smiles``, ``smiles_nci``) as one."""
    return {d: "smiles" if f.startswith("smiles") else f for d, f in families.items()}


def derived_scores(families: Mapping[str, str]) -> Any:
    """-> scores -> the pre-registered baselines built from other tables:

    - "family1": 1 for a source of the target's family with one SMILES label, else 0;
    - "family_cka": the family label with ties broken by CKA: same-family sources first, each
      group ordered by CKA (family indicator + CKA rank / (candidates + 1));
    - "product" / "exact_product": Scov(M_a) · Scov(Γ_e), the coupling-free prediction
      (sketch / exact values)."""
    fam1 = one_smiles_family(families)

    def extra(scores: Mapping[str, Any]) -> dict[str, Any]:
        names = list(scores["fisher"])
        out: dict[str, Any] = scoring.trivial_scores(names, groups=fam1)
        out["family1"] = out.pop("family")
        if "cka" in scores:
            out["family_cka"] = {}
            for t, row in scores["cka"].items():
                order = sorted(row, key=lambda s: (row[s], s))
                rank = {s: (i + 1) / (len(order) + 1) for i, s in enumerate(order)}
                out["family_cka"][t] = {s: float(families[s] == families[t]) + rank[s] for s in row}
        out["product"] = mappings.product_scores(scores["activation"], scores["error"])
        if "exact_activation" in scores and "exact_error" in scores:
            out["exact_product"] = mappings.product_scores(scores["exact_activation"], scores["exact_error"])
        return out

    return extra


def _verdict_rows(by_method: Mapping[str, Any], family: str, seed: int, keep: Any = None) -> list[dict[str, Any]]:
    """Sign-flip verdicts of the :data:`PRESPECIFIED` comparisons on per-target Spearman
    differences (targets in ``keep`` only, when given), Holm across them."""
    from updatescope.select.metrics import paired_verdicts

    diffs: dict[str, dict[str, float]] = {}
    for name, a, b in PRESPECIFIED:
        sa = mappings.per_target_spearman(by_method, a) or {}
        sb = mappings.per_target_spearman(by_method, b) or {}
        diffs[name] = {
            t: sa[t] - sb[t] for t in sa if t in sb and math.isfinite(sa[t] - sb[t]) and (keep is None or t in keep)
        }
    return [
        {
            "comparison": v.comparison,
            "n_targets": v.n,
            "mean_spearman_difference": v.mean if math.isfinite(v.mean) else None,
            "p": v.p,
            "p_se": v.p_se,
            "p_holm": v.p_holm,
            "test": v.test,
            "family": v.family,
            "family_size": v.family_size,
            "alpha": v.alpha,
            "word": v.word,
        }
        for v in paired_verdicts(diffs, family=family, seed=seed)
    ]


def preregistered_verdicts(
    by_method: Mapping[str, Any], cfg: SelectionConfig, eval_tokens: Mapping[str, int]
) -> dict[str, Any]:
    """The verdict block of PREREGISTRATION.md: per-target Spearman differences of the
    :data:`PRESPECIFIED` comparisons, two-sided sign-flip over targets (exact up to 20 non-zero
    differences, Monte Carlo beyond), Holm across the four, alpha 0.05, on every target
    ("primary") and, as a secondary family, on the targets whose eval split reached
    ``POWERED["eval_tokens"]`` counted tokens; the statement follows from the primary
    A_F − Scov(Γ_e) word; "powered" by the :data:`POWERED` rule.  ``eval_tokens``: target ->
    counted eval tokens."""
    full = {t for t, n in eval_tokens.items() if n >= POWERED["eval_tokens"]}
    primary = _verdict_rows(by_method, "source-selection pre-registered (sketch)", cfg.seed)
    secondary = _verdict_rows(by_method, "source-selection, targets at the full eval size", cfg.seed, keep=full)
    first = primary[0]["word"]
    statement = {
        "better": "A_F beats error-only Scov(Gamma_e) on natural shift: the coupling adds signal here",
        "worse": "error-only Scov(Gamma_e) beats A_F on natural shift",
    }.get(first, "A_F does not beat error-only Scov(Gamma_e) on natural shift (no difference after Holm)")
    powered = (
        len(eval_tokens) >= POWERED["targets"]
        and cfg.gt_seeds >= POWERED["gt_seeds"]
        and (cfg.tokens.eval or 0) >= POWERED["eval_tokens"]
    )
    return {
        "primary": primary,
        "full_eval_targets": secondary,
        "n_full_eval_targets": len(full),
        "statement": statement,
        "rule": "statement from the primary 'A_F - Scov(Gamma_e)' word (Holm-adjusted sign-flip p < alpha)",
        "powered": powered,
        "powered_rule": (
            f">= {POWERED['targets']} targets, >= {POWERED['gt_seeds']} fine-tuning seeds, "
            f">= {POWERED['eval_tokens']} eval tokens per target requested"
        ),
    }


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
        extra_scores=derived_scores(families),
    )
    console.print_method_table(head, sc["cannot_run"])
    noise = scoring.truth_noise(gt, groups=families, seed=cfg.seed)
    paired = scoring.paired_comparisons(by_method, pairs=scoring.PAIRED + EXTRA_PAIRS, seed=cfg.seed)
    verdicts = preregistered_verdicts(by_method, cfg, {t: gt["tokens"]["eval"][t] for t in gt["transfer"]})
    for v in verdicts["primary"]:
        log(f"pre-registered {v['comparison']}: {v['word']} (p {v['p']:.3g}, Holm {v['p_holm']:.3g})")
    log(f"verdict: {verdicts['statement']}" + ("" if verdicts["powered"] else " (not powered: carries no weight)"))
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None

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
        "verdicts": verdicts,
    }
    return Result(
        NAME,
        config_record(
            cfg,
            families=families,
            families_one_smiles=one_smiles_family(families),
            preregistration_sha256=prereg_sha,
            **({} if budget is None else {"lora_steps_used": budget["chosen"]}),
        ),
        metrics,
        time.perf_counter() - t0,
        figures={
            "source_selection.png": lambda path: plot_selection(
                head, gt["transfer"], sc["scores"]["fisher"], path, title
            )
        },
    )
