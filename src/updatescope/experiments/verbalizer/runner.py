"""Verbalizer shift (paper A): one fixed prompt prefix, several answer-word sets.

Tasks. Every labelled sentence (Pang–Lee movie-review polarity, shipped in gensim's test
data) is put into one prompt, identical for all tasks,

    "Review: {sentence}\\nQuestion: Is this review positive?\\nAnswer:"

and a task is a *verbalizer set* (Yes/No, True/False, Positive/Negative, ...): its label at
the answer position is the set's word for the true class (one SmolLM2 token, with the
leading space).  Only the answer position is counted (``positions=[[-1]]``).  Since the
prefix is the same, the head input ``a`` is the same for every set: the activation-only
geometry Scov(M_a) (and CKA, RSA, SVCCA, LogME/H-score on source-projected features) is
constant across sources and can only pick at random; only the labels, hence the errors
``e = softmax(W a) − onehot(y)``, differ.  We verify the "same a" claim by capturing the
first ``verify_n`` prompts under every set and comparing the activations (max |Δa|).

Ground truth (``ground_truth`` in the config), transfer = reduction of the target set's
held-out cross-entropy at the answer position after fine-tuning on the source set's train
split:

- ``"lora"`` (default): LoRA adapters on the last decoder blocks (:mod:`groundtruth.lora`), head frozen —
  the features feeding the head move, so learning "positive review" for one word pair can
  carry over to another pair.  The block inputs of the prompts are captured once (they do
  not depend on the set) and only the answer label changes between sets.
- ``"head"``: head-only fine-tuning (:mod:`groundtruth.head`, full batch, Adam) on the cached
  answer-position activations; with frozen features the head rows of different sets are
  independent parameters.

Split: sentences are shuffled with a fixed generator (seed) and cut 60/40 into train (also
the data that is sketched, as a user would sketch the data they might fine-tune on) and
eval.

Designs (``design`` in the config):

- ``"sets"`` (default): the first ``n_sets`` of :data:`VERBALIZERS`, disjoint word pairs.
- ``"contrast"``: :data:`CONTRAST`, candidates that only the error geometry or the coupling
  can tell apart — the same words with the mapping flipped (Yes→negative), sets sharing
  one word with the target, and a same-words *control* source trained on the other half of
  the train sentences.  Every set except the control trains on (and is sketched on) the
  first half of the train split, the control on the second half, so all prefixes are
  identical except the control's: activation-only methods are constant over the
  identical-prefix candidates and see only "the control reads different sentences".
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from pathlib import Path
from typing import Any

import torch

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads, scoring, selection
from updatescope.experiments.configs import LoRAConfig
from updatescope.experiments.groundtruth import head as head_gt
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.plotting import plot_selection
from updatescope.experiments.verbalizer.config import VerbalizerConfig
from updatescope.report import console

NAME = "verbalizer"
#: (positive word, negative word); the quick run uses the first 6 (5 candidates per target,
#: the paper's chance level of 20%).
VERBALIZERS: tuple[tuple[str, str], ...] = (
    ("Yes", "No"),
    ("True", "False"),
    ("Positive", "Negative"),
    ("Good", "Bad"),
    ("yes", "no"),
    ("positive", "negative"),
    ("true", "false"),
    ("good", "bad"),
    ("great", "terrible"),
    ("Right", "Wrong"),
)
#: design "contrast": (name, positive word, negative word, train half).  Half 0 / 1 = first /
#: second half of the train sentences; the family label is the unordered word pair.
CONTRAST: tuple[tuple[str, str, str, int], ...] = (
    ("Yes/No", "Yes", "No", 0),
    ("Yes/No, other half", "Yes", "No", 1),  # same words, disjoint sentences: the control
    ("No/Yes, flipped", "No", "Yes", 0),  # same words, label mapping flipped
    ("Yes/Bad", "Yes", "Bad", 0),  # shares the positive word
    ("Good/No", "Good", "No", 0),  # shares the negative word
    ("Good/Bad", "Good", "Bad", 0),
)


def task_specs(design: str, n_sets: int) -> list[tuple[str, str, str, int | None]]:
    """(name, positive word, negative word, train half or None = the whole train split)."""
    if design == "contrast":
        return list(CONTRAST)
    return [(f"{p}/{n}", p, n, None) for p, n in VERBALIZERS[:n_sets]]


def train_rows(half: int | None, n_train: int) -> torch.Tensor:
    """Row indices of a task's train split: all of it, or its first / second half."""
    if half is None:
        return torch.arange(n_train)
    cut = n_train // 2
    return torch.arange(0, cut) if half == 0 else torch.arange(cut, n_train)


