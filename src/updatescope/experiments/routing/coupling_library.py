"""The coupling-dark library of ``reproduce routing`` (``--set design=coupling_dark``).

Per prompt family (a cue and its answer words), one LoRA adapter per *mapping* of the input
classes to the answer words (``mappings.mappings_for``), every adapter trained on the same
inputs (``n_fit`` per class), posed as the requests are (amendment 2, :func:`fit_rows`: solved
examples of other training inputs, then the example, every answer counted), and represented
by the signature of its own training rows, the answers counted.  The adapters share their
inputs and their answer-word histogram; only the input -> answer association tells them apart.

Requests: per mapping, ``queries_per_mapping`` held-out inputs, each posed twice:

- **few-shot**: ``shots`` solved examples per class of the request's mapping, in random
  order, then the query.  The routers read the prompt without the query's answer; the
  signature routers count the solved examples' answer tokens (``fisher_all_tokens``: every
  token of the prompt, as ``updatescope route`` does by default);
- **input-only** (the control): the query alone.  Nothing in it reveals the mapping.

Ground truth: the loss at the query's answer under every adapter, per adapter-training seed;
the oracle is the adapter with the lowest loss.  A router whose scores tie exactly (identical
signatures or centroids) is charged the mean loss of its tied adapters and credited the share
of them that is the oracle's.  Analysis: PREREGISTRATION.md beside this file (amendment 1).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.capture.chunks import target_mask
from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads, mapping_tasks, mappings
from updatescope.experiments.caching import cache_key
from updatescope.experiments.groundtruth import lora as lora_gt
from updatescope.experiments.groundtruth import seeds as gt_seeds
from updatescope.experiments.routing import runner as domains_runner
from updatescope.experiments.routing.config import RoutingConfig

KINDS = ("few_shot", "input_only")
#: routers that choose one adapter per request (routed loss, accuracy)
CHOOSERS = ("fisher", "fisher_all_tokens", "error", "activation", "embedding")
ROUTERS = (*CHOOSERS, "arrow", "uniform_merge", "base", "random", "own", "oracle")
#: what each router reads of a request
SEES = {
    "fisher": "the joint score (head input x error) at the solved examples' answer tokens; input-only: "
    "every next-token target of the input",
    "fisher_all_tokens": "the joint score over every next-token target of the prompt",
    "error": "the error-only score (the head's error vectors) at the same tokens as fisher",
    "activation": "the activation-only score (head inputs) at the same tokens as fisher",
    "embedding": "the cosine of the mean head input at the same positions to each adapter's training "
    "centroid (the mean head input predicting its training rows' answers)",
    "arrow": "per token, the hidden state entering each adapted layer against each adapter's top "
    "singular directions (PEFT create_arrow_model, top-k of the library)",
    "uniform_merge": "nothing: every adapter averaged",
    "base": "nothing: no adapter",
    "random": "nothing: the expected loss of a uniformly drawn adapter",
    "own": "the request's mapping (a label no router has)",
    "oracle": "the request's loss under every adapter",
}
#: pre-specified comparisons on few-shot requests: (name, other router); difference other − fisher
COMPARISONS = domains_runner.COMPARISONS
#: the control family: FisherSketch against random, per request kind
CONTROLS = (
    ("FisherSketch vs random, few-shot", "few_shot"),
    ("FisherSketch vs random, input-only", "input_only"),
)


def _tokens(ids: list[list[int]], masks: list[list[bool]] | None = None) -> Any:
    from updatescope.pipeline.corpus import Tokens

    if masks is None:
        masks = [[False] + [True] * (len(x) - 1) for x in ids]
    return Tokens([list(x) for x in ids], [list(m) for m in masks], list(range(len(ids))))


def _prompt_ids(tok: Any, text: str, cue: str) -> list[int]:
    return list(tok(mapping_tasks.prompt(text, cue))["input_ids"])


def head_inputs(model: Any, ids: list[list[int]], masks: list[list[bool]]) -> torch.Tensor:
    """Mean head input over the positions that predict each sequence's counted tokens -> (n, d)."""
    from updatescope.capture.hook import find_output_linear

    head = find_output_linear(model)
    grabbed: list[torch.Tensor] = []
    handle = head.register_forward_pre_hook(lambda _m, args: grabbed.append(args[0].detach().float()))
    out = []
    try:
        with torch.no_grad():
            for x, m in zip(ids, masks, strict=True):
                model(input_ids=torch.tensor([x]), use_cache=False)
                h = grabbed.pop()[0]
                pos = [j - 1 for j, keep in enumerate(m) if keep]
                out.append(h[pos].mean(0))
    finally:
        handle.remove()
    return torch.stack(out)


