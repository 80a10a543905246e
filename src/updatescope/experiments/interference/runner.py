"""Interference between tasks trained one after another, on the synthetic lab.

Per replicate seed: a fresh :class:`TinyTransformer` (the *base*); every task A trained from
the base (θ_A); every other task B trained from θ_A (θ_AB).  Forgetting of the pair (A, B) is
A's eval loss at θ_AB minus at θ_A, B's gain its eval loss at θ_A minus at θ_AB.  The
predictors are computed from the head streams of every task at θ_A (the primary state: where
B's training starts) and at the base (what a planner has).  Then sequences of tasks are
trained in the planner's order, random orders and the predicted-worst order, and with the
planner's replay against uniform replay.  Stages are memoised by their prefix (the task and
replay rows of every earlier stage), so a pair's two stages are the first two stages of any
order that starts with them.  Analysis: PREREGISTRATION.md, :mod:`.analysis`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from updatescope.experiments import Result, config_record, scoring
from updatescope.experiments.heads import errors_of, sketch_stream
from updatescope.experiments.interference import analysis
from updatescope.experiments.interference.config import InterferenceConfig
from updatescope.experiments.interference.tasks import TASK_FAMILY, FamilyTasks
from updatescope.locallinear.config import ModelConfig
from updatescope.locallinear.params import flat_params, set_flat_params
from updatescope.locallinear.synthetic import TinyTransformer
from updatescope.select.interference import interference_table, replay_shares, search_order

NAME = "interference"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")
#: predictors in table order (higher = more forgetting predicted)
PREDICTORS = (
    "fisher",
    "exact_fisher",
    "inner",
    "exact_inner",
    "error",
    "exact_error",
    "activation",
    "exact_activation",
    "grad_conflict",
    "cka",
    "family",
    "random",
)
STATES = ("start", "base")
ARMS = ("plan", "worst", "random", "plan_replay", "uniform_replay")
_SEED_STRIDE = 1000

Stage = tuple[str, tuple[tuple[str, int], ...]]  # (task, ((replayed task, rows), ...))


def replicate_seed(cfg: InterferenceConfig, j: int) -> int:
    return cfg.seed + _SEED_STRIDE * j


def make_model(cfg: InterferenceConfig, vocab: int, seed: int) -> TinyTransformer:
    """The base of replicate ``seed``: the lab's transformer at its seeded initialisation."""
    mc = ModelConfig(n_layer=cfg.n_layer, d_model=cfg.d_model, n_head=cfg.n_head, seq_len=cfg.digits, vocab=vocab)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyTransformer(mc)


def replay_rows(shares: Mapping[str, float], batch: int) -> tuple[tuple[str, int], ...]:
    """Shares of a batch -> whole rows per task (largest remainder, so the total is
    round(Σ shares · batch)); tasks with no row are dropped, order kept."""
    if not shares:
        return ()
    want = {t: s * batch for t, s in shares.items()}
    total = int(round(sum(want.values())))
    rows = {t: int(math.floor(v)) for t, v in want.items()}
    for t in sorted(want, key=lambda t: rows[t] - want[t])[: total - sum(rows.values())]:
        rows[t] += 1
    return tuple((t, r) for t, r in rows.items() if r > 0)


def train_stage(model: TinyTransformer, ft: FamilyTasks, cfg: InterferenceConfig, stage: Stage) -> None:
    """``cfg.steps`` Adam steps (fresh optimiser) on the stage's task; replayed tasks fill
    their rows of every batch from their own training streams (same rows per step in total)."""
    task, replay = stage
    n_main = cfg.batch - sum(r for _, r in replay)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    model.train()
    for i in range(cfg.steps):
        seq = torch.cat([ft.batch(task, i, "train", n_main)] + [ft.batch(t, i, "train", r) for t, r in replay])
        loss = ft.loss(model, seq)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


