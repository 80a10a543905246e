"""Does forward-only document selection pick documents that help?  Top-k of a mixed pool.

The pool mixes ``docs_per_domain`` train-split documents of several built-in domains
(shuffled, origin hidden from every selector); the target domain is one of them, so a
selection's share of the target's own documents is measurable.  The target has its own
documents: ``target_docs`` of its sketch split define the target (signature, mean
embedding, mean gradient) and ``eval_docs`` of its eval split measure the loss.

Selectors (top ``k`` documents each, same k):

- ``fisher``, ``activation``, ``error``: :func:`updatescope.pipeline.score_documents`
  (joint FisherSketch score and its two marginals) against the target's signature;
- ``mean_gradient``: cosine of the document's mean head gradient with the target's
  (:func:`select.baselines.mean_gradient`);
- ``embedding``: cosine of the document's mean final hidden state (the head input) with the
  target's mean;
- ``per_example_gradient``: LoRA-parameter gradient of each document's mean loss (the
  adapters of the ground truth, warmed up for ``warmup_steps`` minibatches of the pool),
  randomly projected to ``proj_dim`` (:func:`select.baselines.project_rows`), cosine with the
  target documents' mean projected gradient — the recipe of gradient data-selection tools;
- ``random``: k documents drawn with the fine-tuning seed.

Ground truth: for each method and fine-tuning seed (shared by all methods, so differences
are paired), LoRA fine-tuning on the selection (:func:`groundtruth.lora.finetune_lora`);
loss reduction = target eval loss under the base model − after fine-tuning (nats, > 0
helps).  The spread over seeds of one fixed selection is the fine-tuning noise.

Cost per selector: wall time of scoring (target side included; forward passes shared by
the three FisherSketch scores are counted once for each), peak memory as the resident-set
high-water above the level at the start of the scoring, sampled every 5 ms from
``/proc/self/statm`` (``getrusage`` ``ru_maxrss`` growth where /proc is missing), and the
bytes a reusable index keeps per document to score it against a new target.
"""

from __future__ import annotations

import functools
import math
import resource
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from updatescope.constants import IGNORE_INDEX
from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.select_evidence import figures
from updatescope.experiments.select_evidence.config import SelectEvidenceConfig
from updatescope.report import console

NAME = "select"
METHODS = ("fisher", "activation", "error", "mean_gradient", "embedding", "per_example_gradient", "random")
FORWARD_ONLY = ("fisher", "activation", "error", "embedding")
#: the claim this experiment tests, and its verdict rule (see :func:`verdicts`)
CLAIM = "forward-only selection matches the gradient baseline at a fraction of its cost"


