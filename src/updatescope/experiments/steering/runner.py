"""``updatescope reproduce steering`` -- paper B's weight -> activation steering claims.

On true/false statements (``updatescope.data.statements``), at the last prompt token (where
the answer is predicted):
1. CAA per layer: mean h_l(true statements) - mean h_l(false ones), train split.
2. One gradient step δθ = -∇ CE(right answer) on the train prompts; its exact activation
   shift Δh_l,i = J_θ h_l · δθ (forward AD).  Two summaries: the mean shift (the vector one
   would inject) and the label contrast mean_true Δh - mean_false Δh.
3. Cosine of each with CAA per layer, against controls: the same summaries of a same-norm
   random δθ, CAA from shuffled labels (null), CAA of one half of the subjects vs the
   other half (noise ceiling); every control over ``seeds`` seeds, mean +- SE.
4. Random-search-derived vectors: per seed, Best-of-N Gaussian weight perturbations
   (``locallinear.search.best_of_n``, the library's one Best-of-N rule) of norm
   ρ·‖δθ_step‖ for each ρ in ``search_norms``; the candidate with the largest gain in mean
   signed answer margin on the select split is kept (over N and ρ) and pushed forward like
   the step (mean shift over the train prompts).
5. Steering: unit vectors times scale x (mean residual norm at the layer), added at the
   last prompt token; the (layer, scale) with the best select-split accuracy is reported
   on the test split, next to the base model, a same-norm random vector (per seed) and a
   bias-only baseline (the base margins with a threshold fitted on the select split).
   CAA, the one-step shift, the searched shifts and the random vectors share this path.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from updatescope.experiments import Result, config_record, heads
from updatescope.experiments.steering import figures
from updatescope.experiments.steering.config import SteeringConfig

NAME = "steering"


def _se(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _cos_rows(a: Tensor, b: Tensor) -> list[float]:
    """Row-wise cosine of (n_layers, d) tensors."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1).tolist()


def _split(config: SteeringConfig, name: str, limit: int | None) -> list[Any]:
    from updatescope.data.statements import load_statements

    items = load_statements(config.task, name)
    return items if limit is None else items[: 2 * limit]  # pairs are adjacent: limit subjects