def load_sentences() -> list[tuple[str, int]]:
    """(sentence, 1 = positive / 0 = negative) from gensim's Pang–Lee polarity sample."""
    from updatescope.data._sources import gensim_file

    out = []
    for ln in gensim_file("pang_lee_polarity.cor").read_text(encoding="cp1252", errors="replace").split("\n"):
        m = re.match(r"^__label__(pos|neg)\s+(.*\S)", ln.strip())
        if m:
            out.append((m.group(2), 1 if m.group(1) == "pos" else 0))
    return out


def _word_id(tokenizer: Any, word: str) -> int:
    ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise InputError(f"verbalizer word {word!r} is {len(ids)} tokens for this tokenizer; need exactly one")
    return int(ids[0])


@torch.no_grad()
def word_mass(w0: Any, b0: Any, acts: torch.Tensor, word_ids: dict[str, dict[str, int]]) -> dict[str, float]:
    """Per set, the base model's mean probability of either of the set's two words at the
    answer position: the "word_prob" trivial baseline (a source whose words the model
    already predicts loses least when fine-tuning pulls mass onto them).  acts (n, d)."""
    p = torch.softmax(heads.logits_of(w0, b0, acts).double(), dim=-1)
    return {n: float((p[:, ids["positive"]] + p[:, ids["negative"]]).mean()) for n, ids in word_ids.items()}


def lora_ground_truth(
    model: Any,
    tok: Any,
    fp: str,
    prompts: list[list[int]],
    tasks: dict[str, torch.Tensor],
    n_train: int,
    lc: LoRAConfig,
    seed: int,
    log: Any,
    rows: dict[str, torch.Tensor] | None = None,
    eval_rows: torch.Tensor | None = None,
) -> dict[str, Any]:
    """LoRA transfer table: the prompts' block inputs are captured once (with the first set's
    answer appended; causal attention keeps every earlier position independent of it) and each
    set relabels the one counted position per prompt.  ``rows``: per set, its train rows
    (default: the whole train split); every set is evaluated on ``eval_rows`` (default: the
    eval split, rows n_train and beyond)."""
    first = next(iter(tasks.values()))
    texts = [p + [int(first[i])] for i, p in enumerate(prompts)]
    width = max(len(t) for t in texts)
    blocks = lora_gt.capture_block_inputs(
        model,
        tok,
        texts,
        n_last=lc.n_last,
        fp=fp,
        positions=[[-1]] * len(texts),
        seq_len=width,
        desc="verbalizer prompts",
    )
    keep = blocks["labels"] != IGNORE_INDEX
    if blocks["labels"].shape[0] != len(texts) or not torch.equal(
        keep.sum(1), torch.ones(len(texts), dtype=torch.long)
    ):
        raise RuntimeError("verbalizer: expected one counted answer position per prompt")
    split: dict[str, dict[str, Any]] = {"train": {}, "eval": {}}
    for name, y in tasks.items():
        lab = torch.full_like(blocks["labels"], IGNORE_INDEX)
        lab[keep] = y
        parts = {
            "train": torch.arange(n_train) if rows is None else rows[name],
            "eval": torch.arange(n_train, len(texts)) if eval_rows is None else eval_rows,
        }
        for part, sl in parts.items():
            split[part][name] = {"hidden": blocks["hidden"][sl], "mask": blocks["mask"][sl], "labels": lab[sl]}
    return lora_gt.transfer_from_config(model, split["train"], split["eval"], lc, seed=seed, log=log)