def load_texts(name: str, split: str, n_docs: int, doc_chars: int) -> list[str]:
    """The first ``n_docs`` documents of a domain split, each cut to ``doc_chars`` characters
    (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    return [d[:doc_chars] for d in load_domain(name, split)[:n_docs]]


# ------------------------------------------------------------------------------ costs
def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


class Cost:
    """Wall time and peak memory of a block: ``with Cost() as c: ...`` -> ``c.seconds``,
    ``c.peak_bytes`` (RSS high-water above the start, sampled; see the module docstring)."""

    def __enter__(self) -> Cost:
        self.start_rss = _rss()
        self.peak = self.start_rss or 0
        self.maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self._stop = threading.Event()
        if self.start_rss is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        self.t0 = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss() or 0)

    def __exit__(self, *exc: Any) -> None:
        self.seconds = time.perf_counter() - self.t0
        self._stop.set()
        if self.start_rss is not None:
            self._thread.join()
            self.peak = max(self.peak, _rss() or 0)
            self.peak_bytes = max(0, self.peak - self.start_rss)
            self.how = "sampled RSS high-water minus RSS at start (/proc/self/statm, 5 ms)"
        else:  # ru_maxrss is in KiB on Linux; it only moves when the process high-water grows
            self.peak_bytes = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.maxrss0) * 1024
            self.how = "getrusage ru_maxrss growth"


# ------------------------------------------------------------------------ selectors
def split_rows(x: Tensor, counts: Sequence[int]) -> list[Tensor]:
    """Rows of a captured stream cut per document (capture order = document order)."""
    return list(torch.split(x, list(counts)))


def document_gradients(tail: torch.nn.Module, parts: Sequence[dict[str, Tensor]]) -> Tensor:
    """Gradient of each document's mean next-token loss w.r.t. the LoRA parameters of
    ``tail``, flattened in ``named_parameters`` order.  parts[i]: block inputs of document i
    ({"hidden" (c, S, d), "labels" (c, S), "mask" (c, S)}) -> (N, D) float64."""
    params = [p for n, p in tail.named_parameters() if "lora_" in n]
    if not params:
        raise ValueError("document_gradients: the model has no LoRA parameters")
    rows = []
    for part in parts:
        keep = part["labels"] != IGNORE_INDEX
        h = tail.model(inputs_embeds=part["hidden"], attention_mask=part["mask"], use_cache=False).last_hidden_state
        loss = F.cross_entropy(tail.lm_head(h[keep]).float(), part["labels"][keep])
        grads = torch.autograd.grad(loss, params)
        rows.append(torch.cat([g.reshape(-1) for g in grads]).to(torch.float64))
    return torch.stack(rows)


def document_blocks(
    model: Any, tok: Any, texts: Sequence[str], *, n_last: int, fp: str, seq_len: int
) -> list[dict[str, Tensor]]:
    """Block inputs (:func:`groundtruth.lora.capture_block_inputs`) of each document on its own.

    One batched capture when every document is a single chunk (then row i is document i,
    trimmed to its length); otherwise one capture per document."""
    whole = lora_gt.capture_block_inputs(
        model, tok, list(texts), n_last=n_last, fp=fp, seq_len=seq_len, desc="documents", use_cache=False
    )
    if whole["hidden"].shape[0] == len(texts):
        out = []
        for i in range(len(texts)):
            n = int(whole["mask"][i].sum())
            out.append({k: v[i : i + 1, :n] for k, v in whole.items()})
        return out
    return [
        lora_gt.capture_block_inputs(
            model, tok, [x], n_last=n_last, fp=fp, seq_len=seq_len, desc=f"document {i}", use_cache=False
        )
        for i, x in enumerate(texts)
    ]


def stack_parts(parts: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Concatenate block-input captures of several documents, right padding to one width."""
    width = max(p["labels"].shape[1] for p in parts)

    def pad(x: Tensor, value: float) -> Tensor:
        extra = width - x.shape[1]
        return x if extra == 0 else F.pad(x, (0, 0, 0, extra) if x.ndim == 3 else (0, extra), value=value)

    return {
        "hidden": torch.cat([pad(p["hidden"], 0.0) for p in parts]),
        "labels": torch.cat([pad(p["labels"], IGNORE_INDEX) for p in parts]),
        "mask": torch.cat([pad(p["mask"], 0) for p in parts]),
    }


def top_k(scores: Tensor, k: int) -> list[int]:
    """Indices of the k highest scores, undefined (NaN) scores last, ties by index."""
    s = scores.to(torch.float64)
    key = torch.where(torch.isfinite(s), -s, torch.full_like(s, math.inf))
    return torch.argsort(key, stable=True)[:k].tolist()


def _cos(x: Tensor, v: Tensor) -> Tensor:
    """Cosine of each row of x (N, p) with v (p,).  -> (N,) float64."""
    x, v = x.to(torch.float64), v.to(torch.float64)
    return (x @ v) / (x.norm(dim=1) * v.norm()).clamp_min(1e-300)