class Stages:
    """Parameters after a sequence of stages from one base, memoised by prefix."""

    def __init__(self, model: TinyTransformer, ft: FamilyTasks, cfg: InterferenceConfig) -> None:
        self.model, self.ft, self.cfg = model, ft, cfg
        self.memo: dict[tuple[Stage, ...], torch.Tensor] = {(): flat_params(model)}
        self.trained = 0

    def load(self, prefix: tuple[Stage, ...]) -> TinyTransformer:
        """The model with the parameters after ``prefix`` loaded (trained when not memoised)."""
        if prefix not in self.memo:
            self.load(prefix[:-1])
            train_stage(self.model, self.ft, self.cfg, prefix[-1])
            self.trained += 1
            self.memo[prefix] = flat_params(self.model)
        set_flat_params(self.model, self.memo[prefix])
        return self.model


@torch.no_grad()
def head_stream(model: TinyTransformer, ft: FamilyTasks, task: str, n: int) -> dict[str, torch.Tensor]:
    """Head inputs (final LayerNorm output) at the answer positions of ``n`` sketch
    sequences and their labels: {"acts" (n·L, d), "labels" (n·L,)}."""
    seq = ft.batch(task, 0, "sketch", n)
    got: dict[str, torch.Tensor] = {}
    hook = model.ln_f.register_forward_hook(lambda _m, _i, out: got.__setitem__("x", out))
    try:
        model(seq[:, :-1])
    finally:
        hook.remove()
    acts = got["x"][:, ft.seq_len + 1 :].reshape(-1, got["x"].shape[-1]).float()
    return {"acts": acts, "labels": seq[:, ft.seq_len + 2 :].reshape(-1)}


def exact_inner(w0: torch.Tensor, b0: torch.Tensor | None, streams: Mapping[str, Mapping[str, torch.Tensor]]) -> dict:
    """⟨F_A, F_B⟩ = mean_ij (a_i·a'_j)² (e_i·e'_j)² over all cross pairs (exact), per task pair."""
    names = list(streams)
    ae = {}
    for t in names:
        a = streams[t]["acts"].to(torch.float64)
        ae[t] = (a, errors_of(w0.double(), None if b0 is None else b0.double(), a, streams[t]["labels"]))
    out: dict[str, dict[str, float]] = {t: {} for t in names}
    for i, t in enumerate(names):
        for s in names[i + 1 :]:
            (a1, e1), (a2, e2) = ae[t], ae[s]
            v = float(((a1 @ a2.T).square() * (e1 @ e2.T).square()).mean())
            out[t][s] = out[s][t] = v
    return out


def predictors_at(model: TinyTransformer, ft: FamilyTasks, cfg: InterferenceConfig, seed: int) -> tuple[dict, Any]:
    """Every predictor for every task pair at the model's current parameters.
    -> ({predictor: {A: {B: value}}}, the InterferenceTable of the sketches)."""
    streams = {t: head_stream(model, ft, t, cfg.n_sketch) for t in ft.tasks}
    w0, b0 = model.head.weight.detach().float(), model.head.bias.detach().float()
    fp = hashlib.sha256(flat_params(model).numpy().tobytes()).hexdigest()[:16]
    return predictors_from_streams(w0, b0, streams, TASK_FAMILY, fp=fp, sketch_dim=cfg.sketch_dim, seed=seed)


