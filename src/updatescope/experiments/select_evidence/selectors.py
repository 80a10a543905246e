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

import dataclasses
import math
import resource
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
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


def block_tokens(tok: Any, texts: Sequence[str], seq_len: int) -> list[int]:
    """Counted next-token targets of each document's block inputs (:func:`document_blocks`),
    from its chunks alone (the capture's own chunking and label rule), with no forward pass."""
    from updatescope.capture.chunks import document_chunks, pad_batch

    out = []
    for x in texts:
        chunks = list(document_chunks(tok, [x], chunk_len=seq_len))
        out.append(int((pad_batch(chunks, 0)[2] != IGNORE_INDEX).sum()) if chunks else 0)
    return out


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


def scores_code() -> str:
    """A digest of the code every stored score depends on (the selectors, document scoring,
    the sketch and its maps, the capture, the baselines), so scores an earlier version made
    are never read back.  Conservative: any change to those modules names new files."""
    import hashlib
    import inspect

    from updatescope import __version__
    from updatescope.capture import causal_lm
    from updatescope.experiments.select_evidence import dsir
    from updatescope.pipeline import score
    from updatescope.select import baselines, documents
    from updatescope.sketch import fishersketch, maps

    mods = (sys.modules[__name__], dsir, score, documents, baselines, fishersketch, maps, causal_lm, heads, lora_gt)
    try:
        src = "".join(inspect.getsource(m) for m in mods)
    except (OSError, TypeError):
        src = __version__
    return hashlib.sha256(src.encode()).hexdigest()[:16]


class PoolBlocks:
    """Block inputs of documents (:func:`document_blocks`), captured when first asked for and
    kept: a sitting whose fine-tunings all come from the truth store captures none.  Documents
    captured in another batch than before can differ in the last bits (the batched capture
    equals one capture per document to float32 rounding); the truth store keys fine-tunings on
    the selected texts, not on these bits."""

    def __init__(self, model: Any, tok: Any, texts: Sequence[str], *, n_last: int, fp: str, seq_len: int) -> None:
        self.model, self.tok, self.texts = model, tok, list(texts)
        self.opts = {"n_last": n_last, "fp": fp, "seq_len": seq_len}
        self.kept: dict[int, dict[str, Tensor]] = {}

    def fill(self, parts: Sequence[dict[str, Tensor]]) -> None:
        """Keep every document's block inputs, captured elsewhere (one per document, in order)."""
        if len(parts) != len(self.texts):
            raise ValueError(f"{len(parts)} block inputs for {len(self.texts)} documents")
        self.kept.update(enumerate(parts))

    def __getitem__(self, indices: Sequence[int]) -> list[dict[str, Tensor]]:
        missing = sorted({int(i) for i in indices} - set(self.kept))
        if missing:
            got = document_blocks(self.model, self.tok, [self.texts[i] for i in missing], **self.opts)
            self.kept.update(zip(missing, got))
        return [self.kept[int(i)] for i in indices]


def _cost_of(c: Cost) -> dict[str, Any]:
    return {"seconds": c.seconds, "peak_bytes": c.peak_bytes, "how": c.how}


def _vec(x: Sequence[float | None]) -> Tensor:
    return torch.tensor([math.nan if v is None else v for v in x], dtype=torch.float64)