def score_all(
    model: Any,
    tok: Any,
    fp: str,
    pool: list[str],
    target: list[str],
    cfg: SelectEvidenceConfig,
    log: Callable[[str], None],
) -> tuple[dict[str, Tensor], dict[str, dict[str, Any]], list[dict[str, Tensor]]]:
    """Every deterministic selector's scores (N,) and its cost; also the per-document block
    inputs (captured for the gradient baseline, reused for fine-tuning)."""
    from updatescope.capture.chunks import tokenize
    from updatescope.pipeline import score_documents
    from updatescope.select.baselines import mean_gradient, project_rows

    w0, b0 = heads.head_weights(model)
    k_out, d = w0.shape
    m, p = cfg.sketch_dim, cfg.proj_dim
    scores: dict[str, Tensor] = {}
    cost: dict[str, dict[str, Any]] = {}

    def record(names: Sequence[str], c: Cost, per_doc: int, *extra: Cost) -> None:
        for n in names:
            cost[n] = {
                "seconds": c.seconds + sum(e.seconds for e in extra),
                "peak_bytes": max([c.peak_bytes, *(e.peak_bytes for e in extra)]),
                "bytes_per_doc": per_doc,
                "memory": c.how,
            }

    with Cost() as c:  # forward only: target signature + one scoring pass over the pool
        t = heads.capture_acts(model, tok, target, fp=fp, use_cache=False, desc="target")
        sig = heads.sketch_stream(w0, b0, t["acts"], t["labels"], sketch_dim=m, seed=cfg.seed, fp=fp, name="target")
        res = score_documents(model, tok, pool, sig, fingerprint=fp, progress=False)
    scores.update(fisher=res.score, activation=res.activation, error=res.error)
    record(("fisher", "activation", "error"), c, 8 * m + 8)  # one float64 m-vector of feature sums + count
    log(f"FisherSketch scores: {c.seconds:.1f}s")

    with Cost() as cap:  # head inputs of every document and of the target, kept for two baselines
        counts = [max(len(tokenize(tok, x, True, i)) - 1, 0) for i, x in enumerate(pool)]
        acts = heads.capture_acts(model, tok, pool, fp=fp, use_cache=False, desc="pool")
        t = heads.capture_acts(model, tok, target, fp=fp, use_cache=False, desc="target")
    if acts["labels"].numel() != sum(counts):
        raise RuntimeError(f"captured {acts['labels'].numel()} rows for {sum(counts)} counted tokens")
    doc_acts = split_rows(acts["acts"], counts)
    doc_labels = split_rows(acts["labels"], counts)
    with Cost() as c:
        emb = torch.stack(
            [
                a.to(torch.float64).mean(0) if a.shape[0] else torch.full((d,), math.nan, dtype=torch.float64)
                for a in doc_acts
            ]
        )
        scores["embedding"] = _cos(emb, t["acts"].to(torch.float64).mean(0))
    record(("embedding",), c, 8 * d, cap)
    with Cost() as c:
        g_t = mean_gradient([(t["acts"], heads.errors_of(w0, b0, t["acts"], t["labels"]))])
        vals = []
        for a, y in zip(doc_acts, doc_labels):
            if a.shape[0] == 0:
                vals.append(math.nan)
                continue
            g = mean_gradient([(a, heads.errors_of(w0, b0, a, y))])
            vals.append(float((g * g_t).sum() / (g.norm() * g_t.norm()).clamp_min(1e-300)))
            del g
        scores["mean_gradient"] = torch.tensor(vals, dtype=torch.float64)
        del g_t
    record(("mean_gradient",), c, 8 * k_out * d, cap)  # the dense K×d mean head gradient
    log(
        f"embedding and mean-gradient scores: {cost['embedding']['seconds']:.1f}s, "
        f"{cost['mean_gradient']['seconds']:.1f}s"
    )
    del acts, doc_acts, t

    lc = cfg.lora
    with Cost() as c:  # block inputs per document, LoRA warm-up, backward per document, projection
        parts = document_blocks(model, tok, pool, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
        tparts = document_blocks(model, tok, target, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
        tail = lora_gt.finetune_from_config(model, stack_parts(parts), lc, seed=cfg.seed, steps=cfg.warmup_steps)
        g_pool = document_gradients(tail, parts)
        g_tgt = document_gradients(tail, tparts)
        both = project_rows(torch.cat([g_pool, g_tgt]), p, cfg.seed)
        scores["per_example_gradient"] = _cos(both[: len(parts)], both[len(parts) :].mean(0))
        n_params = g_pool.shape[1]
        del tail, g_pool, g_tgt, both
    record(("per_example_gradient",), c, 8 * p)
    cost["per_example_gradient"]["lora_params"] = int(n_params)
    log(f"per-example-gradient scores ({n_params} LoRA parameters -> {p}): {c.seconds:.1f}s")
    cost["random"] = {"seconds": 0.0, "peak_bytes": 0, "bytes_per_doc": 0, "memory": "none"}
    return scores, cost, parts


# ---------------------------------------------------------------------------- stats
def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Mean of a − b over seeds with its t-based 95% CI (paired: seed i is shared)."""
    from scipy import stats

    diff = torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)
    n = diff.numel()
    mean = float(diff.mean())
    if n < 2:
        return {"mean": mean, "ci": None, "n": n}
    half = float(stats.t.ppf(0.975, n - 1)) * float(diff.std()) / math.sqrt(n)
    return {"mean": mean, "ci": [mean - half, mean + half], "n": n}


def summary(values: Sequence[float]) -> dict[str, Any]:
    v = torch.tensor(values, dtype=torch.float64)
    sd = float(v.std()) if v.numel() > 1 else math.nan
    return {"mean": float(v.mean()), "sd": sd, "se": sd / math.sqrt(v.numel()), "n": int(v.numel())}


def noise(by_method: dict[str, list[float]]) -> dict[str, Any]:
    """Fine-tuning noise: the spread over seeds of each fixed selection (random excluded,
    its selection changes with the seed).  ``floor``: half-width of a 95% CI on the
    difference of two methods' means that this noise alone gives (unpaired, t with
    2(n − 1) degrees of freedom) — differences below it are not resolved by this ground truth."""
    from scipy import stats

    fixed = {k: v for k, v in by_method.items() if k != "random"}
    var = [float(torch.tensor(v, dtype=torch.float64).var()) for v in fixed.values()]
    n = len(next(iter(fixed.values())))
    pooled = math.sqrt(sum(var) / len(var))
    floor = float(stats.t.ppf(0.975, 2 * (n - 1))) * pooled * math.sqrt(2.0 / n)
    return {
        "pooled_sd": pooled,
        "floor": floor,
        "n_seeds": n,
        "sd_by_method": {k: math.sqrt(x) for k, x in zip(fixed, var)},
    }


def verdicts(methods: dict[str, Any], paired_vs: dict[str, Any], floor: float) -> dict[str, dict[str, Any]]:
    """Verdicts from the numbers.  The claim holds ("reproduced") when FisherSketch's selection
    is not worse than the per-example-gradient one by more than the noise floor (lower end
    of the paired CI of the difference above −floor) and it costs under half the scoring
    time; it fails ("not reproduced") when it is significantly worse (CI below 0) or not
    cheaper; otherwise "undecided".  "beats random": the paired CI of fisher − random lies
    above 0 (reproduced), below 0 (not reproduced), else undecided."""
    d = paired_vs["per_example_gradient"]
    ratio = methods["fisher"]["cost"]["seconds"] / max(methods["per_example_gradient"]["cost"]["seconds"], 1e-12)
    lo, hi = d["ci"]
    if hi < 0 or ratio >= 1:
        v = "not reproduced"
    elif lo > -floor and ratio < 0.5:
        v = "reproduced"
    else:
        v = "undecided"
    r = paired_vs["random"]
    vr = "reproduced" if r["ci"][0] > 0 else "not reproduced" if r["ci"][1] < 0 else "undecided"
    return {
        CLAIM: {"verdict": v, "difference": d, "cost_ratio": ratio, "noise_floor": floor},
        "FisherSketch selection beats random": {"verdict": vr, "difference": r},
    }


# ------------------------------------------------------------------------------ run
def run(cfg: SelectEvidenceConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)

    pool, origin = [], []
    for name in cfg.pool:
        docs = load_texts(name, "train", cfg.docs_per_domain, cfg.doc_chars)
        pool.extend(docs)
        origin.extend([name] * len(docs))
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(cfg.seed)).tolist()
    pool, origin = [pool[i] for i in order], [origin[i] for i in order]  # selectors see text only
    target = load_texts(cfg.target, "sketch", cfg.target_docs, cfg.doc_chars)
    evals = load_texts(cfg.target, "eval", cfg.eval_docs, cfg.doc_chars)
    if len(pool) <= cfg.k or not target or not evals:
        from updatescope.errors import InputError

        raise InputError(
            f"pool of {len(pool)} documents for k={cfg.k}, {len(target)} target and {len(evals)} "
            "eval documents: too few"
        )
    log(
        f"pool: {len(pool)} documents from {len(cfg.pool)} domains; target {cfg.target}: {len(target)} sketch, "
        f"{len(evals)} eval documents"
    )

    scores, cost, parts = score_all(model, tok, fp, pool, target, cfg, log)
    doc_tokens = [int((p["labels"] != IGNORE_INDEX).sum()) for p in parts]
    lc = cfg.lora
    eval_data = lora_gt.capture_block_inputs(
        model, tok, evals, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len, desc="target eval"
    )
    base_loss = lora_gt.mean_loss(lora_gt.tail_model(model, lc.n_last), eval_data)

    seeds = [gt_seeds.gt_seed(cfg.seed, j) for j in range(cfg.seeds)]
    selections: dict[str, list[list[int]]] = {}
    for name in METHODS:
        if name == "random":
            selections[name] = [
                torch.randperm(len(pool), generator=torch.Generator().manual_seed(s))[: cfg.k].tolist() for s in seeds
            ]
        else:
            selections[name] = [top_k(scores[name], cfg.k)] * len(seeds)
    reduction: dict[str, list[float]] = {}
    for name in METHODS:
        reduction[name] = []
        for s, sel in zip(seeds, selections[name]):
            t1 = time.perf_counter()
            tail = lora_gt.finetune_from_config(model, stack_parts([parts[i] for i in sel]), lc, seed=s)
            reduction[name].append(base_loss - lora_gt.mean_loss(tail, eval_data))
            del tail
            log(
                f"{name}, seed {s}: target eval loss reduction {reduction[name][-1]:+.4f} "
                f"({time.perf_counter() - t1:.1f}s)"
            )

    nz = noise(reduction)
    methods: dict[str, Any] = {}
    for name in METHODS:
        sels = selections[name]
        own = [sum(origin[i] == cfg.target for i in sel) / len(sel) for sel in sels]
        toks = [sum(doc_tokens[i] for i in sel) for sel in sels]
        methods[name] = {
            "loss_reduction": summary(reduction[name]),
            "by_seed": reduction[name],
            "own_domain_fraction": sum(own) / len(own),
            "selection_tokens": sum(toks) / len(toks),
            "selected": sels[0] if name != "random" else sels,
            "cost": cost[name],
        }
    paired_vs = {n: paired(reduction["fisher"], reduction[n]) for n in METHODS if n != "fisher"}
    for n, d in paired_vs.items():
        methods[n]["minus_fisher"] = {
            "mean": -d["mean"],
            "ci": None if d["ci"] is None else [-d["ci"][1], -d["ci"][0]],
            "n": d["n"],
        }
    verdict = verdicts(methods, paired_vs, nz["floor"])

    console.print_rows(
        f"select: top {cfg.k} of {len(pool)} documents for {cfg.target}",
        (
            "method",
            "loss reduction ± SE",
            "− fisher (95% CI)",
            "own domain",
            "tokens",
            "scoring s",
            "peak MiB",
            "bytes/doc",
        ),
        [
            (
                n,
                console.fmt(m["loss_reduction"]["mean"], m["loss_reduction"]["se"], digits=4),
                ""
                if n == "fisher"
                else f"{m['minus_fisher']['mean']:+.4f} "
                f"[{m['minus_fisher']['ci'][0]:+.4f}, {m['minus_fisher']['ci'][1]:+.4f}]",
                f"{m['own_domain_fraction']:.2f}",
                f"{m['selection_tokens']:.0f}",
                f"{m['cost']['seconds']:.1f}",
                f"{m['cost']['peak_bytes'] / 2**20:.0f}",
                m["cost"]["bytes_per_doc"],
            )
            for n, m in methods.items()
        ],
        right=("tokens", "scoring s", "peak MiB", "bytes/doc"),
    )
    for claim, v in verdict.items():
        log(f"{claim}: {v['verdict']}")

    title = f"top {cfg.k} of {len(pool)} documents for {cfg.target}, LoRA fine-tuning, {cfg.seeds} seeds"
    metrics = {
        "n_pool": len(pool),
        "pool_origin_counts": {n: origin.count(n) for n in cfg.pool},
        "pool_tokens": sum(doc_tokens),
        "target_eval_tokens": int((eval_data["labels"] != IGNORE_INDEX).sum()),
        "base_loss": base_loss,
        "seeds": seeds,
        "methods": methods,
        "noise": nz,
        "verdicts": verdict,
        "scores": {n: [None if not math.isfinite(x) else x for x in v.tolist()] for n, v in scores.items()},
        "origin": origin,
    }
    return Result(
        NAME,
        config_record(cfg),
        metrics,
        time.perf_counter() - t0,
        figures={
            "select.png": lambda path: figures.selection_bars(
                {n: m["loss_reduction"] for n, m in methods.items()}, path, title, noise_floor=nz["floor"]
            )
        },
    )