def build_family(cfg: RoutingConfig, tok: Any, cue: str) -> dict[str, Any]:
    """One family's mappings, adapter training rows and requests (both kinds)."""
    cd = cfg.coupling_dark
    words = mapping_tasks.FAMILIES[cue]
    ids = mapping_tasks.word_ids(tok, words)
    n_cls = len(cd.classes)
    maps = mappings.mappings_for(n_cls, len(words))
    n_query = -(-cd.queries_per_mapping * len(maps) // n_cls)
    per_class = [
        mapping_tasks.class_texts(c, cd.n_fit + cd.shot_pool + n_query, cfg.seed + 7 * k)
        for k, c in enumerate(cd.classes)
    ]
    names = [f"{cue}{'/'.join(words[a] for a in m)}" for m in maps]
    fit_seqs, fit_answers = fit_rows(cd, tok, cue, per_class, [[ids[a] for a in m] for m in maps], cfg.seed)
    rng = np.random.default_rng(cfg.seed + 1009)
    req: dict[str, Any] = {"mapping": [], "query_class": []}
    for kind in KINDS:
        req[kind] = {"route": [], "mask": [], "full": []}
    for mi, m in enumerate(maps):
        for r in range(cd.queries_per_mapping):
            q = mi * cd.queries_per_mapping + r
            k, row = q % n_cls, cd.n_fit + cd.shot_pool + q // n_cls
            ans = ids[m[k]]
            shots = [
                (per_class[c][cd.n_fit + int(j)], ids[m[c]])
                for c in range(n_cls)
                for j in rng.choice(cd.shot_pool, size=cd.shots, replace=False)
            ]
            shots = [shots[int(i)] for i in rng.permutation(len(shots))]
            full, answers = mapping_tasks.solved_sequence(tok, [*shots, (per_class[k][row], ans)], cue)
            req["few_shot"]["full"].append(full)
            req["few_shot"]["route"].append(full[:-1])
            req["few_shot"]["mask"].append([j in answers[:-1] for j in range(len(full) - 1)])
            alone = [*_prompt_ids(tok, per_class[k][row], cue), ans]
            req["input_only"]["full"].append(alone)
            req["input_only"]["route"].append(alone[:-1])
            req["input_only"]["mask"].append([False] + [True] * (len(alone) - 2))
            req["mapping"].append(mi)
            req["query_class"].append(k)
    return {
        "cue": cue,
        "words": list(words),
        "maps": [list(m) for m in maps],
        "names": names,
        "fit_seqs": fit_seqs,
        "fit_answers": fit_answers,
        "requests": req,
    }


def fit_rows(cd: Any, tok: Any, cue: str, per_class: list[list[str]], answers: list[list[int]], seed: int):
    """Every adapter's training rows in the request format (amendment 2): per training example
    i of class k, ``cd.shots`` solved examples per class drawn from that class's *training*
    examples other than i, in random order, then i; labelled by the adapter's mapping
    (``answers[a][class]``: answer token per class).  One draw serves every adapter ->
    (rows[a][i] token ids, the answer positions of row i, shared by every adapter)."""
    n_cls = len(per_class)
    rng = np.random.default_rng(seed + 2003)
    layout = []
    for k in range(n_cls):
        for i in range(cd.n_fit):
            shots = [
                (c, int(j))
                for c in range(n_cls)
                for j in rng.choice([j for j in range(cd.n_fit) if (c, j) != (k, i)], size=cd.shots, replace=False)
            ]
            layout.append(([shots[int(o)] for o in rng.permutation(len(shots))], (k, i)))
    rows, positions = [], None
    for ans in answers:
        built = [
            mapping_tasks.solved_sequence(tok, [(per_class[c][j], ans[c]) for c, j in [*shots, query]], cue)
            for shots, query in layout
        ]
        if positions is None:
            positions = [p for _, p in built]
        elif positions != [p for _, p in built]:
            raise InputError(f"family {cue!r}: the answer words must be one token each (their positions differ)")
        rows.append([x for x, _ in built])
    return rows, positions


#: scores this close (relative) are one tie: identical columns of a matrix product may differ
#: in their last bits
TIE = 1e-12


def _pick_sets(scores: torch.Tensor) -> list[list[int]]:
    """Per row, the adapters with the highest score (all of them when the row ties;
    NaN counts as −inf; a row with no finite score ties every adapter)."""
    s = scores.double()
    s = torch.where(torch.isfinite(s), s, torch.full_like(s, -float("inf")))
    out = []
    for row in s:
        top = float(row.max())
        if top == -float("inf"):
            out.append(list(range(len(row))))
        else:
            out.append([int(i) for i in (row >= top - TIE * max(1.0, abs(top))).nonzero()[:, 0]])
    return out


def route_family(cfg: RoutingConfig, model: Any, tok: Any, fp: str, fam: dict[str, Any], log) -> dict[str, Any]:
    """Every signature and embedding router's choice sets per request kind (seed-independent)."""
    from updatescope.pipeline import Router, SketchOptions, sketch_corpus

    opts = SketchOptions(sketch_dim=cfg.sketch_dim, seed=cfg.seed)
    t0 = time.perf_counter()
    # per row, True at its answer tokens (the counted targets)
    rows0 = zip(fam["fit_seqs"][0], fam["fit_answers"], strict=True)
    masks = [target_mask(len(x), p, i) for i, (x, p) in enumerate(rows0)]
    sigs = {
        n: sketch_corpus(model, tok, _tokens(rows, masks), opts, progress=False)
        for n, rows in zip(fam["names"], fam["fit_seqs"], strict=True)
    }
    sketch_s = time.perf_counter() - t0
    router = Router(model, tok, sigs)
    # each adapter's centroid: the mean head input where its training answers are predicted
    # (the solved examples' answers differ between adapters, so the centroids do too)
    cents = torch.stack([head_inputs(model, rows, masks).mean(0) for rows in fam["fit_seqs"]])
    out: dict[str, Any] = {"seconds": {"sketch": sketch_s}, "choices": {}, "scores": {}, "ambiguous": {}}
    for kind in KINDS:
        r = fam["requests"][kind]
        t0 = time.perf_counter()
        rs = router.score(_tokens(r["route"], r["mask"]))
        out["seconds"][f"route_{kind}"] = time.perf_counter() - t0
        every = rs if kind == "input_only" else router.score(_tokens(r["route"]))
        emb = head_inputs(model, r["route"], r["mask"])
        cos = (
            torch.nn.functional.normalize(emb.double(), dim=1) @ torch.nn.functional.normalize(cents.double(), dim=1).T
        )
        sc = {
            "fisher": rs.score,
            "fisher_all_tokens": every.score,
            "error": rs.error,
            "activation": rs.activation,
            "embedding": cos,
        }
        out["choices"][kind] = {k: _pick_sets(v) for k, v in sc.items()}
        out["scores"][kind] = {k: v.tolist() for k, v in sc.items()}
        out["ambiguous"][kind] = [c.ambiguous for c in router.choose(rs)]
    log(f"{fam['cue']} routers scored ({sketch_s:.1f}s to sketch {len(sigs)} adapters)")
    return out


def truth_family(cfg, model, tok, fp, fam, seed, log) -> dict[str, Any]:
    """One seed's adapters of one family -> per request kind the loss at the query's answer
    under every adapter (n, A), the Arrow router, the uniform merge and the base model."""
    lc = cfg.coupling_dark.lora
    width = max(len(x) for rows in fam["fit_seqs"] for x in rows)
    n_counted = sum(len(p) for p in fam["fit_answers"])
    fit_blocks = []
    for name, rows in zip(fam["names"], fam["fit_seqs"], strict=True):
        b = lora_gt.capture_block_inputs(
            model, tok, rows, n_last=lc.n_last, fp=fp, positions=fam["fit_answers"], seq_len=width, desc=f"fit {name}"
        )
        if int((b["labels"] != IGNORE_INDEX).sum()) != n_counted:
            raise RuntimeError(f"routing coupling-dark: {name}: expected every answer of every training row counted")
        fit_blocks.append(b)
    req = {}
    for kind in KINDS:
        full = fam["requests"][kind]["full"]
        req[kind] = lora_gt.capture_block_inputs(
            model,
            tok,
            full,
            n_last=lc.n_last,
            fp=fp,
            positions=[[-1]] * len(full),
            seq_len=max(len(x) for x in full),
            desc=f"requests {fam['cue']} {kind}",
        )
        if int((req[kind]["labels"] != IGNORE_INDEX).sum()) != len(full):
            raise RuntimeError("routing coupling-dark: expected one counted answer per request")
    out: dict[str, Any] = {k: {"loss": []} for k in KINDS}
    deltas, states, train_after = [], [], []
    for mi, name in enumerate(fam["names"]):
        t0 = time.perf_counter()
        data = fit_blocks[mi]
        tail = lora_gt.finetune_from_config(model, data, lc, seed=seed + mi)
        for kind in KINDS:
            out[kind]["loss"].append(lora_gt.sequence_losses(tail, req[kind])[0].numpy())
        train_after.append(lora_gt.mean_loss(tail, data))
        deltas.append(domains_runner.deltas_of(tail))
        states.append(domains_runner.adapter_state(tail))
        log(f"adapter {name} (seed {seed + mi}): train loss {train_after[-1]:.3f} ({time.perf_counter() - t0:.1f}s)")
    merged = domains_runner.tail_with_deltas(model, lc.n_last, deltas, [1.0 / len(deltas)] * len(deltas))
    base_tail = lora_gt.tail_model(model, lc.n_last)
    arrow_cfg = dataclasses.replace(cfg, lora=lc, arrow_top_k=min(cfg.arrow_top_k, len(states)))
    for kind in KINDS:
        out[kind]["loss"] = np.stack(out[kind]["loss"], axis=1)
        out[kind]["uniform_merge"] = lora_gt.sequence_losses(merged, req[kind])[0].numpy()
        out[kind]["base"] = lora_gt.sequence_losses(base_tail, req[kind])[0].numpy()
        out[kind]["arrow"] = domains_runner.arrow_losses(model, arrow_cfg, states, req[kind], seed).numpy()
    out["train_loss_after"] = dict(zip(fam["names"], train_after, strict=True))
    return out


#: the ground-truth code's digest, part of every stored truth's key
_TRUTH_CODE = hashlib.sha256(inspect.getsource(truth_family).encode()).hexdigest()[:16]


def store_path(cfg: RoutingConfig, fp: str, fam: dict[str, Any], seed: int) -> tuple[Path, str] | None:
    """Where one (seed, family)'s ground truth lives in ``cfg.truth_store``, and its key: the
    recipe, the tokens of the training rows and of the requests, the model, the fine-tuning
    code, the family and the seed.  None without a store."""
    if cfg.truth_store is None:
        return None
    rows = {"fit": fam["fit_seqs"], "answers": fam["fit_answers"], "requests": fam["requests"]}
    key = cache_key(
        "routing coupling-dark truth v1",
        dataclasses.asdict(cfg.coupling_dark),
        cfg.arrow_top_k,
        hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest(),
        fp,
        lora_gt._code_digest(),
        _TRUTH_CODE,
        fam["cue"],
        seed,
    )
    slug = re.sub(r"[^A-Za-z0-9]+", "", fam["cue"]) or "family"
    return Path(cfg.truth_store) / f"seed{seed}-{slug}-{key[:16]}.json", key


def stored_truth(cfg, model, tok, fp, fam, seed, log) -> dict[str, Any]:
    """:func:`truth_family`, read from / written to ``cfg.truth_store`` when it is set (a file
    whose key differs from the run's is refused in one line naming it)."""
    from updatescope.records import write_json_atomic

    where = store_path(cfg, fp, fam, seed)
    if where is None:
        return truth_family(cfg, model, tok, fp, fam, seed, log)
    path, key = where
    if path.is_file():
        try:
            got = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"truth store {path}: not a readable truth file ({exc})") from exc
        if got.get("key") != key:
            raise InputError(f"truth store {path}: its key does not match this run; move it away")
        log(f"{fam['cue']} seed {seed}: ground truth loaded from {path}")
        out: dict[str, Any] = {k: {n: np.asarray(v) for n, v in got[k].items()} for k in KINDS}
        out["train_loss_after"] = got["train_loss_after"]
        return out
    out = truth_family(cfg, model, tok, fp, fam, seed, log)
    rec = {k: {n: np.asarray(v).tolist() for n, v in out[k].items()} for k in KINDS}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        {"key": key, "family": fam["cue"], "seed": seed, **rec, "train_loss_after": out["train_loss_after"]}, path
    )
    return out