def score_all(
    model: Any,
    tok: Any,
    fp: str,
    pool: list[str],
    targets: Mapping[str, list[str]],
    cfg: SelectEvidenceConfig,
    log: Callable[[str], None],
) -> tuple[dict[str, dict[str, Tensor]], dict[str, dict[str, Any]], PoolBlocks]:
    """Every scored selector's scores for each target -> (scores[target][selector] (N,),
    cost[selector], the pool's block inputs (:class:`PoolBlocks`, reused for fine-tuning)).

    With ``cfg.truth_store``, each group of scores (FisherSketch per target; the embedding and
    mean-gradient baselines; the per-example gradients; DSIR per target) is kept under its
    ``scores/`` folder as a small gzip JSON file with the cost measured when it was computed,
    keyed by the code (:func:`scores_code`), the model, the pool's and the target's texts and
    the settings it reads (``experiments.caching.stored_json``): a later sitting reads them
    back instead of repeating hours of scoring, and records the same scores and costs."""
    from updatescope.experiments.caching import stored_json
    from updatescope.experiments.groundtruth.store import texts_digest

    where = None if cfg.truth_store is None else Path(cfg.truth_store) / "scores"
    names = list(targets)
    lc = cfg.lora
    base = {"code": scores_code(), "model": fp, "pool": texts_digest(pool, None), "seed": cfg.seed}
    tkeys = {t: texts_digest(targets[t], None) for t in names}
    blocks = PoolBlocks(model, tok, pool, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
    head = heads.head_weights(model)  # one float32 copy of W (K, d) and b, for every group that needs it
    scores: dict[str, dict[str, Tensor]] = {t: {} for t in names}
    cost: dict[str, dict[str, Any]] = {}
    stored: dict[str, bool] = {}

    def keep(kind: str, parts: dict[str, Any], build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        fresh = []
        got = stored_json(where, kind, {**base, **parts}, lambda: fresh.append(1) or build())
        stored[kind] = stored.get(kind, True) and not fresh
        return got

    def record(kind: str, sels: Sequence[str], per_doc: int, costs: Sequence[dict[str, Any]]) -> None:
        secs = sum(c["seconds"] for c in costs)
        for n in sels:
            cost[n] = {
                "seconds": secs,
                "seconds_per_target": secs / len(names),
                "peak_bytes": max(c["peak_bytes"] for c in costs),
                "bytes_per_doc": per_doc,
                "memory": costs[0]["how"],
                "stored": stored[kind],  # read back from the store: the cost is the sitting's that computed it
            }

    fisher_costs = []
    for t in names:  # forward only: target signature + one scoring pass over the pool
        got = keep(
            "fisher",
            {"target": tkeys[t], "sketch_dim": cfg.sketch_dim},
            lambda t=t: _fisher(model, tok, fp, head, pool, targets[t], cfg, t),
        )
        for n in ("fisher", "activation", "error"):
            scores[t][n] = _vec(got["scores"][n])
        fisher_costs.append(got["cost"])
    record(
        "fisher", ("fisher", "activation", "error"), 8 * cfg.sketch_dim + 8, fisher_costs
    )  # one float64 m-vector + a count
    log(f"FisherSketch scores: {cost['fisher']['seconds']:.1f}s for {len(names)} targets")

    got = keep("acts", {"targets": tkeys}, lambda: _acts_baselines(model, tok, fp, head, pool, targets))
    for t in names:
        scores[t]["embedding"] = _vec(got["scores"][t]["embedding"])
        scores[t]["mean_gradient"] = _vec(got["scores"][t]["mean_gradient"])
    d = head[0].shape
    record("acts", ("embedding",), 8 * d[1], [got["cost"]["capture"], got["cost"]["embedding"]])
    record(
        "acts", ("mean_gradient",), 8 * d[0] * d[1], [got["cost"]["capture"], got["cost"]["mean_gradient"]]
    )  # dense K×d
    secs = (cost["embedding"]["seconds"], cost["mean_gradient"]["seconds"])
    log(f"embedding and mean-gradient scores: {secs[0]:.1f}s, {secs[1]:.1f}s")

    dsir_costs, dropped = [], {}
    for t in names:
        opts = {"ngrams": cfg.dsir_ngrams, "num_buckets": cfg.dsir_buckets, "min_length": cfg.dsir_min_length}
        got = keep("dsir", {"target": tkeys[t], **opts}, lambda t=t, opts=opts: _dsir(pool, targets[t], opts))
        scores[t]["dsir"], dropped[t] = _vec(got["scores"]), got["dropped"]
        dsir_costs.append(got["cost"])
    record("dsir", ("dsir",), 8 * cfg.dsir_buckets, dsir_costs)  # the package's dense int64 bucket counts
    cost["dsir"]["documents_below_min_length"] = dropped
    log(f"DSIR scores: {cost['dsir']['seconds']:.1f}s; documents below its minimum length: {dropped}")

    recipe = {"lora": dataclasses.asdict(lc), "warmup_steps": cfg.warmup_steps, "proj_dim": cfg.proj_dim}
    got = keep("gradient", {"targets": tkeys, **recipe}, lambda: _gradients(blocks, targets, cfg))
    for t in names:
        scores[t]["per_example_gradient"] = _vec(got["scores"][t])
    record("gradient", ("per_example_gradient",), 8 * cfg.proj_dim, [got["cost"]])
    cost["per_example_gradient"]["lora_params"] = got["lora_params"]
    secs = got["cost"]["seconds"]
    log(f"per-example-gradient scores ({got['lora_params']} LoRA parameters -> {cfg.proj_dim}): {secs:.1f}s")
    return scores, cost, blocks


def _fisher(
    model: Any,
    tok: Any,
    fp: str,
    head: tuple[Tensor, Tensor | None],
    pool: list[str],
    target: list[str],
    cfg: SelectEvidenceConfig,
    name: str,
) -> dict:
    """FisherSketch's three scores of the pool against one target, and what they cost.
    head: (W, b) of :func:`heads.head_weights`."""
    from updatescope.pipeline import score_documents

    w0, b0 = head
    with Cost() as c:
        a = heads.capture_acts(model, tok, target, fp=fp, use_cache=False, desc=f"target {name}")
        sig = heads.sketch_stream(
            w0, b0, a["acts"], a["labels"], sketch_dim=cfg.sketch_dim, seed=cfg.seed, fp=fp, name=name
        )
        res = score_documents(model, tok, pool, sig, fingerprint=fp, progress=False)
    out = {n: getattr(res, "score" if n == "fisher" else n).tolist() for n in ("fisher", "activation", "error")}
    return {"scores": out, "cost": _cost_of(c)}


def _acts_baselines(
    model: Any,
    tok: Any,
    fp: str,
    head: tuple[Tensor, Tensor | None],
    pool: list[str],
    targets: Mapping[str, list[str]],
) -> dict:
    """The embedding and mean-gradient scores of the pool against every target, from one
    capture of the head inputs of the pool and of each target, and what each costs.
    head: (W, b) of :func:`heads.head_weights`."""
    from updatescope.capture.chunks import tokenize
    from updatescope.select.baselines import mean_gradient

    w0, b0 = head
    d = w0.shape[1]
    names = list(targets)
    with Cost() as cap:  # head inputs of every document and of each target, kept for both baselines
        counts = [max(len(tokenize(tok, x, True, i)) - 1, 0) for i, x in enumerate(pool)]
        acts = heads.capture_acts(model, tok, pool, fp=fp, use_cache=False, desc="pool")
        tacts = {t: heads.capture_acts(model, tok, targets[t], fp=fp, use_cache=False, desc=t) for t in names}
    if acts["labels"].numel() != sum(counts):
        raise RuntimeError(f"captured {acts['labels'].numel()} rows for {sum(counts)} counted tokens")
    doc_acts = split_rows(acts["acts"], counts)
    doc_labels = split_rows(acts["labels"], counts)
    out: dict[str, dict[str, list[float]]] = {t: {} for t in names}
    with Cost() as emb_cost:
        emb = torch.stack(
            [
                a.to(torch.float64).mean(0) if a.shape[0] else torch.full((d,), math.nan, dtype=torch.float64)
                for a in doc_acts
            ]
        )
        for t in names:
            out[t]["embedding"] = _cos(emb, tacts[t]["acts"].to(torch.float64).mean(0)).tolist()
    with Cost() as grad_cost:
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
            out[t]["mean_gradient"] = vals[t]
    costs = {"capture": _cost_of(cap), "embedding": _cost_of(emb_cost), "mean_gradient": _cost_of(grad_cost)}
    return {"scores": out, "cost": costs}


def _dsir(pool: list[str], target: list[str], opts: Mapping[str, int]) -> dict:
    from updatescope.experiments.select_evidence.dsir import dsir_scores

    with Cost() as c:
        s, dropped = dsir_scores(pool, target, **opts)
    return {"scores": s.tolist(), "dropped": dropped, "cost": _cost_of(c)}


def _gradients(blocks: PoolBlocks, targets: Mapping[str, list[str]], cfg: SelectEvidenceConfig) -> dict:
    """The per-example-gradient scores of the pool against every target (block inputs per
    document, LoRA warm-up, backward per document, projection) and what they cost; the pool's
    block inputs are kept in ``blocks``."""
    from updatescope.select.baselines import project_rows

    model, tok, pool, fp = blocks.model, blocks.tok, blocks.texts, blocks.opts["fp"]
    lc, p = cfg.lora, cfg.proj_dim
    out = {}
    with Cost() as c:
        parts = document_blocks(model, tok, pool, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
        tail = lora_gt.finetune_from_config(model, stack_parts(parts), lc, seed=cfg.seed, steps=cfg.warmup_steps)
        g_pool = project_rows(document_gradients(tail, parts), p, cfg.seed)
        n_params = sum(x.numel() for n, x in tail.named_parameters() if "lora_" in n)
        for t, texts in targets.items():
            tparts = document_blocks(model, tok, texts, n_last=lc.n_last, fp=fp, seq_len=lc.seq_len)
            g_tgt = project_rows(document_gradients(tail, tparts), p, cfg.seed)
            out[t] = _cos(g_pool, g_tgt.mean(0)).tolist()
        del tail
    blocks.fill(parts)
    return {"scores": out, "cost": _cost_of(c), "lora_params": int(n_params)}
