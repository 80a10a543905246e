"""``updatescope reproduce sentiment-steering`` -- a steering task that can succeed.

Neutral news openings (VADER compound ~ 0) are continued greedily by the packaged model;
a vector added to the residual stream should make the continuation positive (or, in the
other direction, negative) without wrecking it.
1. CAA per layer: mean residual (over tokens) of positive minus negative polarity
   sentences.  Its split-half cosine (two disjoint halves of each class, ``SPLITS`` random
   splits) says whether it is a direction at all.
2. The pushforward of one gradient step: δθ = -∇ LM loss on positive (negative) sentences;
   its exact activation shift J_θ h_l · δθ (forward AD), averaged over tokens and sentences.
3. The search-derived vector: Best-of-N weight perturbations scored by the loss of held-out
   sentences of the class, the best pushed forward the same way, mean over search seeds
   (:mod:`.search`).
4. Baselines: the base model, a prompting prefix ("Write a positive continuation: ") with
   no vector, and a random Gaussian vector (same norm: every vector is unit-normed and
   scaled by a fraction of the layer's mean residual norm).
5. Judges: VADER's compound score of the continuation (primary), and a logistic
   regression on the base model's mean residual at ``judge_layer`` trained on the polarity
   sentences (used only if its cross-validated accuracy reaches ``min_judge_accuracy``).
   Fluency: the continuation's perplexity under the unsteered base model, given the neutral
   opening.
6. Each method's (layer, scale) is chosen on the select prompts under the fluency bound,
   then run on the test prompts; pre-specified paired comparisons per prompt, Holm-corrected
   per judge over both directions (the search-derived vector's comparisons are a family of
   their own); comparisons against CAA wait for its gate (see :mod:`.verdicts`).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.experiments import Result, config_record, heads
from updatescope.experiments import sentiment_texts as texts
from updatescope.experiments.sentiment_steering import figures, search, verdicts
from updatescope.experiments.sentiment_steering.config import (
    COMPARISONS,
    DIRECTIONS,
    SEARCH_COMPARISONS,
    SentimentSteeringConfig,
)

NAME = "sentiment_steering"
N_EXAMPLES = 4  # test continuations kept in the record per condition


def _log(msg: str) -> None:
    print(f"sentiment-steering: {msg}", file=sys.stderr, flush=True)


def _cos(a: Tensor, b: Tensor) -> list[float]:
    """Row-wise cosine of (n_layers, d) tensors."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1).tolist()


@torch.no_grad()
def continuation_stats(
    model: Any, seqs: Tensor, mask: Tensor, cont: Tensor, judge_layer: int, bs: int
) -> tuple[Tensor, Tensor]:
    """Under the unsteered model: per row, the mean NLL of the continuation tokens (log
    perplexity) and the mean residual at ``judge_layer`` over them.  seqs, mask, cont (n, T)
    (cont marks continuation tokens) -> ((n,), (n, d))."""
    from updatescope.steering import decoder_layers
    from updatescope.steering.positions import hidden_of

    got: dict[str, Tensor] = {}
    h = decoder_layers(model)[judge_layer].register_forward_hook(lambda m, a, o: got.__setitem__("h", hidden_of(o)))
    nll, feats = [], []
    try:
        for s in range(0, seqs.shape[0], bs):
            ids, m, c = seqs[s : s + bs], mask[s : s + bs], cont[s : s + bs].double()
            pos = (m.long().cumsum(1) - 1).clamp(min=0)
            logits = model(input_ids=ids, attention_mask=m, position_ids=pos, use_cache=False).logits
            lp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
            w = c[:, 1:]
            nll.append(-(lp * w).sum(1) / w.sum(1))
            feats.append((got["h"].double() * c[..., None]).sum(1) / c.sum(1, keepdim=True))
    finally:
        h.remove()
    return torch.cat(nll), torch.cat(feats)


