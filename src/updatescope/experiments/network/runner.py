"""``updatescope reproduce network``: when does the head (or a few blocks) tell the truth?

Paper A claims "head/block approximations track the full Fisher" and that the profile
cosine and off-diagonal discrepancy are measurable diagnostics.  Here the full-network
Fisher alignment is computed exactly (per-sequence gradients of every parameter by
autograd, Gram identity, float64) on two tiny models — the synthetic transformer of
``locallinear.synthetic`` and a random ``LlamaForCausalLM`` — briefly pre-trained on the
task mixture.  Tasks are token maps (label y_t = f(x_t), first two positions unlabelled):

    target     inputs from pool A (half the vocabulary), labels f_T
    source     a fraction ``input_overlap`` of its sequences from pool A (rest: pool B,
               disjoint), labels f_T on a random ``label_agreement`` share of the tokens
               and a different map elsewhere

so alignments span low (other inputs, other labels) to high (the target's distribution).
For every source we compare with the exact full alignment A_F (all parameters):

    head          the head block alone: exact, sequence sketch, and the per-token head
                  sketch users have today (``head_token``, FisherSketch's Fisher)
    block_diag    A_BD over the linear layers: exact and sketched
    last_k        the Fisher of the last k blocks' linear layers + head: exact, sketched
    all_linear    the Fisher of all linear weights (no embeddings, norms, biases)

(Spearman over sources, mean/max absolute error), whether 1 − profile cosine or the
off-diagonal slack √(ω_S ω_T) rank the pairs where the head errs most, whether the bound
holds, and the cost of a layer sketch vs the head sketch vs a bare forward + backward.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from updatescope.constants import IGNORE_INDEX
from updatescope.experiments import Result
from updatescope.experiments.network import figures
from updatescope.experiments.network.config import NetworkExperimentConfig
from updatescope.network import (
    NetworkConfig,
    NetworkSketch,
    decompose,
    exact_block_products,
    network_alignment,
    network_config,
    sketch_layers,
)

NAME = "network"
PROMPT = 2  # unlabelled leading positions: internal layers still get gradient there
METHODS = ("head_token", "head", "block_diag", "last_k", "all_linear")
FIGURES = ("network_profile.png", "network_tracking.png")


# ---------------------------------------------------------------------------- models and tasks
class _Model:
    """A tiny model, its vocabulary, sequence length and head name; ``inputs(x)`` adapts the
    token batch to the model's call convention."""

    def __init__(self, kind: str, cfg: NetworkExperimentConfig, seed: int) -> None:
        self.kind = kind
        with torch.random.fork_rng():  # the initialisers draw from the global generator
            torch.manual_seed(seed)
            if kind == "synthetic":
                from updatescope.locallinear.synthetic import ModelConfig, TinyTransformer

                mc = ModelConfig(n_layer=cfg.n_layer, d_model=cfg.width, n_head=4, seq_len=5)
                self.model, self.vocab, self.seq_len, self.head = TinyTransformer(mc), mc.vocab, mc.context, "head"
                self.block_prefix = "blocks.{}."
            else:
                from transformers import LlamaConfig, LlamaForCausalLM

                lc = LlamaConfig(
                    vocab_size=cfg.vocab,
                    hidden_size=cfg.width,
                    intermediate_size=2 * cfg.width,
                    num_hidden_layers=cfg.n_layer,
                    num_attention_heads=4,
                    num_key_value_heads=4,
                    max_position_embeddings=max(64, cfg.seq_len),
                    tie_word_embeddings=False,
                )
                self.model, self.vocab, self.seq_len, self.head = (
                    LlamaForCausalLM(lc),
                    cfg.vocab,
                    cfg.seq_len,
                    "lm_head",
                )
                self.block_prefix = "model.layers.{}."
        self.model = self.model.eval()  # float32 for pre-training and timing; .double() for the exact checks
        self.n_layer = cfg.n_layer

    def inputs(self, x: Tensor) -> Any:
        return x if self.kind == "synthetic" else {"input_ids": x}

    def logits(self, x: Tensor) -> Tensor:
        out = self.model(self.inputs(x)) if self.kind == "synthetic" else self.model(**self.inputs(x))
        return out if isinstance(out, Tensor) else out.logits