def evaluate(own: np.ndarray, by_seed: list[dict[str, Any]], choices: dict[str, list[list[int]]]) -> dict[str, Any]:
    """Per request and router: routed loss (nats at the query's answer, mean over seeds) and,
    for the choosers, the share of their (tied) choices that is the oracle's / the request's
    own mapping's adapter."""
    n = len(own)
    per = {r: np.zeros(n) for r in ROUTERS}
    hit = {r: np.zeros(n) for r in CHOOSERS}
    own_hit = {r: np.array([np.mean([a == own[i] for a in choices[r][i]]) for i in range(n)]) for r in CHOOSERS}
    rows = np.arange(n)
    for s in by_seed:
        L = s["loss"]
        oracle = L.argmin(1)
        vals = {
            "oracle": L[rows, oracle],
            "random": L.mean(1),
            "own": L[rows, own],
            "base": s["base"],
            "uniform_merge": s["uniform_merge"],
            "arrow": s["arrow"],
        }
        for r in CHOOSERS:
            vals[r] = np.array([L[i, choices[r][i]].mean() for i in range(n)])
            hit[r] += np.array([np.mean([a == oracle[i] for a in choices[r][i]]) for i in range(n)]) / len(by_seed)
        for r, v in vals.items():
            per[r] += np.asarray(v, dtype=float) / len(by_seed)
    return {
        "routed_loss": {r: v.tolist() for r, v in per.items()},
        "oracle_hit": {r: v.tolist() for r, v in hit.items()},
        "own_hit": {r: v.tolist() for r, v in own_hit.items()},
    }


