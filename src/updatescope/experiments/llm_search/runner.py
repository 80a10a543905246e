"""``updatescope reproduce llm-search`` -- paper B's Best-of-N random search around the weights
of the packaged SmolLM2, on true/false statements (``updatescope.data.statements``).

Loss f(θ) = − mean signed answer margin, margin = logit(true answer) − logit(false answer) at
the last prompt token, signed by the label.  Statements come in (true, false) pairs per
subject, so a constant yes/no bias cancels: only discrimination lowers the loss.

Searched weights: those of the last ``n_last`` decoder blocks (every weight when None), a flat
vector θ_S of dimension D.  Candidates θ_S + σ z_i come from ``locallinear.search.best_of_n``
(the library's one Best-of-N rule); each is written into the model in place and θ_S is
restored exactly from a saved copy.  σ is absolute, per coordinate (the paper's ≈ 1e-4 is
absolute on Qwen2.5-0.5B); the record also states it relative to the RMS of θ_S.

Protocol (as the synthetic ``random-search``): candidates are chosen on the ``select`` split;
σ is tuned on ``tune`` (half of the test split's subjects); every reported gain is on
``heldout`` (the other half) with fresh candidate seeds.  Parts:
1. σ window: tune-split gain vs σ on a log grid, isotropic, N = ``n_sweep``, ``seeds`` seeds.
2. Gain vs N at the tuned σ against σ‖g‖E[max_N] (g: one backward pass on select; held out:
   σ⟨g_sel, g_held⟩/‖g_sel‖ E[max_N], the part of the chosen step that transfers).
3. Prefix basis (span of the first k SGD steps on the train split) vs isotropic vs a random
   k-dim subspace, at equal N and matched σ‖P g_sel‖ (the same linear-regime prediction).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.llm_search.config import LLMSearchConfig

NAME = "llm-search"
FIGURE = "llm_search.png"


def _se(values: list[float]) -> float:
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0


def _band(values: list[float]) -> dict[str, Any]:
    return {"mean": float(np.mean(values)), "se": _se(values), "values": list(values)}


def searched_names(model: torch.nn.Module, n_last: int | None) -> list[str]:
    """Names of the searched parameters of ``model``: those of its last ``n_last`` decoder blocks
    (every weight when None; a tied weight counts once)."""
    from updatescope.errors import InputError
    from updatescope.steering import decoder_layers

    named = list(model.named_parameters())  # named_parameters lists a shared tensor once
    if n_last is None:
        return [k for k, _ in named]
    layers = decoder_layers(model)
    if n_last > len(layers):
        raise InputError(f"n_last={n_last} exceeds the model's {len(layers)} decoder blocks")
    ids = {id(p) for block in list(layers)[-n_last:] for p in block.parameters()}
    return [k for k, p in named if id(p) in ids]


def split_statements(config: LLMSearchConfig) -> dict[str, tuple[list[str], Tensor]]:
    """Prompts and ±1 signs per split: train, select, tune and heldout (test subjects, alternating)."""
    from updatescope.data.statements import load_statements, prompt_of

    def take(name: str, limit: int | None) -> list[Any]:
        items = load_statements(config.task, name)
        return items if limit is None else items[: 2 * limit]  # pairs are adjacent

    test = take("test", config.n_test)
    parts = {
        "train": take("train", config.n_train),
        "select": take("select", config.n_select),
        "tune": [x for i, x in enumerate(test) if (i // 2) % 2 == 0],
        "heldout": [x for i, x in enumerate(test) if (i // 2) % 2 == 1],
    }
    return {
        k: ([prompt_of(x) for x in v], torch.tensor([2.0 * x.label - 1 for x in v], dtype=torch.float64))
        for k, v in parts.items()
    }


Batch = tuple[Tensor, Tensor, Tensor]  # (input ids (b, S) or block inputs (b, S, d), mask (b, S), sign (b,))


def encode(tok: Any, prompts: list[str], sign: Tensor, batch_size: int) -> list[Batch]:
    """Right-padded token batches (as ``answer_margins``: each row's last real token at its length − 1)."""
    from updatescope.data.statements import right_padded

    batches = right_padded(tok, prompts, batch_size)
    starts = [0]
    for tokens, _ in batches:
        starts.append(starts[-1] + tokens.shape[0])
    return [(tokens, mask, sign[a:b]) for (tokens, mask), a, b in zip(batches, starts, starts[1:])]


class _Stop(Exception):
    """Raised by the capture hook: nothing after the captured block is needed."""


@torch.no_grad()
def block_inputs(model: torch.nn.Module, batches: list[Batch], n_last: int) -> list[Batch]:
    """The same batches as the residual stream entering block L − n_last.  (b, S) -> (b, S, d)."""
    from updatescope.steering import decoder_layers

    grabbed: list[Tensor] = []

    def hook(_mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        grabbed.append((args[0] if args else kwargs["hidden_states"]).detach().clone())
        raise _Stop

    handle = list(decoder_layers(model))[-n_last].register_forward_pre_hook(hook, with_kwargs=True)
    out = []
    try:
        for ids, mask, sign in batches:
            try:
                model(input_ids=ids, attention_mask=mask, use_cache=False)
            except _Stop:
                pass
            out.append((grabbed.pop(), mask, sign))
    finally:
        handle.remove()
    return out


def margin_loss(net: Any, batches: list[Batch], ids: tuple[int, int]) -> Tensor:
    """− mean signed margin over ``batches``, differentiable.  Token batches run the whole model,
    block-input batches run ``net`` as a tail (``groundtruth.lora.tail_model``).  -> scalar."""
    yes, no = ids
    head = net.get_output_embeddings()
    w = head.weight[yes] - head.weight[no]  # read each call: the head may be searched (tied)
    b = 0.0 if getattr(head, "bias", None) is None else head.bias[yes] - head.bias[no]
    total, n = torch.zeros((), dtype=torch.float64), 0
    for x, mask, sign in batches:
        feed = {"input_ids": x} if x.dtype == torch.long else {"inputs_embeds": x}
        hidden = net.base_model(**feed, attention_mask=mask, use_cache=False)[0]
        last = hidden[torch.arange(len(mask)), mask.sum(1) - 1]
        total = total - ((last @ w + b).double() * sign).sum()
        n += len(mask)
    return total / n


class _Weights:
    """The searched weights as one flat vector: write a vector in place, restore θ_S exactly."""

    def __init__(self, model: torch.nn.Module, names: list[str]) -> None:
        params = dict(model.named_parameters())
        self.params = [params[k] for k in names]
        self.numels = [p.numel() for p in self.params]
        self.theta = torch.cat([p.detach().reshape(-1) for p in self.params]).clone()  # (D,)

    @torch.no_grad()
    def write(self, vec: Tensor) -> None:
        for p, part in zip(self.params, torch.split(vec, self.numels)):
            p.copy_(part.view_as(p).to(p.dtype))

    def restore(self) -> None:
        self.write(self.theta)

    def grad(self, loss_fn: Callable[[], Tensor]) -> Tensor:
        """∇ of loss_fn at the current weights w.r.t. the searched ones.  -> (D,) float64."""
        flags = [p.requires_grad for p in self.params]
        try:
            for p in self.params:
                p.requires_grad_(True)
            grads = torch.autograd.grad(loss_fn(), self.params, allow_unused=True)
        finally:
            for p, f in zip(self.params, flags):
                p.requires_grad_(f)
        return torch.cat(
            [(torch.zeros_like(p) if g is None else g).reshape(-1).double() for p, g in zip(self.params, grads)]
        )


def _sigma_window(
    config: LLMSearchConfig, search: Any, pred: Any, theta: Tensor, d: int, seeds: list[int]
) -> list[dict[str, Any]]:
    """(1) The σ window on the tune split: best of ``n_sweep`` at every σ, over the seeds."""
    sweep = []
    for sigma in config.sigmas:
        runs = [search(sigma, config.n_sweep, s, "tune") for s in seeds]
        ps, pt = pred(sigma, config.n_sweep, "tune")
        sweep.append(
            {
                "sigma": sigma,
                "sigma_rel_rms": sigma / float(theta.pow(2).mean().sqrt()),
                "step_norm": sigma * math.sqrt(d),
                "gain_select": _band([r.gain_select for r in runs]),
                "gain_tune": _band([r.gain_heldout for r in runs]),
                "median_candidate_change": _band([float(np.median(np.array(r.select) - r.base_select)) for r in runs]),
                "pred_select": ps,
                "pred_tune": pt,
            }
        )
    return sweep


def _gain_vs_n(config: LLMSearchConfig, search: Any, pred: Any, best_sigma: float, seeds: list[int]) -> dict[str, Any]:
    """(2) Gain against N at the tuned σ, held out, fresh seeds."""
    from updatescope.locallinear.search import expected_max_normal

    ns = list(config.ns)
    curve_runs = [search(best_sigma, max(ns), s + 100, "heldout") for s in seeds]
    sel = np.array([[r.best_of(n)[0] for n in ns] for r in curve_runs])
    held = np.array([[r.best_of(n)[1] for n in ns] for r in curve_runs])
    p = [pred(best_sigma, n, "heldout") for n in ns]
    gain_vs_n = {
        "sigma": best_sigma,
        "n": ns,
        "gain_select": [_band(sel[:, j].tolist()) for j in range(len(ns))],
        "gain_heldout": [_band(held[:, j].tolist()) for j in range(len(ns))],
        "pred_select": [a for a, _ in p],
        "pred_heldout": [b for _, b in p],
        "expected_max": [expected_max_normal(n) for n in ns],
        "gain_nmax_minus_n1": _band((held[:, -1] - held[:, 0]).tolist()),
    }
    return gain_vs_n


def _prefix_updates(
    config: LLMSearchConfig, w: _Weights, net: Any, batches: dict[str, Any], ids: Any, theta: Tensor
) -> tuple[list[Tensor], float | None]:
    """``prefix_steps`` SGD steps of ``prefix_batch`` train statements from θ_S, the first
    step's norm ``prefix_step`` × ‖θ_S‖, the step size then fixed -> (updates, step size)."""
    train = [
        (x[i : i + 1], mask[i : i + 1], sgn[i : i + 1]) for x, mask, sgn in batches["train"] for i in range(len(mask))
    ]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(config.seed)).tolist()
    k, b = config.prefix_steps, config.prefix_batch
    updates, cur, lr = [], theta.clone(), None
    try:
        for i in range(k):
            rows = [order[(i * b + j) % len(order)] for j in range(b)]
            w.write(cur)
            gi = w.grad(lambda: margin_loss(net, [train[r] for r in rows], ids))
            if lr is None:  # fixed step size: the first step has prefix_step × ‖θ_S‖
                lr = config.prefix_step * float(theta.double().norm()) / max(float(gi.norm()), 1e-30)
            step = (-lr * gi).float()
            updates.append(step)
            cur = cur + step
    finally:
        w.restore()
    return updates, lr


def _compare(
    config: LLMSearchConfig,
    search: Any,
    pred: Any,
    bases: dict[str, Tensor],
    best_sigma: float,
    g_norm: float,
    g_select: Tensor,
    d: int,
    seeds: list[int],
) -> dict[str, Any]:
    """(3) The prefix basis against isotropic and a random k-dim basis at matched σ‖P g_sel‖,
    held out."""
    compare = {}
    for name, basis in [("isotropic", None)] + list(bases.items()):
        proj = g_norm if basis is None else float((basis.double() @ g_select).norm())
        sigma = best_sigma * g_norm / max(proj, 1e-30)  # same σ‖P g_sel‖ as isotropic at the tuned σ
        r = d if basis is None else basis.shape[0]
        runs = [search(sigma, config.n_compare, s + 200, "heldout", basis) for s in seeds]
        compare[name] = {
            "dim": r,
            "sigma": sigma,
            "step_norm": sigma * math.sqrt(r),
            "proj_grad_norm": proj,
            "capture_of_grad": (proj / g_norm) ** 2,
            "gain_select": _band([x.gain_select for x in runs]),
            "gain_heldout": _band([x.gain_heldout for x in runs]),
            "pred_select": pred(sigma, config.n_compare, "heldout", basis)[0],
            "pred_heldout": pred(sigma, config.n_compare, "heldout", basis)[1],
        }
    return compare


def run(config: LLMSearchConfig, out_dir: Path) -> Result:
    from updatescope.data.statements import answer_ids
    from updatescope.experiments.llm_search import figures
    from updatescope.locallinear.search import best_of_n, expected_max_normal
    from updatescope.locallinear.subspaces import orthonormal_basis, random_basis

    t0 = time.perf_counter()
    model, tok = heads.load_model(config.model)
    ids = answer_ids(tok, config.answers)
    data = split_statements(config)
    batches = {k: encode(tok, p, sgn, config.batch_size) for k, (p, sgn) in data.items()}
    net = model
    if config.n_last is not None:
        # only the last blocks move: cache the residual stream entering them once and run a
        # tail (copies of those blocks, the shared final norm and head); exact on cached inputs
        from updatescope.experiments.groundtruth.lora import tail_model

        searched_names(model, config.n_last)  # checks n_last against the model
        batches = {k: block_inputs(model, v, config.n_last) for k, v in batches.items()}
        net = tail_model(model, config.n_last)
    names = searched_names(net, config.n_last)
    w = _Weights(net, names)
    theta, numels, d = w.theta, w.numels, w.theta.numel()
    timings: dict[str, float] = {"setup": time.perf_counter() - t0}

    def loss_of(split: str) -> Callable[[], Tensor]:
        return lambda: margin_loss(net, batches[split], ids)

    # Objectives on flat vectors.  best_of_n scores a candidate on select, then on the
    # reporting split: one write and one pass over both splits serve the two calls; the base
    # θ_S (the same object every call) is scored once per split.
    base: dict[str, float] = {}
    last: dict[str, Any] = {"vec": None}

    @torch.no_grad()
    def scores(vec: Tensor, report: str) -> dict[str, float]:
        if vec is theta and "select" in base and report in base:
            return base
        if last["vec"] is not vec or report not in last:
            w.write(vec)
            last.clear()
            last.update(
                vec=vec,
                select=float(margin_loss(net, batches["select"], ids)),
                **{report: float(margin_loss(net, batches[report], ids))},
            )
            if vec is theta:
                base.update(select=last["select"], **{report: last[report]})
        return last

    def objective(split: str, report: str) -> Callable[[Tensor], float]:
        return lambda vec: scores(vec, report)[split]

    def search(sigma: float, n: int, seed: int, report: str, basis: Tensor | None = None):
        try:
            return best_of_n(
                theta, objective("select", report), objective(report, report), sigma, n, seed, numels, basis
            )
        finally:
            last["vec"] = None  # frees the last candidate
            w.restore()

    # one backward pass per split at θ_S
    g = {s: w.grad(loss_of(s)) for s in ("select", "tune", "heldout")}
    g_norm = float(g["select"].norm())
    timings["gradients"] = time.perf_counter() - t0

    def pred(sigma: float, n: int, report: str, basis: Tensor | None = None) -> tuple[float, float]:
        """Linear-regime prediction (select, reporting split) of the best-of-n gain."""
        gs, gr = (
            (g["select"], g[report]) if basis is None else (basis.double() @ g["select"], basis.double() @ g[report])
        )
        em = expected_max_normal(n)
        return sigma * float(gs.norm()) * em, sigma * float(gs @ gr) / float(gs.norm()) * em

    seeds = [config.seed * 1000 + k for k in range(config.seeds)]

    sweep = _sigma_window(config, search, pred, theta, d, seeds)
    best_sigma = max(sweep, key=lambda r: r["gain_tune"]["mean"])["sigma"]
    timings["sweep"] = time.perf_counter() - t0

    # (2) gain vs N at the tuned σ, held out, fresh seeds
    gain_vs_n = _gain_vs_n(config, search, pred, best_sigma, seeds)
    timings["gain_vs_n"] = time.perf_counter() - t0

    # (3) prefix basis vs isotropic vs random k-dim, matched σ‖P g_sel‖, held out
    updates, lr = _prefix_updates(config, w, net, batches, ids, theta)
    k, b = config.prefix_steps, config.prefix_batch
    bases = {
        "trajectory_prefix": orthonormal_basis(torch.stack(updates), dtype=torch.float32),
        "random": random_basis(d, k, config.seed + 1234, dtype=torch.float32),
    }
    compare = _compare(config, search, pred, bases, best_sigma, g_norm, g["select"], d, seeds)
    timings["compare"] = time.perf_counter() - t0
    w.restore()
    assert torch.equal(torch.cat([q.detach().reshape(-1) for q in w.params]), theta)

    metrics: dict[str, Any] = {
        "n": {s: len(v[0]) for s, v in data.items()},
        "dim": d,
        "n_params_searched": len(names),
        "searched": "every weight" if config.n_last is None else f"last {config.n_last} decoder blocks",
        "theta_rms": float(theta.pow(2).mean().sqrt()),
        "theta_norm": float(theta.double().norm()),
        "sigma_units": "absolute, per coordinate",
        "splits": {
            "candidate_selection": "select",
            "sigma_tuning": "tune",
            "reported": "heldout",
            "prefix_trajectory": "train",
        },
        "base_loss": dict(base),
        "grad_norm": {s: float(v.norm()) for s, v in g.items()},
        "grad_cos_select_heldout": float(g["select"] @ g["heldout"] / g["select"].norm() / g["heldout"].norm()),
        "grad_cos_select_tune": float(g["select"] @ g["tune"] / g["select"].norm() / g["tune"].norm()),
        "best_sigma": best_sigma,
        "sigma_window": sweep,
        "gain_vs_n": gain_vs_n,
        "prefix": {"k": k, "batch": b, "lr": lr, "step_norms": [float(u.norm()) for u in updates]},
        "subspaces": compare,
    }
    metrics["verdicts"] = verdicts(metrics)
    metrics["timings_s"] = {**timings, "total": time.perf_counter() - t0}
    _print(metrics)
    return Result(
        NAME,
        config_record(config, searched_names=searched_names(model, config.n_last)),
        metrics,
        time.perf_counter() - t0,
        figures={FIGURE: lambda path: figures.llm_search_figure(metrics, path)},
    )


def verdicts(m: dict[str, Any]) -> dict[str, str]:
    """One verdict per claim, by the rules stated in docs/locallinear.md ("LLM random search")."""
    sweep = m["sigma_window"]
    lo = [r["gain_tune"]["mean"] - 2 * r["gain_tune"]["se"] for r in sweep]
    hi = [r["gain_tune"]["mean"] + 2 * r["gain_tune"]["se"] for r in sweep]
    j = max(range(len(sweep)), key=lambda i: sweep[i]["gain_tune"]["mean"])
    useful = [r["sigma"] for r, x in zip(sweep, lo) if x > 0]
    if not useful:
        window = "no σ gains on the tune split by 2 SE"
    else:
        edges = [0, len(sweep) - 1]
        falls = all(hi[e] < lo[j] for e in edges if e != j)
        window = f"gain > 0 by 2 SE at σ ∈ [{min(useful):.0e}, {max(useful):.0e}]; " + (
            "falls off on both sides" if falls and j not in edges else "no fall-off on both sides by 2 SE"
        )
    c = m["gain_vs_n"]
    diff, last, pred = c["gain_nmax_minus_n1"], c["gain_heldout"][-1], c["pred_heldout"][-1]
    grows = diff["mean"] - 2 * diff["se"] > 0
    within = abs(last["mean"] - pred) <= 2 * last["se"]
    side = "consistent with" if within else ("below" if last["mean"] < pred else "above")
    n_verdict = (
        f"{'grows' if grows else 'does not grow'} with N by 2 SE; at N = {c['n'][-1]} "
        f"{side} the linear prediction (ratio {last['mean'] / pred:.2f})"
        if pred
        else f"{'grows' if grows else 'does not grow'} with N by 2 SE; prediction 0"
    )
    s = m["subspaces"]
    pre = s["trajectory_prefix"]["gain_heldout"]
    beats = {
        k: pre["mean"] - 2 * pre["se"] > s[k]["gain_heldout"]["mean"] + 2 * s[k]["gain_heldout"]["se"]
        for k in ("isotropic", "random")
    }
    sub = (
        "prefix beats isotropic and the random subspace"
        if all(beats.values())
        else "prefix beats isotropic, not the random subspace"
        if beats["isotropic"]
        else "prefix beats the random subspace, not isotropic"
        if beats["random"]
        else "prefix beats neither by 2 SE"
    )
    return {"sigma_window": window, "gain_vs_n": n_verdict, "prefix_vs_isotropic": sub}


def _print(m: dict[str, Any]) -> None:
    from updatescope.report.console import print_rows

    rows = [
        [
            f"{r['sigma']:.0e}",
            f"{r['sigma_rel_rms']:.1e}",
            f"{r['gain_tune']['mean']:+.4f} ± {r['gain_tune']['se']:.4f}",
            f"{r['pred_tune']:+.4f}",
            f"{r['median_candidate_change']['mean']:+.4f}",
        ]
        for r in m["sigma_window"]
    ]
    print_rows(
        f"σ window (tune split, D = {m['dim']:,})", ["σ", "σ / RMS", "gain", "linear pred.", "median Δloss"], rows
    )
    c = m["gain_vs_n"]
    rows = [
        [str(n), f"{h['mean']:+.4f} ± {h['se']:.4f}", f"{p:+.4f}"]
        for n, h, p in zip(c["n"], c["gain_heldout"], c["pred_heldout"])
    ]
    print_rows(f"gain vs N at σ = {c['sigma']:.0e} (held out)", ["N", "gain", "σ‖g‖E[max_N] (held out)"], rows)
    rows = [
        [
            k,
            str(v["dim"]),
            f"{v['sigma']:.2e}",
            f"{v['gain_heldout']['mean']:+.4f} ± {v['gain_heldout']['se']:.4f}",
            f"{v['pred_heldout']:+.4f}",
        ]
        for k, v in m["subspaces"].items()
    ]
    print_rows("subspaces at matched σ‖P g‖ (held out)", ["space", "dim", "σ", "gain", "pred."], rows)
    for k, v in m["verdicts"].items():
        print(f"{k}: {v}")
