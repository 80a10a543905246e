"""Routing among LoRA adapters by predicted update compatibility (paper A's second use).

A library of LoRA adapters on the packaged model, one per built-in domain, each trained on
the domain's ``train`` split and represented by the head signature of those same training
documents.  Requests are held-out documents (``eval`` split, the first ``request_tokens``
tokens) of the library's domains and of domains outside it.  Ground truth: every request's
loss under every adapter, for each adapter-training seed; the oracle is the adapter with the
lowest loss.  Routers:

- ``fisher`` / ``error`` / ``activation``: :class:`updatescope.pipeline.Router`, one forward
  pass of the base model per batch of requests, the joint score or one marginal;
- ``embedding``: cosine of the request's mean head input to each adapter's training centroid;
- ``arrow``: PEFT's Arrow router (``create_arrow_model``, per-token routing over the top
  singular directions of each adapter's ΔW), run on the adapted blocks;
- ``uniform_merge``: every adapter averaged (Σ ΔW_a / A); ``base``: no adapter;
- ``random``: the expected loss of an adapter drawn uniformly; ``own``: the request's own
  domain's adapter (in-library requests only: the label a user may have);
- ``oracle``: the best adapter of each request, per seed.

Only the last ``lora.n_last`` blocks are adapted, so the residual stream entering them is
captured once per text and every adapter (and Arrow) runs on it: exact, and it keeps the
ground truth cheap.  Analysis: PREREGISTRATION.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.caching import cache_key, cached
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.routing.config import RoutingConfig

NAME = "routing"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
#: every router whose routed loss is reported
ROUTERS = ("fisher", "error", "activation", "embedding", "arrow", "uniform_merge", "base", "random", "own", "oracle")
#: the pre-specified comparisons: (name, other router); the difference is other − fisher in
#: routed loss (nats per token), so "better" means FisherSketch routes to lower loss
COMPARISONS = (
    ("FisherSketch vs embedding centroid", "embedding"),
    ("FisherSketch vs PEFT Arrow", "arrow"),
    ("FisherSketch vs error-only", "error"),
    ("FisherSketch vs activation-only", "activation"),
    ("FisherSketch vs uniform merge", "uniform_merge"),
)


def build_requests(cfg: RoutingConfig, tok: Any) -> tuple[list[list[int]], list[str]]:
    """``requests_per_domain`` requests of ``request_tokens`` token ids per domain -> (ids per
    request, domain each).  First the opening window of each held-out document long enough for
    one, in document order; a domain still short of requests then adds its documents' further
    disjoint windows (the second window of each document in order, then the third, ...:
    amendment 3), and one that still falls short is refused."""
    from updatescope.data.domains import load_domain

    ids, doms = [], []
    n, want = cfg.request_tokens, cfg.requests_per_domain
    for d in (*cfg.library, *cfg.outside):
        docs = [tok(doc, add_special_tokens=True)["input_ids"] for doc in load_domain(d, "eval")]
        got: list[list[int]] = []
        depth = max((len(x) // n for x in docs), default=0)
        for k in range(depth):  # window k of every document that has one, documents in order
            for x in docs:
                if len(got) < want and len(x) >= (k + 1) * n:
                    got.append([int(v) for v in x[k * n : (k + 1) * n]])
            if len(got) == want:
                break
        if len(got) < want:
            raise InputError(
                f"domain {d}: {len(got)} disjoint windows of {n} tokens in its eval documents, need {want}"
            )
        ids.extend(got)
        doms.extend([d] * want)
    return ids, doms


def train_docs(cfg: RoutingConfig) -> dict[str, list[str]]:
    from updatescope.data.domains import load_domain

    # ~4 characters per token: enough text for ``train_tokens`` counted targets
    return {d: load_domain(d, "train", max_chars=8 * cfg.train_tokens) for d in cfg.library}


def request_embeddings(model: Any, requests: list[list[int]], batch: int = 16) -> Tensor:
    """Mean head input over each request's positions (requests share one length: no padding)."""
    from updatescope.capture.hook import find_output_linear

    head = find_output_linear(model)
    grabbed: list[Tensor] = []
    handle = head.register_forward_pre_hook(lambda _m, args: grabbed.append(args[0].detach().float()))
    out = []
    try:
        with torch.no_grad():
            for i in range(0, len(requests), batch):
                ids = torch.tensor(requests[i : i + batch])
                model(input_ids=ids, use_cache=False)
                out.append(grabbed.pop().mean(1))
    finally:
        handle.remove()
    return torch.cat(out)