def summarise(ev: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"n_requests": len(ev["routed_loss"]["oracle"])}
    orc = np.array(ev["routed_loss"]["oracle"])
    for r in ROUTERS:
        v = np.array(ev["routed_loss"][r])
        gap = v - orc
        se = lambda x: float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else None
        out[r] = {
            "routed_loss": float(v.mean()),
            "routed_loss_se": se(v),
            "oracle_gap": float(gap.mean()),
            "oracle_gap_se": se(gap),
        }
        if r in ev["oracle_hit"]:
            out[r]["oracle_accuracy"] = float(np.mean(ev["oracle_hit"][r]))
            out[r]["own_accuracy"] = float(np.mean(ev["own_hit"][r]))
    return out


def verdicts(cfg: RoutingConfig, units: list[str], clusters: dict[str, str], ev: dict[str, Any]) -> dict[str, Any]:
    """Amendment 1's comparisons: few-shot routed loss, other − FisherSketch (Holm over
    :data:`COMPARISONS`); the control, random − FisherSketch per request kind (Holm over
    :data:`CONTROLS`).  Sign-flip over requests; bootstrap clustered over (family, mapping)."""
    fs = ev["few_shot"]["routed_loss"]
    diffs = {c: {u: fs[o][i] - fs["fisher"][i] for i, u in enumerate(units)} for c, o in COMPARISONS}
    ctrl = {
        c: {u: ev[k]["routed_loss"]["random"][i] - ev[k]["routed_loss"]["fisher"][i] for i, u in enumerate(units)}
        for c, k in CONTROLS
    }
    common = dict(n_key="n_requests", mean_key="mean_loss_difference", n_boot=cfg.n_boot, seed=cfg.seed)
    return {
        "rule": '"better" when FisherSketch routes to lower loss than the other router: Holm-adjusted '
        "two-sided sign-flip p < 0.05 over requests with the mean difference (other − FisherSketch) > 0; "
        '"worse" when p < 0.05 with it < 0; else "no difference"',
        "comparisons": mappings.verdict_rows(
            diffs, clusters, family="routing, coupling-dark library: few-shot requests", **common
        ),
        "control": mappings.verdict_rows(
            ctrl, clusters, family="routing, coupling-dark library: FisherSketch against random", **common
        ),
    }


