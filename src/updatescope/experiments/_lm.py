"""Shared pieces of the language-model experiment runners.

- ``load_model``: the model loader every runner calls (tests monkeypatch it with a tiny
  random ``LlamaConfig`` model).
- ``capture_acts``: head inputs and next-token labels of a text stream, cached on disk under
  ``$UPDATESCOPE_CACHE/experiments`` (key = head fingerprint + texts + positions + budget).
  Logits are *not* cached: they are ``acts @ W.T (+ b)`` and are recomputed from the frozen
  head, which costs one matmul and saves K floats per token.
- ``finetune_head`` / ``transfer_matrix``: the ground truth.  Head-level fine-tuning on
  cached activations (the backbone is frozen, so its activations are fixed and captured
  once): the full output head ``W`` (K×d; for SmolLM2 the tied embedding matrix, untied
  here) is trained by Adam on the source's train split; transfer to a target is the
  reduction of the target's held-out mean cross-entropy against the base head.
- ``score_methods``: every selection method on the same task streams: FisherSketch
  (joint, activation-only, error-only, coupling), the exact Gram identity, mean-gradient
  cosine, the ``BASELINES`` registry and random.  A method that cannot run is reported with
  its reason, never silently dropped.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from updatescope.errors import InputError

IGNORE_INDEX = -100


# ------------------------------------------------------------------- model and cache
def load_model(spec: str = "smollm2") -> tuple[Any, Any]:
    """(model, tokenizer), eval mode, float32.  Monkeypatched in tests."""
    from updatescope.models.hf import load_causal_lm

    return load_causal_lm(spec)


def cache_root() -> Path:
    from updatescope.models.smollm2 import cache_dir

    root = cache_dir() / "experiments"
    root.mkdir(parents=True, exist_ok=True)
    return root


def head_weights(model: Any) -> tuple[Tensor, Tensor | None]:
    """The frozen head as float32 copies: W (K, d), b (K,) or None."""
    from updatescope.capture.hook import find_output_linear

    head = find_output_linear(model)
    w = head.weight.detach().to(torch.float32).clone()
    b = None if head.bias is None else head.bias.detach().to(torch.float32).clone()
    return w, b


def fingerprint(model: Any, tokenizer: Any) -> str:
    from updatescope.models.hf import head_fingerprint

    return head_fingerprint(model, tokenizer)


def _key(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=str).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:24]


def capture_acts(model: Any, tokenizer: Any, texts: Sequence[Any], *, fp: str,
                 positions: Sequence[Any] | None = None, max_tokens: int | None = None,
                 token_budget: int = 1024, desc: str = "capture",
                 use_cache: bool = True) -> dict[str, Tensor]:
    """{"acts": (n, d) float32, "labels": (n,) int64} for the counted positions of ``texts``.

    Cached by (fingerprint, texts, positions, max_tokens): a second call is a file read.
    """
    from updatescope.capture.causal_lm import capture_causal_lm

    key = _key("acts-v1", fp, list(texts), None if positions is None else [list(p) for p in positions],
               max_tokens, getattr(getattr(model, "config", None), "max_position_embeddings", None))
    path = cache_root() / f"acts-{key}.pt"
    if use_cache and path.is_file():
        return torch.load(path, weights_only=True)
    acts, labels = [], []
    for a, _logits, y in capture_causal_lm(model, list(texts), tokenizer, positions=positions,
                                          token_budget=token_budget, max_tokens=max_tokens,
                                          progress=False, desc=desc):
        acts.append(a.float().cpu())
        labels.append(y.cpu())
    if not acts:
        raise InputError(f"{desc}: nothing captured (texts too short?)")
    out = {"acts": torch.cat(acts), "labels": torch.cat(labels)}
    if use_cache:
        tmp = path.with_name(path.name + ".tmp")
        torch.save(out, tmp)
        tmp.replace(path)
    return out


# ------------------------------------------------------------------- head arithmetic
def logits_of(w: Tensor, b: Tensor | None, acts: Tensor) -> Tensor:
    """acts (n, d) -> logits (n, K) = acts Wᵀ + b, float32."""
    z = acts @ w.T
    return z if b is None else z + b


def errors_of(w: Tensor, b: Tensor | None, acts: Tensor, labels: Tensor) -> Tensor:
    """softmax(W a + b) − onehot(y), (n, K) float32 (labels must be valid ids)."""
    e = torch.softmax(logits_of(w, b, acts), dim=-1)
    e[torch.arange(labels.numel()), labels] -= 1.0
    return e


@torch.no_grad()
def mean_loss(w: Tensor, b: Tensor | None, acts: Tensor, labels: Tensor, chunk: int = 512) -> float:
    """Mean next-token cross-entropy of the head on (acts, labels), in nats."""
    tot = 0.0
    for i in range(0, acts.shape[0], chunk):
        z = logits_of(w, b, acts[i : i + chunk])
        tot += float(F.cross_entropy(z, labels[i : i + chunk], reduction="sum"))
    return tot / max(1, acts.shape[0])


def trainable_rows(w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]],
                   extra: int = 512, chunk: int = 256) -> Tensor:
    """The head rows fine-tuning may change: every label token of every task, plus the
    ``extra`` tokens with the largest total base probability over all tasks' inputs.

    One row set for all sources, so the parameterisation favours no source.  Rows outside
    it get gradient ``p_k a`` with ``p_k`` tiny under the base model; freezing them is what
    makes head fine-tuning affordable on a CPU (cost n·|R|·d per step instead of n·K·d,
    the softmax still runs over all K).  -> sorted int64 row ids.
    """
    k = w0.shape[0]
    mass = torch.zeros(k, dtype=torch.float64)
    labels = []
    for t in tasks.values():
        a = t["acts"]
        for i in range(0, a.shape[0], chunk):
            mass += torch.softmax(logits_of(w0, b0, a[i : i + chunk]), -1).sum(0).double()
        labels.append(t["labels"])
    top = torch.topk(mass, min(extra, k)).indices
    return torch.unique(torch.cat([top, *labels]))


def _logits_rows(z0: Tensor, acts: Tensor, rows: Tensor, dw: Tensor) -> Tensor:
    """Base logits (n, K) plus the trained rows' change acts ΔW_Rᵀ in columns ``rows``."""
    return z0.index_add(1, rows, acts @ dw.T)


