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
  frozen (``_lora.transfer_matrix``).  Features move, as in practical fine-tuning.  The frozen
  blocks' output is captured once per split, so each step runs only the adapted blocks and
  the head — exact, not an approximation.
- ``"head"``: the output head W (49,152×576, the tied embedding matrix, untied for training)
  trained by Adam on cached head inputs with the backbone frozen (``_lm.transfer_matrix``) —
  the setting paper A's head Fisher describes literally.

Every target is scored against every other domain as a candidate source (leave the target
out), by every method in ``_lm.score_methods``; metrics from ``select.metrics.summarise``.
"""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from updatescope.experiments import _lm, _lora
from updatescope.experiments._common import finish, merge_config

NAME = "source-selection"

QUICK_DOMAINS = ("code_email", "code_asyncio", "code_text", "wiki_people", "wiki_life_science", "news_lee",
                 "python_docs", "smiles_nci_tpsa_low", "smiles_wehi_halogen_polar", "num_stocks")
FULL_DOMAINS = (
    "code_asyncio", "code_email", "code_xml", "code_http", "code_unittest", "code_tkinter", "code_text",
    "wiki_countries", "wiki_people", "wiki_life_science", "wiki_physical_science", "wiki_tech_math",
    "news_lee", "reviews", "python_docs", "licenses",
    "smiles_nci_tpsa_low", "smiles_nci_tpsa_high", "smiles_wehi_halogen_polar",
    "num_stocks",
)
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


def capture_domains(model: Any, tok: Any, fp: str, domains: list[str], tokens: dict[str, int],
                    log: Any = print, loader: Any = None) -> dict[str, dict[str, Any]]:
    """split -> domain -> {"acts", "labels"} (cached).  ``loader(name, split, max_chars)``
    defaults to :func:`load_texts`."""
    loader = loader or load_texts
    out: dict[str, dict[str, Any]] = {s: {} for s in tokens}
    for name in domains:
        for split, n_tok in tokens.items():
            t0 = time.perf_counter()
            texts = loader(name, split, n_tok * CHARS_PER_TOKEN_CAP)
            out[split][name] = _lm.capture_acts(model, tok, texts, fp=fp, max_tokens=n_tok, desc=f"{name}/{split}")
            log(f"captured {name}/{split}: {out[split][name]['labels'].numel()} tokens "
                f"({time.perf_counter() - t0:.1f}s)")
    return out


def capture_blocks(model: Any, tok: Any, fp: str, domains: list[str], tokens: dict[str, int], n_last: int,
                   log: Any = print, loader: Any = None, seq_len: int = 128) -> dict[str, dict[str, Any]]:
    """split -> domain -> cached block inputs for the LoRA ground truth (:mod:`_lora`)."""
    loader = loader or load_texts
    out: dict[str, dict[str, Any]] = {s: {} for s in tokens}
    for name in domains:
        for split, n_tok in tokens.items():
            t0 = time.perf_counter()
            texts = loader(name, split, n_tok * CHARS_PER_TOKEN_CAP)
            out[split][name] = _lora.capture_block_inputs(model, tok, texts, n_last=n_last, fp=fp,
                                                          max_tokens=n_tok, seq_len=seq_len, desc=f"{name}/{split}")
            n = int((out[split][name]["labels"] != _lora.IGNORE_INDEX).sum())
            log(f"captured block inputs {name}/{split}: {n} tokens ({time.perf_counter() - t0:.1f}s)")
    return out


def ground_truth(model: Any, tok: Any, fp: str, w0: Any, b0: Any, domains: list[str], cfg: dict[str, Any],
                 seed: int, log: Any, loader: Any = None, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The transfer table from ``cfg["ground_truth"]`` ("lora" or "head") fine-tuning.

    ``data``: head-input captures by split (needed for "head", which trains on them)."""
    splits = {s: cfg["tokens"][s] for s in ("train", "eval")}
    if cfg["ground_truth"] == "lora":
        lc = cfg["lora"]
        blocks = capture_blocks(model, tok, fp, domains, splits, lc["n_last"], log, loader, lc["seq_len"])
        return _lora.transfer_matrix(model, blocks["train"], blocks["eval"], n_last=lc["n_last"], r=lc["r"],
                                     alpha=lc["alpha"], lr=lc["lr"], steps=lc["steps"], batch=lc["batch"],
                                     seed=seed, targets=lc["targets"], log=log)
    if cfg["ground_truth"] != "head":
        raise ValueError(f"ground_truth must be 'lora' or 'head', got {cfg['ground_truth']!r}")
    if data is None or "train" not in data:
        data = capture_domains(model, tok, fp, domains, splits, log, loader)
    ft = cfg["finetune"]
    return _lm.transfer_matrix(w0, b0, data["train"], data["eval"], steps=ft["steps"], lr=ft["lr"],
                               batch=ft["batch"], seed=seed, extra_rows=ft["extra_rows"],
                               max_cached_logits=cfg["max_cached_logits"], log=log)


