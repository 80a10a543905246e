"""Training-free mixture weights, judged by fine-tuning (``updatescope.select.mixture.mix``).

For each target domain, every arm proposes token shares over the same pool of source domains;
LoRA is fine-tuned on that mixture at one fixed token budget and the transfer is the target's
loss before minus after, on its ``eval`` rows.  Arms:

- ``fisher_mix`` / ``error_mix`` / ``activation_mix``: ``mix`` with each objective;
- ``fisher_top1``: the best single source by FisherSketch (``Mixture.best_single``);
- ``fisher_top3``: uniform over the ``top`` sources with the highest single-source A_F;
- ``uniform``: uniform over the whole pool (one run serves every target);
- ``random_mix``: Dirichlet(1) shares, seeded per target;
- ``oracle_single``: the single source with the highest measured transfer (every single
  source is fine-tuned once per seed and judged on every target).

Runs with the same rows share one fine-tuning (e.g. ``fisher_top1`` is a single-source run).
With ``run_store``, several processes running the same command split the fine-tunings: each
claims one before running it (a ``.fit-<key>.claim`` file beside the result, as in
``groundtruth.store``), leaves those another live process has claimed, and waits for them at
the end of each seed.  Only the last ``lora.n_last`` blocks are adapted: the residual stream
entering them is captured once per row.  Analysis: PREREGISTRATION.md.
"""

from __future__ import annotations

import functools
import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.caching import cache_key, cached, read_stored_json, stored_json, stored_json_path
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.groundtruth.store import claimed_at, settle
from updatescope.experiments.mixtures.config import MixturesConfig

NAME = "mixtures"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
ARMS = (
    "fisher_mix",
    "error_mix",
    "activation_mix",
    "fisher_top1",
    "fisher_top3",
    "uniform",
    "random_mix",
    "oracle_single",
)
#: pre-specified comparisons: (name, first arm, second arm); difference = first − second in transfer
COMPARISONS = (
    ("FisherSketch mixture vs best single source by FisherSketch", "fisher_mix", "fisher_top1"),
    ("FisherSketch mixture vs uniform over the pool", "fisher_mix", "uniform"),
    ("FisherSketch mixture vs uniform over its top 3", "fisher_mix", "fisher_top3"),
    ("FisherSketch mixture vs random mixture", "fisher_mix", "random_mix"),
    ("FisherSketch mixture vs error-only mixture", "fisher_mix", "error_mix"),
)


def row_counts(weights: list[float], rows: int) -> list[int]:
    """Rows per source for token shares ``weights`` (largest remainders, summing to ``rows``)."""
    from updatescope.select.mixture import round_budget

    return round_budget(weights, rows)


def mixture_rows(blocks: dict[str, dict], pool: tuple[str, ...], counts: list[int]) -> dict[str, torch.Tensor]:
    """The first ``counts[i]`` rows of source i, stacked (every source's rows share one width)."""
    parts = [{k: blocks[s][k][:c] for k in ("hidden", "mask", "labels")} for s, c in zip(pool, counts) if c > 0]
    return {k: torch.cat([p[k] for p in parts]) for k in ("hidden", "mask", "labels")}


def run_key(counts: list[int]) -> str:
    return ",".join(str(c) for c in counts)