def _lora_modules(tail: Any) -> dict[str, Any]:
    return {
        name: mod
        for name, mod in tail.model.layers.named_modules()
        if hasattr(mod, "get_delta_weight") and hasattr(mod, "base_layer")
    }


def adapter_state(tail: Any) -> dict[str, Tensor]:
    """The LoRA A/B weights of a trained tail under PEFT's saved-adapter names."""
    out = {}
    for name, mod in _lora_modules(tail).items():
        for part in ("lora_A", "lora_B"):
            out[f"base_model.model.model.layers.{name}.{part}.weight"] = (
                getattr(mod, part)["default"].weight.detach().clone()
            )
    return out


def deltas_of(tail: Any) -> dict[str, Tensor]:
    return {name: mod.get_delta_weight("default").detach().clone() for name, mod in _lora_modules(tail).items()}


def tail_with_deltas(model: Any, n_last: int, deltas: list[dict[str, Tensor]], weights: list[float]) -> Any:
    """A fresh tail with Σ w_a ΔW_a added to its weights (the merge of several adapters)."""
    tail = lora_gt.tail_model(model, n_last)
    with torch.no_grad():
        for name in deltas[0]:
            mod = tail.model.layers.get_submodule(name)
            mod.weight += sum(w * d[name] for w, d in zip(weights, deltas, strict=True)).to(mod.weight.dtype)
    return tail


def save_adapter(state: dict[str, Tensor], cfg: RoutingConfig, path: Path) -> None:
    """A PEFT adapter folder (config + safetensors) for the tail model."""
    from peft import LoraConfig
    from safetensors.torch import save_file

    lc = cfg.lora
    LoraConfig(
        r=lc.r,
        lora_alpha=lc.alpha,
        lora_dropout=0.0,
        target_modules=list(lc.targets),
        bias="none",
        task_type="CAUSAL_LM",
    ).save_pretrained(str(path))
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "adapter_model.safetensors"))


def arrow_losses(model: Any, cfg: RoutingConfig, states: list[dict[str, Tensor]], req: dict, seed: int) -> Tensor:
    """Per-request summed loss of PEFT's Arrow router over the adapter library, on the adapted
    blocks (the real ``create_arrow_model``; adapters written as PEFT folders first)."""
    from peft import ArrowConfig, create_arrow_model

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, st in enumerate(states):
            p = Path(tmp) / f"adapter_{i}"
            p.mkdir()
            save_adapter(st, cfg, p)
            paths.append(str(p))
        tail = lora_gt.tail_model(model, cfg.lora.n_last)
        arrow = create_arrow_model(
            base_model=tail,
            task_specific_adapter_paths=paths,
            arrow_config=ArrowConfig(top_k=cfg.arrow_top_k, rng_seed=seed),
        )
        arrow.eval()
        inner = arrow.base_model.model
        return lora_gt.sequence_losses(inner, req)[0]


def check_adapter_folder(model: Any, cfg: RoutingConfig, state: dict[str, Tensor], req: dict, loss: Tensor) -> float:
    """Write one adapter as a PEFT folder, load it with ``PeftModel.from_pretrained`` onto a
    fresh tail and return the largest per-request difference from the losses the trained tail
    gave (so the folders Arrow reads hold the adapters that were trained)."""
    from peft import PeftModel

    with tempfile.TemporaryDirectory() as tmp:
        save_adapter(state, cfg, Path(tmp))
        loaded = PeftModel.from_pretrained(lora_gt.tail_model(model, cfg.lora.n_last), tmp)
        loaded.eval()
        a = lora_gt.sequence_losses(loaded.base_model.model, req)[0]
    return float((a - loss).abs().max())


def _adapter_key(fp: str, cfg: RoutingConfig, domain: str, seed: int, data: dict, req: dict) -> str:
    digest = [
        hashlib.sha256(d[k].contiguous().numpy().tobytes()).hexdigest()
        for d in (data, req)
        for k in ("hidden", "labels", "mask")
    ]
    lc = cfg.lora
    return cache_key(
        "routing-adapter-v1",
        lora_gt._code_digest(),
        fp,
        domain,
        seed,
        lc.n_last,
        lc.r,
        lc.alpha,
        lc.lr,
        lc.steps,
        lc.batch,
        list(lc.targets),
        digest,
    )


