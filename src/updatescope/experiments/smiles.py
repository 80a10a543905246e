"""SMILES (paper A): does the Fisher alignment between molecular domains track transfer?

Domains: the 9 SMILES domains of ``updatescope.data.domains`` (family ``smiles``: NCI
molecules by TPSA band, WEHI screening molecules by element class × polarity), each with
disjoint sketch / train / eval hash splits, all under SmolLM2's text tokenizer (the shared
output basis).  Head inputs are captured once per split and cached (``_lm.capture_acts``).

Ground truth (``ground_truth`` in the config, as in ``source-selection``): ``"lora"``
(default) trains LoRA adapters on the last decoder blocks on the source's train split
(``_lora.transfer_matrix``); ``"head"`` fine-tunes only the output head on cached head inputs
(``_lm.transfer_matrix``).  The cross-domain *perplexity reduction* on a target is

    r(T, S) = (PPL_T − PPL_T|S) / PPL_T = 1 − exp(−(L_T − L_T|S)),

L the target's eval-split mean cross-entropy (nats) under the base head and under the head
fine-tuned on S.  It is a monotone function of the loss reduction, so per-target rankings
are the same as with ``transfer``; pooled over targets it puts targets on a relative scale.

Statistics, for every method's similarity (FisherSketch joint A_F, activation-only
Scov(M_a), error-only Scov(Γ_e), the exact Gram identity, mean-gradient cosine, the
baselines, random):

- pooled Spearman ρ over all ordered (target, source) pairs, s ≠ t, with scipy's two-sided
  p-value.  That p treats the 72 pairs as independent; they are not (each domain appears in
  16 pairs, and A_F is symmetric), so the p-value is optimistic.
- hence also a Mantel-style permutation p-value: the domain labels of the similarity
  matrix are permuted (rows and columns together) ``n_perm`` times and the pooled ρ
  recomputed; p = (1 + #{|ρ_perm| ≥ |ρ|}) / (1 + n_perm).  This keeps the dependence
  between pairs that share a domain.
- per-target Spearman (8 candidates per target): mean ± sd and each target's p-value.
- the selection metrics of ``select.metrics.summarise`` (top-1, regret, ...) for reference.
"""
from __future__ import annotations

import functools
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from updatescope.experiments import _lm, _lora, source_selection
from updatescope.experiments._common import finish, merge_config

NAME = "smiles"


def smiles_domains() -> list[str]:
    """Names of the SMILES-family domains (monkeypatched in tests)."""
    from updatescope.data.domains import list_domains

    return [d.name for d in list_domains("smiles")]


def load_texts(name: str, split: str, max_chars: int) -> list[str]:
    """Documents of one domain split (monkeypatched in tests)."""
    from updatescope.data.domains import load_domain

    return load_domain(name, split, max_chars=max_chars)


