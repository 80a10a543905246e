"""Interference on SmolLM2 with the LoRA recipe of the selection experiments
(``reproduce interference-smollm2``; amendments 1 to 3 of PREREGISTRATION.md).

Tasks: built-in domains (next-token loss on document rows) and mappings of one coupling-dark
family (``"{text}\\n{cue}"`` -> an answer word per input class: the same inputs, different
outputs).  A *stage* fine-tunes LoRA adapters on the last ``lora.n_last`` blocks
(:func:`~updatescope.experiments.groundtruth.lora.finetune_from_config`) and merges them into
those blocks, so the next stage starts from the merged model.  Only those blocks ever change:
the residual stream entering them is captured once per split and every loss, head input and
fine-tuning runs on the tail (exact, see :mod:`.groundtruth.lora`).

Before anything else, the answer-format warm-up (:func:`warm_up`): one LoRA on warm-up
examples of their own, every input class labelled with every answer word equally often,
merged into the tail; the warmed model is the base of the mapping tasks, their stages and
predictors, while the domain tasks and the plans start from the packaged model (amendment 3).

Per replicate seed: every task A from the base (θ_A), every partner B of A's group from θ_A
(θ_AB); forgetting and gain as in the lab, per eval row (the bootstrap unit).  Predictors at θ_A
(primary) and at the base, by the same code as the lab (:func:`.runner.predictors_from_streams`).
Then the plan arms on sequences of domains, stages memoised by prefix.  Every (seed, A),
(seed, pair) and (seed, plan prefix) result goes to the truth store when ``truth_store`` is set.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.constants import IGNORE_INDEX
from updatescope.experiments import Result, config_record, heads, mapping_tasks, mappings
from updatescope.experiments.caching import cache_key
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.groundtruth.store import TruthStore, texts_digest
from updatescope.experiments.interference import analysis, runner
from updatescope.experiments.interference.config import InterferenceLMConfig

NAME = "interference_smollm2"
Stage = runner.Stage
#: the warm-up check: afterwards every mapping's eval loss lies within this many nats of ln(answer words)
WARM_TOLERANCE = 0.25
#: the warm-up LoRA's seed offset (coupling-dark's)
WARM_SEED = 104729


def mapping_names(cfg: InterferenceLMConfig) -> list[tuple[str, tuple[int, ...]]]:
    """The mapping tasks: the family's first mapping, then those agreeing least with it
    (most different outputs on the same inputs) -> [(name, mapping)]."""
    if not cfg.mapping_tasks:
        return []
    maps = mappings.mappings_for(len(cfg.classes), len(cfg.words))
    if cfg.mapping_tasks > len(maps):
        raise ValueError(f"mapping_tasks={cfg.mapping_tasks}: the family has {len(maps)} mappings")
    rest = sorted(maps[1:], key=lambda m: mappings.agreement(maps[0], m))
    chosen = [maps[0], *rest[: cfg.mapping_tasks - 1]]
    return [("map_" + "_".join(cfg.words[a] for a in m), m) for m in chosen]


def _pad_cat(parts: list[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack right-padded block-input sets of different widths (causal: a right pad is unseen)."""
    width = max(p["hidden"].shape[1] for p in parts)
    pad = torch.nn.functional.pad
    return {
        "hidden": torch.cat([pad(p["hidden"], (0, 0, 0, width - p["hidden"].shape[1])) for p in parts]),
        "mask": torch.cat([pad(p["mask"], (0, width - p["mask"].shape[1])) for p in parts]),
        "labels": torch.cat([pad(p["labels"], (0, width - p["labels"].shape[1]), value=IGNORE_INDEX) for p in parts]),
    }


def _rows(blocks: Mapping[str, torch.Tensor], n: int, what: str) -> dict[str, torch.Tensor]:
    if blocks["hidden"].shape[0] < n:
        raise ValueError(f"{what}: {blocks['hidden'].shape[0]} rows, need {n}")
    return {k: v[:n] for k, v in blocks.items()}