def _capture_sets(
    model: Any, tok: Any, fp: str, specs: list, prompts: list, ys: torch.Tensor, verify_n: int
) -> tuple[list[str], dict[str, Any], dict[str, torch.Tensor], dict[str, Any], torch.Tensor]:
    """Capture the prompts under every answer-word set: the first set on every prompt, the
    others on ``verify_n`` prompts to check that the activations are identical.
    -> (set names, word ids, labels per set, activation check, the first set's activations)."""
    n_data = len(prompts)
    names, word_ids, tasks = [], {}, {}
    verify: dict[str, Any] = {}
    base_acts = None
    for k, (name, pos, neg, _half) in enumerate(specs):
        ids = (_word_id(tok, neg), _word_id(tok, pos))
        word_ids[name] = {"positive": ids[1], "negative": ids[0]}
        labels = torch.tensor([ids[int(y)] for y in ys])
        n_cap = n_data if k == 0 else min(verify_n, n_data)
        texts = [p + [int(labels[i])] for i, p in enumerate(prompts[:n_cap])]
        cap = heads.capture_acts(model, tok, texts, fp=fp, positions=[[-1]] * n_cap, desc=name)
        if not torch.equal(cap["labels"], labels[:n_cap]):
            raise RuntimeError(f"{name}: captured labels differ from the verbalizer ids")
        if k == 0:
            base_acts = cap["acts"]
        else:
            diff = (cap["acts"] - base_acts[:n_cap]).abs().max().item()
            verify[name] = {"n": n_cap, "max_abs_diff_vs_first_set": diff}
        names.append(name)
        tasks[name] = labels
    assert base_acts is not None
    return names, word_ids, tasks, verify, base_acts