def run(quick: bool, out_dir: Path, seed: int = 0, *, config: dict[str, Any] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    cfg: dict[str, Any] = {
        "model": "smollm2",
        "domains": list(QUICK_DOMAINS if quick else FULL_DOMAINS),
        # LoRA ground truth needs more training text than the head did: ~2.5 passes over the
        # train split at 512 tokens per step (more passes at lr 1e-3 overfit the prose domains)
        "tokens": {"sketch": 300, "train": 1600, "eval": 400} if quick else {"sketch": 1500, "train": 4000, "eval": 1000},
        "sketch_dim": 4096,
        "ground_truth": "lora",
        "lora": {"n_last": 2, "r": 8, "alpha": 16, "targets": list(_lora.DEFAULT_TARGETS), "optimizer": "adam",
                 "lr": 3e-4, "steps": 8 if quick else 20, "batch": 4, "seq_len": 128},
        "finetune": {"optimizer": "adam", "lr": 3e-5, "steps": 60, "batch": 128, "extra_rows": 2048},
        "max_cached_logits": 2**29,
        "exact_n": 300 if quick else 500, "baseline_n": 300 if quick else 500,
        "seed": seed, "quick": quick,
    }
    merge_config(cfg, config)
    domains = list(cfg["domains"])
    cfg["families"] = {d: family_of(d) for d in domains}
    log = functools.partial(print, flush=True)

    model, tok = _lm.load_model(cfg["model"])
    fp = _lm.fingerprint(model, tok)
    w0, b0 = _lm.head_weights(model)
    wanted = cfg["tokens"] if cfg["ground_truth"] == "head" else {"sketch": cfg["tokens"]["sketch"]}
    data = capture_domains(model, tok, fp, domains, wanted, log)
    gt = ground_truth(model, tok, fp, w0, b0, domains, cfg, seed, log, data=data)
    del model
    sc = _lm.score_methods(w0, b0, data["sketch"], fp=fp, sketch_dim=cfg["sketch_dim"], seed=seed,
                           exact_n=cfg["exact_n"], baseline_n=cfg["baseline_n"], log=log)
    by_method = _lm.evaluate_methods(sc["scores"], gt["transfer"], seed=seed)
    head = _lm.headline(by_method)
    _lm.print_table(head, sc["cannot_run"])

    # does the best source share the target's family? (how much structure the truth has)
    same_family_best = {}
    for t, row in gt["transfer"].items():
        best = max((s for s in row if s != t), key=lambda s: row[s])
        same_family_best[t] = cfg["families"][best] == cfg["families"][t]

    out_dir.mkdir(parents=True, exist_ok=True)
    fig = out_dir / "source_selection.png"
    _lm.plot_selection(head, gt["transfer"], sc["scores"]["fisher"], fig,
                       f"natural shift, SmolLM2-135M, {len(domains)} domains, {cfg['ground_truth']} fine-tuning ground truth")
    metrics = {
        "n_domains": len(domains), "n_families": len(set(cfg["families"].values())),
        "tokens_captured": {s: {d: int(v["labels"].numel()) for d, v in data[s].items()} for s in data},
        "ground_truth": gt,
        "best_source_same_family": same_family_best,
        **_lm.method_metrics(sc, by_method, head, fig),
    }
    return finish(NAME, cfg, metrics, t0)