def run(config: SteeringConfig, out_dir: Path) -> Result:
    from updatescope.constants import IGNORE_INDEX
    from updatescope.data.statements import answer_ids, answer_margins, margin_summary, prompt_of
    from updatescope.errors import InputError
    from updatescope.steering import (
        capture_residuals,
        decoder_layers,
        direction_norm,
        encode_prompts,
        gradient_step,
        pad_sequences,
        pushforward,
        random_direction,
        steer,
    )

    t0 = time.perf_counter()
    model, tok = heads.load_model(config.model)
    n_layers = len(decoder_layers(model))
    steer_layers = [x for x in config.steer_layers if x < n_layers]
    if not steer_layers:
        raise InputError(f"none of steer_layers {list(config.steer_layers)} exists in a {n_layers}-layer model")
    ids = answer_ids(tok, config.answers)
    splits = {s: _split(config, s, getattr(config, f"n_{s}")) for s in ("train", "select", "test")}
    prompts = {s: [prompt_of(x) for x in v] for s, v in splits.items()}
    labels = {s: torch.tensor([x.label for x in v]) for s, v in splits.items()}
    bs = config.batch_size

    # --- activations and CAA at the last prompt token (left padding: last real token is last)
    x_ids, x_mask = encode_prompts(tok, prompts["train"], side="left")
    acts = capture_residuals(model, x_ids, x_mask, position="last", batch_size=bs).double()  # (Lyr, n, d)
    y = labels["train"]

    def caa(idx_pos: Tensor, idx_neg: Tensor) -> Tensor:
        return acts[:, idx_pos].mean(1) - acts[:, idx_neg].mean(1)

    pos_idx, neg_idx = torch.nonzero(y == 1).flatten(), torch.nonzero(y == 0).flatten()
    v_caa = caa(pos_idx, neg_idx)  # (Lyr, d)
    resid_norm = acts.norm(dim=2).mean(1)  # (Lyr,)

    # --- one gradient step on the right answers, and its exact activation shift
    full = [tok(p)["input_ids"] for p in prompts["train"]]
    seqs = [list(s) + [ids[0] if lab == 1 else ids[1]] for s, lab in zip(full, y.tolist())]
    pad = getattr(tok, "pad_token_id", None) or 0
    g_ids, g_mask = pad_sequences(seqs, pad_id=int(pad), side="right")
    g_labels = torch.full_like(g_ids, IGNORE_INDEX)
    lengths = g_mask.sum(1)
    g_labels[torch.arange(len(seqs)), lengths - 1] = g_ids[torch.arange(len(seqs)), lengths - 1]
    delta = gradient_step(model, g_ids, g_labels, g_mask, lr=1.0)
    step_norm = direction_norm(delta)

    def summaries(d: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        shift = pushforward(model, d, x_ids, x_mask, position="last", batch_size=bs).double()  # (Lyr, n, d)
        return shift.mean(1), shift[:, pos_idx].mean(1) - shift[:, neg_idx].mean(1)

    pf_mean, pf_contrast = summaries(delta)
    g = torch.Generator().manual_seed(config.seed)
    rand_mean, rand_contrast, shuffled, halves = [], [], [], []
    subjects = torch.arange(len(y) // 2)  # statements come in (true, false) pairs per subject
    for k in range(config.seeds):
        rm, rc = summaries(random_direction(delta, seed=config.seed * 1000 + k, norm=step_norm))
        rand_mean.append(_cos_rows(rm, v_caa))
        rand_contrast.append(_cos_rows(rc, v_caa))
        perm = y[torch.randperm(len(y), generator=g)]
        shuffled.append(_cos_rows(caa(torch.nonzero(perm == 1).flatten(), torch.nonzero(perm == 0).flatten()), v_caa))
        order = subjects[torch.randperm(len(subjects), generator=g)]
        a, b = order[: len(order) // 2], order[len(order) // 2 :]
        halves.append(_cos_rows(caa(2 * a, 2 * a + 1), caa(2 * b, 2 * b + 1)))

    search, search_shift, search_cos = _weight_search(
        model, tok, config, delta, step_norm, prompts, labels, ids, summaries, v_caa
    )

    cosine = {
        "layers": list(range(n_layers)),
        "pushforward_mean": _cos_rows(pf_mean, v_caa),
        "pushforward_contrast": _cos_rows(pf_contrast, v_caa),
        "random_step_mean": _band(rand_mean),
        "random_step_contrast": _band(rand_contrast),
        "search_mean": _band(search_cos),
        "shuffled_caa": _band(shuffled),
        "half_caa": _band(halves),
    }

    # --- steering: select (layer, scale) on the select split, report on the test split
    def margins(split: str, vec: Tensor | None = None, layer: int = 0, scale: float = 0.0) -> Tensor:
        if vec is None:
            return answer_margins(model, tok, prompts[split], ids, bs)
        unit = (vec / vec.norm()).float()
        with steer(model, unit, layers=layer, scale=scale * float(resid_norm[layer]), positions=config.positions):
            return answer_margins(model, tok, prompts[split], ids, bs)

    base = {s: margins(s) for s in ("select", "test")}
    d = acts.shape[2]
    # the label contrast of the shift is reported as a cosine only: injected everywhere it
    # would act like CAA's own contrast, not like the weight step's shadow
    vectors: dict[str, Tensor] = {"caa": v_caa, "pushforward": pf_mean}
    for k, shift in enumerate(search_shift):
        vectors[f"search_{k}"] = shift
    for k in range(config.seeds):
        vectors[f"random_{k}"] = torch.randn(n_layers, d, generator=g, dtype=torch.float64)

    grid, chosen = _steering_grid(config, vectors, steer_layers, margins, base, labels)

    bias_only = _bias_only(base, labels)

    metrics = {
        "n": {s: len(v) for s, v in splits.items()},
        "n_layers": n_layers,
        "step_norm": step_norm,
        "base": {s: margin_summary(base[s], labels[s]) for s in ("select", "test")},
        "cosine": cosine,
        "search": search,
        "grid_select": grid,
        "steering_test": chosen,
        "bias_only": bias_only,
        "resid_norm": resid_norm.tolist(),
    }
    _print(metrics)

    return Result(
        NAME,
        config_record(config, steer_layers_used=steer_layers),
        metrics,
        time.perf_counter() - t0,
        {
            "steering_cosine.png": lambda path: figures.draw_cosine(cosine, path),
            "steering_scale.png": lambda path: figures.draw_scale(
                grid, steer_layers, metrics["base"]["select"]["accuracy"], path
            ),
        },
    )


def _band(rows: list[list[float]]) -> dict[str, list[float]]:
    """Mean and SE per column of per-seed rows."""
    cols = list(zip(*rows))
    return {"mean": [sum(c) / len(c) for c in cols], "se": [_se(list(c)) for c in cols]}


def _weight_search(
    model: Any,
    tok: Any,
    config: SteeringConfig,
    delta: dict[str, Tensor],
    step_norm: float,
    prompts: dict[str, list[str]],
    labels: dict[str, Tensor],
    ids: Any,
    summaries: Any,
    v_caa: Tensor,
) -> tuple[list[dict[str, Any]], list[Tensor], list[list[float]]]:
    """Best-of-N weight perturbations pushed forward, one search per seed in
    ``config.search_seeds``; the norm is chosen on the select split.
    -> (per-seed records, their mean activation shifts, their cosines with CAA)."""
    from updatescope.data.statements import answer_margins
    from updatescope.locallinear.search import best_over_norms
    from updatescope.steering import direction_norm, displaced

    bs = config.batch_size
    # --- Best-of-N weight perturbations, in displacement coordinates (origin = the model):
    # loss(u) = -mean signed margin of θ + u; candidates σ z_i with σ = ρ‖δθ‖/√D, so ‖σ z‖ ≈ ρ‖δθ‖
    names = list(delta)
    numels = [delta[k].numel() for k in names]
    origin = torch.zeros(sum(numels))
    saved = {k: p.detach().clone() for k, p in model.named_parameters() if k in delta}
    both = prompts["select"] + prompts["test"]
    n_sel = len(prompts["select"])
    sign = torch.cat([labels[s].double() * 2 - 1 for s in ("select", "test")])
    last: dict[str, Any] = {"u": None}

    def search_loss(split: str):
        # best_of_n scores each candidate on select, then on test: one displacement and one
        # pass over both splits serves the two calls (the origin needs no displacement)
        def f(u: Tensor) -> float:
            if last["u"] is not u:
                if u is origin:
                    m = answer_margins(model, tok, both, ids, bs)
                else:
                    with displaced(model, names, u, saved):
                        m = answer_margins(model, tok, both, ids, bs)
                signed = m * sign
                last.update(u=u, select=-float(signed[:n_sel].mean()), test=-float(signed[n_sel:].mean()))
            return last[split]

        return f

    search, search_shift, search_cos = [], [], []
    for k in range(config.search_seeds):
        seed_k = config.seed * 1000 + 500 + k
        j, runs, u = best_over_norms(
            origin, search_loss("select"), search_loss("test"), config.search_norms, step_norm, config.search_n,
            seed_k, numels,
        )  # fmt: skip
        res = runs[j]
        parts = torch.split(u, numels)
        kept = {name: part.view_as(delta[name]).to(delta[name].dtype) for name, part in zip(names, parts)}
        last["u"] = None  # frees the last candidate
        shift, _ = summaries(kept)
        search_shift.append(shift)
        search_cos.append(_cos_rows(shift, v_caa))
        # gain_select / gain_heldout: the weight perturbation itself, in mean signed margin
        search.append(
            {
                **res.as_dict(),
                "norm": config.search_norms[j],
                "direction_norm": direction_norm(kept),
                "gain_select_per_norm": [r.gain_select for r in runs],
                "cosine": search_cos[-1],
            }
        )
    saved.clear()  # the clones of θ are not needed past the search
    return search, search_shift, search_cos


def _steering_grid(
    config: SteeringConfig,
    vectors: dict[str, Tensor],
    steer_layers: list[int],
    margins: Any,
    base: dict[str, Tensor],
    labels: dict[str, Tensor],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every vector at every (layer, scale) on the select split; the best one per vector
    reported on the test split, against the base model.  -> (select grid, chosen per vector)."""
    from updatescope.data.statements import margin_summary

    def correct(m: Tensor, split: str) -> Tensor:
        return ((m > 0).long() == labels[split]).double()

    grid, chosen = {}, {}
    for name, vec in vectors.items():
        rows = []
        for layer in steer_layers:
            rows.append(
                [margin_summary(margins("select", vec[layer], layer, s), labels["select"]) for s in config.scales]
            )
        grid[name] = {
            "layers": steer_layers,
            "scales": list(config.scales),
            "accuracy": [[c["accuracy"] for c in r] for r in rows],
            "signed_margin": [[c["signed_margin"] for c in r] for r in rows],
        }
        best = max(
            ((li, si) for li in range(len(steer_layers)) for si in range(len(config.scales))),
            key=lambda t: (rows[t[0]][t[1]]["accuracy"], rows[t[0]][t[1]]["signed_margin"]),
        )
        layer, scale = steer_layers[best[0]], config.scales[best[1]]
        m_test = margins("test", vec[layer], layer, scale)
        diff = correct(m_test, "test") - correct(base["test"], "test")
        chosen[name] = {
            "layer": layer,
            "scale": scale,
            "select": rows[best[0]][best[1]],
            "test": margin_summary(m_test, labels["test"]),
            "gain": float(diff.mean()),
            "gain_se": float(diff.std() / math.sqrt(len(diff))),
        }
    for kind, count in (("search", config.search_seeds), ("random", config.seeds)):
        gains = [chosen[f"{kind}_{k}"]["gain"] for k in range(count)]
        chosen[f"{kind}_mean"] = {"gain": sum(gains) / len(gains), "gain_se": _se(gains)}
    return grid, chosen


def _bias_only(base: dict[str, Tensor], labels: dict[str, Tensor]) -> dict[str, Any]:
    """The bias-only baseline: the best threshold on the base margins of the select split,
    reported on the test split."""
    from updatescope.data.statements import margin_summary

    def correct(m: Tensor, split: str) -> Tensor:
        return ((m > 0).long() == labels[split]).double()

    # bias-only baseline: the best threshold on the base margins of the select split
    cands = sorted(set(base["select"].tolist()))
    ths = [c + 1e-9 for c in cands] + [cands[0] - 1.0]
    th = max(ths, key=lambda t: float(correct(base["select"] - t, "select").mean()))
    bias_test = margin_summary(base["test"] - th, labels["test"])
    diff = correct(base["test"] - th, "test") - correct(base["test"], "test")
    return {
        "threshold": th,
        "test": bias_test,
        "gain": float(diff.mean()),
        "gain_se": float(diff.std() / math.sqrt(len(diff))),
    }


def _print(m: dict[str, Any]) -> None:
    from updatescope.report.console import print_rows

    c = m["cosine"]
    rows = [
        [
            str(layer),
            f"{c['pushforward_mean'][i]:.3f}",
            f"{c['pushforward_contrast'][i]:.3f}",
            f"{c['random_step_mean']['mean'][i]:.3f}",
            f"{c['shuffled_caa']['mean'][i]:.3f}",
            f"{c['half_caa']['mean'][i]:.3f}",
        ]
        for i, layer in enumerate(c["layers"])
    ]
    for i, row in enumerate(rows):
        row.insert(4, f"{c['search_mean']['mean'][i]:.3f}")
    print_rows(
        "cosine with CAA per layer",
        ["layer", "step mean", "step contrast", "random step", "searched step", "shuffled CAA", "half CAA"],
        rows,
    )
    rows = [
        [
            k,
            str(v.get("layer", "")),
            str(v.get("scale", "")),
            f"{v['test']['accuracy']:.3f}" if "test" in v else "",
            f"{v['gain']:+.3f} ± {v['gain_se']:.3f}",
        ]
        for k, v in m["steering_test"].items()
    ]
    rows.append(
        [
            "bias only",
            "",
            "",
            f"{m['bias_only']['test']['accuracy']:.3f}",
            f"{m['bias_only']['gain']:+.3f} ± {m['bias_only']['gain_se']:.3f}",
        ]
    )
    print_rows(
        f"test accuracy (base {m['base']['test']['accuracy']:.3f})",
        ["vector", "layer", "scale", "accuracy", "gain vs base"],
        rows,
    )
