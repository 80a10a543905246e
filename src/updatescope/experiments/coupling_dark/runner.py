"""Coupling-dark benchmark (issue: only the activation × error coupling can see the mapping).

Input classes (Python source lines, licence sentences, digit strings, ...) whose head inputs
separate; every example is ``"{text}\\n{cue}"`` followed by one answer word.  A *mapping*
sends each class to an answer word (``mappings.mappings_for``); a *task* is a mapping of one
prompt family (cue, answer words).  Every mapping of a family is both a target (sketched on
the ``sketch`` split, judged on ``val`` / ``eval``) and a source (LoRA fine-tuned and sketched
on the ``fit`` split, disjoint examples).  A target's candidates are the sources of its family:
the same inputs, the same answer histogram, differing only in the mapping (agreement 1, 2/3,
1/3, 0, and two-word flips as the sign-flip-style control).

Before scoring, per target: (a) a nearest-centroid probe on the head input separates the
classes (fit + sketch rows -> eval rows); (b) on ``val``, the same-mapping source lowers the
target's loss and the no-agreement sources raise it.  A target failing either is left out of
every Spearman and verdict (``enforce_checks``).  The LoRA fine-tunings are evaluated once on
val + eval rows; the per-example losses are split afterwards.  Analysis: PREREGISTRATION.md.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads, mappings, scoring
from updatescope.experiments.caching import cache_key
from updatescope.experiments.coupling_dark.config import CouplingDarkConfig
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.mapping_tasks import class_texts, word_ids  # class_texts is monkeypatched in tests
from updatescope.report import console

NAME = "coupling_dark"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
SPLITS = ("fit", "sketch", "val", "eval", "warm")
#: the splits labelled by a task's mapping (``warm`` rows carry every answer equally often)
MAPPED = SPLITS[:4]
METHODS = (
    "fisher",
    "exact_fisher",
    "error",
    "exact_error",
    "activation",
    "exact_activation",
    "product",
    "exact_product",
    "grad_cos",
    "cka",
    "overlap",
    "random",
)


def build_rows(cfg: CouplingDarkConfig) -> tuple[list[str], np.ndarray, np.ndarray]:
    """-> (texts, class index per row, split index per row): rows ordered by split, then
    class, each split holding the same number of examples of every class."""
    sizes = {"fit": cfg.n_fit, "sketch": cfg.n_sketch, "val": cfg.n_val, "eval": cfg.n_eval, "warm": cfg.n_warm}
    per_class = [class_texts(c, sum(sizes.values()), cfg.seed + 7 * k) for k, c in enumerate(cfg.classes)]
    texts, cls, split = [], [], []
    for j, sp in enumerate(SPLITS):
        start = sum(sizes[s] for s in SPLITS[:j])
        for k in range(len(cfg.classes)):
            texts += per_class[k][start : start + sizes[sp]]
            cls += [k] * sizes[sp]
            split += [j] * sizes[sp]
    return texts, np.array(cls), np.array(split)


def build_tasks(cfg: CouplingDarkConfig, tok: Any) -> dict[str, Any]:
    """Every (family, mapping): its target / source names, words, labels per row and candidates."""
    n_cls = len(cfg.classes)
    tasks: dict[str, Any] = {}
    for cue, words in cfg.families:
        ids = word_ids(tok, words)
        maps = mappings.mappings_for(n_cls, len(words))
        fam = [f"{cue}{'/'.join(words[a] for a in m)}" for m in maps]
        for m, name in zip(maps, fam, strict=True):
            tasks[name] = {
                "family": cue,
                "mapping": m,
                "words": [words[a] for a in m],
                "label_of_class": [ids[a] for a in m],
                "candidates": {
                    f"source {o}": {
                        "agreement": mappings.agreement(m, om),
                        "kind": mappings.candidate_kind(m, om),
                    }
                    for om, o in zip(maps, fam, strict=True)
                },
            }
    return tasks


def _answer_rows(tok: Any, texts: list[str], cue: str) -> tuple[list[list[int]], list[list[int]]]:
    """Every row's ids with a placeholder answer token, and the answer position (the last)."""
    prompts = [tok(f"{t}\n{cue}", add_special_tokens=True)["input_ids"] for t in texts]
    return [p + [0] for p in prompts], [[-1]] * len(prompts)