def library_seed(model, fp, cfg, train, req, seed, log) -> dict[str, Any]:
    """One seed's adapters: per adapter its per-request summed losses, ΔW and PEFT weights."""
    out = {}
    lc = cfg.lora
    for k, d in enumerate(cfg.library):
        t0 = time.perf_counter()

        def build(d: str = d, k: int = k) -> dict[str, Any]:
            tail = lora_gt.finetune_from_config(model, train[d], lc, seed=seed + k)
            res = {
                "loss": lora_gt.sequence_losses(tail, req)[0],
                "train_after": lora_gt.mean_loss(tail, train[d]),
                "deltas": deltas_of(tail),
                "state": adapter_state(tail),
            }
            return res | {"seconds": time.perf_counter() - t0}  # fine-tuning and evaluation, when computed

        res = cached("routing-adapter", _adapter_key(fp, cfg, d, seed + k, train[d], req), build)
        # a cache entry written before "seconds" was kept: the time it took to load instead
        out[d] = {**res, "seconds": res.get("seconds", time.perf_counter() - t0)}
        log(
            f"adapter {d} (seed {seed + k}): train loss after {float(res['train_after']):.3f} "
            f"({time.perf_counter() - t0:.1f}s)"
        )
    return out


def _pick(scores: Tensor) -> np.ndarray:
    """Row-wise argmax, NaN as −inf, first on ties."""
    s = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -float("inf")))
    return s.argmax(1).numpy()


def route_all(cfg, model, tok, fp, train_text, requests, log) -> dict[str, Any]:
    """Every signature-based and embedding router's choice per request (seed-independent)."""
    from updatescope.pipeline import Router, SketchOptions, sketch_corpus

    opts = SketchOptions(sketch_dim=cfg.sketch_dim, seed=cfg.seed, max_tokens=cfg.train_tokens)
    t0 = time.perf_counter()
    sigs = {d: sketch_corpus(model, tok, train_text[d], opts, progress=False) for d in cfg.library}
    sketch_s = time.perf_counter() - t0
    router = Router(model, tok, sigs)
    t0 = time.perf_counter()
    rs = router.score(requests)
    route_s = time.perf_counter() - t0
    choices = router.choose(rs)
    fisher = np.array([cfg.library.index(c.adapters[0]) for c in choices])
    t0 = time.perf_counter()
    cents = torch.stack(
        [
            heads.capture_acts(model, tok, train_text[d], fp=fp, max_tokens=cfg.train_tokens)["acts"].mean(0)
            for d in cfg.library
        ]
    )
    emb = request_embeddings(model, requests)
    cos = torch.nn.functional.normalize(emb.double(), dim=1) @ torch.nn.functional.normalize(cents.double(), dim=1).T
    emb_s = time.perf_counter() - t0
    log(f"routers scored {len(requests)} requests (sketch {sketch_s:.1f}s, route {route_s:.1f}s, embed {emb_s:.1f}s)")
    return {
        "fisher": fisher,
        "error": _pick(rs.error),
        "activation": _pick(rs.activation),
        "embedding": _pick(cos),
        "ambiguous": np.array([c.ambiguous for c in choices]),
        "seconds": {"sketch": sketch_s, "route": route_s, "embedding": emb_s},
        "scores": {
            "fisher": rs.score.tolist(),
            "error": rs.error.tolist(),
            "activation": rs.activation.tolist(),
            "embedding": cos.tolist(),
        },
    }


