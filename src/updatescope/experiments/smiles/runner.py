"""SMILES (paper A): does the Fisher alignment between molecular domains track transfer?

Domains: the 9 SMILES domains of ``updatescope.data.domains`` (family ``smiles``: NCI
molecules by TPSA band, WEHI screening molecules by element class × polarity), each with
disjoint sketch / train / eval hash splits, all under SmolLM2's text tokenizer (the shared
output basis).  Head inputs are captured once per split and cached (:func:`heads.capture_acts`).

Ground truth (``ground_truth`` in the config, as in ``source-selection``): ``"lora"``
(default) trains LoRA adapters on the last decoder blocks on the source's train split
(:mod:`groundtruth.lora`); ``"head"`` fine-tunes only the output head on cached head inputs
(:mod:`groundtruth.head`).  The cross-domain *perplexity reduction* on a target is

    r(T, S) = (PPL_T − PPL_T|S) / PPL_T = 1 − exp(−(L_T − L_T|S)),

L the target's eval-split mean cross-entropy (nats) under the base head and under the head
fine-tuned on S.  It is a monotone function of the loss reduction, so per-target rankings
are the same as with ``transfer``; pooled over targets it puts targets on a relative scale.

Budget (``budget_grid``, as in ``source-selection``): the LoRA steps are chosen before the
truth is measured, on the sketch split of ``budget_domains`` bins (never the eval split the
truth uses), by the largest median signal-to-noise ratio of the transfers over 2 seeds
(:func:`selection.choose_budget`); ``budget_only`` records the probe alone.

Statistics, for every method's similarity (FisherSketch joint A_F, activation-only
Scov(M_a), error-only Scov(Γ_e), the exact Gram identity, mean-gradient cosine, the
baselines, random):

- pooled Spearman ρ over all ordered (target, source) pairs, s ≠ t, with scipy's two-sided
  p-value.  That p treats the 72 pairs as independent; they are not (each domain appears in
  16 pairs, and A_F is symmetric), so the p-value is optimistic.
- hence also a Mantel-style permutation p-value: the domain labels of the similarity
  matrix are permuted (rows and columns together) ``n_perm`` times and the pooled ρ
  recomputed; p = (1 + #{|ρ_perm| ≥ |ρ|}) / (1 + n_perm).  This keeps the dependence
  between pairs that share a domain.
- per-target Spearman (8 candidates per target): mean ± sd and each target's p-value.
- the selection metrics of ``select.metrics.summarise`` (top-1, regret, ...) for reference.

Within one collection (``collection="nci"``): the 12 ``smiles_nci`` domains, disjoint NCI
property bins (TPSA, logP, molecular weight, fraction sp3; terciles each; ``--quick``: the 9
of :data:`QUICK_WITHIN_PROPERTIES`).  The 0/1
same-collection indicator, which beats FisherSketch across NCI/WEHI, is then 1 for every
pair: it is kept in the record as method "collection" (constant, so it cannot rank: its
per-target Spearman is undefined and counts as 0 in the paired bootstrap) and flagged under
``collection_indicator``.  The trivial baselines that still vary are "family" (here: the
source is binned by the same property as the target), "easiness" and "size"; the paired
bootstrap compares FisherSketch with each of them and with every similarity method.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.experiments import Result, config_record, heads, scoring, selection
from updatescope.experiments.configs import check_budget_domains
from updatescope.experiments.smiles import figures
from updatescope.experiments.smiles.config import SmilesConfig
from updatescope.report import console

NAME = "smiles"


def smiles_domains(collection: str | None = None) -> list[str]:
    """Names of the SMILES domains: family ``smiles`` (two collections), or with a
    ``collection`` the one-collection family ``smiles_<collection>`` (monkeypatched in tests)."""
    from updatescope.data.domains import list_domains

    return [d.name for d in list_domains("smiles" if collection is None else f"smiles_{collection}")]


def load_texts(name: str, split: str, max_chars: int) -> list[str]:
    """Documents of one domain split (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    return load_domain(name, split, max_chars=max_chars)


def collection_of(name: str) -> str:
    """The source collection a SMILES domain was cut from ("nci", "wehi", ...): the
    "family" trivial baseline scores a source 1 when it shares the target's collection."""
    parts = name.split("_")
    return parts[1] if len(parts) > 2 else name


def property_of(name: str) -> str:
    """The property a one-collection bin was cut by ("smiles_nci_logp_q2" -> "logp"); the
    "family" baseline of the within-collection run scores a same-property source 1."""
    parts = name.split("_")
    return parts[2] if len(parts) > 3 else name


#: ``--quick`` within one collection: 3 of the 4 property families (9 bins, 8 candidates per
#: target), so it costs what the recorded two-collection quick run costs.  "mw" is left out:
#: it is the family most correlated with the others, and its low bin is short of train tokens.
QUICK_WITHIN_PROPERTIES = ("tpsa", "logp", "fsp3")

#: within one collection, FisherSketch against every method whose per-target difference is bootstrapped
WITHIN_PAIRED = tuple(
    ("fisher", m)
    for m in (
        "exact_fisher",
        "activation",
        "error",
        "cka",
        "grad_cos",
        "family",
        "easiness",
        "size",
        "collection",
        "random",
    )
)


def collection_indicator(collections: Mapping[str, str]) -> dict[str, Any]:
    """Whether the same-collection indicator can rank anything among these domains."""
    values = sorted(set(collections.values()))
    return {
        "collections": values,
        "constant": len(values) == 1,
        "note": (
            "one collection: the same-collection indicator is 1 for every pair and cannot rank"
            if len(values) == 1
            else "several collections: the indicator varies across pairs"
        ),
    }


def ppl_reduction(
    base_loss: Mapping[str, float], loss: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """{target: {source: 1 − exp(−(L_T − L_T|S))}} (relative perplexity reduction; > 0 = helped)."""
    return {t: {s: 1.0 - math.exp(-(base_loss[t] - v)) for s, v in row.items()} for t, row in loss.items()}


def _offdiag(names: Sequence[str], table: Mapping[str, Mapping[str, float]]) -> np.ndarray:
    """(T, T) [target, source] array, NaN on the diagonal and where missing."""
    out = np.full((len(names), len(names)), np.nan)
    for i, t in enumerate(names):
        for j, s in enumerate(names):
            if i != j and s in table.get(t, {}):
                out[i, j] = table[t][s]
    return out


def _rowwise_spearman(xs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of every row of xs (P, n) with y (n,), average ranks for ties."""
    from scipy import stats

    rx = stats.rankdata(xs, axis=1)
    ry = stats.rankdata(y)
    rx = rx - rx.mean(1, keepdims=True)
    ry = ry - ry.mean()
    den = np.sqrt((rx * rx).sum(1) * (ry * ry).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx @ ry) / den


def correlation_tests(
    names: Sequence[str],
    scores: Mapping[str, Mapping[str, float]],
    truth: Mapping[str, Mapping[str, float]],
    *,
    n_perm: int = 5000,
    seed: int = 0,
) -> dict[str, Any]:
    """Pooled Spearman (scipy p and Mantel permutation p) and per-target Spearman.

    -> {"pooled": {rho, p, p_perm, n_perm, n}, "per_target": {mean, sd, n, rho: {t}, p: {t}}}
    """
    from scipy import stats

    sm, tr = _offdiag(names, scores), _offdiag(names, truth)
    mask = ~np.eye(len(names), dtype=bool)
    x, y = sm[mask], tr[mask]
    ok = np.isfinite(x) & np.isfinite(y)
    pooled: dict[str, Any] = {"rho": math.nan, "p": math.nan, "p_perm": math.nan, "n_perm": n_perm, "n": int(ok.sum())}
    if ok.sum() >= 3 and np.ptp(x[ok]) > 0 and np.ptp(y[ok]) > 0:
        res = stats.spearmanr(x[ok], y[ok])
        rho = float(res.statistic)
        pooled.update(rho=rho, p=float(res.pvalue))
        if ok.all():  # permutation test needs every pair's score
            rng = np.random.default_rng(seed)
            perms = np.stack([rng.permutation(len(names)) for _ in range(n_perm)])  # (P, T)
            xp = sm[perms[:, :, None], perms[:, None, :]][:, mask]  # (P, pairs)
            r = _rowwise_spearman(xp, y)
            hits = int(np.sum(np.isfinite(r) & (np.abs(r) >= abs(rho) - 1e-12)))
            pooled["p_perm"] = (1 + hits) / (1 + n_perm)
    per_rho, per_p = {}, {}
    for i, t in enumerate(names):
        xi, yi = sm[i][mask[i]], tr[i][mask[i]]
        if np.all(np.isfinite(xi)) and np.ptp(xi) > 0 and np.ptp(yi) > 0:
            res = stats.spearmanr(xi, yi)
            per_rho[t], per_p[t] = float(res.statistic), float(res.pvalue)
    vals = np.array(list(per_rho.values()))
    per = {
        "mean": float(vals.mean()) if vals.size else None,
        "sd": float(vals.std(ddof=1)) if vals.size > 1 else None,
        "n": int(vals.size),
        "rho": per_rho,
        "p": per_p,
    }
    return {"pooled": pooled, "per_target": per}


def run(cfg: SmilesConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    if cfg.domains:
        domains = list(cfg.domains)
    elif cfg.collection:
        domains = smiles_domains(cfg.collection)
        if cfg.quick:
            domains = [d for d in domains if property_of(d) in QUICK_WITHIN_PROPERTIES]
    else:
        domains = smiles_domains()
    check_budget_domains(cfg.budget_domains, len(domains))  # the domain list is known only now
    log = functools.partial(print, flush=True)

    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    budget = selection.choose_budget(model, tok, fp, domains, cfg, log, loader=load_texts) if cfg.budget_grid else None
    if cfg.budget_only:  # the probe alone: no ground truth, no scores
        log(f"budget probe only: {budget['chosen']} LoRA steps chosen; no ground truth measured")
        return Result(
            NAME,
            config_record(cfg, domains=domains, lora_steps_chosen=budget["chosen"]),
            {"n_domains": len(domains), "budget": budget},
            time.perf_counter() - t0,
        )
    wanted = cfg.tokens.used() if cfg.ground_truth == "head" else {"sketch": cfg.tokens.sketch}
    data = selection.capture_domains(model, tok, fp, domains, wanted, log, loader=load_texts)
    gt = selection.ground_truth(
        model,
        tok,
        fp,
        w0,
        b0,
        domains,
        cfg,
        log,
        loader=load_texts,
        data=data,
        steps=None if budget is None else budget["chosen"],
    )
    del model
    truth = ppl_reduction(gt["base_loss"], gt["loss"])
    collections = {d: collection_of(d) for d in domains}
    # within one collection the collection label is constant: group by property instead
    groups = {d: property_of(d) for d in domains} if cfg.collection else collections
    per_source = selection.trivial_values(w0, b0, data["sketch"], gt)
    if cfg.collection:
        sc = scoring.score_methods(
            w0,
            b0,
            data["sketch"],
            fp=fp,
            sketch_dim=cfg.sketch_dim,
            seed=cfg.seed,
            exact_n=cfg.exact_n,
            baseline_n=cfg.baseline_n,
            log=log,
        )
        sc["scores"].update(scoring.trivial_scores(domains, groups=groups, per_source=per_source))
        sc["scores"]["collection"] = scoring.trivial_scores(domains, groups=collections)["family"]
        by_method = scoring.evaluate_methods(sc["scores"], truth, seed=cfg.seed, groups=groups)
        head = scoring.headline(by_method)
    else:
        sc, by_method, head = selection.score_and_evaluate(
            w0, b0, data["sketch"], truth, fp=fp, cfg=cfg, log=log, groups=groups, per_source=per_source
        )
    noise = scoring.truth_noise(
        gt, groups=groups, seed=cfg.seed, tables=[ppl_reduction(gt["base_loss"], lo) for lo in gt["loss_by_seed"]]
    )
    paired = scoring.paired_comparisons(
        by_method, seed=cfg.seed, **({"pairs": WITHIN_PAIRED} if cfg.collection else {})
    )
    tests = {
        m: correlation_tests(domains, table, truth, n_perm=cfg.n_perm, seed=cfg.seed)
        for m, table in sc["scores"].items()
    }
    console.print_correlation_table(tests, sc["cannot_run"])

    mask = ~np.eye(len(domains), dtype=bool)
    pairs = {
        m: _offdiag(domains, sc["scores"][m])[mask].tolist() for m in ("fisher", "activation") if m in sc["scores"]
    }
    y = _offdiag(domains, truth)[mask].tolist()
    where = f"within {cfg.collection.upper()}, " if cfg.collection else ""
    title = f"SMILES, SmolLM2-135M, {where}{len(domains)} domains, {cfg.ground_truth} fine-tuning ground truth"
    metrics = {
        "n_domains": len(domains),
        "budget": budget,
        "tokens_captured": {s: {d: int(v["labels"].numel()) for d, v in data[s].items()} for s in data},
        "ground_truth": {**gt, "ppl_reduction": truth},
        "correlation": tests,
        "collections": collections,
        **scoring.method_metrics(sc, by_method, head, paired, noise),
    }
    if cfg.collection:
        scores = sc["scores"]
        metrics.update(
            property_families=groups,
            collection_indicator=collection_indicator(collections),
            constant_methods=sorted(
                m for m, tab in scores.items() if len({v for row in tab.values() for v in row.values()}) <= 1
            ),
        )
    fig = f"smiles_{cfg.collection}.png" if cfg.collection else "smiles.png"
    used = {} if budget is None else {"lora_steps_used": budget["chosen"]}
    return Result(
        NAME,
        config_record(cfg, domains=domains, **used),
        metrics,
        time.perf_counter() - t0,
        figures={fig: lambda path: figures.plot_smiles(pairs, y, tests, path, title)},
    )