def propose(cfg: MixturesConfig, sources: dict, target_sig: Any, target: str) -> dict[str, Any]:
    """Every signature-based arm's token shares for one target, with the predicted alignment
    of each arm's mixture (FisherSketch objective)."""
    from updatescope.select.mixture import mix, mixture_alignment

    names = list(cfg.pool)
    out: dict[str, Any] = {}
    mixes = {}
    for obj in ("fisher", "error", "activation"):
        m = mix(target_sig, {n: sources[n] for n in names}, objective=obj, target_name=target)
        mixes[obj] = m
        out[f"{obj}_mix"] = list(m.weights)
    fm = mixes["fisher"]
    single = {n: mixture_alignment([sources[n]], target_sig, [1.0])["value"] for n in names}
    best = max(names, key=lambda n: (single[n], -names.index(n)))
    out["fisher_top1"] = [1.0 if n == best else 0.0 for n in names]
    top = sorted(names, key=lambda n: (-single[n], names.index(n)))[: cfg.top]
    out["fisher_top3"] = [1.0 / cfg.top if n in top else 0.0 for n in names]
    out["uniform"] = [1.0 / len(names)] * len(names)
    rng = np.random.default_rng([cfg.seed, sum(map(ord, target))])
    out["random_mix"] = rng.dirichlet(np.ones(len(names))).tolist()
    sig_list = [sources[n] for n in names]
    predicted = {a: mixture_alignment(sig_list, target_sig, w)["value"] for a, w in out.items()}
    return {
        "weights": out,
        "predicted": predicted,
        "single_alignment": single,
        "fisher_mix": {k: fm.as_dict()[k] for k in ("predicted", "predicted_se", "best_single", "psd", "solver")},
    }


def _fit_key(fp: str, cfg: MixturesConfig, counts: list[int], seed: int, digests: list[str]) -> str:
    lc = cfg.lora
    return cache_key(
        "mixtures-run-v1",
        lora_gt._code_digest(),
        fp,
        list(cfg.pool),
        counts,
        seed,
        lc.n_last,
        lc.r,
        lc.alpha,
        lc.lr,
        lc.steps,
        lc.batch,
        list(lc.targets),
        digests,
    )


def finetune_eval(model, fp, cfg, blocks, evals, counts, seed, digests) -> dict[str, float] | None:
    """Fine-tune on the mixture with ``counts`` rows per source; -> target -> mean eval loss.
    With ``run_store``, the result is read from the store or computed under this process's
    claim beside it (``groundtruth.store.claimed_at``); None when another live process sharing
    the store holds that claim (ask again later)."""
    lc = cfg.lora

    def build() -> dict[str, Any]:
        data = mixture_rows(blocks, cfg.pool, counts)
        tail = lora_gt.finetune_from_config(model, data, lc, seed=seed)
        return {t: torch.tensor(lora_gt.mean_loss(tail, d)) for t, d in evals.items()}

    key = _fit_key(fp, cfg, counts, seed, digests)
    if cfg.run_store is not None:  # kept in the run store: floats, as the cache gives them back
        parts = {"fit": key, "rows": counts, "seed": seed, "targets": sorted(evals)}
        path = stored_json_path(cfg.run_store, "fit", parts)
        return claimed_at(
            path.with_name(f".{path.name.removesuffix('.json.gz')}.claim"),
            lambda: read_stored_json(cfg.run_store, "fit", parts),
            lambda: stored_json(cfg.run_store, "fit", parts, lambda: {t: float(v) for t, v in build().items()}),
        ).value
    res = cached("mixtures-run", key, build)
    return {t: float(v) for t, v in res.items()}


def _digest(d: dict[str, torch.Tensor]) -> str:
    return hashlib.sha256(
        b"".join(d[k].contiguous().numpy().tobytes() for k in ("hidden", "labels", "mask"))
    ).hexdigest()


