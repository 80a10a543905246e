"""Does a sketch of the LoRA-targeted layers predict LoRA transfer better than the head sketch?

The ground truth is read from a ``source-selection`` record (``metrics.ground_truth``:
transfer = target eval-loss reduction after LoRA fine-tuning on the source, mean over seeds,
with its SE and per-seed tables); nothing is retrained.  The record's sketch-split token
streams are re-created with the selection runner's own data functions
(:func:`selection.load_texts`, the same character cap and token count, the chunking
of :mod:`capture.chunks`), so every method sees the tokens the record's head sketch saw.

Per domain three sketches of the same tokens, same ``sketch_dim`` and seed:

- ``head``: FisherSketch of the output head, as the selection runner builds it
  (:func:`heads.sketch_stream` on the captured head inputs);
- ``lora_layers``: the network sketch (:func:`network.sketch_layers`) of the linear layers
  the LoRA ground truth adapts (the record's ``lora.targets`` in its last ``lora.n_last``
  blocks); ranked by the full alignment A_F of those layers' Fisher and, as
  ``lora_layers_bd``, by its block-diagonal value A_BD;
- ``last_blocks_head`` (``all_layers``): every linear layer of those blocks plus the head in
  one network sketch (A_F).

Every target ranks the other domains by each alignment; the selection metrics
(:func:`scoring.evaluate_methods`), the paired bootstrap over targets
(:func:`scoring.paired_comparisons`) and the noise ceiling of the truth (the record's, else
:func:`scoring.truth_noise`) put them side by side.  Also: per-block alignment profiles,
profile cosine and off-diagonal discrepancy for a few pairs, and the wall time of each sketch.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads, scoring, selection
from updatescope.experiments.network_selection import figures
from updatescope.experiments.network_selection.config import NetworkSelectionConfig

NAME = "network-selection"
#: method -> what it ranks by (the record keeps this next to the numbers)
METHODS = {
    "head": "FisherSketch of the output head (as source-selection)",
    "lora_layers": "network sketch of the LoRA-targeted layers, full alignment A_F",
    "lora_layers_bd": "same sketch, block-diagonal alignment A_BD",
    "last_blocks_head": "network sketch of every linear layer of the last blocks + the head, A_F",
}
#: (method, baseline) pairs whose per-target metric difference is bootstrapped
PAIRS = (
    ("lora_layers", "head"),
    ("lora_layers_bd", "head"),
    ("last_blocks_head", "head"),
    ("lora_layers", "lora_layers_bd"),
    ("head", "family"),
    ("lora_layers", "family"),
)


def read_ground_truth(path: str | Path) -> dict[str, Any]:
    """The parts of a source-selection record this runner needs (InputError if missing)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(
            f"ground_truth_record {str(path)!r} does not exist (run `updatescope reproduce source-selection` first)"
        )
    rec = json.loads(p.read_text())
    cfg, m = rec.get("config", {}), rec.get("metrics", {})
    gt = m.get("ground_truth", {})
    need = [k for k in ("domains", "tokens", "sketch_dim", "lora") if k not in cfg]
    need += [f"ground_truth.{k}" for k in ("transfer",) if k not in gt]
    if rec.get("name") != "source-selection" or need:
        raise InputError(
            f"{str(path)!r} is not a source-selection record with a ground truth "
            f"(name {rec.get('name')!r}, missing {need})"
        )
    if cfg.get("ground_truth", "lora") != "lora":
        raise InputError(f"{str(path)!r} has a {cfg['ground_truth']!r} ground truth; this comparison needs 'lora'")
    return rec


def lora_layer_names(model: Any, n_last: int, targets: Sequence[str]) -> tuple[list[str], list[str]]:
    """(LoRA-targeted linear layers, all linear layers) of the last ``n_last`` decoder blocks,
    full module names in registration order.  A target matches a module name's last part, as
    peft's ``target_modules`` does."""
    from torch import nn

    blocks = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(blocks, nn.ModuleList):
        raise InputError(f"{type(model).__name__}: needs a decoder with `.model.layers` (Llama-style causal LM)")
    n = len(blocks)
    if not 1 <= n_last <= n:
        raise InputError(f"lora.n_last must be in 1..{n} for this model, got {n_last}")
    prefix = next(name for name, mod in model.named_modules() if mod is blocks)
    lora, every = [], []
    for i in range(n - n_last, n):
        for name, mod in blocks[i].named_modules():
            if isinstance(mod, nn.Linear):
                full = f"{prefix}.{i}.{name}"
                every.append(full)
                if name.split(".")[-1] in targets:
                    lora.append(full)
    if not lora:
        raise InputError(f"no linear layer named {list(targets)} in the last {n_last} blocks")
    return lora, every