def load_tasks(cfg: InterferenceLMConfig, model: Any, tok: Any, fp: str) -> dict[str, Any]:
    """Block inputs of every task's train / sketch / eval rows, family and group labels, and
    digests of the texts each split was made of."""
    from updatescope.data.domains import check_known_domains, list_domains, load_domain

    check_known_domains(cfg.domains)
    info = {d.name: d for d in list_domains()}
    lc = cfg.lora
    data: dict[str, dict[str, Any]] = {"train": {}, "sketch": {}, "eval": {}}
    digest: dict[str, dict[str, str]] = {"train": {}, "eval": {}}
    family, group = {}, {}
    sizes = {"train": cfg.train_rows * (lc.seq_len - 1), "sketch": cfg.sketch_tokens, "eval": cfg.eval_rows}
    sizes["eval"] *= lc.seq_len - 1
    for d in cfg.domains:
        for split, tokens in sizes.items():
            docs = load_domain(d, split, max_chars=12 * tokens)
            b = lora_gt.capture_block_inputs(
                model, tok, docs, n_last=lc.n_last, fp=fp, max_tokens=tokens, seq_len=lc.seq_len, desc=d
            )
            rows = {"train": cfg.train_rows, "eval": cfg.eval_rows}.get(split)
            data[split][d] = b if rows is None else _rows(b, rows, f"domain {d} {split}")
            if split in digest:
                digest[split][d] = texts_digest(docs, tokens)
        family[d], group[d] = info[d].family, "domains"
    maps = mapping_names(cfg)
    warm, warm_digest = None, None
    if maps:
        ids = mapping_tasks.word_ids(tok, cfg.words)
        counts = (*cfg.class_rows, cfg.warm_rows)  # per class: train, sketch, eval, warm-up (amendment 3)
        per_class = [mapping_tasks.class_texts(c, sum(counts), cfg.seed + 7 * k) for k, c in enumerate(cfg.classes)]
        for j, split in enumerate(("train", "sketch", "eval", "warm")):
            lo = sum(counts[:j])
            # classes interleaved (row i is of class i mod C), so every prefix of a split is balanced
            texts = [pc[lo + i] for i in range(counts[j]) for pc in per_class]
            cls = torch.tensor([k for _ in range(counts[j]) for k in range(len(cfg.classes))])
            full = [tok(mapping_tasks.prompt(t, cfg.cue))["input_ids"] + [0] for t in texts]
            b = lora_gt.capture_block_inputs(
                model, tok, full, n_last=lc.n_last, fp=fp, positions=[[-1]] * len(full), seq_len=max(map(len, full))
            )
            keep = b["labels"] != IGNORE_INDEX
            if b["labels"].shape[0] != len(texts) or int(keep.sum()) != len(texts):
                raise RuntimeError("interference: expected one counted answer position per mapping example")
            if split == "warm":
                warm, warm_digest = _warm_rows(cfg, b, keep, ids, texts, cls)
                continue
            for name, m in maps:
                lab = b["labels"].clone()
                lab[keep] = torch.tensor([ids[a] for a in m])[cls]
                data[split][name] = {"hidden": b["hidden"], "mask": b["mask"], "labels": lab}
                if split in digest:
                    digest[split][name] = texts_digest([*texts, repr(m), cfg.cue, *cfg.words], None)
        for name, _m in maps:
            family[name], group[name] = f"mapping {cfg.cue}", "mappings"
    return {
        **data,
        "digest": digest,
        "family": family,
        "group": group,
        "names": list(family),
        "warm": warm,
        "warm_digest": warm_digest,
    }


