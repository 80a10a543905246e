"""The selectors of ``select`` and what each costs: scores of every pool document for each target.

Selectors (top ``k`` documents each, same k; the pool's origin is hidden from all of them):

- ``fisher``, ``activation``, ``error``: :func:`updatescope.pipeline.score_documents`
  (joint FisherSketch score and its two marginals) against the target's signature, one
  forward pass over the pool per target (what ``updatescope select`` does);
- ``mean_gradient``: cosine of the document's mean head gradient with the target's
  (:func:`select.baselines.mean_gradient`);
- ``embedding``: cosine of the document's mean final hidden state (the head input) with the
  target's mean;
- ``dsir``: hashed n-gram importance weights of the package ``data-selection``
  (:mod:`.dsir`);
- ``per_example_gradient``: LoRA-parameter gradient of each document's mean loss (the
  adapters of the ground truth, warmed up for ``warmup_steps`` minibatches of the pool),
  randomly projected to ``proj_dim`` (:func:`select.baselines.project_rows`), cosine with the
  target documents' mean projected gradient — the recipe of gradient data-selection tools
  (LESS);
- ``random`` (k documents drawn with the fine-tuning seed) and ``oracle`` (the target's own
  unused train documents, a ceiling) need no scores.

Cost per selector, over all targets of the run: wall time of scoring (pool side once where a
selector can reuse it across targets, target side for each; FisherSketch's three scores
share their passes, so each is charged the whole), peak memory as the resident-set
high-water above the level at the start of the scoring block, sampled every 5 ms from
``/proc/self/statm`` (``getrusage`` ``ru_maxrss`` growth where /proc is missing), and the bytes
a reusable index keeps per document to score it against a new target.
"""

from __future__ import annotations

import math
import resource
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from updatescope.constants import IGNORE_INDEX
from updatescope.experiments import heads
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.select_evidence.config import SelectEvidenceConfig

#: the scored selectors, in the record's order
SCORED = ("fisher", "activation", "error", "mean_gradient", "embedding", "dsir", "per_example_gradient")


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
    targets: Mapping[str, list[str]],
    cfg: SelectEvidenceConfig,
    log: Callable[[str], None],
) -> tuple[dict[str, dict[str, Tensor]], dict[str, dict[str, Any]], list[dict[str, Tensor]]]:
    """Every scored selector's scores for each target -> (scores[target][selector] (N,),
    cost[selector], the pool's per-document block inputs (captured for the gradient
    baseline, reused for fine-tuning))."""
    from updatescope.capture.chunks import tokenize
    from updatescope.experiments.select_evidence.dsir import dsir_scores
    from updatescope.pipeline import score_documents
    from updatescope.select.baselines import mean_gradient, project_rows

    w0, b0 = heads.head_weights(model)
    k_out, d = w0.shape
    m, p = cfg.sketch_dim, cfg.proj_dim
    names = list(targets)
    scores: dict[str, dict[str, Tensor]] = {t: {} for t in names}
    cost: dict[str, dict[str, Any]] = {}

    def record(sels: Sequence[str], per_doc: int, *blocks: Cost) -> None:
        for n in sels:
            secs = sum(c.seconds for c in blocks)
            cost[n] = {
                "seconds": secs,
                "seconds_per_target": secs / len(names),
                "peak_bytes": max(c.peak_bytes for c in blocks),
                "bytes_per_doc": per_doc,
                "memory": blocks[0].how,
            }

    fisher_costs = []
    for t in names:  # forward only: target signature + one scoring pass over the pool
        with Cost() as c:
            a = heads.capture_acts(model, tok, targets[t], fp=fp, use_cache=False, desc=f"target {t}")
            sig = heads.sketch_stream(w0, b0, a["acts"], a["labels"], sketch_dim=m, seed=cfg.seed, fp=fp, name=t)
            res = score_documents(model, tok, pool, sig, fingerprint=fp, progress=False)
        scores[t].update(fisher=res.score, activation=res.activation, error=res.error)
        fisher_costs.append(c)
    record(("fisher", "activation", "error"), 8 * m + 8, *fisher_costs)  # one float64 m-vector + a count
    log(f"FisherSketch scores: {cost['fisher']['seconds']:.1f}s for {len(names)} targets")

    with Cost() as cap:  # head inputs of every document and of each target, kept for two baselines
        counts = [max(len(tokenize(tok, x, True, i)) - 1, 0) for i, x in enumerate(pool)]
        acts = heads.capture_acts(model, tok, pool, fp=fp, use_cache=False, desc="pool")
        tacts = {t: heads.capture_acts(model, tok, targets[t], fp=fp, use_cache=False, desc=t) for t in names}
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
        for t in names:
            scores[t]["embedding"] = _cos(emb, tacts[t]["acts"].to(torch.float64).mean(0))
    record(("embedding",), 8 * d, cap, c)
    with Cost() as c:
        g_t = {
            t: mean_gradient([(v["acts"], heads.errors_of(w0, b0, v["acts"], v["labels"]))]) for t, v in tacts.items()
        }
        vals: dict[str, list[float]] = {t: [] for t in names}
        for a, y in zip(doc_acts, doc_labels):
            if a.shape[0] == 0:
                for t in names:
                    vals[t].append(math.nan)
                continue
            g = mean_gradient([(a, heads.errors_of(w0, b0, a, y))])
            gn = g.norm()
            for t in names:
                vals[t].append(float((g * g_t[t]).sum() / (gn * g_t[t].norm()).clamp_min(1e-300)))
            del g
        for t in names:
            scores[t]["mean_gradient"] = torch.tensor(vals[t], dtype=torch.float64)
        del g_t
    record(("mean_gradient",), 8 * k_out * d, cap, c)  # the dense K×d mean head gradient
    log(
        f"embedding and mean-gradient scores: {cost['embedding']['seconds']:.1f}s, "
        f"{cost['mean_gradient']['seconds']:.1f}s"
    )
    del acts, doc_acts, tacts

    dsir_costs, dropped = [], {}
    for t in names:
        with Cost() as c:
            s, dropped[t] = dsir_scores(
                pool, targets[t], ngrams=cfg.dsir_ngrams, num_buckets=cfg.dsir_buckets, min_length=cfg.dsir_min_length
            )
            scores[t]["dsir"] = torch.from_numpy(s)
        dsir_costs.append(c)
    record(("dsir",), 8 * cfg.dsir_buckets, *dsir_costs)  # the package's dense int64 bucket counts
    cost["dsir"]["documents_below_min_length"] = dropped
    log(f"DSIR scores: {cost['dsir']['seconds']:.1f}s; documents below its minimum length: {dropped}")

    lc = cfg.lora
    with Cost() as c:  # block inputs per document, LoRA warm-up, backward per document, projection
        parts = document_blocks(model, tok, pool, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
        tail = lora_gt.finetune_from_config(model, stack_parts(parts), lc, seed=cfg.seed, steps=cfg.warmup_steps)
        g_pool = project_rows(document_gradients(tail, parts), p, cfg.seed)
        n_params = sum(x.numel() for n, x in tail.named_parameters() if "lora_" in n)
        for t in names:
            tparts = document_blocks(model, tok, targets[t], n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
            g_tgt = project_rows(document_gradients(tail, tparts), p, cfg.seed)
            scores[t]["per_example_gradient"] = _cos(g_pool, g_tgt.mean(0))
        del tail
    record(("per_example_gradient",), 8 * p, c)
    cost["per_example_gradient"]["lora_params"] = int(n_params)
    log(f"per-example-gradient scores ({n_params} LoRA parameters -> {p}): {c.seconds:.1f}s")
    return scores, cost, parts