def predictors_from_streams(
    w0: torch.Tensor,
    b0: torch.Tensor | None,
    streams: Mapping[str, Mapping[str, torch.Tensor]],
    family: Mapping[str, str],
    *,
    fp: str,
    sketch_dim: int,
    seed: int,
    exact_n: int | None = None,
) -> tuple[dict, Any]:
    """Every predictor for every pair of the head ``streams`` (task -> {"acts" (n, d), "labels"
    (n,)}) under the head (w0, b0); exact values on the first ``exact_n`` rows (None: all).
    -> ({predictor: {A: {B: value}}}, the InterferenceTable of the sketches)."""
    names = list(streams)
    sc = scoring.score_methods(
        w0,
        b0,
        streams,
        fp=fp,
        sketch_dim=sketch_dim,
        seed=seed,
        exact_n=exact_n,
        baseline_n=exact_n,
        baselines=("cka",),
    )
    if sc["cannot_run"]:
        raise RuntimeError(f"interference: predictors could not run: {sc['cannot_run']}")
    raw = sc["scores"]
    sigs = [
        sketch_stream(w0, b0, streams[t]["acts"], streams[t]["labels"], sketch_dim=sketch_dim, seed=seed, fp=fp)
        for t in names
    ]
    table = interference_table(sigs, names)
    inner = table.values["inner"]
    preds = {k: raw[k] for k in ("fisher", "exact_fisher", "error", "exact_error", "activation", "exact_activation")}
    preds["inner"] = {a: {b: float(inner[i, j]) for j, b in enumerate(names) if j != i} for i, a in enumerate(names)}
    cut = {t: {k: v[:exact_n] for k, v in s.items()} for t, s in streams.items()} if exact_n else streams
    preds["exact_inner"] = exact_inner(w0, b0, cut)
    preds["grad_conflict"] = {a: {b: -v for b, v in row.items()} for a, row in raw["grad_cos"].items()}
    preds["cka"] = raw["cka"]
    preds["family"] = {a: {b: float(family[a] == family[b]) for b in names if b != a} for a in names}
    preds["random"] = raw["random"]
    return preds, table


def draw_sequences(cfg: Any, names: Sequence[str], family: Mapping[str, str] = TASK_FAMILY) -> list[list[str]]:
    """``n_sequences`` distinct task sets (sorted lists) drawn with a fixed seed among those of
    ``seq_len_tasks`` tasks holding at least one same-family pair."""
    eligible = [
        list(c) for c in itertools.combinations(names, cfg.seq_len_tasks) if len({family[t] for t in c}) < len(c)
    ]
    rng = np.random.default_rng(cfg.seed + 4242)
    pick = rng.choice(len(eligible), size=min(cfg.n_sequences, len(eligible)), replace=False)
    return [eligible[i] for i in sorted(pick.tolist())]


def _losses(model: TinyTransformer, ft: FamilyTasks, n: int) -> dict[str, np.ndarray]:
    return {t: ft.example_losses(model, t, n).numpy() for t in ft.tasks}


def _plan_arms(seq: list[str], damage: np.ndarray, cfg: Any, rng: np.random.Generator) -> dict[str, Any]:
    """The arms of one sequence: orders (task names) and per-stage replay shares."""
    best, _ = search_order(damage)
    worst, _ = search_order(damage, worst=True)
    order = [seq[i] for i in best]
    planned = replay_shares(damage, best, cfg.replay_budget)
    arms = {
        "plan": {"order": order, "replay": [{} for _ in seq]},
        "worst": {"order": [seq[i] for i in worst], "replay": [{} for _ in seq]},
        "plan_replay": {"order": order, "replay": [{seq[a]: v for a, v in s.items()} for s in planned]},
        "uniform_replay": {
            "order": order,
            "replay": [{t: cfg.replay_budget / k for t in order[:k]} if k else {} for k in range(len(order))],
        },
    }
    for r in range(cfg.n_random_orders):
        arms[f"random{r}"] = {"order": [seq[i] for i in rng.permutation(len(seq))], "replay": [{} for _ in seq]}
    return arms