class Generator:
    """Greedy continuations of a prompt list, steered or not, judged and scored for fluency."""

    def __init__(self, model: Any, tok: Any, config: SentimentSteeringConfig, judge_layer: int, resid: Tensor):
        self.model, self.tok, self.cfg, self.judge_layer, self.resid = model, tok, config, judge_layer, resid
        self.eos = getattr(tok, "eos_token_id", None)
        pad = getattr(tok, "pad_token_id", None)
        self.pad = int(pad if pad is not None else (self.eos if self.eos is not None else 0))
        self.vader: Any = None
        self.judge: Any = None
        self.key_base: dict[str, Any] = {}  # what every stored pass shares (see ``store_context``)

    def _generate(self, prompts: list[str]) -> list[list[int]]:
        from updatescope.steering import encode_prompts

        out: list[list[int]] = []
        bs = self.cfg.batch_size
        for s in range(0, len(prompts), bs):
            ids, mask = encode_prompts(self.tok, prompts[s : s + bs], side="left", pad_id=self.pad)
            gen = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=self.cfg.new_tokens,
                min_new_tokens=self.cfg.new_tokens,
                do_sample=False,
                pad_token_id=self.pad,
            )
            for row in gen[:, ids.shape[1] :].tolist():
                # up to and including the first end-of-text token: at least one token to score
                if self.eos is not None and self.eos in row:
                    row = row[: row.index(self.eos) + 1]
                out.append(row)
        return out

    def run(
        self, prompts: list[str], vec: Tensor | None = None, layer: int = 0, scale: float = 0.0, prefix: str = ""
    ) -> dict[str, Any]:
        """Continue ``prompts`` (with ``prefix`` in front, for generation only), steered by
        ``scale`` x mean residual norm x unit(``vec``) at ``layer``; judge and score each
        continuation given the bare prompt.  -> per-prompt lists, read from ``run_store`` when
        this pass (same prompts, vector bits, layer, absolute scale and context) is kept there."""
        from updatescope.experiments.caching import stored_json

        unit = None if vec is None else (vec / vec.norm()).float()
        parts = {
            **self.key_base,
            "prompts": _digest(json.dumps(prompts).encode()),
            "prefix": prefix,
            "vector": None if unit is None else _digest(unit.contiguous().numpy().tobytes()),
            "layer": None if unit is None else layer,
            "scale": None if unit is None else scale * float(self.resid[layer]),
        }
        return stored_json(self.cfg.run_store, "pass", parts, lambda: self._run(prompts, unit, layer, scale, prefix))

    def _run(self, prompts: list[str], unit: Tensor | None, layer: int, scale: float, prefix: str) -> dict[str, Any]:
        from updatescope.steering import pad_sequences, steer

        gen_prompts = [prefix + p for p in prompts]
        if unit is None:
            conts = self._generate(gen_prompts)
        else:
            with steer(
                self.model, unit, layers=layer, scale=scale * float(self.resid[layer]), positions=self.cfg.positions
            ):
                conts = self._generate(gen_prompts)
        texts = [self._decode(c) for c in conts]
        heads_ = [list(self.tok(p)["input_ids"]) for p in prompts]
        seqs, mask = pad_sequences([h + c for h, c in zip(heads_, conts)], pad_id=self.pad, side="left")
        lengths = torch.tensor([len(c) for c in conts])
        cont = (torch.arange(seqs.shape[1])[None, :] >= seqs.shape[1] - lengths[:, None]).long() & mask.long()
        logppl, feats = continuation_stats(self.model, seqs, mask, cont, self.judge_layer, self.cfg.batch_size)
        out = {"vader": self.vader.scores(texts), "logppl": logppl.tolist(), "texts": texts}
        if self.judge is not None:
            out["judge"] = self.judge.prob(feats.numpy()).tolist()
        return out

    def _decode(self, ids: list[int]) -> str:
        ids = [i for i in ids if i != self.eos]
        return self.tok.decode(ids, skip_special_tokens=True).strip()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def store_context(model: Any, tok: Any, config: SentimentSteeringConfig, judge_layer: int, judge: Any) -> dict:
    """The key parts every stored generation pass of a run shares: the model's fingerprint, the
    digest of the code a pass runs, VADER's version, the trained judge's bits and the config
    fields a pass reads."""
    import inspect
    from importlib.metadata import PackageNotFoundError, version

    from updatescope.models.hf import head_fingerprint
    from updatescope.steering import inject, positions

    try:
        vader = version("vaderSentiment")
    except PackageNotFoundError:
        vader = None
    code = "".join(inspect.getsource(x) for x in (Generator, continuation_stats, inject, positions, texts.Vader))
    arrays = () if judge is None else (judge.mean, judge.std, judge.w, np.asarray([judge.b]))
    judge_bits = b"".join(np.ascontiguousarray(a, np.float64).tobytes() for a in arrays)
    return {
        "model": head_fingerprint(model, tok),
        "code": _digest(code.encode()),
        "vader": vader,
        "judge": None if judge is None else _digest(judge_bits),
        "judge_layer": judge_layer,
        **{k: getattr(config, k) for k in ("new_tokens", "positions", "batch_size")},
    }