def ppl_reduction(base_loss: Mapping[str, float], loss: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """{target: {source: 1 − exp(−(L_T − L_T|S))}} (relative perplexity reduction; > 0 = helped)."""
    return {t: {s: 1.0 - math.exp(-(base_loss[t] - v)) for s, v in row.items()} for t, row in loss.items()}


def _offdiag(names: Sequence[str], table: Mapping[str, Mapping[str, float]]) -> np.ndarray:
    """(T, T) [target, source] array, NaN on the diagonal and where missing."""
    out = np.full((len(names), len(names)), np.nan)
    for i, t in enumerate(names):
        for j, s in enumerate(names):
            if i != j and s in table.get(t, {}):
                out[i, j] = table[t][s]
    return out


def _rowwise_spearman(xs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of every row of xs (P, n) with y (n,), average ranks for ties."""
    from scipy import stats

    rx = stats.rankdata(xs, axis=1)
    ry = stats.rankdata(y)
    rx = rx - rx.mean(1, keepdims=True)
    ry = ry - ry.mean()
    den = np.sqrt((rx * rx).sum(1) * (ry * ry).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx @ ry) / den


def correlation_tests(names: Sequence[str], scores: Mapping[str, Mapping[str, float]],
                      truth: Mapping[str, Mapping[str, float]], *, n_perm: int = 5000,
                      seed: int = 0) -> dict[str, Any]:
    """Pooled Spearman (scipy p and Mantel permutation p) and per-target Spearman.

    -> {"pooled": {rho, p, p_perm, n_perm, n}, "per_target": {mean, sd, n, rho: {t}, p: {t}}}
    """
    from scipy import stats

    sm, tr = _offdiag(names, scores), _offdiag(names, truth)
    mask = ~np.eye(len(names), dtype=bool)
    x, y = sm[mask], tr[mask]
    ok = np.isfinite(x) & np.isfinite(y)
    pooled: dict[str, Any] = {"rho": math.nan, "p": math.nan, "p_perm": math.nan, "n_perm": n_perm,
                              "n": int(ok.sum())}
    if ok.sum() >= 3 and np.ptp(x[ok]) > 0 and np.ptp(y[ok]) > 0:
        res = stats.spearmanr(x[ok], y[ok])
        rho = float(res.statistic)
        pooled.update(rho=rho, p=float(res.pvalue))
        if ok.all():  # permutation test needs every pair's score
            rng = np.random.default_rng(seed)
            perms = np.stack([rng.permutation(len(names)) for _ in range(n_perm)])   # (P, T)
            xp = sm[perms[:, :, None], perms[:, None, :]][:, mask]                   # (P, pairs)
            r = _rowwise_spearman(xp, y)
            hits = int(np.sum(np.isfinite(r) & (np.abs(r) >= abs(rho) - 1e-12)))
            pooled["p_perm"] = (1 + hits) / (1 + n_perm)
    per_rho, per_p = {}, {}
    for i, t in enumerate(names):
        xi, yi = sm[i][mask[i]], tr[i][mask[i]]
        if np.all(np.isfinite(xi)) and np.ptp(xi) > 0 and np.ptp(yi) > 0:
            res = stats.spearmanr(xi, yi)
            per_rho[t], per_p[t] = float(res.statistic), float(res.pvalue)
    vals = np.array(list(per_rho.values()))
    per = {"mean": float(vals.mean()) if vals.size else None,
           "sd": float(vals.std(ddof=1)) if vals.size > 1 else None,
           "n": int(vals.size), "rho": per_rho, "p": per_p}
    return {"pooled": pooled, "per_target": per}


def plot_smiles(names: Sequence[str], truth: Mapping[str, Mapping[str, float]],
                scores: Mapping[str, Mapping[str, Mapping[str, float]]], tests: Mapping[str, Any],
                out_png: Path, title: str) -> None:
    """Scatter of A_F and Scov(M_a) against the perplexity reduction, and pooled ρ per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mask = ~np.eye(len(names), dtype=bool)
    y = _offdiag(names, truth)[mask]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1, 1, 1.3]})
    for a_, method, lab in ((ax[0], "fisher", "FisherSketch A_F"), (ax[1], "activation", "Scov(M_a) (sketch)")):
        if method not in scores:
            continue
        x = _offdiag(names, scores[method])[mask]
        a_.scatter(x, y, s=12)
        pl = tests[method]["pooled"]
        a_.set_title(f"{lab}: ρ={pl['rho']:.2f}, p={pl['p']:.3g}, p_perm={pl['p_perm']:.3g}", fontsize=9)
        a_.set_xlabel(lab)
        a_.set_ylabel("relative perplexity reduction on target")
    methods = [m for m in tests if math.isfinite(tests[m]["pooled"]["rho"])]
    rhos = [tests[m]["pooled"]["rho"] for m in methods]
    cols = ["C3" if tests[m]["pooled"]["p_perm"] < 0.05 else "C7" for m in methods]
    ax[2].bar(range(len(methods)), rhos, color=cols)
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set_xticks(range(len(methods)))
    ax[2].set_xticklabels(methods, rotation=60, ha="right", fontsize=8)
    ax[2].set_ylabel("pooled Spearman ρ (red: permutation p < 0.05)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


def run(quick: bool, out_dir: Path, seed: int = 0, *, config: dict[str, Any] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    cfg: dict[str, Any] = {
        "model": "smollm2",
        "domains": None,  # None = every SMILES domain
        # quick sizes equal source-selection's, so the two SMILES domains it uses are cache hits
        # the source-selection LoRA recipe (about 2.5 passes over the train split)
        "tokens": {"sketch": 300, "train": 1600, "eval": 400} if quick else {"sketch": 1500, "train": 4000, "eval": 1000},
        "sketch_dim": 4096,
        "ground_truth": "lora",
        "lora": {"n_last": 2, "r": 8, "alpha": 16, "targets": list(_lora.DEFAULT_TARGETS), "optimizer": "adam",
                 "lr": 3e-4, "steps": 8 if quick else 20, "batch": 4, "seq_len": 128},
        "finetune": {"optimizer": "adam", "lr": 3e-5, "steps": 60, "batch": 128, "extra_rows": 2048},
        "max_cached_logits": 2**29,
        "exact_n": 300 if quick else 500, "baseline_n": 300 if quick else 500,
        "n_perm": 5000, "seed": seed, "quick": quick,
    }
    merge_config(cfg, config)
    domains = list(cfg["domains"] or smiles_domains())
    cfg["domains"] = domains
    log = functools.partial(print, flush=True)

    model, tok = _lm.load_model(cfg["model"])
    fp = _lm.fingerprint(model, tok)
    w0, b0 = _lm.head_weights(model)
    wanted = cfg["tokens"] if cfg["ground_truth"] == "head" else {"sketch": cfg["tokens"]["sketch"]}
    data = source_selection.capture_domains(model, tok, fp, domains, wanted, log, loader=load_texts)
    gt = source_selection.ground_truth(model, tok, fp, w0, b0, domains, cfg, seed, log, loader=load_texts, data=data)
    del model
    truth = ppl_reduction(gt["base_loss"], gt["loss"])
    sc = _lm.score_methods(w0, b0, data["sketch"], fp=fp, sketch_dim=cfg["sketch_dim"], seed=seed,
                           exact_n=cfg["exact_n"], baseline_n=cfg["baseline_n"], log=log)
    tests = {m: correlation_tests(domains, table, truth, n_perm=cfg["n_perm"], seed=seed)
             for m, table in sc["scores"].items()}
    by_method = _lm.evaluate_methods(sc["scores"], truth, seed=seed)
    head = _lm.headline(by_method)

    print(f"{'method':18s} {'rho':>6s} {'p':>8s} {'p_perm':>8s} {'tgt_rho':>8s}")
    for m, tst in tests.items():
        pl, pt = tst["pooled"], tst["per_target"]
        print(f"{m:18s} {pl['rho']:6.3f} {pl['p']:8.3g} {pl['p_perm']:8.3g} "
              f"{'n/a' if pt['mean'] is None else format(pt['mean'], '8.3f')}")
    for m, why in sc["cannot_run"].items():
        print(f"{m:18s} cannot run: {why}")

    out_dir.mkdir(parents=True, exist_ok=True)
    fig = out_dir / "smiles.png"
    plot_smiles(domains, truth, sc["scores"], tests, fig,
                f"SMILES, SmolLM2-135M, {len(domains)} domains, {cfg['ground_truth']} fine-tuning ground truth")
    metrics = {
        "n_domains": len(domains),
        "tokens_captured": {s: {d: int(v["labels"].numel()) for d, v in data[s].items()} for s in data},
        "ground_truth": {**gt, "ppl_reduction": truth},
        "correlation": tests,
        **_lm.method_metrics(sc, by_method, head, fig),
    }
    return finish(NAME, cfg, metrics, t0)