def _warm_rows(cfg: InterferenceLMConfig, b: Mapping[str, torch.Tensor], keep, ids: list[int], texts, cls):
    """The warm-up rows (amendment 3: examples of their own, drawn after the eval examples of
    each class): per input class its first ⌊n/W⌋·W warm examples (W answer words), the j-th of
    class k answered by word (j + k) mod W, so every class meets every word equally often and
    there is no mapping to learn -> (block inputs, digest of their texts and labels)."""
    w = len(cfg.words)
    per = cfg.warm_rows // w * w
    seen = [0] * len(cfg.classes)
    rows, answers = [], []
    for i, k in enumerate(cls.tolist()):
        if seen[k] < per:
            rows.append(i)
            answers.append(ids[(seen[k] + k) % w])
        seen[k] += 1
    lab = b["labels"][rows].clone()
    lab[keep[rows]] = torch.tensor(answers)
    digest = texts_digest([*(texts[r] for r in rows), json.dumps(answers), cfg.cue], None)
    return {"hidden": b["hidden"][rows], "mask": b["mask"][rows], "labels": lab}, digest


def check_merged(lora_loss: float, merged_loss: float) -> None:
    """The merged tail must reproduce the LoRA tail's loss (to 1e-3, relative above 1 nat)."""
    if not abs(lora_loss - merged_loss) <= 1e-3 * max(1.0, abs(lora_loss)):
        raise RuntimeError(f"warm-up: merged model loss {merged_loss:.5f} != LoRA tail loss {lora_loss:.5f}")


def warm_up(cfg: InterferenceLMConfig, model: Any, tasks: Mapping[str, Any], log) -> dict[str, Any] | None:
    """The answer-format warm-up (amendment 2): one LoRA of ``cfg.warmup_steps`` steps (the
    stage recipe) on the warm rows, merged into ``model``'s tail in place -> its facts, or None
    without mapping tasks.  Checked: the merged tail reproduces the LoRA tail's loss (raises
    otherwise); recorded: every mapping's eval loss before and after against ln(W), and whether
    all lie within ``WARM_TOLERANCE`` of it (if not, the mapping pairs are refused)."""
    if tasks.get("warm") is None:
        return None
    n, data = cfg.lora.n_last, tasks["warm"]
    maps = [t for t in tasks["names"] if tasks["group"][t] == "mappings"]
    t0 = time.perf_counter()
    before_tail = lora_gt.tail_model(model, n)
    before = {t: lora_gt.mean_loss(before_tail, tasks["eval"][t]) for t in maps}
    tail = lora_gt.finetune_from_config(model, data, cfg.lora, seed=cfg.seed + WARM_SEED, steps=cfg.warmup_steps)
    lora_gt.load_tail_state(model, lora_gt.merged_tail_state(model, tail, n), n)
    merged_tail = lora_gt.tail_model(model, n)
    lora_loss, merged_loss = lora_gt.mean_loss(tail, data), lora_gt.mean_loss(merged_tail, data)
    check_merged(lora_loss, merged_loss)
    after = {t: lora_gt.mean_loss(merged_tail, tasks["eval"][t]) for t in maps}
    uniform = math.log(len(cfg.words))
    facts = {
        "steps": cfg.warmup_steps,
        "rows": int(data["labels"].shape[0]),
        "train_loss_after": lora_loss,
        "merged_loss": merged_loss,
        "uniform_loss": uniform,
        "tolerance": WARM_TOLERANCE,
        "eval_loss_before": before,
        "eval_loss_after": after,
        "passed": all(abs(v - uniform) <= WARM_TOLERANCE for v in after.values()),
        "seconds": time.perf_counter() - t0,
    }
    log(
        "warm-up: "
        + ", ".join(f"{t} eval loss {before[t]:.3f} -> {after[t]:.3f}" for t in maps)
        + f" (ln {len(cfg.words)} = {uniform:.3f}; {'passed' if facts['passed'] else 'FAILED: mapping pairs refused'})"
    )
    return facts