class _Tasks:
    """Token-map tasks of one model: pools A/B of input tokens, target map f_T, other map f_O."""

    def __init__(self, vocab: int, seq_len: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.vocab, self.seq_len, self.seed = vocab, seq_len, seed
        perm = torch.randperm(vocab, generator=g)
        self.pool_a, self.pool_b = perm[: vocab // 2], perm[vocab // 2 :]
        self.f_t = torch.randint(0, vocab, (vocab,), generator=g)
        self.f_o = (self.f_t + torch.randint(1, vocab, (vocab,), generator=g)) % vocab  # differs everywhere
        self.order = torch.randperm(vocab, generator=g)  # tokens that agree first, for every agreement level

    def sample(self, agreement: float, overlap: float, n: int, key: int) -> tuple[Tensor, Tensor]:
        """(x (n, T), y (n, T)): labels aligned with the logits (y_t is the target of logits t)."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + key)
        n_a = round(overlap * n)
        pools = [self.pool_a] * n_a + [self.pool_b] * (n - n_a)
        x = torch.stack([p[torch.randint(0, len(p), (self.seq_len,), generator=g)] for p in pools])
        agree = torch.zeros(self.vocab, dtype=torch.bool)
        agree[self.order[: round(agreement * self.vocab)]] = True
        fmap = torch.where(agree, self.f_t, self.f_o)
        y = fmap[x]
        y[:, :PROMPT] = IGNORE_INDEX
        return x, y


def _pretrain(m: _Model, tasks: _Tasks, steps: int, n: int) -> list[float]:
    """Adam on random tasks of the family (agreement, overlap ∈ {0, 1}): the model partly fits
    both maps on both pools, so errors are neither uniform nor zero.  -> losses"""
    opt = torch.optim.Adam(m.model.parameters(), lr=3e-3)
    losses = []
    m.model.train()
    for s in range(steps):
        x, y = tasks.sample(float(s % 2), float((s // 2) % 2), n, 10_000_000 + s)
        loss = nn.functional.cross_entropy(m.logits(x).reshape(-1, m.vocab), y.reshape(-1), ignore_index=IGNORE_INDEX)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m.model.eval()
    for p in m.model.parameters():
        p.grad = None
    return losses


# ---------------------------------------------------------------------------- exact reference
def _dense_grads(m: _Model, layers: list[str], x: Tensor, y: Tensor) -> list[Tensor]:
    """Per-sequence gradients of the summed loss, by autograd, one sequence at a time.
    -> [(n, D_b)] for each linear weight in ``layers`` order, then one block of everything else."""
    named = dict(m.model.named_parameters())
    weights = [f"{n}.weight" for n in layers]
    rest = [k for k in named if k not in set(weights)]
    params = [named[k] for k in weights + rest]
    rows: list[list[Tensor]] = [[] for _ in range(len(layers) + 1)]
    for i in range(x.shape[0]):
        loss = nn.functional.cross_entropy(m.logits(x[i : i + 1])[0], y[i], ignore_index=IGNORE_INDEX, reduction="sum")
        gs = torch.autograd.grad(loss, params, allow_unused=True)
        gs = [torch.zeros_like(p) if g is None else g for g, p in zip(gs, params)]
        for b in range(len(layers)):
            rows[b].append(gs[b].reshape(-1))
        rows[-1].append(torch.cat([g.reshape(-1) for g in gs[len(layers) :]]))
    return [torch.stack(r) for r in rows]


def _restricted(cross: Tensor, sq_s: Tensor, sq_t: Tensor, idx: list[int]) -> float:
    """Alignment of the Fishers restricted to blocks ``idx`` (all their cross-block terms)."""
    i = torch.tensor(idx)
    c, s, t = (m[i][:, i].sum() for m in (cross, sq_s, sq_t))
    return float(c / (s.clamp(min=0).sqrt() * t.clamp(min=0).sqrt())) if s > 0 and t > 0 else float("nan")


# ---------------------------------------------------------------------------- one model
def _batches(m: _Model, x: Tensor, y: Tensor, size: int = 16) -> list[tuple[Any, Tensor]]:
    return [(m.inputs(x[i : i + size]), y[i : i + size]) for i in range(0, x.shape[0], size)]


def _sketches(m: _Model, cfgs: dict[str, NetworkConfig], x: Tensor, y: Tensor) -> dict[str, Any]:
    return {k: sketch_layers(m.model, c, _batches(m, x, y)) for k, c in cfgs.items()}


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    a_, b_ = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a_) & np.isfinite(b_)
    if ok.sum() < 3 or np.ptp(a_[ok]) == 0 or np.ptp(b_[ok]) == 0:
        return float("nan")
    return float(spearmanr(a_[ok], b_[ok]).statistic)


def _track(est: list[float], truth: list[float]) -> dict[str, float]:
    err = np.abs(np.asarray(est, float) - np.asarray(truth, float))
    return {
        "spearman": _spearman(est, truth),
        "mean_abs_error": float(np.nanmean(err)),
        "max_abs_error": float(np.nanmax(err)),
    }


def _run_model(kind: str, cfg: NetworkExperimentConfig, seed: int) -> dict[str, Any]:
    m = _Model(kind, cfg, seed)
    tasks = _Tasks(m.vocab, m.seq_len, seed)
    losses = _pretrain(m, tasks, cfg.pretrain_steps, 16)
    m.model.double()  # the exact reference and the sketches run in float64
    all_cfg = network_config(m.model, "*", sketch_dim=cfg.sketch_dim, seed=seed, mode="sequence")
    layers = list(all_cfg.names)
    last = [
        n
        for n in layers
        if any(n.startswith(m.block_prefix.format(b)) for b in range(m.n_layer - cfg.last_k, m.n_layer))
    ] + [m.head]
    cfgs = {
        "all": all_cfg,
        "last": network_config(m.model, last, sketch_dim=cfg.sketch_dim, seed=seed, mode="sequence"),
        "head_token": network_config(m.model, m.head, sketch_dim=cfg.sketch_dim, seed=seed, mode="token"),
    }
    head_i, last_i = layers.index(m.head), [layers.index(n) for n in last]
    list(range(len(layers)))

    x_t, y_t = tasks.sample(1.0, 1.0, cfg.n_seq, 0)
    g_t, sk_t = _dense_grads(m, layers, x_t, y_t), _sketches(m, cfgs, x_t, y_t)
    rows = []
    key = 1
    for agr in cfg.label_agreement:
        for ovl in cfg.input_overlap:
            x_s, y_s = tasks.sample(agr, ovl, cfg.n_seq, key)
            key += 1
            g_s, sk_s = _dense_grads(m, layers, x_s, y_s), _sketches(m, cfgs, x_s, y_s)
            bp = exact_block_products(g_s, g_t)
            cx, ss, st = bp.cross, bp.sq_s, bp.sq_t
            truth = decompose(
                cx.diagonal(),
                ss.diagonal(),
                st.diagonal(),
                bp.full_cross,
                bp.full_sq_s,
                bp.full_sq_t,
                blocks=(*layers, "rest"),
                exact=True,
            )
            lin_ex = decompose(
                cx.diagonal()[:-1],
                ss.diagonal()[:-1],
                st.diagonal()[:-1],
                cx[:-1, :-1].sum(),
                ss[:-1, :-1].sum(),
                st[:-1, :-1].sum(),
                blocks=tuple(layers),
                exact=True,
            )
            plug = exact_block_products(g_s, g_t, self_pairs=True)  # the bound holds for PSD Fishers
            pb = decompose(
                plug.cross.diagonal(),
                plug.sq_s.diagonal(),
                plug.sq_t.diagonal(),
                plug.full_cross,
                plug.full_sq_s,
                plug.full_sq_t,
                exact=True,
            )
            al = network_alignment(sk_s["all"], sk_t["all"])
            al_last = network_alignment(sk_s["last"], sk_t["last"])
            al_head = network_alignment(sk_s["head_token"], sk_t["head_token"])
            rows.append(
                {
                    "label_agreement": agr,
                    "input_overlap": ovl,
                    "full": truth.full,
                    "exact": {
                        "head": lin_ex.profile[head_i],
                        "block_diag": lin_ex.block_diagonal,
                        "last_k": _restricted(cx, ss, st, last_i),
                        "all_linear": lin_ex.full,
                        "block_diag_all_params": truth.block_diagonal,
                        "profile_cosine": truth.profile_cosine,
                        "offdiag_slack": math.sqrt(
                            max(truth.offdiag_share_source, 0) * max(truth.offdiag_share_target, 0)
                        ),
                        "profile_cosine_linear": lin_ex.profile_cosine,
                        "profile": list(lin_ex.profile),
                        "energy_target": list(truth.energy_target),
                    },
                    "sketch": {
                        "head_token": al_head.full,
                        "head": al.profile[head_i],
                        "block_diag": al.block_diagonal,
                        "last_k": al_last.full,
                        "all_linear": al.full,
                        "profile_cosine": al.profile_cosine,
                        "offdiag_slack": math.sqrt(max(al.offdiag_share_source, 0) * max(al.offdiag_share_target, 0)),
                        "profile": list(al.profile),
                        "se": {
                            "head": al.se[f"profile[{m.head}]"],
                            "block_diag": al.se["block_diagonal"],
                            "last_k": al_last.se["full"],
                            "all_linear": al.se["full"],
                            "head_token": al_head.se["full"],
                            "profile_cosine": al.se["profile_cosine"],
                        },
                    },
                    "bound": {
                        "lower": pb.bound_lower,
                        "upper": pb.bound_upper,
                        "full_plugin": pb.full,
                        "holds": bool(pb.bound_lower - 1e-12 <= pb.full <= pb.bound_upper + 1e-12),
                    },
                }
            )
    return _summarise(kind, m, layers, last, rows, losses)


def _summarise(kind: str, m: _Model, layers: list[str], last: list[str], rows: list[dict], losses: list[float]) -> dict:
    full = [r["full"] for r in rows]
    tracking = {
        "exact": {k: _track([r["exact"][k] for r in rows], full) for k in METHODS if k != "head_token"},
        "sketch": {k: _track([r["sketch"][k] for r in rows], full) for k in METHODS},
    }
    # sketch vs exact on the same quantity: abs error and 2·se coverage
    same = {}
    for k in ("head", "block_diag", "last_k", "all_linear"):
        d = np.array([r["sketch"][k] - r["exact"][k] for r in rows], float)
        se = np.array([r["sketch"]["se"][k] for r in rows], float)
        ok = np.isfinite(d) & np.isfinite(se)
        same[k] = {
            "mean_abs_error": float(np.abs(d[ok]).mean()) if ok.any() else float("nan"),
            "coverage_2se": float((np.abs(d[ok]) <= 2 * se[ok]).mean()) if ok.any() else float("nan"),
            "mean_se": float(se[ok].mean()) if ok.any() else float("nan"),
            "pairs_defined": int(ok.sum()),
        }
    head_err = [abs(r["exact"]["head"] - r["full"]) for r in rows]
    head_err_sk = [abs(r["sketch"]["head"] - r["full"]) for r in rows]
    diag = {
        "head_error_mean": float(np.mean(head_err)),
        "head_error_max": float(np.max(head_err)),
        "spearman_head_error_vs_1_minus_profile_cosine": _spearman(
            head_err, [1 - r["exact"]["profile_cosine"] for r in rows]
        ),
        "spearman_head_error_vs_offdiag_slack": _spearman(head_err, [r["exact"]["offdiag_slack"] for r in rows]),
        "spearman_head_error_vs_bd_minus_head": _spearman(
            head_err, [abs(r["exact"]["block_diag"] - r["exact"]["head"]) for r in rows]
        ),
        "sketch_spearman_head_error_vs_1_minus_profile_cosine": _spearman(
            head_err_sk, [1 - r["sketch"]["profile_cosine"] for r in rows]
        ),
        "sketch_spearman_head_error_vs_offdiag_slack": _spearman(
            head_err_sk, [r["sketch"]["offdiag_slack"] for r in rows]
        ),
        "sketch_spearman_head_error_vs_bd_minus_head": _spearman(
            head_err_sk, [abs(r["sketch"]["block_diag"] - r["sketch"]["head"]) for r in rows]
        ),
        "profile_cosine_range": [
            float(min(r["exact"]["profile_cosine"] for r in rows)),
            float(max(r["exact"]["profile_cosine"] for r in rows)),
        ],
        "offdiag_slack_range": [
            float(min(r["exact"]["offdiag_slack"] for r in rows)),
            float(max(r["exact"]["offdiag_slack"] for r in rows)),
        ],
    }
    energy = np.array(rows[0]["exact"]["energy_target"], float) ** 2
    shares = {
        "head": float(energy[layers.index(m.head)] / energy.sum()),
        "rest": float(energy[-1] / energy.sum()),
        "internal_linear": float(1 - (energy[layers.index(m.head)] + energy[-1]) / energy.sum()),
    }
    return {
        "model": kind,
        "parameters": sum(p.numel() for p in m.model.parameters()),
        "layers": layers,
        "last_k_layers": last,
        "pretrain_loss": [losses[0], losses[-1]] if losses else [],
        "full_range": [float(min(full)), float(max(full))],
        "tracking": tracking,
        "sketch_vs_exact": same,
        "diagnostics": diag,
        "bound_holds": float(np.mean([r["bound"]["holds"] for r in rows])),
        "target_energy_share": shares,
        "pairs": rows,
    }


# ---------------------------------------------------------------------------- cost
def _median_time(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    q = np.percentile(ts, [25, 50, 75])
    return {"median_s": float(q[1]), "q25_s": float(q[0]), "q75_s": float(q[2])}


def _cost(cfg: NetworkExperimentConfig, kind: str, seed: int) -> dict[str, Any]:
    """Seconds per batch (float32, n_seq sequences): bare forward + backward, the head sketch
    (forward-only + FisherSketch.update_logits), and layer sketches (forward + backward + features)."""
    from updatescope.sketch import FisherSketch

    m = _Model(kind, cfg, seed)
    model = m.model
    tasks = _Tasks(m.vocab, m.seq_len, seed)
    x, y = tasks.sample(0.5, 0.5, cfg.n_seq, 0)
    head = dict(model.named_modules())[m.head]

    def fwd_bwd() -> None:
        loss = nn.functional.cross_entropy(
            m.logits(x).reshape(-1, m.vocab), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        loss.backward()
        model.zero_grad(set_to_none=True)

    # sketches are built once (their random basis is generated on the first update, a one-time
    # cost); each timed call streams the same batch into them, as a long data stream would
    fs = FisherSketch(head.in_features, m.vocab, cfg.sketch_dim, seed)

    def head_sketch() -> None:
        seen = {}
        h = head.register_forward_hook(lambda mod, a, out: seen.__setitem__("a", a[0]))
        try:
            with torch.no_grad():
                z = m.logits(x)
        finally:
            h.remove()
        fs.update_logits(seen["a"].reshape(-1, head.in_features), z.reshape(-1, m.vocab), y.reshape(-1))

    names = list(network_config(model, "*").names)
    last = [n for n in names if n.startswith(m.block_prefix.format(m.n_layer - 1))] + [m.head]
    specs = {
        "layer_sketch_head_only": (m.head, "token"),
        "layer_sketch_last_block": (last, "token"),
        "layer_sketch_all_token": ("*", "token"),
        "layer_sketch_all_sequence": ("*", "sequence"),
    }
    batch = [(m.inputs(x), y)]
    t = {
        "forward_backward": _median_time(fwd_bwd, cfg.cost_repeats),
        "head_sketch": _median_time(head_sketch, cfg.cost_repeats),
    }
    for k, (layers, mode) in specs.items():
        sk = NetworkSketch(network_config(model, layers, sketch_dim=cfg.sketch_dim, seed=seed, mode=mode))
        t[k] = _median_time(lambda sk=sk: sketch_layers(model, sk.config, batch, sketch=sk), cfg.cost_repeats)
    base_fb, base_head = t["forward_backward"]["median_s"], t["head_sketch"]["median_s"]
    ratios = {
        k: {"vs_forward_backward": v["median_s"] / base_fb, "vs_head_sketch": v["median_s"] / base_head}
        for k, v in t.items()
    }
    return {
        "model": kind,
        "sequences": cfg.n_seq,
        "tokens": int((y != IGNORE_INDEX).sum()),
        "n_layers_all": len(names),
        "n_layers_last_block": len(last),
        "sketch_dim": cfg.sketch_dim,
        "threads": torch.get_num_threads(),
        "seconds": t,
        "ratios": ratios,
    }


# ---------------------------------------------------------------------------- entry point
def run(config: NetworkExperimentConfig, out_dir: Path) -> Result:
    from updatescope.report.console import fmt, print_rows

    t0 = time.perf_counter()
    models = [_run_model(kind, config, config.seed + 17 * i) for i, kind in enumerate(config.models)]
    cost = _cost(config, config.models[-1], config.seed)
    metrics = {"models": models, "cost": cost}
    rows = []
    for mm in models:
        for k in METHODS:
            ex = mm["tracking"]["exact"].get(k)
            sk = mm["tracking"]["sketch"][k]
            rows.append(
                [
                    mm["model"],
                    k,
                    fmt(ex["spearman"]) if ex else "-",
                    fmt(ex["mean_abs_error"]) if ex else "-",
                    fmt(sk["spearman"]),
                    fmt(sk["mean_abs_error"]),
                ]
            )
    print_rows(
        "approximation vs exact full-network Fisher alignment",
        ["model", "method", "ρ exact", "|err| exact", "ρ sketch", "|err| sketch"],
        rows,
    )
    print_rows(
        "cost per batch",
        ["step", "median s", "× fwd+bwd", "× head sketch"],
        [
            [
                k,
                fmt(v["median_s"]),
                fmt(cost["ratios"][k]["vs_forward_backward"]),
                fmt(cost["ratios"][k]["vs_head_sketch"]),
            ]
            for k, v in cost["seconds"].items()
        ],
    )
    figs = {
        "network_profile.png": lambda p: figures.plot_profile(metrics, p),
        "network_tracking.png": lambda p: figures.plot_tracking(metrics, p),
    }
    return Result(NAME, asdict(config), metrics, time.perf_counter() - t0, figures=figs)


# ---------------------------------------------------------------------------- docs tables
def markdown_tables(metrics: dict[str, Any]) -> str:
    """The docs/network.md tables from a record's metrics (``python -m updatescope.experiments.network
    docs/results/network_quick.json`` prints them)."""
    f = lambda x: "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"  # noqa: E731
    out = [
        "| model | method | Spearman (exact) | mean abs err (exact) | max abs err (exact) | Spearman (sketch) "
        "| mean abs err (sketch) |",
        "|---|---|---|---|---|---|---|",
    ]
    for mm in metrics["models"]:
        for k in METHODS:
            ex, sk = mm["tracking"]["exact"].get(k), mm["tracking"]["sketch"][k]
            out.append(
                f"| {mm['model']} | {k} | {f(ex['spearman']) if ex else '-'} "
                f"| {f(ex['mean_abs_error']) if ex else '-'} | {f(ex['max_abs_error']) if ex else '-'} "
                f"| {f(sk['spearman'])} | {f(sk['mean_abs_error'])} |"
            )
    out += [
        "",
        "| model | params | full A_F range | head energy share | internal linear | rest (emb., norms, biases) "
        "| bound holds | sketch − exact, mean abs (head / BD / last-k / all-linear) | 2·se coverage (same) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mm in metrics["models"]:
        s, sv = mm["target_energy_share"], mm["sketch_vs_exact"]
        keys = ("head", "block_diag", "last_k", "all_linear")
        out.append(
            f"| {mm['model']} | {mm['parameters']} | {f(mm['full_range'][0])} – {f(mm['full_range'][1])} "
            f"| {f(s['head'])} | {f(s['internal_linear'])} | {f(s['rest'])} | {f(mm['bound_holds'])} "
            f"| {' / '.join(f(sv[k]['mean_abs_error']) for k in keys)} "
            f"| {' / '.join(f(sv[k]['coverage_2se']) for k in keys)} |"
        )
    out += [
        "",
        "| model | head err mean | head err max | ρ(head err, 1 − π) | ρ(head err, √(ω_S ω_T)) "
        "| ρ(head err, abs(A_BD − head)) | same three, sketched | π range | √(ω_S ω_T) range |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mm in metrics["models"]:
        d = mm["diagnostics"]
        out.append(
            f"| {mm['model']} | {f(d['head_error_mean'])} | {f(d['head_error_max'])} "
            f"| {f(d['spearman_head_error_vs_1_minus_profile_cosine'])} "
            f"| {f(d['spearman_head_error_vs_offdiag_slack'])} | {f(d['spearman_head_error_vs_bd_minus_head'])} "
            f"| {f(d['sketch_spearman_head_error_vs_1_minus_profile_cosine'])} / "
            f"{f(d['sketch_spearman_head_error_vs_offdiag_slack'])} / "
            f"{f(d['sketch_spearman_head_error_vs_bd_minus_head'])} "
            f"| {f(d['profile_cosine_range'][0])} – {f(d['profile_cosine_range'][1])} "
            f"| {f(d['offdiag_slack_range'][0])} – {f(d['offdiag_slack_range'][1])} |"
        )
    c = metrics["cost"]
    out += [
        "",
        f"Cost per batch ({c['model']}, {c['sequences']} sequences, {c['tokens']} labelled tokens, "
        f"m = {c['sketch_dim']}, {c['threads']} threads; median of the repeats):",
        "",
        "| step | median s | × forward+backward | × head sketch |",
        "|---|---|---|---|",
    ]
    for k, v in c["seconds"].items():
        out.append(
            f"| {k} | {v['median_s']:.4f} | {c['ratios'][k]['vs_forward_backward']:.2f} "
            f"| {c['ratios'][k]['vs_head_sketch']:.2f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover - docs helper
    import json
    import sys

    print(markdown_tables(json.loads(Path(sys.argv[1]).read_text())["metrics"]))