def evaluate(cfg, doms, counts, by_seed, choices) -> dict[str, Any]:
    """Per request and router: the routed loss (nats per token, mean over seeds), its gap to
    the oracle, and for the choosers whether the choice was the oracle's / the own domain's."""
    n = len(doms)
    lib = list(cfg.library)
    own = np.array([lib.index(d) if d in lib else -1 for d in doms])
    per: dict[str, list[float]] = {r: [0.0] * n for r in ROUTERS}
    hit: dict[str, list[float]] = {r: [0.0] * n for r in ("fisher", "error", "activation", "embedding")}
    for s in by_seed:
        L = s["loss"] / counts[:, None]  # (n, A) nats per token
        oracle = L.argmin(1)
        rows = np.arange(n)
        vals = {
            "oracle": L[rows, oracle],
            "random": L.mean(1),
            "base": s["base"] / counts,
            "uniform_merge": s["uniform_merge"] / counts,
            "arrow": s["arrow"] / counts,
            "own": np.where(own >= 0, L[rows, np.maximum(own, 0)], np.nan),
        }
        for r in ("fisher", "error", "activation", "embedding"):
            vals[r] = L[rows, choices[r]]
            for i in range(n):
                hit[r][i] += float(choices[r][i] == oracle[i]) / len(by_seed)
        for r, v in vals.items():
            for i in range(n):
                per[r][i] += float(v[i]) / len(by_seed)
    return {
        "routed_loss": per,
        "oracle_hit": hit,
        "own_hit": {
            r: [float(choices[r][i] == own[i]) if own[i] >= 0 else None for i in range(n)]
            for r in ("fisher", "error", "activation", "embedding")
        },
    }


def summarise(cfg, doms, ev) -> dict[str, Any]:
    groups = {
        "all": list(range(len(doms))),
        "in_library": [i for i, d in enumerate(doms) if d in cfg.library],
        "outside": [i for i, d in enumerate(doms) if d not in cfg.library],
    }
    out: dict[str, Any] = {}
    for g, idx in groups.items():
        if not idx:
            continue
        row: dict[str, Any] = {"n_requests": len(idx)}
        orc = np.array([ev["routed_loss"]["oracle"][i] for i in idx])
        for r in ROUTERS:
            v = np.array([ev["routed_loss"][r][i] for i in idx], dtype=float)
            if np.all(np.isnan(v)):
                continue
            ok = ~np.isnan(v)
            gap = v[ok] - orc[ok]
            row[r] = {
                "routed_loss": float(v[ok].mean()),
                "routed_loss_se": float(v[ok].std(ddof=1) / np.sqrt(ok.sum())) if ok.sum() > 1 else None,
                "oracle_gap": float(gap.mean()),
                "oracle_gap_se": float(gap.std(ddof=1) / np.sqrt(gap.size)) if gap.size > 1 else None,
            }
            if r in ev["oracle_hit"]:
                row[r]["oracle_accuracy"] = float(np.mean([ev["oracle_hit"][r][i] for i in idx]))
                owns = [ev["own_hit"][r][i] for i in idx if ev["own_hit"][r][i] is not None]
                row[r]["own_accuracy"] = float(np.mean(owns)) if owns else None
        out[g] = row
    return out


def verdicts(cfg, doms, ev) -> dict[str, Any]:
    """The pre-registered comparisons on per-request routed loss over all requests: exact /
    Monte Carlo sign-flip over requests, Holm across :data:`COMPARISONS`; secondary: a
    bootstrap clustered over domains."""
    from updatescope.experiments.mappings import verdict_rows

    names = [f"r{i}" for i in range(len(doms))]
    f = ev["routed_loss"]["fisher"]
    diffs = {c: {u: ev["routed_loss"][o][i] - f[i] for i, u in enumerate(names)} for c, o in COMPARISONS}
    clusters = dict(zip(names, doms, strict=True))
    return {
        "rule": '"better" when FisherSketch routes to lower loss than the other router: Holm-adjusted '
        "two-sided sign-flip p < 0.05 over requests with the mean difference (other − FisherSketch) > 0; "
        '"worse" when p < 0.05 with it < 0; else "no difference"',
        "comparisons": verdict_rows(
            diffs,
            clusters,
            family="routing: FisherSketch against the routers users have",
            n_key="n_requests",
            mean_key="mean_loss_difference",
            n_boot=cfg.n_boot,
            seed=cfg.seed,
        ),
    }


MERGED = ("uniform_merge", "arrow")  # a seed's losses that need every adapter of the library
_SEED_FILE = "_library"  # the truth-store source name of those