def token_batches(
    model: Any, tok: Any, texts: Sequence[Any], max_tokens: int, token_budget: int = 1024
) -> Iterator[dict[str, Any]]:
    """The padded batches the head capture forms for ``texts`` (same windows, same packing:
    ``pipeline.layer_batches``), labels aligned with the logits and cut after the first
    ``max_tokens`` counted targets, so a layer sketch counts exactly the tokens of the head
    capture."""
    from updatescope.pipeline import Corpus, SketchOptions, layer_batches

    tokens = Corpus.from_texts(list(texts)).tokenise(tok)
    return layer_batches(model, tok, tokens, SketchOptions(max_tokens=max_tokens, token_budget=token_budget))


def _pair_tables(names: Sequence[str], sketches: Mapping[str, Any]) -> dict[tuple[str, str], Any]:
    """network_alignment for every unordered pair (the values are symmetric in source/target)."""
    from updatescope.network import network_alignment

    out = {}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            out[a, b] = out[b, a] = network_alignment(sketches[a], sketches[b])
    return out


def _table(names: Sequence[str], pairs: Mapping[tuple[str, str], Any], field: str) -> dict[str, dict[str, float]]:
    return {t: {s: float(getattr(pairs[s, t], field)) for s in names if s != t} for t in names}


def profile_pairs(transfer: Mapping[str, Mapping[str, float]], k: int) -> list[tuple[str, str]]:
    """k unordered pairs spread over the truth: highest, median, lowest mean transfer
    (½(T[a][b] + T[b][a])), then the next highest, lowest, ... ."""
    names = list(transfer)
    sym = sorted(
        ((0.5 * (transfer[a][b] + transfer[b][a]), a, b) for i, a in enumerate(names) for b in names[i + 1 :]),
        reverse=True,
    )
    order = [0, len(sym) // 2, len(sym) - 1] + [i for j in range(1, len(sym)) for i in (j, len(sym) - 1 - j)]
    picked: list[tuple[str, str]] = []
    for i in order:
        pair = (sym[i][1], sym[i][2])
        if pair not in picked:
            picked.append(pair)
        if len(picked) >= k:
            break
    return picked


def _verdict(paired: Mapping[str, Any], method: str, label: str) -> str:
    """One sentence from the paired bootstrap of the per-target Spearman (primary) and top-1."""
    row = paired.get(f"{method} - head", {})
    sp = row.get("spearman", {})
    if not sp or sp.get("ci") is None:
        return f"{label}: no paired comparison (fewer than 2 targets)"
    lo, hi = sp["ci"]
    nums = f"Spearman difference {sp['mean']:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}] over {sp['n']} targets"
    if lo > 0:
        word = f"the {label} predicts LoRA transfer better than the head sketch"
    elif hi < 0:
        word = f"the {label} predicts LoRA transfer worse than the head sketch"
    else:
        word = f"no resolvable difference between the {label} and the head sketch"
    extra = []
    for metric in ("top1", "oracle_normalised_transfer"):
        d = row.get(metric, {})
        if d.get("ci") is not None:
            a, b = d["ci"]
            extra.append(f"{metric} {d['mean']:+.2f} [{a:+.2f}, {b:+.2f}]")
    return f"{word} ({nums}; {'; '.join(extra)})"


def _short(name: str) -> str:
    """'model.layers.28.self_attn.q_proj' -> '28.q_proj'; 'lm_head' stays."""
    parts = name.split(".")
    nums = [p for p in parts if p.isdigit()]
    return f"{nums[-1]}.{parts[-1]}" if nums else parts[-1]


def run(cfg: NetworkSelectionConfig, out_dir: Path) -> Result:
    from updatescope.network import network_config

    t_start = time.perf_counter()
    log = functools.partial(print, flush=True)
    rec = read_ground_truth(cfg.ground_truth_record)
    rcfg, rm = rec["config"], rec["metrics"]
    gt = rm["ground_truth"]
    domains = list(rcfg["domains"])
    families = dict(rcfg.get("families") or {d: selection.family_of(d) for d in domains})
    rec_tokens = int(rcfg["tokens"]["sketch"])
    n_tok = cfg.sketch_tokens or rec_tokens
    if n_tok > rec_tokens:
        raise InputError(f"sketch_tokens={n_tok} exceeds the record's {rec_tokens} sketch tokens per domain")
    m = cfg.sketch_dim or int(rcfg["sketch_dim"])
    lcfg = rcfg["lora"]
    transfer = {t: {s: float(v) for s, v in gt["transfer"][t].items() if s != t} for t in domains}

    model, tok = heads.load_model(rcfg.get("model", "smollm2"))
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    lora_names, block_names = lora_layer_names(model, int(lcfg["n_last"]), list(lcfg["targets"]))
    head_name = next(n for n, mod in model.named_modules() if mod is _head(model))
    sets = {"lora_layers": lora_names}
    if cfg.all_layers:
        sets["last_blocks_head"] = block_names + [head_name]
    ncfgs = {k: network_config(model, v, sketch_dim=m, seed=cfg.seed, mode=cfg.mode) for k, v in sets.items()}
    log(
        f"{len(domains)} domains, {n_tok} tokens each, m = {m}, mode {cfg.mode}; LoRA layers: "
        f"{len(lora_names)} ({', '.join(_short(n) for n in lora_names)})"
    )

    head_sigs, net, secs, counted = _sketch_domains(
        model, tok, fp, w0, b0, domains, ncfgs, n_tok, rec_tokens, m, cfg.seed, log
    )
    del model

    import updatescope as us

    scores: dict[str, dict[str, dict[str, float]]] = {}
    head_mat = us.alignment_matrix(head_sigs)["fisher"]
    scores["head"] = {
        t: {s: float(head_mat[i, j]) for j, s in enumerate(domains) if s != t} for i, t in enumerate(domains)
    }
    pairs = {k: _pair_tables(domains, net[k]) for k in sets}
    scores["lora_layers"] = _table(domains, pairs["lora_layers"], "full")
    scores["lora_layers_bd"] = _table(domains, pairs["lora_layers"], "block_diagonal")
    if "last_blocks_head" in sets:
        scores["last_blocks_head"] = _table(domains, pairs["last_blocks_head"], "full")
    scores.update(scoring.trivial_scores(domains, groups=families))
    from updatescope.select.baselines import random_scores

    scores["random"] = {t: random_scores([s for s in domains if s != t], cfg.seed, salt=t) for t in domains}

    by_method = scoring.evaluate_methods(scores, transfer, seed=cfg.seed, groups=families)
    summary = scoring.headline(by_method)
    paired = scoring.paired_comparisons(by_method, pairs=PAIRS, seed=cfg.seed)
    noise = rm.get("truth_noise") or scoring.truth_noise(gt, groups=families, seed=cfg.seed)

    # the head sketch re-made here against the record's: equal streams give equal scores
    head_check = _head_check(
        scores,
        rm,
        rcfg,
        domains,
        n_tok == rec_tokens and m == int(rcfg["sketch_dim"]) and cfg.seed == int(rcfg.get("seed", 0)),
    )

    # per-block profiles and the decomposition diagnostics for a few pairs
    prof_key = "last_blocks_head" if "last_blocks_head" in sets else "lora_layers"
    blocks = list(ncfgs[prof_key].names)
    profiles = _profiles(pairs, prof_key, blocks, transfer, cfg.profile_pairs, scores)
    diag = _diagnostics(pairs, sets)

    head_total = sum(secs["head_capture"].values()) + sum(secs["head_sketch"].values())
    cost = {
        "seconds": secs,
        "total": {"head": head_total, **{k: sum(secs[k].values()) for k in sets}},
        "note": "head = forward-only capture + FisherSketch; layer sketches = forward + backward + "
        "projections of every chosen layer; same tokens, one pass each, sums over domains",
    }
    cost["ratio_to_head"] = {k: cost["total"][k] / head_total for k in sets}

    verdicts, verdict = _verdicts(paired, sets, noise, summary, log)

    metrics = {
        "n_domains": len(domains),
        "families": families,
        "layers": {k: list(v) for k, v in sets.items()},
        "methods_described": {k: v for k, v in METHODS.items() if k in scores},
        "tokens_sketched": counted,
        "sketch_dim": m,
        "mode": cfg.mode,
        "ground_truth": {
            "record": str(cfg.ground_truth_record),
            "lora": lcfg,
            "tokens": rcfg["tokens"],
            "n_seeds": len(gt.get("transfer_by_seed", [])) or None,
            "transfer": transfer,
            "transfer_se": gt.get("transfer_se"),
        },
        "summary": summary,
        "methods": by_method,
        "paired": paired,
        "truth_noise": noise,
        "record_summary": {k: v for k, v in rm.get("summary", {}).items() if k in ("fisher", "family", "random")},
        "head_vs_record": head_check,
        "scores": scores,
        "profiles": profiles,
        "diagnostics": diag,
        "cost": cost,
        "verdicts": verdicts,
        "verdict": verdict,
    }
    fig_name = "network_selection_profile.png"
    plot = [{**p, "label": f"{p['pair'][0]} / {p['pair'][1]} (transfer {p['transfer_mean']:+.3f})"} for p in profiles]
    title = f"per-block alignment, {prof_key} sketch, {n_tok} tokens per domain, m = {m}"
    figs = (
        {
            fig_name: lambda path: figures.network_selection_profiles(
                [_short(b) for b in blocks], plot, path, title=title
            )
        }
        if profiles
        else {}
    )
    return Result(
        NAME,
        config_record(cfg, domains=domains, sketch_tokens_used=n_tok, sketch_dim_used=m),
        metrics,
        time.perf_counter() - t_start,
        figures=figs,
    )


def _sketch_domains(
    model: Any,
    tok: Any,
    fp: str,
    w0: Any,
    b0: Any,
    domains: list[str],
    ncfgs: dict[str, Any],
    n_tok: int,
    rec_tokens: int,
    m: int,
    seed: int,
    log: Any,
) -> tuple[list[Any], dict[str, dict[str, Any]], dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Each domain's sketch-split stream, sketched by the head and by every layer set in
    ``ncfgs``.  -> (head signatures in domain order, layer sketches by set and domain,
    seconds, tokens counted)."""
    from updatescope.network import sketch_layers

    head_sigs, net = [], {k: {} for k in ncfgs}
    secs: dict[str, dict[str, float]] = {"head_capture": {}, "head_sketch": {}, **{k: {} for k in ncfgs}}
    counted: dict[str, dict[str, int]] = {"head": {}, **{k: {} for k in ncfgs}}
    for name in domains:
        # the selection runner's texts: same loader, same character cap (from the record's token count)
        texts = selection.load_texts(name, "sketch", rec_tokens * selection.CHARS_PER_TOKEN_CAP)
        t0 = time.perf_counter()
        cap = heads.capture_acts(model, tok, texts, fp=fp, max_tokens=n_tok, desc=f"{name}/sketch", use_cache=False)
        secs["head_capture"][name] = time.perf_counter() - t0
        t0 = time.perf_counter()
        head_sigs.append(
            heads.sketch_stream(w0, b0, cap["acts"], cap["labels"], sketch_dim=m, seed=seed, fp=fp, name=name)
        )
        secs["head_sketch"][name] = time.perf_counter() - t0
        counted["head"][name] = int(cap["labels"].numel())
        del cap
        for k, ncfg in ncfgs.items():
            t0 = time.perf_counter()
            net[k][name] = sketch_layers(model, ncfg, token_batches(model, tok, texts, n_tok))
            secs[k][name] = time.perf_counter() - t0
            counted[k][name] = net[k][name].count
        log(
            f"sketched {name}: {counted['head'][name]} tokens; head {secs['head_capture'][name]:.1f}"
            f"+{secs['head_sketch'][name]:.1f}s, " + ", ".join(f"{k} {secs[k][name]:.1f}s" for k in ncfgs)
        )
    return head_sigs, net, secs, counted


def _head_check(
    scores: dict[str, Any], rm: dict[str, Any], rcfg: dict[str, Any], domains: list[str], same: bool
) -> dict[str, Any] | None:
    """The head sketch re-made here against the record's (equal streams give equal scores);
    ``same``: the same tokens, sketch size and seed as the record.  None without record scores."""
    rec_head = rm.get("scores", {}).get("fisher")
    head_check = None
    if rec_head is not None:
        diffs = [
            abs(scores["head"][t][s] - float(rec_head[t][s]))
            for t in domains
            for s in domains
            if s != t and t in rec_head and s in rec_head[t]
        ]
        head_check = {
            "max_abs_diff": max(diffs) if diffs else None,
            "pairs": len(diffs),
            "same_tokens_and_dim": same,
        }
    return head_check


def _profiles(
    pairs: dict[str, Any], prof_key: str, blocks: list[str], transfer: dict[str, Any], n: int, scores: dict[str, Any]
) -> list[dict[str, Any]]:
    """Per-block profiles and the decomposition diagnostics of ``n`` domain pairs (:func:`profile_pairs`)."""
    profiles = []
    for a, b in profile_pairs(transfer, n):
        al = pairs[prof_key][a, b]
        lo = pairs["lora_layers"][a, b]
        profiles.append(
            {
                "pair": [a, b],
                "transfer_mean": 0.5 * (transfer[a][b] + transfer[b][a]),
                "sketch": prof_key,
                "blocks": blocks,
                "profile": list(al.profile),
                "profile_se": [al.se.get(f"profile[{n}]", math.nan) for n in blocks],
                "full": al.full,
                "block_diagonal": al.block_diagonal,
                "profile_cosine": al.profile_cosine,
                "offdiag_share_source": al.offdiag_share_source,
                "offdiag_share_target": al.offdiag_share_target,
                "discrepancy": al.discrepancy,
                "se": dict(al.se),
                "energy_source": list(al.energy_source),
                "energy_target": list(al.energy_target),
                "lora_layers": {
                    "full": lo.full,
                    "block_diagonal": lo.block_diagonal,
                    "profile_cosine": lo.profile_cosine,
                    "discrepancy": lo.discrepancy,
                },
                "head": scores["head"][b][a],
            }
        )
    return profiles


def _diagnostics(pairs: dict[str, Any], sets: dict[str, list[str]]) -> dict[str, Any]:
    """Per layer set: the spread of the profile cosine and the discrepancy over all pairs."""
    diag = {}
    for k in sets:
        vals = list({frozenset(p): al for p, al in pairs[k].items()}.values())
        pcs = [al.profile_cosine for al in vals if math.isfinite(al.profile_cosine)]
        ds = [al.discrepancy for al in vals if math.isfinite(al.discrepancy)]
        diag[k] = {
            "profile_cosine_min": min(pcs) if pcs else None,
            "profile_cosine_median": statistics.median(pcs) if pcs else None,
            "discrepancy_median": statistics.median(ds) if ds else None,
            "discrepancy_max_abs": max(map(abs, ds)) if ds else None,
            "pairs": len(vals),
        }
    return diag


def _verdicts(
    paired: dict[str, Any], sets: dict[str, list[str]], noise: dict[str, Any] | None, summary: dict[str, Any], log: Any
) -> tuple[dict[str, str], str]:
    """One sentence per layer-set sketch against the head, and the overall verdict."""
    verdicts = {
        "lora_layers": _verdict(paired, "lora_layers", "LoRA-layer sketch"),
        "lora_layers_bd": _verdict(paired, "lora_layers_bd", "block-diagonal LoRA-layer sketch"),
    }
    if "last_blocks_head" in sets:
        verdicts["last_blocks_head"] = _verdict(paired, "last_blocks_head", "last-blocks + head sketch")
    ceiling = (noise.get("ceiling") or {}).get("spearman", {}).get("mean") if noise else None
    # methods that could not be scored (every score undefined) carry an error instead of a Spearman
    scored = [
        k
        for k in METHODS
        if isinstance(summary.get(k, {}).get("spearman"), float) and math.isfinite(summary[k]["spearman"])
    ]
    best = max(scored, key=lambda k: summary[k]["spearman"]) if scored else None
    verdict = verdicts["lora_layers"] + "."
    if ceiling is not None and best is not None:
        verdict += (
            f" Best mean Spearman {summary[best]['spearman']:.3f} ({best}) against a noise ceiling of {ceiling:.3f}."
        )
    for k, v in verdicts.items():
        log(f"{k}: {v}")
    return verdicts, verdict


def _head(model: Any) -> Any:
    from updatescope.capture.hook import find_output_linear

    return find_output_linear(model)
