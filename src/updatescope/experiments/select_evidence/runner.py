"""Does forward-only document selection pick documents that help?  Top-k of a mixed pool.

The pool mixes ``docs_per_domain`` train-split documents (pieces of ``doc_chars``
characters) of several built-in domains, shuffled, origin hidden from every selector; each
target domain is one of them, so a selection's share of the target's own documents is
measurable.  Each target has its own documents: sketch-split pieces define it, eval-split
pieces measure the loss, and its train-split pieces after the pool's are the oracle's
selection.  Selectors and their costs: :mod:`.selectors`.

Ground truth: for each target, budget, selector and fine-tuning seed (shared by all
selectors, so differences are paired), LoRA fine-tuning on the selection
(:func:`groundtruth.lora.finetune_from_config`, ``ceil(epochs × k / batch)`` steps); loss
reduction = target eval loss under the base model − after fine-tuning (nats, > 0 helps).
Each fine-tuning result (per-sequence eval losses) goes through a
:class:`~updatescope.experiments.groundtruth.store.TruthStore` when ``truth_store`` is set,
keyed by the selected texts, the eval texts, the recipe, the code and the model, so a run
resumes across sittings; the selectors' scores are kept there too (``selectors.score_all``),
and block inputs are captured only for fine-tunings the store does not hold
(``selectors.PoolBlocks``).  Verdicts: :mod:`.verdicts` (PREREGISTRATION.md).
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.groundtruth.store import TruthStore, settle
from updatescope.experiments.select_evidence import figures
from updatescope.experiments.select_evidence.config import SelectEvidenceConfig
from updatescope.experiments.select_evidence.selectors import (
    SCORED,
    PoolBlocks,
    block_tokens,
    score_all,
    stack_parts,
    top_k,
)
from updatescope.experiments.select_evidence.verdicts import selection_verdicts
from updatescope.report import console

NAME = "select"
METHODS = (*SCORED, "random", "oracle")
PREREG = Path(__file__).with_name("PREREGISTRATION.md")


def load_texts(name: str, split: str, n_docs: int | None, doc_chars: int) -> list[str]:
    """The first ``n_docs`` (None: all) pieces of a domain split: each document cut into
    consecutive pieces of ``doc_chars`` characters, a last piece shorter than half of that
    dropped (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    out: list[str] = []
    for doc in load_domain(name, split):
        for i in range(0, len(doc), doc_chars):
            piece = doc[i : i + doc_chars]
            if len(piece) * 2 >= doc_chars and piece.strip():
                out.append(piece)
                if n_docs is not None and len(out) >= n_docs:
                    return out
    return out


def check_available(cfg: SelectEvidenceConfig) -> None:
    """Refuse, in one line, a config that asks a domain split for more pieces than it has."""
    short = []
    for name, need in cfg.pieces_needed().items():
        for split, n in need.items():
            have = len(load_texts(name, split, None, cfg.doc_chars))
            if have < n:
                short.append(f"{name}/{split} has {have} < {n}")
    if short:
        raise InputError(
            f"not enough documents of {cfg.doc_chars} characters: {'; '.join(short[:4])}"
            f"{' ...' if len(short) > 4 else ''} (lower docs_per_domain, the budgets or doc_chars)"
        )


def _digest(texts: Sequence[str]) -> str:
    from updatescope.experiments.groundtruth.store import texts_digest

    return texts_digest(texts, None)


class GroundTruth:
    """Fine-tune on a selection, evaluate on the target; through the truth store if set."""

    def __init__(self, model: Any, cfg: SelectEvidenceConfig, fp: str, evals: Mapping[str, dict[str, Any]]):
        self.model, self.cfg, self.fp, self.evals = model, cfg, fp, evals
        self.context = {"model": fp, "code": lora_gt._code_digest(), "doc_chars": cfg.doc_chars, "experiment": NAME}

    def recipe(self, k: int) -> dict[str, Any]:
        return {**asdict(replace(self.cfg.lora, steps=self.cfg.steps(k))), "targets": list(self.cfg.lora.targets)}

    def reduction(
        self, target: str, k: int, selector: str, seed: int, texts: Sequence[str], parts: Callable[[], list[dict]]
    ) -> tuple[float, float, bool] | None:
        """-> (target eval-loss reduction, fine-tuning + evaluation seconds, loaded from the store),
        or None when another live process sharing the truth store has claimed this fine-tuning
        (``TruthStore.claimed``: ask again later).  ``parts()`` gives the selection's block inputs,
        asked for only when it is fine-tuned."""
        ev = self.evals[target]
        source, recipe = f"{target}.k{k}.{selector}", self.recipe(k)
        if self.cfg.truth_store is None:
            return self._finetune(target, k, parts, seed, None, source, recipe)
        store = TruthStore(
            self.cfg.truth_store,
            self.context,
            {"train": {source: _digest(texts)}, "eval": {target: ev["digest"]}},
        )
        got = store.claimed(
            source,
            seed,
            lambda: store.load(source, seed, [target], recipe),
            lambda: self._finetune(target, k, parts, seed, store, source, recipe),
        )
        if got.holder is not None:
            return None
        if not got.stored:
            return got.value
        return ev["base"] - float(got.value["eval"][target].sum()) / ev["count"], got.value["seconds"], True

    def _finetune(
        self,
        target: str,
        k: int,
        parts: Callable[[], list[dict]],
        seed: int,
        store: Any,
        source: str,
        recipe: dict[str, Any],
    ) -> tuple[float, float, bool]:
        ev = self.evals[target]
        data = stack_parts(parts())
        t0 = time.perf_counter()
        lc = replace(self.cfg.lora, steps=self.cfg.steps(k))
        tail = lora_gt.finetune_from_config(self.model, data, lc, seed=seed)
        sums, _ = lora_gt.sequence_losses(tail, ev["data"])
        train_after = lora_gt.mean_loss(tail, data)
        seconds = time.perf_counter() - t0
        if store is not None:
            store.save(
                source, seed, [target], recipe, {"train_after": train_after, "seconds": seconds, "eval": {target: sums}}
            )
        return ev["base"] - float(sums.sum()) / ev["count"], seconds, False


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _loadavg() -> float | None:
    """The 1-minute load average (None where the platform has none): the timings above
    depend on what else the machine ran."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def _budget_key(b: float) -> str:
    return f"{b:g}"


# ------------------------------------------------------------------------------ run
def _pool(cfg: SelectEvidenceConfig) -> tuple[list[str], list[str]]:
    """The pool's documents, shuffled with the run seed, and their hidden origins."""
    pool, origin = [], []
    for name in cfg.pool:
        docs = load_texts(name, "train", cfg.docs_per_domain, cfg.doc_chars)
        pool.extend(docs)
        origin.extend([name] * len(docs))
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    return [pool[i] for i in order], [origin[i] for i in order]  # selectors see text only


def _eval_and_oracle(
    model: Any, tok: Any, fp: str, cfg: SelectEvidenceConfig, evals: Mapping[str, list[str]], oracle: Mapping
) -> tuple[dict[str, dict[str, Any]], dict[str, PoolBlocks]]:
    """Per target: its eval block inputs, counted tokens, text digest and base loss; the
    oracle documents' block inputs (captured when a fine-tuning first needs them)."""
    lc = cfg.lora
    tail0 = lora_gt.tail_model(model, lc.n_last)
    ev: dict[str, dict[str, Any]] = {}
    oracle_blocks: dict[str, PoolBlocks] = {}
    for t in cfg.targets:
        data = lora_gt.capture_block_inputs(
            model, tok, evals[t], n_last=lc.n_last, fp=fp, seq_len=lc.seq_len, desc=f"{t} eval"
        )
        count = int((data["labels"] != IGNORE_INDEX).sum())
        ev[t] = {"data": data, "count": count, "digest": _digest(evals[t]), "base": lora_gt.mean_loss(tail0, data)}
        oracle_blocks[t] = PoolBlocks(model, tok, oracle[t], n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
    return ev, oracle_blocks


def _ground_truth(
    cfg: SelectEvidenceConfig,
    truth: GroundTruth,
    pool: list[str],
    origin: list[str],
    blocks: PoolBlocks,
    scores: Mapping[str, Mapping[str, Any]],
    oracle: Mapping[str, list[str]],
    oracle_blocks: Mapping[str, PoolBlocks],
    budgets: Mapping[str, int],
    seeds: list[int],
    log: Any,
) -> dict[str, Any]:
    """Every (target, selector, budget, seed) fine-tuning -> {"reduction", "selected", "own",
    "tokens", "log"} (nested target -> selector -> budget, except the fine-tuning log).  Block
    inputs are captured only for fine-tunings the truth store does not hold."""
    tok = blocks.tok
    doc_tokens = block_tokens(tok, pool, cfg.lora.seq_len)
    out: dict[str, Any] = {"reduction": {}, "selected": {}, "own": {}, "tokens": {}, "log": []}
    # every fine-tuning's selection, in the record's order
    jobs: dict[tuple[str, str, str, int], tuple[list[int], list[str], Any, int]] = {}
    for t in cfg.targets:
        for name in METHODS:
            for bk, k in budgets.items():
                for s in seeds:
                    if name == "oracle":
                        sel, texts, src = list(range(k)), oracle[t][:k], oracle_blocks[t]
                    else:
                        if name == "random":
                            g = torch.Generator().manual_seed(s)
                            sel = torch.randperm(len(pool), generator=g)[:k].tolist()
                        else:
                            sel = top_k(scores[t][name], k)
                        texts, src = [pool[i] for i in sel], blocks
                    jobs[(t, name, bk, s)] = (sel, texts, src, k)
    done: dict[tuple[str, str, str, int], tuple[float, float, bool]] = {}

    def run(job: tuple[str, str, str, int]) -> bool:
        (t, name, _, s), (sel, texts, src, k) = job, jobs[job]
        got = truth.reduction(t, k, name, s, texts, lambda src=src, sel=sel: src[sel])
        if got is None:
            return False
        done[job] = got
        r, secs, hit = got
        log(f"{t}, k={k}, {name}, seed {s}: loss reduction {r:+.4f} ({secs:.1f}s{', stored' if hit else ''})")
        return True

    # one pass, leaving the fine-tunings another process sharing the truth store has claimed;
    # then wait for those to be saved (or take them over if that process stops)
    settle(
        jobs,
        lambda job, _first: run(job),
        lambda: lora_gt.CLAIM_POLL,
        lambda waiting: log(
            f"{len(waiting)} fine-tunings claimed by other processes: waiting for them in the truth store"
        ),
    )
    for t in cfg.targets:
        for key in ("reduction", "selected", "own", "tokens"):
            out[key][t] = {name: {} for name in METHODS}
        for name in METHODS:
            for bk, k in budgets.items():
                vals, sels = [], []
                for s in seeds:
                    r, secs, hit = done[(t, name, bk, s)]
                    vals.append(r)
                    sels.append(jobs[(t, name, bk, s)][0])
                    out["log"].append({"k": k, "steps": cfg.steps(k), "seconds": secs, "stored": hit})
                out["reduction"][t][name][bk] = vals
                out["selected"][t][name][bk] = sels if name == "random" else sels[0]
                if name == "oracle":
                    out["own"][t][name][bk] = 1.0
                    out["tokens"][t][name][bk] = float(sum(block_tokens(tok, oracle[t][:k], cfg.lora.seq_len)))
                else:
                    out["own"][t][name][bk] = _mean([sum(origin[i] == t for i in sel) / k for sel in sels])
                    out["tokens"][t][name][bk] = _mean([float(sum(doc_tokens[i] for i in sel)) for sel in sels])
    return out


def _methods(cfg: SelectEvidenceConfig, gt: Mapping[str, Any], cost: Mapping, budgets: Mapping) -> dict[str, Any]:
    """Per selector and budget: means over targets and seeds; the cost once per selector."""
    red, methods = gt["reduction"], {}
    for name in METHODS:
        by_budget = {}
        for bk in budgets:
            allv = [v for t in cfg.targets for v in red[t][name][bk]]
            diffs = [a - b for t in cfg.targets for a, b in zip(red[t][name][bk], red[t]["fisher"][bk])]
            by_budget[bk] = {
                "mean": _mean(allv),
                "minus_fisher": _mean(diffs),
                "own_domain_fraction": _mean([gt["own"][t][name][bk] for t in cfg.targets]),
                "selection_tokens": _mean([gt["tokens"][t][name][bk] for t in cfg.targets]),
            }
        methods[name] = {"by_budget": by_budget, "cost": cost[name]}
    return methods


def _print(title: str, methods: Mapping[str, Any], verdict: Mapping[str, Any], log: Any) -> None:
    rows = [
        (
            name,
            bk,
            f"{b['mean']:+.4f}",
            "" if name == "fisher" else f"{b['minus_fisher']:+.4f}",
            f"{b['own_domain_fraction']:.2f}",
            f"{b['selection_tokens']:.0f}",
            f"{mm['cost']['seconds']:.1f}",
            f"{mm['cost']['peak_bytes'] / 2**20:.0f}",
            f"{mm['cost']['bytes_per_doc']:,}",
        )
        for name, mm in methods.items()
        for bk, b in mm["by_budget"].items()
    ]
    cols = ("selector", "budget", "loss reduction", "− fisher", "own domain", "tokens", "scoring s", "peak MiB")
    console.print_rows(title, (*cols, "bytes/doc"), rows, right=("tokens", "scoring s", "peak MiB", "bytes/doc"))
    for row in verdict["comparisons"]:
        log(f"{row['comparison']}: {row['verdict']} (sign-flip word {row['word']}, Holm p {row['p_holm']:.3g})")


def _finetuning(cfg: SelectEvidenceConfig, ft_log: list[dict[str, Any]], budgets: Mapping[str, int]) -> dict:
    """The fine-tunings' count and time: those computed in this run, and all of them with the
    time each one stored when it ran (a record made from a complete truth store computes none)."""

    def timed(fs: list[dict[str, Any]]) -> tuple[float, float]:
        secs = sum(f["seconds"] for f in fs)
        return secs, secs / max(sum(f["steps"] for f in fs), 1)

    computed = [f for f in ft_log if not f["stored"]]
    (secs, per_step), (all_secs, all_per_step) = timed(computed), timed(ft_log)
    return {
        "count": len(ft_log),
        "computed": len(computed),
        "seconds": secs,
        "seconds_per_step": per_step,
        "all_seconds": all_secs,
        "all_seconds_per_step": all_per_step,
        "by_k": {
            str(k): {"steps": cfg.steps(k), "mean_seconds": _mean([f["seconds"] for f in computed if f["k"] == k])}
            for k in budgets.values()
        },
    }


def run(cfg: SelectEvidenceConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    load0 = _loadavg()
    log = functools.partial(print, flush=True)
    check_available(cfg)
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)

    pool, origin = _pool(cfg)
    budgets = {_budget_key(b): cfg.k(b) for b in cfg.budgets}
    k_max = max(budgets.values())
    sketch = {t: load_texts(t, "sketch", cfg.target_docs, cfg.doc_chars) for t in cfg.targets}
    evals = {t: load_texts(t, "eval", cfg.eval_docs, cfg.doc_chars) for t in cfg.targets}
    oracle = {
        t: load_texts(t, "train", cfg.docs_per_domain + k_max, cfg.doc_chars)[cfg.docs_per_domain :]
        for t in cfg.targets
    }
    log(
        f"pool: {len(pool)} documents from {len(cfg.pool)} domains; {len(cfg.targets)} targets; "
        f"budgets {budgets} documents"
    )

    scores, cost, blocks = score_all(model, tok, fp, pool, sketch, cfg, log)
    cost["random"] = {"seconds": 0.0, "seconds_per_target": 0.0, "peak_bytes": 0, "bytes_per_doc": 0, "memory": "none"}
    cost["oracle"] = {**cost["random"], "note": "not a selector: the target's own unused train documents"}
    ev, oracle_blocks = _eval_and_oracle(model, tok, fp, cfg, evals, oracle)
    truth = GroundTruth(model, cfg, fp, ev)
    seeds = [gt_seeds.gt_seed(cfg.seed, j) for j in range(cfg.seeds)]
    gt = _ground_truth(cfg, truth, pool, origin, blocks, scores, oracle, oracle_blocks, budgets, seeds, log)
    reduction = gt["reduction"]
    verdict = selection_verdicts(
        {t: {n: {float(b): v for b, v in by_b.items()} for n, by_b in by_n.items()} for t, by_n in reduction.items()},
        seeds,
        n_boot=cfg.n_boot,
        seed=cfg.seed,
    )
    methods = _methods(cfg, gt, cost, budgets)
    title = f"{len(pool)} documents, {len(cfg.targets)} targets, {cfg.seeds} seeds"
    _print(f"select: {title}", methods, verdict, log)

    metrics = {
        "n_pool": len(pool),
        "pool_origin_counts": {n: origin.count(n) for n in cfg.pool},
        "pool_tokens": sum(block_tokens(tok, pool, cfg.lora.seq_len)),
        "budgets": budgets,
        "targets": {
            t: {
                "base_loss": ev[t]["base"],
                "eval_tokens": ev[t]["count"],
                "sketch_docs": len(sketch[t]),
                "oracle_docs": len(oracle[t]),
            }
            for t in cfg.targets
        },
        "seeds": seeds,
        "reduction": reduction,
        "methods": methods,
        "verdicts": verdict,
        "finetuning": _finetuning(cfg, gt["log"], budgets),
        "selected": gt["selected"],
        "scores": {
            t: {n: [None if not math.isfinite(x) else x for x in v.tolist()] for n, v in by.items()}
            for t, by in scores.items()
        },
        "origin": origin,
        "load_average": {"start": load0, "end": _loadavg()},
    }
    return Result(
        NAME,
        config_record(cfg, preregistration_sha256=prereg_sha),
        metrics,
        time.perf_counter() - t0,
        figures={
            "select.png": lambda path: figures.selection_bars(
                {n: {bk: b["mean"] for bk, b in m["by_budget"].items()} for n, m in methods.items()}, path, title
            )
        },
    )