def truth_store(cfg: RoutingConfig, fp: str, train_text: dict[str, list[str]], requests: list[list[int]]):
    """The run's :class:`TruthStore` (None without ``truth_store``): per seed, one file per
    adapter (its summed loss on every request) and one for the library as a whole (uniform
    merge and Arrow, which need every adapter's weights), keyed by the recipe, the texts, the
    request tokens, the fine-tuning code and the model."""
    if cfg.truth_store is None:
        return None
    from updatescope.experiments.groundtruth.store import TruthStore, texts_digest

    req = hashlib.sha256(json.dumps(requests).encode()).hexdigest()[:16]
    train = {d: texts_digest(train_text[d], cfg.train_tokens) for d in cfg.library}
    train[_SEED_FILE] = hashlib.sha256(json.dumps(train, sort_keys=True).encode()).hexdigest()[:16]
    context = {
        "experiment": "routing domains truth v1",
        "fingerprint": fp,
        "code": lora_gt._code_digest(),
        "arrow_top_k": cfg.arrow_top_k,
        "library": list(cfg.library),
    }
    return TruthStore(
        cfg.truth_store, context, {"train": train, "eval": {"requests": req, **dict.fromkeys(MERGED, req)}}
    )


def _recipe(cfg: RoutingConfig, adapter_seed: int | None) -> dict[str, Any]:
    return {**dataclasses.asdict(cfg.lora), "targets": list(cfg.lora.targets), "adapter_seed": adapter_seed}


def seed_truth(model, fp, cfg, train, req, seed, store, *, check_folder: bool, log) -> tuple[dict[str, Any], Any]:
    """One seed's ground truth: "loss" (n, A), "uniform_merge", "arrow" (n,), "train_after"
    {domain: loss}, "arrow_seconds", "stored" (every part read from the store); and the PEFT
    folder check's loss difference (``check_folder``; read back from the store with the seed,
    whose writer ran the check before saving it).  With a store, a complete seed is read back
    without fine-tuning; otherwise the library is trained (stored adapters' losses are kept as
    stored) and the missing files are written."""
    lib_seeds = {d: seed + k for k, d in enumerate(cfg.library)}
    got = {}
    if store is not None:
        for d in cfg.library:
            got[d] = store.load(d, seed, ["requests"], _recipe(cfg, lib_seeds[d]))
        got[_SEED_FILE] = store.load(_SEED_FILE, seed, list(MERGED), _recipe(cfg, None))
    if got and all(v is not None for v in got.values()):
        log(f"seed {seed}: ground truth read from {cfg.truth_store}")
        whole = got[_SEED_FILE]
        return {
            "loss": np.stack([got[d]["eval"]["requests"].numpy() for d in cfg.library], axis=1),
            **{k: whole["eval"][k].numpy() for k in MERGED},
            "train_after": {d: got[d]["train_after"] for d in cfg.library},
            "arrow_seconds": float(whole["extra"]["arrow_seconds"]),
            "stored": True,
        }, whole["extra"].get("folder_check")
    lib = library_seed(model, fp, cfg, train, req, seed, log)
    lc = cfg.lora
    for d in cfg.library:
        if got.get(d) is None and store is not None:
            res = {"train_after": float(lib[d]["train_after"]), "seconds": lib[d]["seconds"]}
            store.save(d, seed, ["requests"], _recipe(cfg, lib_seeds[d]), res | {"eval": {"requests": lib[d]["loss"]}})
    losses = {d: got[d]["eval"]["requests"] if got.get(d) is not None else lib[d]["loss"] for d in cfg.library}
    deltas = [lib[d]["deltas"] for d in cfg.library]
    merged = tail_with_deltas(model, lc.n_last, deltas, [1.0 / len(deltas)] * len(deltas))
    t1 = time.perf_counter()
    arrow = arrow_losses(model, cfg, [lib[d]["state"] for d in cfg.library], req, seed)
    arrow_s = time.perf_counter() - t1
    folder_err = None
    if check_folder:
        first = cfg.library[0]
        folder_err = check_adapter_folder(model, cfg, lib[first]["state"], req, lib[first]["loss"])
        if folder_err > 1e-3:
            raise RuntimeError(f"routing: a PEFT adapter folder does not reproduce its adapter ({folder_err:.2e})")
    out = {
        "loss": np.stack([torch.as_tensor(losses[d]).numpy() for d in cfg.library], axis=1),
        "uniform_merge": lora_gt.sequence_losses(merged, req)[0].numpy(),
        "arrow": arrow.numpy(),
        "train_after": {
            d: got[d]["train_after"] if got.get(d) is not None else float(lib[d]["train_after"]) for d in cfg.library
        },
        "arrow_seconds": arrow_s,
        "stored": False,
    }
    if store is not None and got.get(_SEED_FILE) is None:
        store.save(
            _SEED_FILE,
            seed,
            list(MERGED),
            _recipe(cfg, None),
            {
                "train_after": float("nan"),
                "seconds": arrow_s,
                "eval": {k: torch.as_tensor(out[k]) for k in MERGED},
                "extra": {"arrow_seconds": arrow_s, "folder_check": folder_err},
            },
        )
    return out, folder_err