def warm_refusals(warm: Mapping[str, Any] | None) -> dict[str, str]:
    """Mapping task -> why it is refused, when the warm-up check failed (else {})."""
    if warm is None or warm["passed"]:
        return {}
    lo, hi = warm["uniform_loss"] - warm["tolerance"], warm["uniform_loss"] + warm["tolerance"]
    got = ", ".join(f"{v:.3f}" for v in warm["eval_loss_after"].values())
    why = f"warm-up check failed (mapping eval losses {got} not all within [{lo:.3f}, {hi:.3f}])"
    return dict.fromkeys(warm["eval_loss_after"], why)


class LMStages:
    """The merged tail blocks after a sequence of stages from ``base`` (a tail state; default
    the model's current one), memoised by prefix.  A stage is (task, ((replayed task, rows),
    ...)): a domain stage fine-tunes on the task's first ``train_rows`` rows with the replayed
    tasks' first rows in place of its last ones; a mapping stage on all of its train examples
    (every input class equally often; amendment 3)."""

    def __init__(
        self, model: Any, tasks: Mapping[str, Any], cfg: InterferenceLMConfig, seed: int, base: Any = None
    ) -> None:
        self.model, self.tasks, self.cfg, self.seed = model, tasks, cfg, seed
        root = lora_gt.tail_state(model, cfg.lora.n_last) if base is None else base
        self.memo: dict[tuple[Stage, ...], dict[str, torch.Tensor]] = {(): root}
        self.trained, self.seconds = 0, 0.0

    def data(self, stage: Stage) -> dict[str, torch.Tensor]:
        task, replay = stage
        train = self.tasks["train"]
        if self.tasks["group"][task] == "mappings":
            if replay:
                raise ValueError(f"mapping stage {task}: replay is defined for domain stages only")
            return dict(train[task])
        main = self.cfg.train_rows - sum(r for _, r in replay)
        return _pad_cat([_rows(train[task], main, task)] + [_rows(train[t], r, t) for t, r in replay])

    def load(self, prefix: tuple[Stage, ...]) -> Any:
        """The model with the blocks after ``prefix`` loaded (trained when not memoised)."""
        n = self.cfg.lora.n_last
        if prefix not in self.memo:
            self.load(prefix[:-1])
            t0 = time.perf_counter()
            task = prefix[-1][0]
            fseed = self.seed + 101 * self.tasks["names"].index(task)
            tail = lora_gt.finetune_from_config(self.model, self.data(prefix[-1]), self.cfg.lora, seed=fseed)
            self.memo[prefix] = lora_gt.merged_tail_state(self.model, tail, n)
            self.trained += 1
            self.seconds += time.perf_counter() - t0
        lora_gt.load_tail_state(self.model, self.memo[prefix], n)
        return self.model


def eval_sums(model: Any, cfg: InterferenceLMConfig, tasks: Mapping[str, Any], names: list[str]) -> dict:
    """Summed next-token CE of every eval row of ``names`` at the model's blocks -> {t: (n,) float64}."""
    tail = lora_gt.tail_model(model, cfg.lora.n_last)
    return {t: lora_gt.sequence_losses(tail, tasks["eval"][t])[0] for t in names}


def head_streams(model: Any, cfg: InterferenceLMConfig, tasks: Mapping[str, Any], names: list[str]) -> dict:
    """Head inputs and labels at the counted positions of every sketch row of ``names``."""
    tail = lora_gt.tail_model(model, cfg.lora.n_last)
    out = {}
    with torch.no_grad():
        for t in names:
            d = tasks["sketch"][t]
            keep = d["labels"] != IGNORE_INDEX
            acts = [
                lora_gt._head_inputs(tail, d["hidden"][i : i + 16], d["mask"][i : i + 16], keep[i : i + 16]).float()
                for i in range(0, keep.shape[0], 16)
            ]
            out[t] = {"acts": torch.cat(acts), "labels": d["labels"][keep]}
    return out


def predictors(model: Any, cfg, tasks, names: list[str], fp: str, seed: int, w0, b0) -> tuple[dict, Any]:
    """Every predictor among ``names`` (one group) at the model's blocks (see the lab's)."""
    streams = head_streams(model, cfg, tasks, names)
    fam = {t: tasks["family"][t] for t in names}
    return runner.predictors_from_streams(
        w0, b0, streams, fam, fp=fp, sketch_dim=cfg.sketch_dim, seed=seed, exact_n=cfg.exact_n
    )


