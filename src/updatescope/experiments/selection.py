"""What the source-ranking experiments share: domain texts, captured streams, the
fine-tuning ground truth, the LoRA budget probe and scoring against the truth.

``source-selection``, ``smiles``, ``verbalizer``, ``estimator`` and ``network-selection`` all
read domain splits, capture head inputs or block inputs once per split (cached), measure a
transfer table by fine-tuning and score every method against it; the steps live here so that
no experiment folder imports another.  Everything torch-heavy is imported by the modules this
one calls (:mod:`.heads`, :mod:`.groundtruth`)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments import heads, scoring
from updatescope.experiments.configs import SelectionConfig
from updatescope.experiments.groundtruth import head as head_gt
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds

#: domains of the budget probe unless ``budget_domains`` says otherwise
BUDGET_DOMAINS = 6
#: characters read per split before the token cap applies (~2.2 chars/token for SMILES/digits)
CHARS_PER_TOKEN_CAP = 6


def load_texts(name: str, split: str, max_chars: int) -> list[str]:
    """Documents of one domain split (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    return load_domain(name, split, max_chars=max_chars)


def family_of(name: str) -> str:
    from updatescope.data.domains import list_domains

    fams = {d.name: d.family for d in list_domains()}
    return fams.get(name, name.split("_")[0])


def capture_domains(
    model: Any, tok: Any, fp: str, domains: list[str], tokens: dict[str, int], log: Any = print, loader: Any = None
) -> dict[str, dict[str, Any]]:
    """split -> domain -> {"acts", "labels"} (cached).  ``loader(name, split, max_chars)``
    defaults to :func:`load_texts`."""
    loader = loader or load_texts
    out: dict[str, dict[str, Any]] = {s: {} for s in tokens}
    for name in domains:
        for split, n_tok in tokens.items():
            t0 = time.perf_counter()
            texts = loader(name, split, n_tok * CHARS_PER_TOKEN_CAP)
            out[split][name] = heads.capture_acts(model, tok, texts, fp=fp, max_tokens=n_tok, desc=f"{name}/{split}")
            log(
                f"captured {name}/{split}: {out[split][name]['labels'].numel()} tokens "
                f"({time.perf_counter() - t0:.1f}s)"
            )
    return out


def capture_blocks(
    model: Any,
    tok: Any,
    fp: str,
    domains: list[str],
    tokens: dict[str, int],
    n_last: int,
    log: Any = print,
    loader: Any = None,
    seq_len: int = 128,
) -> dict[str, dict[str, Any]]:
    """split -> domain -> cached block inputs for the LoRA ground truth (:mod:`groundtruth.lora`)."""
    loader = loader or load_texts
    out: dict[str, dict[str, Any]] = {s: {} for s in tokens}
    for name in domains:
        for split, n_tok in tokens.items():
            t0 = time.perf_counter()
            texts = loader(name, split, n_tok * CHARS_PER_TOKEN_CAP)
            out[split][name] = lora_gt.capture_block_inputs(
                model, tok, texts, n_last=n_last, fp=fp, max_tokens=n_tok, seq_len=seq_len, desc=f"{name}/{split}"
            )
            n = int((out[split][name]["labels"] != IGNORE_INDEX).sum())
            log(f"captured block inputs {name}/{split}: {n} tokens ({time.perf_counter() - t0:.1f}s)")
    return out


def candidate_sets(domains: list[str], k: int | None, seed: int) -> dict[str, list[str]] | None:
    """Each target's candidate sources: ``k`` of the other domains drawn without replacement
    by a generator seeded with ``seed`` (the same draw in every run of that seed and domain
    list), in domain order; None (every other domain) when ``k`` is None."""
    if k is None:
        return None
    rng = np.random.default_rng(seed)
    out = {}
    for t in domains:
        others = [s for s in domains if s != t]
        pick = set(rng.choice(len(others), size=k, replace=False).tolist())
        out[t] = [s for i, s in enumerate(others) if i in pick]
    return out


def restrict(gt: dict[str, Any], candidates: dict[str, list[str]] | None) -> dict[str, Any]:
    """``gt`` with every per-pair table cut to each target's candidates (and itself)."""
    if candidates is None:
        return gt
    keep = {t: set(c) | {t} for t, c in candidates.items()}

    def cut(tab: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {t: {s: v for s, v in row.items() if s in keep[t]} for t, row in tab.items()}

    out = dict(gt)
    for key in ("transfer", "transfer_se", "loss"):
        if key in out:
            out[key] = cut(out[key])
    for key in ("transfer_by_seed", "loss_by_seed", "eval_sequences_by_seed"):
        if key in out:
            out[key] = [cut(tab) for tab in out[key]]
    if "eval_sequences" in out:
        out["eval_sequences"] = {**out["eval_sequences"], "loss": cut(out["eval_sequences"]["loss"])}
    return out


def budget_probe_domains(domains: list[str], k: int) -> list[str]:
    """``k`` domains spread evenly over the (family-grouped) domain list, first and last included."""
    idx = sorted({round(i * (len(domains) - 1) / (k - 1)) for i in range(k)})
    return [domains[i] for i in idx]


def budget_signal(gt: dict[str, Any]) -> dict[str, float]:
    """How far a ground truth's transfers stand above their seed noise: per target, the sd of
    the mean transfer over its candidate sources divided by the median SE of those values;
    -> {"median_snr" (over targets), "median_gap_over_se" (best − second-best gap / median SE)}."""
    snr, gap = [], []
    for t, row in gt["transfer"].items():
        vals = np.array([v for s, v in row.items() if s != t])
        se = np.array([v for s, v in gt["transfer_se"][t].items() if s != t])
        noise = float(np.median(se))
        if vals.size < 2 or not noise > 0:
            continue
        top = np.sort(vals)[::-1]
        snr.append(float(vals.std(ddof=1)) / noise)
        gap.append(float(top[0] - top[1]) / noise)
    return {
        "median_snr": float(np.median(snr)) if snr else float("nan"),
        "median_gap_over_se": float(np.median(gap)) if gap else float("nan"),
    }


def choose_budget(
    model: Any, tok: Any, fp: str, domains: list[str], cfg: SelectionConfig, log: Any, loader: Any = None
) -> dict[str, Any]:
    """Choose the LoRA steps from ``cfg.budget_grid`` on a validation split, before the
    ground truth is measured: ``cfg.budget_domains`` (default :data:`BUDGET_DOMAINS`) domains
    (:func:`budget_probe_domains`)
    are fine-tuned on their train split for every budget over 2 seeds, and evaluated on their
    *sketch* split — disjoint from the eval split the reported truth uses; no method's scores
    are looked at.  The budget with the largest :func:`budget_signal` median SNR wins (the
    smaller budget on a tie).  -> {"chosen", "domains", "grid": [{steps, median_snr,
    median_gap_over_se}], "validation_split": "sketch"}."""
    lc = cfg.lora
    probe = budget_probe_domains(domains, cfg.budget_domains or min(BUDGET_DOMAINS, len(domains)))
    blocks = capture_blocks(
        model,
        tok,
        fp,
        probe,
        {"train": cfg.tokens.train, "sketch": cfg.tokens.sketch},
        lc.n_last,
        log,
        loader,
        lc.seq_len,
    )

    def truth_at(steps: int, seed: int) -> dict[str, Any]:
        return lora_gt.transfer_from_config(
            model, blocks["train"], blocks["sketch"], dataclasses.replace(lc, steps=steps), seed=seed, resume_tag=fp
        )

    return {
        **probe_budget(cfg.budget_grid or (), truth_at, cfg.seed, log),
        "domains": probe,
        "validation_split": "sketch",
    }


def probe_budget(
    grid: Sequence[int], truth_at: Callable[[int, int], dict[str, Any]], seed: int, log: Any = None, seeds: int = 2
) -> dict[str, Any]:
    """The budget rule shared by the experiments: ``truth_at(steps, seed)`` (a transfer table
    on a validation split) over ``seeds`` seeds per budget; the budget with the largest
    :func:`budget_signal` median SNR wins (the smaller one on a tie).
    -> {"chosen", "grid": [{steps, median_snr, median_gap_over_se}], "seeds"}."""
    rows = []
    for steps in grid:
        gt = gt_seeds.over_seeds(lambda s, steps=steps: truth_at(steps, s), seed, seeds)
        rows.append({"steps": steps, **budget_signal(gt)})
        if log is not None:
            log(
                f"budget probe: {steps} steps -> median SNR {rows[-1]['median_snr']:.2f}, "
                f"gap/SE {rows[-1]['median_gap_over_se']:.2f}"
            )
    ok = [r for r in rows if math.isfinite(r["median_snr"])]
    if not ok:
        raise InputError("budget probe: no budget gave a measurable signal-to-noise ratio (all SEs zero?)")
    best = max(ok, key=lambda r: (r["median_snr"], -r["steps"]))
    return {"chosen": best["steps"], "grid": rows, "seeds": seeds}


def truth_store(cfg: Any, fp: str, domains: list[str], splits: dict[str, int], seq_len: int, loader: Any = None) -> Any:
    """The run's :class:`groundtruth.store.TruthStore` (None without ``cfg.truth_store``): keyed
    by the model fingerprint, the fine-tuning code digest, the token caps and chunk length, and
    the digests of the train and eval texts this run reads."""
    directory = getattr(cfg, "truth_store", None)
    if directory is None:
        return None
    from updatescope.experiments.groundtruth.store import TruthStore, texts_digest

    loader = loader or load_texts
    digests = {
        split: {d: texts_digest(loader(d, split, n * CHARS_PER_TOKEN_CAP), n) for d in domains}
        for split, n in splits.items()
    }
    context = {"model_fingerprint": fp, "code": lora_gt._code_digest(), "tokens": dict(splits), "seq_len": seq_len}
    return TruthStore(directory, context, digests)


def ground_truth(
    model: Any,
    tok: Any,
    fp: str,
    w0: Any,
    b0: Any,
    domains: list[str],
    cfg: SelectionConfig,
    log: Any,
    loader: Any = None,
    data: dict[str, Any] | None = None,
    candidates: dict[str, list[str]] | None = None,
    steps: int | None = None,
) -> dict[str, Any]:
    """The transfer table from ``cfg.ground_truth`` ("lora" or "head") fine-tuning, over
    ``cfg.gt_seeds`` seeds, each target's row cut to its ``candidates`` (all: None); LoRA
    trains ``steps`` steps (default ``cfg.lora.steps``).

    ``data``: head-input captures by split (needed for "head", which trains on them).  The
    LoRA fine-tunings are cached one (source, seed) at a time, so an interrupted run
    resumes where it stopped (``lora_gt.transfer_matrix(resume_tag=...)``), and with
    ``cfg.truth_store`` also kept in that directory (:func:`truth_store`), so another machine
    can finish the run."""
    splits = {"train": cfg.tokens.train, "eval": cfg.tokens.eval}
    if cfg.ground_truth == "lora":
        lc = cfg.lora if steps is None else dataclasses.replace(cfg.lora, steps=steps)
        blocks = capture_blocks(model, tok, fp, domains, splits, lc.n_last, log, loader, lc.seq_len)
        store = truth_store(cfg, fp, domains, splits, lc.seq_len, loader)

        def one(seed: int) -> dict[str, Any]:
            return lora_gt.transfer_from_config(
                model,
                blocks["train"],
                blocks["eval"],
                lc,
                seed=seed,
                candidates=candidates,
                resume_tag=fp,
                store=store,
                log=log,
            )
    else:
        if data is None or "train" not in data:
            data = capture_domains(model, tok, fp, domains, splits, log, loader)
        ft = cfg.finetune
        train, evals = data["train"], data["eval"]

        def one(seed: int) -> dict[str, Any]:
            out = head_gt.transfer_matrix(
                w0,
                b0,
                train,
                evals,
                steps=ft.steps,
                lr=ft.lr,
                batch=ft.batch or 10**9,
                seed=seed,
                extra_rows=ft.extra_rows,
                max_cached_logits=cfg.max_cached_logits,
                log=log,
            )
            return {
                **out,
                "tokens": {
                    "train": {n: int(d["labels"].numel()) for n, d in train.items()},
                    "eval": {n: int(d["labels"].numel()) for n, d in evals.items()},
                },
            }

    return restrict(gt_seeds.over_seeds(one, cfg.seed, cfg.gt_seeds, log), candidates)


def base_loss_on(w0: Any, b0: Any, tasks: dict[str, Any]) -> dict[str, float]:
    """The base model's mean cross-entropy (nats) on each task's stream: the "easiness"
    baseline scores a source by minus this (the model already predicts it well)."""
    return {n: head_gt.mean_loss(w0, b0, t["acts"], t["labels"]) for n, t in tasks.items()}


def score_and_evaluate(
    w0: Any,
    b0: Any,
    tasks: dict[str, Any],
    truth: dict[str, Any],
    *,
    fp: str,
    cfg: Any,
    log: Any,
    groups: dict[str, str] | None = None,
    per_source: dict[str, dict[str, float]] | None = None,
    extra_scores: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Every method's scores on the sketch streams plus the trivial baselines
    (:func:`scoring.trivial_scores`) and the tables ``extra_scores(scores)`` derives from them,
    its selection metrics against ``truth`` (within ``groups`` too) and the headline table
    (printed).  -> (scores record, metrics by method, headline)."""
    sc = scoring.score_methods(
        w0,
        b0,
        tasks,
        fp=fp,
        sketch_dim=cfg.sketch_dim,
        seed=cfg.seed,
        exact_n=cfg.exact_n,
        baseline_n=cfg.baseline_n,
        log=log,
    )
    sc["scores"].update(scoring.trivial_scores(list(tasks), groups=groups, per_source=per_source))
    if extra_scores is not None:
        sc["scores"].update(extra_scores(sc["scores"]))
    by_method = scoring.evaluate_methods(sc["scores"], truth, seed=cfg.seed, groups=groups)
    return sc, by_method, scoring.headline(by_method)


def trivial_values(w0: Any, b0: Any, tasks: dict[str, Any], gt: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Target-independent trivial baselines: "easiness" (−base loss on the source's sketch
    stream) and "size" (the source's fine-tuning tokens)."""
    return {
        "easiness": {n: -v for n, v in base_loss_on(w0, b0, tasks).items()},
        "size": {n: float(v) for n, v in gt["tokens"]["train"].items()},
    }