def one_seed(cfg: InterferenceConfig, j: int, sequences: list[list[str]], log) -> dict[str, Any]:
    """Every measurement of replicate ``j``: losses, predictors at both states, pair
    differences per example, the plans and their final losses."""
    seed = replicate_seed(cfg, j)
    ft = FamilyTasks(cfg.families, cfg.digits, seed)
    names = list(ft.tasks)
    model = make_model(cfg, ft.vocab, seed)
    model.eval()
    stages = Stages(model, ft, cfg)
    base_loss = _losses(model, ft, cfg.n_eval)
    base_preds, base_table = predictors_at(model, ft, cfg, seed)
    start_preds: dict[str, dict[str, dict[str, float]]] = {p: {} for p in PREDICTORS}
    own_loss, forget, gain = {}, {}, {}
    for a in names:
        at_a = _losses(stages.load(((a, ()),)), ft, cfg.n_eval)
        own_loss[a] = float(at_a[a].mean())
        preds, _ = predictors_at(stages.model, ft, cfg, seed)
        for p in PREDICTORS:
            start_preds[p][a] = preds[p][a]
        for b in names:
            if b == a:
                continue
            after = _losses(stages.load(((a, ()), (b, ()))), ft, cfg.n_eval)
            key = analysis.pair_key(a, b)
            forget[key] = after[a] - at_a[a]
            gain[key] = at_a[b] - after[b]
        log(f"seed {j + 1}/{cfg.seeds}: A = {a} done ({stages.trained} stages trained)")
    damage = base_table.damage("inner").numpy()
    rng = np.random.default_rng(seed + 77)
    plans = []
    for k, seq in enumerate(sequences):
        idx = [names.index(t) for t in seq]
        arms = _plan_arms(seq, damage[np.ix_(idx, idx)], cfg, rng)
        for arm in arms.values():
            prefix = tuple((t, replay_rows(r, cfg.batch)) for t, r in zip(arm["order"], arm["replay"]))
            final = _losses(stages.load(prefix), ft, cfg.n_eval)
            arm["rows"] = [dict(p[1]) for p in prefix]
            arm["final_loss"] = {t: float(final[t].mean()) for t in seq}
            arm["mean_final_loss"] = float(np.mean([final[t].mean() for t in seq]))
        plans.append({"sequence": seq, "damage_all_zero": not damage[np.ix_(idx, idx)].any(), "arms": arms})
        log(f"seed {j + 1}/{cfg.seeds}: sequence {k + 1}/{len(sequences)} done ({stages.trained} stages trained)")
    return {
        "seed": seed,
        "base_loss": {t: float(v.mean()) for t, v in base_loss.items()},
        "own_loss": own_loss,
        "forget": forget,
        "gain": gain,
        "predictors": {"start": start_preds, "base": base_preds},
        "plans": plans,
        "stages_trained": stages.trained,
    }


def _pair_table(per_seed: list[dict], state: str, pred: str, keys: list[str]) -> dict[str, float]:
    """Seed mean of a predictor per ordered pair."""
    out = {}
    for key in keys:
        a, b = analysis.split_key(key)
        out[key] = float(np.mean([s["predictors"][state][pred][a][b] for s in per_seed]))
    return out