def _ground_truth(
    cfg: VerbalizerConfig,
    model: Any,
    tok: Any,
    fp: str,
    w0: Any,
    b0: Any,
    prompts: list,
    tasks: dict[str, torch.Tensor],
    n_train: int,
    rows: dict[str, torch.Tensor],
    train: dict[str, Any],
    evals: dict[str, Any],
    names: list[str],
    log: Any,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The transfer table over ``cfg.gt_seeds`` seeds (LoRA, its steps chosen by the budget
    probe when ``cfg.budget_grid`` is set, or head-only fine-tuning) -> (truth, budget)."""
    seed = cfg.seed
    budget = None
    if cfg.ground_truth == "lora":
        lc = cfg.lora
        if cfg.budget_grid:
            # validation: the last budget_val_frac of the train split; each set fine-tunes on its
            # train rows before it, and the eval split is not touched
            n_fit = n_train - max(1, int(round(cfg.budget_val_frac * n_train)))
            fit = {n: r[r < n_fit] for n, r in rows.items()}
            val = torch.arange(n_fit, n_train)

            def truth_at(steps: int, s: int) -> dict[str, Any]:
                return lora_ground_truth(
                    model,
                    tok,
                    fp,
                    prompts,
                    tasks,
                    n_train,
                    dataclasses.replace(lc, steps=steps),
                    s,
                    log,
                    rows=fit,
                    eval_rows=val,
                )

            budget = {
                **selection.probe_budget(cfg.budget_grid, truth_at, seed, log),
                "domains": names,
                "validation_split": "held-out tail of the train",
                "validation_n": len(val),
            }
            lc = dataclasses.replace(lc, steps=budget["chosen"])

        def one(s: int) -> dict[str, Any]:
            return lora_ground_truth(model, tok, fp, prompts, tasks, n_train, lc, s, log, rows=rows)
    else:
        ft = cfg.finetune

        def one(s: int) -> dict[str, Any]:
            return head_gt.transfer_matrix(
                w0,
                b0,
                train,
                evals,
                steps=ft.steps,
                lr=ft.lr,
                batch=ft.batch or 10**9,
                seed=s,
                extra_rows=ft.extra_rows,
                log=log,
            )

    return gt_seeds.over_seeds(one, seed, cfg.gt_seeds, log), budget


def run(cfg: VerbalizerConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    seed = cfg.seed
    specs = task_specs(cfg.design, cfg.n_sets)
    log = functools.partial(print, flush=True)

    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    w0, b0 = heads.head_weights(model)
    data = load_sentences()
    if cfg.max_sentences:
        data = data[: cfg.max_sentences]
    perm = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed)).tolist()
    data = [data[i] for i in perm]
    prompts = [tok(cfg.prompt.format(text=s), add_special_tokens=True)["input_ids"] for s, _ in data]
    ys = torch.tensor([y for _, y in data])
    n_train = int(round(cfg.train_frac * len(data)))

    names, word_ids, tasks, verify, base_acts = _capture_sets(model, tok, fp, specs, prompts, ys, cfg.verify_n)
    act_scale = base_acts.abs().max().item()
    log(
        "activation check: max |Δa| = "
        f"{max((v['max_abs_diff_vs_first_set'] for v in verify.values()), default=0.0):.3g}"
        f" (max |a| = {act_scale:.3g})"
    )

    rows = {name: train_rows(half, n_train) for name, _p, _n, half in specs}
    ev = slice(n_train, len(data))
    train = {n: {"acts": base_acts[rows[n]], "labels": y[rows[n]]} for n, y in tasks.items()}
    evals = {n: {"acts": base_acts[ev], "labels": y[ev]} for n, y in tasks.items()}
    gt, budget = _ground_truth(cfg, model, tok, fp, w0, b0, prompts, tasks, n_train, rows, train, evals, names, log)
    # the family label: "same words up to case" (sets), the unordered word pair (contrast)
    groups = {
        name: (name.lower() if cfg.design == "sets" else "/".join(sorted((p.lower(), q.lower()))))
        for name, p, q, _h in specs
    }
    per_source = {
        "easiness": {n: -v for n, v in selection.base_loss_on(w0, b0, train).items()},
        "size": {n: float(len(rows[n])) for n in names},  # identical by construction: a chance-level control
        "word_prob": {n: word_mass(w0, b0, train[n]["acts"], {n: word_ids[n]})[n] for n in names},
    }
    sc, metrics_by_method, head = selection.score_and_evaluate(
        w0, b0, train, gt["transfer"], fp=fp, cfg=cfg, log=log, groups=groups, per_source=per_source
    )
    console.print_method_table(head, sc["cannot_run"])
    noise = scoring.truth_noise(gt, groups=groups, seed=seed)
    paired = scoring.paired_comparisons(metrics_by_method, seed=seed)

    # how constant is each method across sources (the activation-dark signature)
    spread = {}
    for method, table in sc["scores"].items():
        vals = [v for row in table.values() for v in row.values()]
        spread[method] = max(vals) - min(vals) if vals else None

    resolution = None
    if cfg.resolution_dims and sc["exact_alignment"]:
        resolution = scoring.sketch_resolution(
            w0,
            b0,
            train,
            sc["exact_alignment"],
            dims=cfg.resolution_dims,
            seeds=cfg.resolution_seeds or 3,
            base_seed=seed,
            fp=fp,
            log=log,
        )

    title = (
        f"verbalizer shift ({cfg.design}), SmolLM2-135M, {len(names)} sets, {cfg.ground_truth} fine-tuning ground truth"
    )
    metrics = {
        "n_sentences": len(data),
        "n_train": n_train,
        "n_eval": len(data) - n_train,
        "design": cfg.design,
        "train_rows_per_set": {n: int(len(r)) for n, r in rows.items()},
        "verbalizer_token_ids": word_ids,
        "activation_identity": {
            "per_set": verify,
            "max_abs_diff": max((v["max_abs_diff_vs_first_set"] for v in verify.values()), default=0.0),
            "max_abs_activation": act_scale,
        },
        "ground_truth": gt,
        "score_spread": spread,
        "word_groups": groups,
        "sketch_resolution": resolution,
        "budget": budget,
        **scoring.method_metrics(sc, metrics_by_method, head, paired, noise),
    }
    used = {} if budget is None else {"lora_steps_used": budget["chosen"]}
    return Result(
        NAME,
        config_record(cfg, verbalizers=names, **used),
        metrics,
        time.perf_counter() - t0,
        figures={
            "verbalizer.png": lambda path: plot_selection(head, gt["transfer"], sc["scores"]["fisher"], path, title)
        },
    )