def own_mapping_gains(fams: list[dict[str, Any]], truths: list[list[dict[str, Any]]], kind: str) -> list[float]:
    """Per (seed, family, adapter), in that order: the mean over the requests of the adapter's
    own mapping of (the other adapters' mean loss − its loss) at the query's answer."""
    gains = []
    for t in truths:
        for f, tf in zip(fams, t, strict=True):
            L = tf[kind]["loss"]
            m = np.array(f["requests"]["mapping"])
            for a in range(L.shape[1]):
                mine = m == a
                others = np.delete(L[mine], a, axis=1).mean(1)
                gains.append(float(np.mean(others - L[mine, a])))
    return gains


def run(cfg: RoutingConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg = domains_runner.PREREG
    prereg_sha = hashlib.sha256(prereg.read_bytes()).hexdigest() if prereg.exists() else None
    cd = cfg.coupling_dark
    model, tok = heads.load_model(cfg.model)
    fp = heads.fingerprint(model, tok)
    fams = [build_family(cfg, tok, cue) for cue in cd.families]
    routed = [route_family(cfg, model, tok, fp, f, log) for f in fams]
    truths: list[list[dict[str, Any]]] = []  # [seed][family]
    for j in range(cfg.gt_seeds):
        s = gt_seeds.gt_seed(cfg.seed, j)
        log(f"coupling-dark library: seed {j + 1}/{cfg.gt_seeds} ({s})")
        truths.append([stored_truth(cfg, model, tok, fp, f, s, log) for f in fams])
    # requests of every family in one list; adapters are indexed within their family
    if len({len(f["names"]) for f in fams}) != 1:
        raise InputError("coupling_dark.families must have the same number of mappings (answer words)")
    own = np.concatenate([np.array(f["requests"]["mapping"]) for f in fams])
    units, clusters = [], {}
    for f in fams:
        for i, m in enumerate(f["requests"]["mapping"]):
            units.append(f"{f['cue']} request {i}")
            clusters[units[-1]] = f["names"][m]  # the family and mapping of the request
    ev, summary, by_seed_rec = {}, {}, {}
    for kind in KINDS:
        seeds = []
        for t in truths:
            # one family's (n, A) blocks stacked: every family has the same number of adapters
            seeds.append(
                {k: np.concatenate([tf[kind][k] for tf in t]) for k in ("loss", "base", "uniform_merge", "arrow")}
            )
        choices = {r: [c for rf in routed for c in rf["choices"][kind][r]] for r in CHOOSERS}
        ev[kind] = evaluate(own, seeds, choices)
        summary[kind] = summarise(ev[kind])
        by_seed_rec[kind] = [{k: v.tolist() for k, v in s.items()} for s in seeds]
    gains = {kind: own_mapping_gains(fams, truths, kind) for kind in KINDS}
    regime = {
        "own_mapping_gain_few_shot": gains["few_shot"],
        "own_mapping_gain_input_only": gains["input_only"],  # secondary (amendment 2): gates nothing
        "adapters_learned_their_mapping": all(g > 0 for g in gains["few_shot"]),
    }
    ver = verdicts(cfg, units, clusters, ev)
    for v in ver["comparisons"] + ver["control"]:
        log(f"{v['comparison']}: Δ loss {v['mean_loss_difference']:+.4f}, Holm p {v['p_holm']:.3g} -> {v['word']}")
    metrics = {
        "powered": not cfg.quick,
        "design": "coupling_dark",
        "routers_see": SEES,
        "families": [
            {k: f[k] for k in ("cue", "words", "maps", "names")} | {"classes": list(cd.classes)} for f in fams
        ],
        "requests": {
            "unit": units,
            "mapping": own.tolist(),
            "cluster": [clusters[u] for u in units],
            "query_class": [c for f in fams for c in f["requests"]["query_class"]],
            "tokens": {k: [len(x) for f in fams for x in f["requests"][k]["route"]] for k in KINDS},
        },
        "regime": regime,
        "train_loss_after": [{c: tf["train_loss_after"] for c, tf in zip(cd.families, t, strict=True)} for t in truths],
        "truth": by_seed_rec,
        "router_scores": {k: [rf["scores"][k] for rf in routed] for k in KINDS},
        "ambiguous": {k: [a for rf in routed for a in rf["ambiguous"][k]] for k in KINDS},
        "router_seconds": [rf["seconds"] for rf in routed],
        "per_request": ev,
        "summary": summary,
        "verdicts": ver,
    }
    log(
        str(
            {k: {r: round(v["oracle_gap"], 4) for r, v in s.items() if isinstance(v, dict)} for k, s in summary.items()}
        )
    )
    return Result(
        domains_runner.NAME, config_record(cfg, preregistration_sha256=prereg_sha), metrics, time.perf_counter() - t0
    )