def _signed(res: dict[str, Any], direction: str, key: str) -> np.ndarray:
    """Per-prompt score toward ``direction``: VADER compound, or the judge's P(positive) - 1/2,
    negated for the negative direction."""
    sign = 1.0 if direction == "positive" else -1.0
    v = np.asarray(res[key], dtype=np.float64)
    return sign * (v - 0.5 if key == "judge" else v)


def _summary(res: dict[str, Any], direction: str) -> dict[str, Any]:
    n = len(res["vader"])
    out = {}
    for key in ("vader", "judge"):
        if key in res:
            s = _signed(res, direction, key)
            out[key] = float(s.mean())
            out[f"{key}_se"] = float(s.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    lp = np.asarray(res["logppl"])
    out["logppl"] = float(lp.mean())
    out["ppl"] = float(math.exp(lp.mean()))
    return out


def run(config: SentimentSteeringConfig, out_dir: Path) -> Result:
    from updatescope.errors import InputError
    from updatescope.steering import (
        capture_residuals,
        decoder_layers,
        encode_prompts,
    )

    t0 = time.perf_counter()
    vader = texts.Vader()
    model, tok = heads.load_model(config.model)
    n_layers = len(decoder_layers(model))
    steer_layers = [x for x in config.steer_layers if x < n_layers]
    if not steer_layers:
        raise InputError(f"none of steer_layers {list(config.steer_layers)} exists in a {n_layers}-layer model")
    judge_layer = min(config.judge_layer, n_layers - 1)
    layers = list(range(n_layers))
    bs = config.batch_size

    _log(f"{n_layers}-layer model loaded")
    # --- prompts: neutral news openings, disjoint select and test splits
    openings = texts.neutral_openings(
        texts.news_sentences(), vader.compound, config.prompt_words, config.neutral_tol, config.seed
    )
    select, test = texts.split_prompts(openings, config.n_select, config.n_test, config.seed)

    # --- CAA, its split halves and the trained judge from the polarity sentences; one step pushed forward
    v_caa, split_half, judge_rec, judge, cosine, pf, searched = _vectors(model, tok, config, layers, judge_layer)

    _log("CAA, split halves, judge, one-step shifts and search-derived vectors done")
    # --- steering: scale is a fraction of the mean residual norm at the layer (select prompts' last token)
    s_ids, s_mask = encode_prompts(tok, select, side="left")
    resid = capture_residuals(model, s_ids, s_mask, position="last", batch_size=bs).double().norm(dim=2).mean(1)
    gen = Generator(model, tok, config, judge_layer, resid)
    gen.vader = vader
    gen.judge = judge
    gen.key_base = store_context(model, tok, config, judge_layer, judge)
    d = v_caa.shape[1]
    g = torch.Generator().manual_seed(config.seed * 1000 + 1)  # the random vectors, one per direction
    vectors = {
        direction: {
            "caa": v_caa * sign,
            "pushforward": pf[direction],
            "search": searched[direction][0],
            "random": torch.randn(n_layers, d, generator=g, dtype=torch.float64),
        }
        for direction, sign in (("positive", 1.0), ("negative", -1.0))
    }

    grid, chosen, limit = _select_grid(gen, config, select, vectors, steer_layers)

    # --- test: every method at its chosen setting; random at the setting of each method it is compared with
    _log("select grid done")
    test_runs = _test_runs(gen, config, test, vectors, chosen)
    comparisons, gates = _compare(config, test_runs, chosen, split_half["mean"], judge is not None)
    test_summary = {
        direction: {k: {**_summary(r, direction), "setting": _setting(chosen[direction], k)} for k, r in runs.items()}
        for direction, runs in test_runs.items()
    }
    examples = {
        direction: {
            k: [{"prompt": p, "continuation": t} for p, t in zip(test[:N_EXAMPLES], r["texts"][:N_EXAMPLES])]
            for k, r in runs.items()
        }
        for direction, runs in test_runs.items()
    }
    per_prompt = {
        direction: {k: {key: r[key] for key in ("vader", "judge", "logppl") if key in r} for k, r in runs.items()}
        for direction, runs in test_runs.items()
    }
    metrics = {
        "n": {"select": len(select), "test": len(test), "openings": len(openings), "polarity": judge_rec["classes"]},
        "n_layers": n_layers,
        "resid_norm": resid.tolist(),
        "judge": judge_rec,
        "cosine": cosine,
        "search": {direction: rec for direction, (_, rec) in searched.items()},
        "fluency_limit_logppl": limit,
        "grid_select": grid,
        "chosen": chosen,
        "test": test_summary,
        "gates": gates,
        "comparisons": comparisons,
        "per_prompt_test": per_prompt,
        "examples": examples,
        "prompts": {"select": select, "test": test},
    }
    _print(metrics)
    return Result(
        NAME,
        config_record(
            config,
            steer_layers_used=steer_layers,
            judge_layer_used=judge_layer,
            comparisons=[f"{a} - {b}" for a, b in COMPARISONS],
            search_comparisons=[f"{a} - {b}" for a, b in SEARCH_COMPARISONS],
        ),
        metrics,
        time.perf_counter() - t0,
        {
            "sentiment_steering_tradeoff.png": lambda path: figures.draw_tradeoff(grid, limit, path),
        },
    )


def _vectors(model: Any, tok: Any, config: SentimentSteeringConfig, layers: list[int], judge_layer: int) -> tuple:
    """CAA (mean over tokens of positive minus negative sentences) per layer, its split-half
    cosines, the trained judge (None when refused) with its record, the cosines of the
    one-step shifts with CAA, the shifts, and the search-derived vectors with their records
    (from the same step).  -> (v_caa, split_half, judge_rec, judge, cosine,
    {direction: (Lyr, d)}, {direction: ((Lyr, d), records)})."""
    from updatescope.experiments.sentiment_steering import judges
    from updatescope.steering import encode_prompts

    bs = config.batch_size
    # --- polarity sentences: CAA (mean over tokens), its split halves, the trained judge's features
    pos, neg = texts.polarity_sentences()
    ids, mask = encode_prompts(tok, pos + neg, side="right")
    acts = texts.token_means(model, ids, mask, mask, layers, bs)  # (Lyr, n_pos + n_neg, d)
    a_pos, a_neg = acts[:, : len(pos)], acts[:, len(pos) :]
    v_caa = a_pos.mean(1) - a_neg.mean(1)  # (Lyr, d)
    g = torch.Generator().manual_seed(config.seed)
    halves = []
    for _ in range(texts.SPLITS):
        pp, pn = torch.randperm(len(pos), generator=g), torch.randperm(len(neg), generator=g)
        h1 = a_pos[:, pp[: len(pos) // 2]].mean(1) - a_neg[:, pn[: len(neg) // 2]].mean(1)
        h2 = a_pos[:, pp[len(pos) // 2 :]].mean(1) - a_neg[:, pn[len(neg) // 2 :]].mean(1)
        halves.append(_cos(h1, h2))
    split_half = {"per_split": halves, "mean": np.mean(halves, axis=0).tolist()}

    y = np.array([1] * len(pos) + [0] * len(neg))
    feats = acts[judge_layer].numpy()
    cv = judges.cross_validate(feats, y, config.judge_l2, config.judge_folds, config.seed)
    usable = verdicts.judge_usable(cv["accuracy"], config.min_judge_accuracy)
    judge_rec = {
        "layer": judge_layer,
        **cv,
        "usable": usable,
        "floor": config.min_judge_accuracy,
        "classes": [len(pos), len(neg)],
    }

    judge = judges.fit_logistic(feats, y, config.judge_l2) if usable else None

    # --- the pushforward of one gradient step on each class's sentences, and the search-derived
    # vectors (Best-of-N weight perturbations at fractions of that step's norm, pushed forward)
    pf, searched = {}, {}
    for i, (direction, sents, sign) in enumerate((("positive", pos, 1.0), ("negative", neg, -1.0))):
        step = texts.class_step(model, tok, sents[: config.step_sentences])
        pf[direction] = texts.one_step_shift(model, step, config.pushforward_sentences, bs)
        seed = config.seed * 1000 + 700 + 10 * i
        searched[direction] = search.search_shifts(model, tok, config, sents, step, v_caa * sign, seed)
        del step
    cosine = {
        "layers": layers,
        "split_half_caa": split_half,
        "pushforward_positive_caa": _cos(pf["positive"], v_caa),
        "pushforward_negative_caa": _cos(pf["negative"], -v_caa),
        "pushforward_positive_negative": _cos(pf["positive"], pf["negative"]),
    }

    return v_caa, split_half, judge_rec, judge, cosine, pf, searched


def _select_grid(
    gen: Generator, config: SentimentSteeringConfig, select: list[str], vectors: dict, steer_layers: list[int]
) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Every method at every (layer, scale) on the select prompts, the base model and the
    prompting baseline; each method's chosen cell under the fluency bound.
    -> (grid, chosen per direction and method (None: no admissible cell), log-perplexity bound)."""
    base_sel = gen.run(select)
    limit = float(np.mean(base_sel["logppl"])) + math.log(config.max_ppl_ratio)
    grid: dict[str, Any] = {}
    chosen: dict[str, Any] = {}
    for direction in DIRECTIONS:
        prefix = config.prompt_prefix.format(direction=direction)
        grid[direction] = {
            "base": _summary(base_sel, direction),
            "prompting": _summary(gen.run(select, prefix=prefix), direction),
        }
        chosen[direction] = {}
        for method, vec in vectors[direction].items():
            _log(f"select grid: {direction}, {method}")
            cells = [[_summary(gen.run(select, vec[x], x, s), direction) for s in config.scales] for x in steer_layers]
            grid[direction][method] = {"layers": steer_layers, "scales": list(config.scales), "cells": cells}
            best = verdicts.admissible_best(
                [[c["vader"] for c in row] for row in cells], [[c["logppl"] for c in row] for row in cells], limit
            )
            chosen[direction][method] = (
                None if best is None else {"layer": steer_layers[best[0]], "scale": config.scales[best[1]]}
            )
    return grid, chosen, limit


def _test_runs(
    gen: Generator, config: SentimentSteeringConfig, test: list[str], vectors: dict, chosen: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The test prompts: base, prompting, each method at its chosen setting, and the random
    vector at the setting of each method it is compared with.  -> {direction: {run: results}}."""
    base_test = gen.run(test)
    test_runs: dict[str, dict[str, Any]] = {}
    for direction in DIRECTIONS:
        runs: dict[str, Any] = {"base": base_test}
        runs["prompting"] = gen.run(test, prefix=config.prompt_prefix.format(direction=direction))
        done: dict[tuple[int, float], Any] = {}
        for method in ("caa", "pushforward", "search"):
            ch = chosen[direction][method]
            if ch is None:
                continue
            runs[method] = gen.run(test, vectors[direction][method][ch["layer"]], ch["layer"], ch["scale"])
            key = (ch["layer"], ch["scale"])
            if key not in done:
                done[key] = gen.run(test, vectors[direction]["random"][ch["layer"]], ch["layer"], ch["scale"])
            runs[f"random@{method}"] = done[key]
        test_runs[direction] = runs
    return test_runs


def _setting(chosen: dict[str, Any], key: str) -> dict[str, Any] | None:
    method = key.split("@")[-1]
    return chosen.get(method)


def _compare(
    config: SentimentSteeringConfig,
    runs: dict[str, dict[str, Any]],
    chosen: dict[str, Any],
    split_half: list[float],
    judge_usable: bool,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Paired per-prompt differences of the pre-specified comparisons, one Holm family per
    judge over both directions; then CAA's gate per direction and each comparison's word."""
    from dataclasses import asdict

    from updatescope.select.metrics import paired_verdicts

    def first(method: str, second: str) -> tuple[str, str]:
        # a random vector is compared at the setting of the method it is compared with
        return method, (f"random@{method}" if second == "random" else second)

    out: dict[str, Any] = {}
    for judge in ("vader", "judge") if judge_usable else ("vader",):
        found: dict[str, Any] = {}
        # two families per judge, each Holm-corrected over both directions
        for family, pairs in ((judge, COMPARISONS), (f"{judge}, search-derived", SEARCH_COMPARISONS)):
            diffs: dict[str, list[float]] = {}
            for direction in DIRECTIONS:
                r = runs[direction]
                for a, b in pairs:
                    ka, kb = first(a, b)
                    if ka in r and kb in r:
                        diffs[f"{direction}: {a} - {b}"] = (
                            _signed(r[ka], direction, judge) - _signed(r[kb], direction, judge)
                        ).tolist()
            for v in paired_verdicts(diffs, family=family, alpha=config.alpha, seed=config.seed):
                found[v.comparison] = asdict(v)
        out[judge] = found
    gates = {}
    for direction in DIRECTIONS:
        ch = chosen[direction]["caa"]
        sh = split_half[ch["layer"]] if ch is not None else split_half[min(config.steer_layers[0], len(split_half) - 1)]
        gates[direction] = {
            "split_half": sh,
            **verdicts.caa_gate(
                sh, out["vader"].get(f"{direction}: caa - random"), config.min_split_half, config.alpha
            ),
        }
    for found in out.values():
        for direction in DIRECTIONS:
            for a, b in COMPARISONS + SEARCH_COMPARISONS:
                name = f"{a} - {b}"
                key = f"{direction}: {name}"
                word = verdicts.comparison_word(name, found.get(key), gates[direction]["open"], config.alpha)
                if key in found:
                    found[key]["shown"] = word
                else:
                    found[key] = {"comparison": key, "shown": word}
    return out, gates


def _print(m: dict[str, Any]) -> None:
    from updatescope.report.console import print_rows

    j = m["judge"]
    print(
        f"trained judge: held-out accuracy {j['accuracy']:.3f} ± {j['se']:.3f} ({'used' if j['usable'] else 'refused'})"
    )
    rows = []
    for direction, tab in m["test"].items():
        for k, v in tab.items():
            s = v["setting"]
            rows.append(
                [
                    direction,
                    k,
                    "" if s is None or k in ("base", "prompting") else f"{s['layer']}, {s['scale']:g}",
                    f"{v['vader']:+.3f} ± {v['vader_se']:.3f}",
                    f"{v['judge']:+.3f}" if "judge" in v else "",
                    f"{v['ppl']:.1f}",
                ]
            )
    print_rows("test prompts", ["direction", "method", "layer, scale", "VADER toward", "judge toward", "ppl"], rows)
    rows = [
        [judge, k, f"{v.get('mean', float('nan')):+.3f}", f"{v.get('p_holm', float('nan')):.3g}", v["shown"]]
        for judge, found in m["comparisons"].items()
        for k, v in found.items()
    ]
    print_rows("paired comparisons (Holm per judge)", ["judge", "comparison", "mean diff", "p Holm", "verdict"], rows)