def _per_row(after: torch.Tensor, before: torch.Tensor, counts: torch.Tensor) -> np.ndarray:
    """Per-row loss differences scaled so that their mean is the token-weighted mean difference."""
    c = counts.double()
    return ((after - before) * c.numel() / c.sum()).numpy()


def _mean(sums: torch.Tensor, counts: torch.Tensor) -> float:
    return float(sums.sum()) / max(int(counts.sum()), 1)


def make_store(cfg: InterferenceLMConfig, tasks: Mapping[str, Any], fp: str) -> TruthStore | None:
    if cfg.truth_store is None:
        return None
    names, dg = tasks["names"], tasks["digest"]
    pairs = {f"{a}__{b}": texts_digest([dg["train"][a], dg["train"][b]], None) for a in names for b in names}
    keep = ("train_rows", "eval_rows", "sketch_tokens", "sketch_dim", "exact_n", "class_rows", "cue", "words")
    code = "".join(inspect.getsource(f) for f in (LMStages, _warm_rows, warm_up, plan_source, one_seed))
    # the warm-up is the base of the mapping results: its recipe (steps, seed, rows; the stage
    # recipe enters every key) is part of the context, so results of another base are refused
    warm = None
    if tasks.get("warm") is not None:
        warm = {"steps": cfg.warmup_steps, "seed": cfg.seed + WARM_SEED, "rows": tasks["warm_digest"]}
    context = {
        "experiment": NAME,
        "model_fp": fp,
        "code": lora_gt._code_digest(),
        "runner": hashlib.sha256(code.encode()).hexdigest()[:16],
        "data": json.loads(json.dumps({k: getattr(cfg, k) for k in keep})),
        "warm_up": warm,
    }
    return TruthStore(cfg.truth_store, context, {"train": {**dg["train"], **pairs}, "eval": dg["eval"]})


def _recipe(cfg: InterferenceLMConfig, seed: int) -> dict[str, Any]:
    return json.loads(json.dumps({**dataclasses.asdict(cfg.lora), "replicate_seed": seed}))