def run(cfg: RoutingConfig, out_dir: Path) -> Result:
    if cfg.design == "coupling_dark":
        from updatescope.experiments.routing.coupling_library import run as run_coupling_dark

        return run_coupling_dark(cfg, out_dir)
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    from updatescope.data.domains import check_known_domains

    check_known_domains((*cfg.library, *cfg.outside))
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    requests, doms = build_requests(cfg, tok)
    train_text = train_docs(cfg)
    lc = cfg.lora
    train = {
        d: lora_gt.capture_block_inputs(
            model, tok, train_text[d], n_last=lc.n_last, fp=fp, max_tokens=cfg.train_tokens, seq_len=lc.seq_len
        )
        for d in cfg.library
    }
    req = lora_gt.capture_block_inputs(
        model, tok, requests, n_last=lc.n_last, fp=fp, seq_len=cfg.request_tokens, desc="requests"
    )
    if req["labels"].shape[0] != len(requests):
        raise RuntimeError("routing: expected one block-input row per request")
    counts = (req["labels"] != -100).sum(1).numpy().astype(float)
    base = lora_gt.sequence_losses(lora_gt.tail_model(model, lc.n_last), req)[0].numpy()
    choices = route_all(cfg, model, tok, fp, train_text, requests, log)
    store = truth_store(cfg, fp, train_text, requests)
    by_seed, facts, folder_err = [], [], None
    for j in range(cfg.gt_seeds):
        s = gt_seeds.gt_seed(cfg.seed, j)
        log(f"adapter library: seed {j + 1}/{cfg.gt_seeds} ({s})")
        truth, err = seed_truth(model, fp, cfg, train, req, s, store, check_folder=j == 0, log=log)
        if j == 0:
            folder_err = err
        by_seed.append({"seed": s, "loss": truth["loss"], "base": base, **{k: truth[k] for k in MERGED}})
        facts.append(
            {
                "seed": s,
                "train_loss_after": truth["train_after"],
                "own_domain_gain": {
                    d: float(
                        np.mean(
                            [
                                (base[i] - by_seed[-1]["loss"][i, k]) / counts[i]
                                for i in range(len(doms))
                                if doms[i] == d
                            ]
                        )
                    )
                    for k, d in enumerate(cfg.library)
                },
                "arrow_seconds": truth["arrow_seconds"],
                "from_truth_store": truth["stored"],
            }
        )
    ev = evaluate(cfg, doms, counts, by_seed, choices)
    summary = summarise(cfg, doms, ev)
    ver = verdicts(cfg, doms, ev)
    regime = {
        "adapters_learned_their_domain": all(g > 0 for f in facts for g in f["own_domain_gain"].values()),
        "adapter_folder_max_loss_difference": folder_err,
    }
    for v in ver["comparisons"]:
        log(f"{v['comparison']}: Δ loss {v['mean_loss_difference']:+.4f}, Holm p {v['p_holm']:.3g} -> {v['word']}")
    metrics = {
        "powered": not cfg.quick,
        "requests": {"domains": doms, "tokens": counts.tolist()},
        "regime": regime,
        "seeds": facts,
        "truth": {
            "loss_by_seed": [s["loss"].tolist() for s in by_seed],
            "base": base.tolist(),
            "uniform_merge_by_seed": [s["uniform_merge"].tolist() for s in by_seed],
            "arrow_by_seed": [s["arrow"].tolist() for s in by_seed],
        },
        "choices": {r: choices[r].tolist() for r in ("fisher", "error", "activation", "embedding")},
        "ambiguous": choices["ambiguous"].tolist(),
        "router_scores": choices["scores"],
        "router_seconds": choices["seconds"],
        "per_request": ev,
        "summary": summary,
        "verdicts": ver,
    }
    record = config_record(cfg, preregistration_sha256=prereg_sha)
    from updatescope.experiments.routing.figures import plot_gaps

    log(
        json.dumps(
            {
                g: {r: round(v["oracle_gap"], 4) for r, v in row.items() if isinstance(v, dict)}
                for g, row in summary.items()
            }
        )
    )
    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={"routing.png": lambda path: plot_gaps(metrics, path)},
    )