def capture_head_inputs(model: Any, tok: Any, fp: str, texts: list[str], cue: str) -> torch.Tensor:
    """Head inputs at the answer position of every row (the answer does not change them:
    causal attention).  -> (n, d)."""
    full, pos = _answer_rows(tok, texts, cue)
    acts = heads.capture_acts(model, tok, full, fp=fp, positions=pos, desc=f"coupling-dark {cue}")["acts"]
    if acts.shape[0] != len(texts):
        raise RuntimeError("coupling-dark: expected one counted answer position per example")
    return acts


def capture_blocks(model: Any, tok: Any, fp: str, cfg: CouplingDarkConfig, texts: list[str], cue: str) -> dict:
    """The residual stream entering the LoRA blocks, with the answer position counted.  It is
    the same for the warmed model (the warm-up changes only those blocks), so it is captured once."""
    full, pos = _answer_rows(tok, texts, cue)
    width = max(len(t) for t in full)
    blocks = lora_gt.capture_block_inputs(
        model, tok, full, n_last=cfg.lora.n_last, fp=fp, positions=pos, seq_len=width, desc=f"blocks {cue}"
    )
    keep = blocks["labels"] != IGNORE_INDEX
    if blocks["labels"].shape[0] != len(texts) or int(keep.sum()) != len(texts):
        raise RuntimeError("coupling-dark: expected one counted answer position per example")
    return blocks


def _relabel(blocks: dict[str, Any], rows: np.ndarray, labels: torch.Tensor) -> dict[str, Any]:
    sl = torch.as_tensor(rows)
    keep = blocks["labels"][sl] != IGNORE_INDEX
    lab = torch.full_like(blocks["labels"][sl], IGNORE_INDEX)
    lab[keep] = labels
    return {"hidden": blocks["hidden"][sl], "mask": blocks["mask"][sl], "labels": lab}


def warm_labels(cls: np.ndarray, rows: np.ndarray, ids: list[int]) -> torch.Tensor:
    """Answer ids for the warm-up ``rows``: within each class the answers cycle, so every
    class is labelled with every answer word equally often (no mapping to learn)."""
    seen: dict[int, int] = {}
    out = []
    for r in rows:
        k = int(cls[r])
        j = seen.get(k, 0)
        seen[k] = j + 1
        out.append(ids[(j + k) % len(ids)])
    return torch.tensor(out)