def one_seed(
    cfg: InterferenceLMConfig, j: int, model, tasks, bases: Mapping[str, tuple[Any, str]], store, log
) -> dict[str, Any]:
    """Every measurement of replicate ``j`` (the lab's layout, see :func:`.runner.one_seed`).
    ``bases``: group -> (the tail state its tasks start from, that state's fingerprint)."""
    seed = gt_seeds.gt_seed(cfg.seed, j)
    names, group = tasks["names"], tasks["group"]
    counts = {t: (tasks["eval"][t]["labels"] != IGNORE_INDEX).sum(1) for t in names}
    w0, b0 = heads.head_weights(model)
    groups = {g: [t for t in names if group[t] == g] for g in dict.fromkeys(group.values())}
    by_group = {g: LMStages(model, tasks, cfg, seed, bases[g][0]) for g in groups}
    fps = {g: bases[g][1] for g in groups}
    base: dict[str, torch.Tensor] = {}
    base_preds: dict[str, dict] = {p: {} for p in runner.PREDICTORS}
    tables = {}
    for g, members in groups.items():
        base.update(eval_sums(by_group[g].load(()), cfg, tasks, members))
        preds, tables[g] = predictors(model, cfg, tasks, members, cache_key(fps[g], "base", seed), seed, w0, b0)
        for p in runner.PREDICTORS:
            base_preds[p].update(preds[p])
    recipe = _recipe(cfg, seed)
    start_preds: dict[str, dict] = {p: {} for p in runner.PREDICTORS}
    own, own_gain, forget, gain = {}, {}, {}, {}
    for a in names:
        mates, stages = groups[group[a]], by_group[group[a]]
        res = None if store is None else store.load(a, seed, mates, recipe)
        if res is None:
            t0 = time.perf_counter()
            at_a = eval_sums(stages.load(((a, ()),)), cfg, tasks, mates)
            preds, _ = predictors(model, cfg, tasks, mates, cache_key(fps[group[a]], a, seed), seed, w0, b0)
            row = {p: preds[p][a] for p in runner.PREDICTORS}
            res = {"train_after": float("nan"), "eval": at_a, "seconds": time.perf_counter() - t0, "extra": row}
            if store is not None:
                store.save(a, seed, mates, recipe, res)
        at_a = res["eval"]
        for p in runner.PREDICTORS:
            start_preds[p][a] = res["extra"][p]
        own[a] = _mean(at_a[a], counts[a])
        own_gain[a] = _per_row(base[a], at_a[a], counts[a])  # base - after A's stage, per eval row
        for b in mates:
            if b == a:
                continue
            src = f"{a}__{b}"
            got = None if store is None else store.load(src, seed, [a, b], recipe)
            if got is None:
                t0 = time.perf_counter()
                after = eval_sums(stages.load(((a, ()), (b, ()))), cfg, tasks, [a, b])
                got = {"train_after": float("nan"), "eval": after, "seconds": time.perf_counter() - t0}
                if store is not None:
                    store.save(src, seed, [a, b], recipe, got)
            key = analysis.pair_key(a, b)
            forget[key] = _per_row(got["eval"][a], at_a[a], counts[a])
            gain[key] = _per_row(at_a[b], got["eval"][b], counts[b])
        trained, secs = sum(s.trained for s in by_group.values()), sum(s.seconds for s in by_group.values())
        log(f"seed {j + 1}/{cfg.seeds}: A = {a} done ({trained} stages trained, {secs:.0f}s)")
    stages = by_group["domains"]
    plans = plan_runs(cfg, stages, tasks, tables["domains"], groups["domains"], counts, seed, log, j, store)
    stages.load(())  # the packaged blocks again (the caller restores them in any case)
    return {
        "seed": seed,
        "base_loss": {t: _mean(base[t], counts[t]) for t in names},
        "own_loss": own,
        "own_gain": own_gain,
        "forget": forget,
        "gain": gain,
        "predictors": {"start": start_preds, "base": base_preds},
        "plans": plans,
        "stages_trained": sum(s.trained for s in by_group.values()),
        "stage_seconds": sum(s.seconds for s in by_group.values()),
    }


def plan_source(prefix: tuple[Stage, ...], train_digests: Mapping[str, str]) -> tuple[str, str, list]:
    """A plan arm's stages -> (its truth-store name ``plan_<sha of the prefix>``, the digest of
    its training texts, the prefix as JSON).  Arms with the same stages share one entry."""
    desc = [[t, [[u, r] for u, r in rep]] for t, rep in prefix]
    text = json.dumps(desc)
    named = [u for t, rep in prefix for u in (t, *(r[0] for r in rep))]  # trained and replayed tasks
    digest = texts_digest([text, *(train_digests[t] for t in named)], None)
    return "plan_" + hashlib.sha256(text.encode()).hexdigest()[:16], digest, desc