def run(cfg: MixturesConfig, out_dir: Path) -> Result:
    from updatescope.data.domains import check_known_domains, load_domain
    from updatescope.errors import InputError
    from updatescope.pipeline import SketchOptions, sketch_corpus

    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    check_known_domains((*cfg.pool, *cfg.targets))
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    lc = cfg.lora
    budget_tokens = cfg.budget_rows * (lc.seq_len - 1)
    blocks, sources = {}, {}
    opts = SketchOptions(sketch_dim=cfg.sketch_dim, seed=cfg.seed, max_tokens=budget_tokens)
    for s in cfg.pool:
        docs = load_domain(s, "train", max_chars=12 * budget_tokens)
        b = lora_gt.capture_block_inputs(
            model, tok, docs, n_last=lc.n_last, fp=fp, max_tokens=budget_tokens, seq_len=lc.seq_len
        )
        if b["hidden"].shape[0] < cfg.budget_rows:
            raise InputError(f"source {s}: {b['hidden'].shape[0]} rows of {lc.seq_len} tokens, need {cfg.budget_rows}")
        blocks[s] = b
        sources[s] = sketch_corpus(model, tok, docs, opts, progress=False)
    width = max(b["hidden"].shape[1] for b in blocks.values())
    for s, b in blocks.items():  # one width for every source, so mixtures stack
        extra = width - b["hidden"].shape[1]
        if extra:
            blocks[s] = {
                "hidden": torch.nn.functional.pad(b["hidden"], (0, 0, 0, extra)),
                "mask": torch.nn.functional.pad(b["mask"], (0, extra)),
                "labels": torch.nn.functional.pad(b["labels"], (0, extra), value=-100),
            }
    evals, targets_sig = {}, {}
    eval_tokens = cfg.eval_rows * (lc.seq_len - 1)
    for t in cfg.targets:
        evals[t] = lora_gt.capture_block_inputs(
            model,
            tok,
            load_domain(t, "eval", max_chars=12 * eval_tokens),
            n_last=lc.n_last,
            fp=fp,
            max_tokens=eval_tokens,
            seq_len=lc.seq_len,
        )
        targets_sig[t] = sketch_corpus(
            model,
            tok,
            load_domain(t, "sketch", max_chars=12 * cfg.target_sketch_tokens),
            SketchOptions(sketch_dim=cfg.sketch_dim, seed=cfg.seed, max_tokens=cfg.target_sketch_tokens),
            progress=False,
        )
    base_tail = lora_gt.tail_model(model, lc.n_last)
    base = {t: lora_gt.mean_loss(base_tail, d) for t, d in evals.items()}
    del base_tail
    digests = [_digest(blocks[s]) for s in cfg.pool] + [_digest(evals[t]) for t in cfg.targets]
    proposals = {t: propose(cfg, sources, targets_sig[t], t) for t in cfg.targets}
    names = list(cfg.pool)
    singles = [[1.0 if j == i else 0.0 for j in range(len(names))] for i in range(len(names))]
    by_seed = []
    for j in range(cfg.gt_seeds):
        s = gt_seeds.gt_seed(cfg.seed, j)
        log(f"mixtures: seed {j + 1}/{cfg.gt_seeds} ({s})")
        done: dict[str, dict[str, float]] = {}
        wanted: dict[str, list[int]] = {}  # every fine-tuning of this seed, once per row counts
        for w in singles + [w for t in cfg.targets for w in proposals[t]["weights"].values()]:
            counts = row_counts(w, cfg.budget_rows)
            wanted.setdefault(run_key(counts), counts)

        def fit(key: str, first: bool, s: int = s, done: dict = done) -> bool:
            t1 = time.perf_counter()
            res = finetune_eval(model, fp, cfg, blocks, evals, wanted[key], s, digests)
            if res is None:
                if first:
                    log(f"  run {key}: claimed by another process; read from the run store when it is saved")
                return False
            done[key] = res
            log(f"  run {key}: {time.perf_counter() - t1:.1f}s")
            return True

        # one pass, leaving the fine-tunings another process sharing the run store has claimed;
        # then wait for those to be saved (or take them over if that process stops)
        settle(wanted, fit, lambda: lora_gt.CLAIM_POLL)

        def loss_at(weights: list[float], done: dict = done) -> dict[str, float]:
            return done[run_key(row_counts(weights, cfg.budget_rows))]

        single_transfer = {n: {t: base[t] - loss_at(w)[t] for t in cfg.targets} for n, w in zip(names, singles)}
        arms = {}
        for t in cfg.targets:
            row = {a: base[t] - loss_at(w)[t] for a, w in proposals[t]["weights"].items()}
            best = max(names, key=lambda n, t=t: (single_transfer[n][t], -names.index(n)))
            row["oracle_single"] = single_transfer[best][t]
            row["oracle_source"] = best
            arms[t] = row
        by_seed.append({"seed": s, "arms": arms, "single": single_transfer, "runs": len(done)})
    metrics = _metrics(cfg, base, proposals, by_seed)
    record = config_record(cfg, preregistration_sha256=prereg_sha, budget_tokens=budget_tokens)
    from updatescope.experiments.mixtures.figures import plot_arms

    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={"mixtures.png": lambda path: plot_arms(metrics, path)},
    )