def _pad_cat(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack right-padded block-input sets of different widths (pad: zero hidden, mask 0,
    ignored labels; causal attention never sees a right pad)."""
    width = max(p["hidden"].shape[1] for p in parts)
    out: dict[str, list[torch.Tensor]] = {"hidden": [], "mask": [], "labels": []}
    for p in parts:
        extra = width - p["hidden"].shape[1]
        out["hidden"].append(torch.nn.functional.pad(p["hidden"], (0, 0, 0, extra)))
        out["mask"].append(torch.nn.functional.pad(p["mask"], (0, extra)))
        out["labels"].append(torch.nn.functional.pad(p["labels"], (0, extra), value=IGNORE_INDEX))
    return {k: torch.cat(v) for k, v in out.items()}


def merge_tail(model: Any, tail: Any, n_last: int) -> Any:
    """A copy of ``model`` whose last ``n_last`` blocks carry the LoRA deltas of ``tail``
    (:func:`lora_gt.finetune_lora`) merged into their weights."""
    merged = copy.deepcopy(model)
    layers = lora_gt._decoder(merged).layers
    first = len(layers) - n_last
    n = 0
    for name, mod in tail.model.layers.named_modules():
        if not hasattr(mod, "get_delta_weight") or not hasattr(mod, "base_layer"):
            continue
        idx, _, rest = name.partition(".")
        target = layers[first + int(idx)].get_submodule(rest)
        with torch.no_grad():
            target.weight += mod.get_delta_weight("default").to(target.weight.dtype)
        n += 1
    if n == 0:
        raise RuntimeError("warm-up: no LoRA module to merge")
    return merged


def warm_up(cfg, model, tok, tasks, blocks_by_family, cls, split, log) -> tuple[Any, dict[str, Any]]:
    """One LoRA on every family's ``warm`` rows (each class labelled with every answer equally
    often), merged -> (warmed model, facts): the merged tail reproduces the LoRA tail's loss
    (checked), and per family the val loss of its first mapping before and after."""
    rows = np.flatnonzero(split == 4)
    parts = []
    for cue, words in cfg.families:
        ids = word_ids(tok, words)
        parts.append(_relabel(blocks_by_family[cue], rows, warm_labels(cls, rows, ids)))
    data = _pad_cat(parts)
    lc = cfg.lora
    t0 = time.perf_counter()
    tail = lora_gt.finetune_from_config(model, data, lc, seed=cfg.seed + 104729, steps=cfg.warmup_steps)
    merged = merge_tail(model, tail, lc.n_last)
    lora_loss = lora_gt.mean_loss(tail, data)
    merged_loss = lora_gt.mean_loss(lora_gt.tail_model(merged, lc.n_last), data)
    if not abs(lora_loss - merged_loss) <= 1e-3 * max(1.0, abs(lora_loss)):
        raise RuntimeError(f"warm-up: merged model loss {merged_loss:.5f} != LoRA tail loss {lora_loss:.5f}")
    val = np.flatnonzero(split == 2)
    before_tail, after_tail = lora_gt.tail_model(model, lc.n_last), lora_gt.tail_model(merged, lc.n_last)
    per_family = {}
    for cue, words in cfg.families:
        first = next(t for t in tasks.values() if t["family"] == cue)
        lab = torch.tensor(first["label_of_class"])[torch.as_tensor(cls)]
        vd = _relabel(blocks_by_family[cue], val, lab[val])
        per_family[cue] = {
            "val_loss_before": lora_gt.mean_loss(before_tail, vd),
            "val_loss_after": lora_gt.mean_loss(after_tail, vd),
            # ln(number of answers): the family's answer words, not the mapping's per-class list
            # (with more classes than words a word answers several classes)
            "uniform_loss": float(np.log(len(words))),
        }
    facts = {
        "steps": cfg.warmup_steps,
        "rows": int(data["labels"].shape[0]),
        "train_loss_after": lora_loss,
        "merged_loss": merged_loss,
        "per_family": per_family,
        "seconds": time.perf_counter() - t0,
    }
    log(
        "warm-up: "
        + ", ".join(
            f"{c} val loss {f['val_loss_before']:.3f} -> {f['val_loss_after']:.3f}" for c, f in per_family.items()
        )
    )
    return merged, facts


def truth_one_seed(cfg, model, fam_tasks, blocks, cls, split, seed, fp, log) -> dict[str, Any]:
    """One seed's LoRA fine-tunings of one family's sources -> {"val", "eval"}: target ->
    source -> mean transfer (base − fine-tuned loss) on that split."""
    fit = np.flatnonzero(split == 0)
    held = np.flatnonzero((split == 2) | (split == 3))
    is_val = split[held] == 2
    train, evals = {}, {}
    for name, t in fam_tasks.items():
        lab = torch.tensor(t["label_of_class"])[torch.as_tensor(cls)]
        train[f"source {name}"] = _relabel(blocks, fit, lab[fit])
        evals[f"source {name}"] = _relabel(blocks, held, lab[held])
    out = lora_gt.transfer_from_config(model, train, evals, cfg.lora, seed=seed, resume_tag=fp, log=log)
    seq = out["eval_sequences"]
    res: dict[str, Any] = {"val": {}, "eval": {}}
    for name in fam_tasks:
        base = np.asarray(seq["base"][f"source {name}"])
        for part, sel in (("val", is_val), ("eval", ~is_val)):
            res[part][name] = {
                s: float(np.mean(base[sel] - np.asarray(v)[sel])) for s, v in seq["loss"][f"source {name}"].items()
            }
    return res


#: regime check (c): after the warm-up, a family's val loss is within this many nats of ln(answers)
WARM_TOLERANCE = 0.25


def regime_checks(tasks: dict[str, Any], val: dict[str, Any], probe: dict[str, float], cfg, warm=None) -> dict:
    """Per target: probe accuracy of its family, val transfer of the same-mapping source and
    the mean over no-agreement sources, the warm-up's val loss against ln(answers) (when there
    was a warm-up), and whether every check passed."""
    out = {}
    for name, t in tasks.items():
        fam = None if warm is None else warm["per_family"][t["family"]]
        same = [val[name][s] for s, c in t["candidates"].items() if c["kind"] == "same"]
        none = [val[name][s] for s, c in t["candidates"].items() if c["agreement"] == 0]
        acc = probe[t["family"]]
        row = {
            "probe_accuracy": acc,
            "probe_ok": acc >= cfg.probe_min_accuracy,
            "val_transfer_same": same[0],
            "val_transfer_no_agreement": float(np.mean(none)) if none else None,
            "same_positive": same[0] > 0,
            "no_agreement_negative": bool(none) and float(np.mean(none)) < 0,
        }
        row["warm_loss_gap"] = None if fam is None else fam["val_loss_after"] - fam["uniform_loss"]
        row["warm_ok"] = fam is None or abs(row["warm_loss_gap"]) <= WARM_TOLERANCE
        row["passed"] = row["probe_ok"] and row["same_positive"] and row["no_agreement_negative"] and row["warm_ok"]
        out[name] = row
    return out


def score_all(cfg, w0, b0, fp, tasks, acts_by_family, cls, split, log) -> dict[str, Any]:
    """Every method on the target (sketch split) and source (fit split) streams, each target
    restricted to its candidates; product and overlap added."""
    streams = {}
    for name, t in tasks.items():
        lab = torch.tensor(t["label_of_class"])[torch.as_tensor(cls)]
        acts = acts_by_family[t["family"]]
        for prefix, sp in (("target ", 1), ("source ", 0)):
            rows = torch.as_tensor(np.flatnonzero(split == sp))
            streams[prefix + name] = {"acts": acts[rows], "labels": lab[rows]}
    sc = scoring.score_methods(
        w0,
        b0,
        streams,
        fp=fp,
        sketch_dim=cfg.sketch_dim,
        seed=cfg.seed,
        exact_n=cfg.exact_n,
        baseline_n=cfg.baseline_n,
        baselines=("cka",),
        log=log,
    )
    raw = sc["scores"]
    cands = {name: list(t["candidates"]) for name, t in tasks.items()}
    scores = {
        m: {name: {s: raw[m][f"target {name}"][s] for s in c} for name, c in cands.items()}
        for m in raw
        if m not in sc["cannot_run"]
    }
    scores["product"] = mappings.product_scores(scores["activation"], scores["error"])
    if "exact_activation" in scores:
        scores["exact_product"] = mappings.product_scores(scores["exact_activation"], scores["exact_error"])
    words = {n: t["words"] for n, t in tasks.items()} | {f"source {n}": t["words"] for n, t in tasks.items()}
    scores["overlap"] = mappings.overlap_scores(words, cands)
    return {"scores": scores, "cannot_run": sc["cannot_run"], "seconds": sc["seconds"]}


def _probe(cfg, acts_by_family, cls, split) -> dict[str, float]:
    train = np.flatnonzero(split <= 1)
    test = np.flatnonzero(split == 3)
    return {
        cue: mappings.nearest_centroid_accuracy(a[train], cls[train], a[test], cls[test])
        for cue, a in acts_by_family.items()
    }


def store_key(cfg, texts: list[str], base_fp: str, warm: dict[str, Any] | None, cue: str, seed: int) -> str:
    """What one (seed, family) truth table depends on: the rows, the model, the warm-up (its
    losses to 4 decimals: the same run on another machine may differ in the last bits), the
    recipe, the fine-tuning code."""
    from dataclasses import asdict

    recipe = {k: v for k, v in asdict(cfg).items() if k not in ("n_boot", "truth_store", "enforce_checks", "quick")}
    warm_id = None if warm is None else [round(warm["train_loss_after"], 4), warm["steps"], warm["rows"]]
    return cache_key(
        "coupling-dark truth v1",
        recipe,
        hashlib.sha256("\x00".join(texts).encode()).hexdigest(),
        base_fp,
        warm_id,
        lora_gt._code_digest(),
        cue,
        seed,
    )


def _stored(cfg, key: str, cue: str, seed: int) -> Path | None:
    if cfg.truth_store is None:
        return None
    slug = re.sub(r"[^A-Za-z0-9]+", "", cue) or "family"
    return Path(cfg.truth_store) / f"seed{seed}-{slug}-{key[:16]}.json"


def _truth(cfg, model, tasks, blocks_by_family, cls, split, fp, log, store=None) -> dict[str, Any]:
    """Per seed, the val and eval transfer tables of every family (written per seed into the
    record).  ``store``: (texts, base fingerprint, warm-up facts) -> each (seed, family) table
    is loaded from / written to ``cfg.truth_store`` under its key (:func:`store_key`)."""
    import json

    from updatescope.records import write_json_atomic

    by_seed = []
    for j in range(cfg.gt_seeds):
        s = gt_seeds.gt_seed(cfg.seed, j)
        log(f"ground truth: seed {j + 1}/{cfg.gt_seeds} ({s})")
        tab: dict[str, Any] = {"seed": s, "val": {}, "eval": {}}
        for cue, _w in cfg.families:
            fam = {n: t for n, t in tasks.items() if t["family"] == cue}
            key = store_key(cfg, *store, cue, s) if store is not None else ""
            path = _stored(cfg, key, cue, s)
            if path is not None and path.is_file():
                one = json.loads(path.read_text())
                if one.get("key") != key:
                    raise InputError(f"truth store {path}: its key does not match this run; move it away")
                log(f"  {cue} seed {s}: loaded from {path}")
            else:
                one = truth_one_seed(cfg, model, fam, blocks_by_family[cue], cls, split, s, fp, log)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    write_json_atomic({"key": key, "family": cue, "seed": s, **one}, path)
            tab["val"].update(one["val"])
            tab["eval"].update(one["eval"])
        by_seed.append(tab)
    mean = {
        part: {
            t: {s: float(np.mean([b[part][t][s] for b in by_seed])) for s in row} for t, row in by_seed[0][part].items()
        }
        for part in ("val", "eval")
    }
    return {"by_seed": by_seed, **mean}


def _evaluate(cfg, sc, truth, checks, tasks) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    passed = [t for t in tasks if checks[t]["passed"] or not cfg.enforce_checks]
    truth_p = {t: truth["eval"][t] for t in passed}
    by_method = {}
    if passed:
        scores = {m: {t: sc["scores"][m][t] for t in passed} for m in METHODS if m in sc["scores"]}
        by_method = scoring.evaluate_methods(scores, truth_p, seed=cfg.seed)
    spearman = {m: mappings.per_target_spearman(by_method, m) for m in METHODS}
    clusters = {t: tasks[t]["family"] for t in passed}
    verdicts = mappings.coupling_verdicts(spearman, clusters, n_boot=cfg.n_boot, seed=cfg.seed)
    return by_method, verdicts, passed


def run(cfg: CouplingDarkConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    base_fp = fp
    w0, b0 = heads.head_weights(model)
    texts, cls, split = build_rows(cfg)
    tasks = build_tasks(cfg, tok)
    blocks_by_family = {cue: capture_blocks(model, tok, fp, cfg, texts, cue) for cue, _w in cfg.families}
    warm = None
    if cfg.warmup_steps:
        model, warm = warm_up(cfg, model, tok, tasks, blocks_by_family, cls, split, log)
        fp = cache_key(fp, "coupling-dark warm-up", warm["train_loss_after"], warm["merged_loss"], cfg.warmup_steps)
    acts_by_family = {cue: capture_head_inputs(model, tok, fp, texts, cue) for cue, _w in cfg.families}
    probe = _probe(cfg, acts_by_family, cls, split)
    log("probe accuracy: " + ", ".join(f"{c} {a:.3f}" for c, a in probe.items()))
    truth = _truth(cfg, model, tasks, blocks_by_family, cls, split, fp, log, store=(texts, base_fp, warm))
    checks = regime_checks(tasks, truth["val"], probe, cfg, warm)
    log(f"regime checks: {sum(c['passed'] for c in checks.values())}/{len(checks)} targets passed")
    sc = score_all(cfg, w0, b0, fp, tasks, acts_by_family, cls, split, log)
    by_method, verdicts, passed = _evaluate(cfg, sc, truth, checks, tasks)
    head = scoring.headline(by_method) if by_method else {}
    if head:
        console.print_method_table(head, sc["cannot_run"])
    log(f"verdict: {verdicts['statement']}")
    metrics = _metrics(cfg, tasks, probe, truth, checks, sc, by_method, head, verdicts, passed, cls, split)
    metrics["warm_up"] = warm
    record = config_record(cfg, preregistration_sha256=prereg_sha, n_targets=len(tasks))
    from updatescope.experiments.coupling_dark.figures import plot_spearman

    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={"coupling_dark.png": lambda path: plot_spearman(metrics, path)},
    )


def _metrics(cfg, tasks, probe, truth, checks, sc, by_method, head, verdicts, passed, cls, split) -> dict[str, Any]:
    n_ans = {cue: len(w) for cue, w in cfg.families}
    hist = {
        n: {
            part: mappings.answer_histogram(t["mapping"], cls[split == j].tolist(), n_ans[t["family"]])
            for j, part in enumerate(MAPPED)
        }
        for n, t in tasks.items()
    }
    return {
        "powered": not cfg.quick,
        "note": "quick: few targets, one seed, small evaluation sets; not powered" if cfg.quick else "",
        "n_eval_per_target": cfg.n_eval * len(cfg.classes),
        "tasks": {n: {k: t[k] for k in ("family", "mapping", "words", "candidates")} for n, t in tasks.items()},
        "answer_histograms": hist,
        "regime": {
            "probe_accuracy": probe,
            "probe_min_accuracy": cfg.probe_min_accuracy,
            "warm_tolerance": WARM_TOLERANCE if cfg.warmup_steps else None,
            "per_target": checks,
            "enforced": cfg.enforce_checks,
            "passed": sum(c["passed"] for c in checks.values()),
            "scored_targets": passed,
            "refused_targets": [t for t in tasks if t not in passed],
        },
        "ground_truth": truth,
        "summary": head,
        "spearman": {m: (by_method.get(m, {}).get("spearman") or {}).get("mean") for m in METHODS},
        "methods": by_method,
        "cannot_run": sc["cannot_run"],
        "scores": sc["scores"],
        "method_seconds": sc["seconds"],
        "verdicts": verdicts,
    }