def lm_regime(
    cfg: Any, per_seed: list[dict], names: list[str], refused_tasks: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The SmolLM2 arm's regime rule (amendment 2): A is learned in a seed when its own gain
    (base loss − loss after its stage) exceeds both ``cfg.min_gain`` and 2 × the bootstrap SE
    of that gain over its eval rows (``per_seed[s]["own_gain"][A]``, per-row gains).  Tasks in
    ``refused_tasks`` (task -> reason, e.g. a failed warm-up check) are refused whatever their gain.
    -> {"learned": {A: [bool per seed]}, "own_gain", "own_gain_se": {A: [per seed]},
    "reasons": {A: why A is refused} (only refused tasks)}."""
    learned, gains, ses, reasons = {}, {}, {}, {}
    for i, a in enumerate(names):
        gains[a] = [s["base_loss"][a] - s["own_loss"][a] for s in per_seed]
        ses[a] = [analysis.eval_se(s["own_gain"][a], n_boot=cfg.n_boot, seed=cfg.seed + i) for s in per_seed]
        learned[a] = [g > cfg.min_gain and g > 2 * se for g, se in zip(gains[a], ses[a])]
        why = [
            f"gain {g:+.4f} nats <= min_gain {cfg.min_gain} in seed {s['seed']}"
            if g <= cfg.min_gain
            else f"gain {g:+.4f} nats <= 2 x eval SE {2 * se:.4f} in seed {s['seed']}"
            for g, se, ok, s in zip(gains[a], ses[a], learned[a], per_seed)
            if not ok
        ]
        if refused_tasks and a in refused_tasks:
            learned[a] = [False] * len(per_seed)
            why.insert(0, refused_tasks[a])
        if why:
            reasons[a] = "; ".join(why)
    return {"learned": learned, "own_gain": gains, "own_gain_se": ses, "reasons": reasons}


def analyse(
    cfg: Any,
    per_seed: list[dict],
    names: list[str],
    family: Mapping[str, str] = TASK_FAMILY,
    keys: list[str] | None = None,
    refused_tasks: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The record's metrics from the per-seed measurements (see PREREGISTRATION.md).
    ``keys``: the ordered pairs measured (default: every pair of ``names``).  A is learned by
    the lab's ratio rule, or, for a config with ``min_gain`` (the SmolLM2 arm), by
    :func:`lm_regime` (``refused_tasks``: tasks refused for a reason of the run)."""
    lm = lm_regime(cfg, per_seed, names, refused_tasks) if hasattr(cfg, "min_gain") else None
    if lm is not None:
        learned = lm["learned"]
    else:
        learned = {a: [s["own_loss"][a] <= cfg.learned_ratio * s["base_loss"][a] for s in per_seed] for a in names}
    keys = keys if keys is not None else [analysis.pair_key(a, b) for a in names for b in names if a != b]
    scored = [k for k in keys if all(learned[analysis.split_key(k)[0]])]
    pairs = {}
    for i, k in enumerate(keys):
        f = analysis.eval_bootstrap(np.stack([s["forget"][k] for s in per_seed]), n_boot=cfg.n_boot, seed=cfg.seed + i)
        g = analysis.eval_bootstrap(np.stack([s["gain"][k] for s in per_seed]), n_boot=cfg.n_boot, seed=cfg.seed + i)
        a, b = analysis.split_key(k)
        pairs[k] = {"same_family": family[a] == family[b], "scored": k in scored, "forgetting": f, "gain": g}
    truth = {k: pairs[k]["forgetting"]["mean"] for k in scored}
    n_a = len({analysis.split_key(k)[0] for k in scored})
    states: dict[str, Any] = {}
    for state in STATES:
        preds = {p: _pair_table(per_seed, state, p, scored) for p in PREDICTORS}
        boot = (
            analysis.cluster_bootstrap(
                preds,
                truth,
                pairs=[(a, b) for _, a, b in analysis.PAIR_COMPARISONS],
                n_boot=cfg.n_boot,
                seed=cfg.seed,
            )
            if n_a >= 3
            else {"ci": {}, "diff_ci": {}}
        )
        states[state] = {
            "values": preds,
            "correlation": {
                p: {
                    **analysis.correlations(preds[p], truth),
                    "spearman_ci": boot["ci"].get(p),
                    "per_task_spearman": analysis.per_task_spearman(preds[p], truth),
                }
                for p in PREDICTORS
            },
            "diff_ci": boot["diff_ci"],
        }
    verdicts = analysis.pair_verdicts(states["start"]["values"], truth, seed=cfg.seed) if n_a >= 3 else []
    widths = [(p["forgetting"]["eval_ci"][1] - p["forgetting"]["eval_ci"][0]) / 2 for p in pairs.values()]
    same = [truth[k] for k in scored if pairs[k]["same_family"]]
    other = [truth[k] for k in scored if not pairs[k]["same_family"]]
    return {
        "regime": {
            **({"min_gain": cfg.min_gain} if hasattr(cfg, "min_gain") else {"learned_ratio": cfg.learned_ratio}),
            "base_loss": {a: [s["base_loss"][a] for s in per_seed] for a in names},
            "own_loss": {a: [s["own_loss"][a] for s in per_seed] for a in names},
            "learned": learned,
            "n_pairs": len(keys),
            "n_scored": len(scored),
            "refused": [k for k in keys if k not in scored],
            **(
                {
                    "own_gain": lm["own_gain"],
                    "own_gain_se": lm["own_gain_se"],
                    "refused_tasks": lm["reasons"],
                    "refusal_reasons": {
                        k: "A not learned: " + lm["reasons"][analysis.split_key(k)[0]] for k in keys if k not in scored
                    },
                }
                if lm is not None
                else {}
            ),
        },
        "pairs": pairs,
        "noise": {
            "median_eval_ci_half_width": float(np.median(widths)),
            "sd_forgetting_over_pairs": float(np.std(list(truth.values()), ddof=1)) if len(truth) > 1 else None,
            "mean_forgetting_same_family": float(np.mean(same)) if same else None,
            "mean_forgetting_other_family": float(np.mean(other)) if other else None,
        },
        "states": states,
        "verdicts": verdicts,
        "conclusion": analysis.proxy_conclusion(verdicts),
    }


def analyse_plans(cfg: Any, per_seed: list[dict]) -> dict[str, Any]:
    """Final mean loss per arm and run (sequence/seed), the three paired comparisons on runs
    and, secondary, clustered by sequence."""
    outcomes: dict[str, dict[str, float]] = {arm: {} for arm in ARMS}
    clusters = {}
    for s in per_seed:
        for k, plan in enumerate(s["plans"]):
            run = f"{k}/{s['seed']}"
            clusters[run] = str(k)
            arms = plan["arms"]
            for arm in ("plan", "worst", "plan_replay", "uniform_replay"):
                outcomes[arm][run] = arms[arm]["mean_final_loss"]
            outcomes["random"][run] = float(
                np.mean([v["mean_final_loss"] for n, v in arms.items() if n.startswith("random")])
            )
    means = {arm: float(np.mean(list(v.values()))) for arm, v in outcomes.items()}
    zero = sum(p["damage_all_zero"] for s in per_seed for p in s["plans"])
    return {
        "outcomes": outcomes,
        "mean_final_loss": means,
        "verdicts": analysis.plan_verdicts(outcomes, seed=cfg.seed),
        "verdicts_by_sequence": analysis.plan_verdicts(outcomes, clusters, seed=cfg.seed),
        "runs": len(clusters),
        "runs_without_predicted_damage": zero,
        "per_seed": [{"seed": s["seed"], "plans": s["plans"]} for s in per_seed],
    }


def run(cfg: InterferenceConfig, out_dir: Path) -> Result:
    t0 = time.perf_counter()
    log = functools.partial(print, flush=True)
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    names = list(FamilyTasks(cfg.families, cfg.digits, cfg.seed).tasks)
    sequences = draw_sequences(cfg, names)
    # one intra-op thread: at this model size threads cost more than they save (and the
    # machine's other cores stay free for the next stage's evaluation or another run)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        per_seed = [one_seed(cfg, j, sequences, log) for j in range(cfg.seeds)]
    finally:
        torch.set_num_threads(threads)
    metrics = analyse(cfg, per_seed, names)
    metrics["plans"] = analyse_plans(cfg, per_seed)
    metrics["powered"] = not cfg.quick
    metrics["note"] = "quick: 3 families, 2 seeds, 2 sequences; not powered" if cfg.quick else ""
    metrics["tasks"] = {t: TASK_FAMILY[t] for t in names}
    metrics["sequences"] = sequences
    metrics["stages_trained"] = sum(s["stages_trained"] for s in per_seed)
    for v in metrics["verdicts"]:
        log(f"{v['comparison']}: {v['word']} ({v['note']})")
    log(f"conclusion: {metrics['conclusion']}")
    for v in metrics["plans"]["verdicts"]:
        log(f"{v['comparison']}: {v['word']} ({v['note']})")
    record = config_record(cfg, preregistration_sha256=prereg_sha, tasks=names)
    from updatescope.experiments.interference.figures import plot_interference

    return Result(
        NAME,
        record,
        metrics,
        time.perf_counter() - t0,
        figures={"interference.png": lambda path: plot_interference(metrics, path)},
    )