def _metrics(cfg, base, proposals, by_seed) -> dict[str, Any]:
    from scipy.stats import spearmanr

    from updatescope.experiments.mappings import verdict_rows
    from updatescope.select.metrics import paired_verdicts

    targets = list(cfg.targets)
    mean = {t: {a: float(np.mean([b["arms"][t][a] for b in by_seed])) for a in ARMS} for t in targets}
    se = {
        t: {
            a: float(np.std([b["arms"][t][a] for b in by_seed], ddof=1) / np.sqrt(len(by_seed)))
            if len(by_seed) > 1
            else None
            for a in ARMS
        }
        for t in targets
    }
    diffs = {name: {t: mean[t][a] - mean[t][b] for t in targets} for name, a, b in COMPARISONS}
    clusters = {t: t.split("_")[0] for t in targets}
    verdicts = verdict_rows(
        diffs,
        clusters,
        family="mixtures: the FisherSketch mixture against the other arms",
        n_key="n_targets",
        mean_key="mean_transfer_difference",
        n_boot=cfg.n_boot,
        seed=cfg.seed,
    )
    # the prediction itself: does the predicted mixture alignment order the arms' transfer?
    pred_arms = [a for a in ARMS if a != "oracle_single"]
    rho = {}
    for t in targets:
        x = [proposals[t]["predicted"][a] for a in pred_arms]
        y = [mean[t][a] for a in pred_arms]
        r = float(spearmanr(x, y).statistic) if len(set(x)) > 1 and len(set(y)) > 1 else float("nan")
        rho[t] = float(r) if np.isfinite(r) else None
    vals = [v for v in rho.values() if v is not None]
    (pv,) = paired_verdicts(
        {"predicted alignment vs transfer": {t: v for t, v in rho.items() if v is not None}},
        family="mixtures: the prediction (one comparison)",
        seed=cfg.seed,
    )
    summary = {
        a: {
            "transfer": float(np.mean([mean[t][a] for t in targets])),
            "transfer_se_over_targets": float(np.std([mean[t][a] for t in targets], ddof=1) / np.sqrt(len(targets)))
            if len(targets) > 1
            else None,
            "share_of_oracle_single": float(
                np.mean([mean[t][a] / mean[t]["oracle_single"] for t in targets if mean[t]["oracle_single"] > 0])
            )
            if any(mean[t]["oracle_single"] > 0 for t in targets)
            else None,
        }
        for a in ARMS
    }
    return {
        "powered": not cfg.quick,
        "base_loss": base,
        "proposals": proposals,
        "by_seed": by_seed,
        "transfer": mean,
        "transfer_se_over_seeds": se,
        "summary": summary,
        "verdicts": {
            "rule": '"better" when the FisherSketch mixture transfers more than the other arm: Holm-adjusted '
            'two-sided sign-flip p < 0.05 over targets with the mean difference > 0; "worse" when p < 0.05 '
            'with it < 0; else "no difference"',
            "comparisons": verdicts,
        },
        "prediction": {
            "per_target_spearman": rho,
            "mean": float(np.mean(vals)) if vals else None,
            "p": pv.p,
            "word": {"better": "orders the arms", "worse": "orders them backwards"}.get(pv.word, "not resolved"),
            "rule": "sign-flip test of the per-target Spearman against 0 (one comparison)",
        },
    }