def plan_runs(
    cfg, stages: LMStages, tasks, table, domains: list[str], counts, seed: int, log, j: int, store=None
) -> list:
    """The plan arms of every sequence (the lab's arms, :func:`.runner._plan_arms`); each arm's
    final eval losses are read from / written to the truth store under its stage prefix."""
    damage = table.damage("inner").numpy()
    rng = np.random.default_rng(seed + 77)
    recipe = _recipe(cfg, seed)
    plans = []
    for k, seq in enumerate(runner.draw_sequences(cfg, domains, tasks["family"])):
        idx = [domains.index(t) for t in seq]
        arms = runner._plan_arms(seq, damage[np.ix_(idx, idx)], cfg, rng)
        for arm in arms.values():
            prefix = tuple((t, runner.replay_rows(r, cfg.train_rows)) for t, r in zip(arm["order"], arm["replay"]))
            got = None
            if store is not None:
                src, digest, desc = plan_source(prefix, tasks["digest"]["train"])
                store.text_digests["train"][src] = digest  # a plan's "source" is its whole prefix
                got = store.load(src, seed, seq, recipe)
            if got is None:
                t0 = time.perf_counter()
                got = {"train_after": float("nan"), "eval": eval_sums(stages.load(prefix), cfg, tasks, seq)}
                got["seconds"] = time.perf_counter() - t0
                if store is not None:
                    store.save(src, seed, seq, recipe, {**got, "extra": {"prefix": desc}})
            final = got["eval"]
            arm["rows"] = [dict(p[1]) for p in prefix]
            arm["final_loss"] = {t: _mean(final[t], counts[t]) for t in seq}
            arm["mean_final_loss"] = float(np.mean(list(arm["final_loss"].values())))
        plans.append({"sequence": seq, "damage_all_zero": not damage[np.ix_(idx, idx)].any(), "arms": arms})
        log(f"seed {j + 1}/{cfg.seeds}: sequence {k + 1} done ({stages.trained} stages trained)")
    return plans


def run(cfg: InterferenceLMConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg_sha = hashlib.sha256(runner.PREREG.read_bytes()).hexdigest() if runner.PREREG.exists() else None
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    for p in model.parameters():
        p.requires_grad_(False)
    tasks = load_tasks(cfg, model, tok, fp)
    names = tasks["names"]
    store = make_store(cfg, tasks, fp)
    n = cfg.lora.n_last
    original = lora_gt.tail_state(model, n)
    try:
        warm = warm_up(cfg, model, tasks, log)
        # the domains start from the packaged model, the mappings from the warmed one (amendment
        # 3); the warmed model's predictors carry its own fingerprint (the block inputs were
        # captured below the tail, which the warm-up leaves alone)
        bases = {"domains": (original, fp)}
        if warm is not None:
            fp_warm = cache_key(fp, "warm-up", cfg.warmup_steps, cfg.lora.lr, tasks["warm_digest"])
            bases["mappings"] = (lora_gt.tail_state(model, n), fp_warm)
            lora_gt.load_tail_state(model, original, n)
        per_seed = [one_seed(cfg, j, model, tasks, bases, store, log) for j in range(cfg.seeds)]
    finally:
        lora_gt.load_tail_state(model, original, n)  # the caller gets the model as loaded
    group = tasks["group"]
    keys = [analysis.pair_key(a, b) for a in names for b in names if a != b and group[a] == group[b]]
    refused = warm_refusals(warm)
    metrics = runner.analyse(cfg, per_seed, names, tasks["family"], keys, refused_tasks=refused)
    metrics["warm_up"] = warm
    metrics["plans"] = runner.analyse_plans(cfg, per_seed)
    metrics["powered"] = not cfg.quick
    metrics["note"] = "quick: 4 domains and 2 mapping tasks, 1 seed, one sequence; not powered" if cfg.quick else ""
    metrics["tasks"] = dict(tasks["family"])
    metrics["groups"] = dict(group)
    metrics["mappings"] = {n: list(m) for n, m in mapping_names(cfg)}
    metrics["sequences"] = [p["sequence"] for p in per_seed[0]["plans"]]
    metrics["stages_trained"] = sum(s["stages_trained"] for s in per_seed)
    metrics["stage_seconds"] = sum(s["stage_seconds"] for s in per_seed)
    for v in metrics["verdicts"] + metrics["plans"]["verdicts"]:
        log(f"{v['comparison']}: {v['word']} ({v['note']})")
    log(f"conclusion: {metrics['conclusion']}")
    record = config_record(cfg, preregistration_sha256=prereg_sha, tasks=names)
    from updatescope.experiments.interference.figures import plot_interference

    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={"interference_smollm2.png": lambda path: plot_interference(metrics, path)},
    )