def finetune_head(w0: Tensor, b0: Tensor | None, acts: Tensor, labels: Tensor, *, steps: int,
                  lr: float, batch: int, seed: int = 0, rows: Tensor | None = None,
                  z0: Tensor | None = None) -> Tensor:
    """Head-only fine-tuning: Adam on ΔW_R (|R|×d) for ``steps`` minibatch steps.  -> ΔW_R.

    Cross-entropy of ``(W0 + ΔW) a + b0`` on (acts, labels) where ΔW is zero outside the
    rows ``rows`` (default: all K rows); the softmax always runs over the full vocabulary.
    Minibatches of ``batch`` rows are drawn without replacement within an epoch from a
    generator seeded by ``seed`` (full batch when ``batch >= n``).  The bias, if any, stays
    frozen.  Adam (β = 0.9, 0.999, no weight decay) because that is how heads are
    fine-tuned in practice; its per-coordinate scaling is also why transfer is not simply
    first-order gradient alignment.  ``z0`` (n, K): precomputed base logits of ``acts``.
    """
    n = acts.shape[0]
    rows = torch.arange(w0.shape[0]) if rows is None else rows
    g = torch.Generator().manual_seed(seed)
    dw = torch.zeros(rows.numel(), w0.shape[1], requires_grad=True)
    opt = torch.optim.Adam([dw], lr=lr)
    order = torch.randperm(n, generator=g)
    pos = 0
    for _ in range(steps):
        if batch >= n:
            idx = torch.arange(n)
        else:
            if pos + batch > n:
                order, pos = torch.randperm(n, generator=g), 0
            idx = order[pos : pos + batch]
            pos += batch
        with torch.no_grad():
            base = z0[idx] if z0 is not None else logits_of(w0, b0, acts[idx])
        loss = F.cross_entropy(_logits_rows(base, acts[idx], rows, dw), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return dw.detach()


@torch.no_grad()
def _loss_rows(w0: Tensor, b0: Tensor | None, task: Mapping[str, Tensor], rows: Tensor, dw: Tensor,
               chunk: int = 512) -> float:
    acts, labels = task["acts"], task["labels"]
    tot = 0.0
    for i in range(0, acts.shape[0], chunk):
        base = task["z0"][i : i + chunk] if "z0" in task else logits_of(w0, b0, acts[i : i + chunk])
        tot += float(F.cross_entropy(_logits_rows(base, acts[i : i + chunk], rows, dw),
                                     labels[i : i + chunk], reduction="sum"))
    return tot / max(1, acts.shape[0])


def transfer_matrix(w0: Tensor, b0: Tensor | None, train: Mapping[str, Mapping[str, Tensor]],
                    evals: Mapping[str, Mapping[str, Tensor]], *, steps: int, lr: float, batch: int,
                    seed: int = 0, extra_rows: int | None = 512, max_cached_logits: int = 2**28,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Ground truth: fine-tune on each source's train split, evaluate every target's eval split.

    -> {"base_loss": {t: L0}, "loss": {t: {s: L}}, "transfer": {t: {s: L0 − L}}, "rows": |R|}
    (nats; transfer > 0 = the source helped the target).  Trainable rows: see
    :func:`trainable_rows` (``extra_rows=None``: the full head).  Base logits are cached
    when all splits together hold at most ``max_cached_logits`` floats.  Self-transfer
    (s = t) is kept in ``transfer`` for reference; the selection metrics never use it.
    """
    names = list(train)
    rows = (torch.arange(w0.shape[0]) if extra_rows is None
            else trainable_rows(w0, b0, train, extra=extra_rows))
    total = sum(int(d["acts"].shape[0]) for d in (*train.values(), *evals.values())) * w0.shape[0]
    if total <= max_cached_logits:
        train = {n: {**d, "z0": logits_of(w0, b0, d["acts"])} for n, d in train.items()}
        evals = {n: {**d, "z0": logits_of(w0, b0, d["acts"])} for n, d in evals.items()}
    empty = torch.zeros(rows.numel(), w0.shape[1])
    base = {t: _loss_rows(w0, b0, evals[t], rows, empty) for t in names}
    loss: dict[str, dict[str, float]] = {t: {} for t in names}
    for k, s in enumerate(names):
        t0 = time.perf_counter()
        dw = finetune_head(w0, b0, train[s]["acts"], train[s]["labels"], steps=steps, lr=lr,
                           batch=batch, seed=seed + k, rows=rows, z0=train[s].get("z0"))
        for t in names:
            loss[t][s] = _loss_rows(w0, b0, evals[t], rows, dw)
        if log:
            log(f"fine-tuned on {s}: own eval loss {base[s]:.3f} -> {loss[s][s]:.3f} "
                f"({time.perf_counter() - t0:.1f}s)")
    transfer = {t: {s: base[t] - loss[t][s] for s in names} for t in names}
    return {"base_loss": base, "loss": loss, "transfer": transfer, "rows": int(rows.numel())}


# ------------------------------------------------------------------- method scores
SKETCH_KINDS = ("fisher", "activation", "error", "coupling")


def _table(names: Sequence[str], mat: Tensor) -> dict[str, dict[str, float]]:
    """(T, T) matrix [target, source] -> {target: {source: value}} without the diagonal."""
    return {t: {s: float(mat[i, j]) for j, s in enumerate(names) if j != i} for i, t in enumerate(names)}


def mean_gradients(w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]],
                   chunk: int = 256) -> dict[str, Tensor]:
    """Per task the mean head gradient G = Eᵀ A / n (K×d), float64, built chunk by chunk."""
    out = {}
    for name, t in tasks.items():
        a, y = t["acts"], t["labels"]
        g = torch.zeros(w0.shape[0], w0.shape[1], dtype=torch.float64)
        for i in range(0, a.shape[0], chunk):
            e = errors_of(w0, b0, a[i : i + chunk], y[i : i + chunk]).double()
            g.addmm_(e.T, a[i : i + chunk].double())
        out[name] = g / a.shape[0]
    return out


def score_methods(w0: Tensor, b0: Tensor | None, tasks: Mapping[str, Mapping[str, Tensor]], *,
                  fp: str = "", sketch_dim: int = 4096, seed: int = 0, exact_n: int | None = 400,
                  baseline_n: int | None = 400, baselines: Sequence[str] = ("cka", "rsa", "svcca", "logme",
                                                                               "hscore", "leep"),
                  log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Score every (target, source) pair with every method.

    tasks: name -> {"acts" (n, d), "labels" (n,)}: the data a user would sketch.
    -> {"scores": {method: {target: {source: score}}}, "cannot_run": {method: reason},
        "seconds": {method: s}, "sketch_alignment": {kind: {target: {source: value}}},
        "exact_n": {task: n used}}.
    Methods: fisher / activation / error (FisherSketch signatures, all tokens), exact_fisher /
    exact_activation / exact_error (Gram identity on the first ``exact_n`` rows of each
    task), grad_cos (mean-gradient cosine, all tokens), the named ``baselines`` (on the
    first ``baseline_n`` rows), random.
    """
    import updatescope as us
    from updatescope.select.baselines import BASELINES, TaskStream, random_scores

    names = list(tasks)
    k, d = w0.shape
    scores: dict[str, dict[str, dict[str, float]]] = {}
    cannot: dict[str, str] = {}
    secs: dict[str, float] = {}

    def say(msg: str) -> None:
        if log:
            log(msg)

    # FisherSketch: one streaming pass per task, all pairs from the signatures.
    t0 = time.perf_counter()
    sigs = []
    for name in names:
        sk = us.FisherSketch(d, k, sketch_dim, seed, fingerprint=fp)
        a, y = tasks[name]["acts"], tasks[name]["labels"]
        for i in range(0, a.shape[0], 256):
            sk.update_logits(a[i : i + 256], logits_of(w0, b0, a[i : i + 256]), y[i : i + 256])
        sigs.append(sk.signature(name=name))
    mats = us.alignment_matrix(sigs)
    secs["sketch"] = time.perf_counter() - t0
    say(f"sketched {len(names)} tasks ({secs['sketch']:.1f}s)")
    sketch_al = {kind: _table(names, mats[kind]) for kind in SKETCH_KINDS}
    for kind in ("fisher", "activation", "error"):
        scores[kind] = sketch_al[kind]

    # Exact Gram identity on (a subsample of) the same streams.
    t0 = time.perf_counter()
    used = {}
    try:
        pairs = []
        for name in names:
            a, y = tasks[name]["acts"], tasks[name]["labels"]
            if exact_n is not None:
                a, y = a[:exact_n], y[:exact_n]
            used[name] = int(a.shape[0])
            pairs.append((a, errors_of(w0, b0, a, y)))
        ex = us.exact_alignment_matrix(pairs)
        del pairs
        for kind in ("fisher", "activation", "error"):
            scores[f"exact_{kind}"] = _table(names, ex[kind])
        exact_tab = {kind: _table(names, ex[kind]) for kind in SKETCH_KINDS}
    except (InputError, RuntimeError) as exc:
        for kind in ("fisher", "activation", "error"):
            cannot[f"exact_{kind}"] = str(exc).splitlines()[0]
        exact_tab = {}
    secs["exact"] = time.perf_counter() - t0
    say(f"exact alignment ({secs['exact']:.1f}s)")

    # Mean-gradient cosine from K×d mean gradients built once per task (same definition as
    # select.baselines.mean_gradient_cosine, which would rebuild them for every pair).
    t0 = time.perf_counter()
    grads = mean_gradients(w0, b0, tasks)
    norms = {n: float(g.square().sum().sqrt()) for n, g in grads.items()}
    gc: dict[str, dict[str, float]] = {t: {} for t in names}
    for i, t in enumerate(names):
        for s in names[i + 1:]:
            v = float((grads[s] * grads[t]).sum()) / (norms[s] * norms[t])
            gc[t][s] = gc[s][t] = v
    del grads
    scores["grad_cos"] = gc
    secs["grad_cos"] = time.perf_counter() - t0

    # Registry baselines on TaskStreams (float64; subsampled to bound memory).
    streams = {}
    for name in names:
        a, y = tasks[name]["acts"], tasks[name]["labels"]
        if baseline_n is not None:
            a, y = a[:baseline_n], y[:baseline_n]
        streams[name] = TaskStream(acts=a, errors=errors_of(w0, b0, a, y), labels=y, name=name)
    for method in baselines:
        t0 = time.perf_counter()
        fn = BASELINES[method]
        try:
            scores[method] = {t: {s: float(fn(streams[s], streams[t])) for s in names if s != t} for t in names}
        except InputError as exc:
            cannot[method] = str(exc).splitlines()[0]
        secs[method] = time.perf_counter() - t0
        say(f"{method}: {'cannot run' if method in cannot else 'ok'} ({secs[method]:.1f}s)")
    del streams
    scores["random"] = {t: random_scores([s for s in names if s != t], seed, salt=t) for t in names}
    return {"scores": scores, "cannot_run": cannot, "seconds": secs, "sketch_alignment": sketch_al,
            "exact_alignment": exact_tab, "exact_n": used}


def evaluate_methods(scores: Mapping[str, Any], transfer: Mapping[str, Mapping[str, float]],
                     seed: int = 0) -> dict[str, Any]:
    """summarise() for every method against the transfer table (self pairs dropped)."""
    from updatescope.select.metrics import summarise

    tr = {t: {s: v for s, v in row.items() if s != t} for t, row in transfer.items()}
    out = {}
    for method, table in scores.items():
        try:
            out[method] = summarise(table, tr, seed=seed, n_boot=2000)
        except InputError as exc:
            out[method] = {"error": str(exc).splitlines()[0]}
    return out


def sketch_vs_exact(sketch: Mapping[str, Any], exact: Mapping[str, Any]) -> dict[str, Any]:
    """Per kind: Spearman and mean/max |difference| between sketch and exact pair values."""
    from scipy import stats

    out = {}
    for kind in SKETCH_KINDS:
        if kind not in exact:
            continue
        xs, ys = [], []
        for t, row in exact[kind].items():
            for s, v in row.items():
                if s < t:  # each unordered pair once
                    xs.append(sketch[kind][t][s])
                    ys.append(v)
        x, y = np.asarray(xs), np.asarray(ys)
        ok = np.isfinite(x) & np.isfinite(y)
        x, y = x[ok], y[ok]
        rho = float(stats.spearmanr(x, y).statistic) if x.size >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0 else math.nan
        out[kind] = {"spearman": rho, "mean_abs_err": float(np.abs(x - y).mean()) if x.size else math.nan,
                     "max_abs_err": float(np.abs(x - y).max()) if x.size else math.nan, "pairs": int(x.size)}
    return out


# ------------------------------------------------------------------- reporting
def headline(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """method -> {top1, oracle_normalised, regret_mean, regret_max, spearman} means (None = n/a)."""
    out = {}
    for method, m in metrics.items():
        if "error" in m:
            out[method] = {"error": m["error"]}
            continue
        out[method] = {
            "top1": m["top1"]["mean"], "chance_top1": m["chance_top1"],
            "oracle_normalised": m["oracle_normalised_transfer"]["mean"],
            "oracle_normalised_n": m["oracle_normalised_transfer"]["n"],
            "regret_mean": m["regret"]["mean"], "regret_max": m["regret"]["max"],
            "spearman": m["spearman"]["mean"], "pooled_spearman": m["pooled_spearman"]["rho"],
            "pooled_spearman_p": m["pooled_spearman"]["p"],
        }
    return out


def print_table(head: Mapping[str, Mapping[str, Any]], cannot: Mapping[str, str]) -> None:
    def f(x: Any) -> str:
        return "  n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:6.3f}"

    print(f"{'method':18s} {'top1':>6s} {'oracle':>6s} {'regret':>6s} {'maxreg':>6s} {'spear':>6s}")
    for method, h in head.items():
        if "error" in h:
            print(f"{method:18s} error: {h['error']}")
            continue
        print(f"{method:18s} {f(h['top1'])} {f(h['oracle_normalised'])} {f(h['regret_mean'])} "
              f"{f(h['regret_max'])} {f(h['spearman'])}")
    for method, why in cannot.items():
        print(f"{method:18s} cannot run: {why}")


def plot_selection(head: Mapping[str, Mapping[str, Any]], transfer: Mapping[str, Mapping[str, float]],
                   fisher: Mapping[str, Mapping[str, float]], out_png: Path, title: str) -> None:
    """Two panels: top-1 per method (chance line) and the transfer matrix next to A_F."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m, h in head.items() if "error" not in h]
    names = list(transfer)
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.3, 1, 1]})
    vals = [head[m]["top1"] for m in methods]
    ax[0].bar(range(len(methods)), vals, color=["C3" if m == "fisher" else "C0" for m in methods])
    chance = next(iter(head[m]["chance_top1"] for m in methods)) if methods else None
    if chance is not None:
        ax[0].axhline(chance, color="k", ls="--", lw=1, label="chance")
        ax[0].legend()
    ax[0].set_xticks(range(len(methods)))
    ax[0].set_xticklabels(methods, rotation=60, ha="right", fontsize=8)
    ax[0].set_ylabel("top-1 accuracy")
    ax[0].set_ylim(0, 1)
    tr = np.array([[transfer[t][s] if s != t else np.nan for s in names] for t in names])
    fi = np.array([[fisher[t][s] if s != t else np.nan for s in names] for t in names])
    for a_, mat, lab in ((ax[1], tr, "transfer (eval loss reduction, nats)"), (ax[2], fi, "FisherSketch A_F")):
        im = a_.imshow(mat, cmap="viridis")
        a_.set_title(lab, fontsize=9)
        a_.set_xticks(range(len(names)))
        a_.set_yticks(range(len(names)))
        a_.set_xticklabels(names, rotation=90, fontsize=6)
        a_.set_yticklabels(names, fontsize=6)
        a_.set_xlabel("source")
        a_.set_ylabel("target")
        fig.colorbar(im, ax=a_, fraction=0.046)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def method_metrics(sc: Mapping[str, Any], by_method: Mapping[str, Any], summary: Any, figure: Path) -> dict[str, Any]:
    """The metrics every selection runner reports from a ``score_methods`` result ``sc``."""
    return {
        "summary": summary,
        "cannot_run": sc["cannot_run"],
        "methods": by_method,
        "sketch_vs_exact": sketch_vs_exact(sc["sketch_alignment"], sc["exact_alignment"]),
        "sketch_alignment": sc["sketch_alignment"],
        "exact_n": sc["exact_n"],
        "method_seconds": sc["seconds"],
        "figures": [figure.name],
    }
