"""``updatescope reproduce steering-shadow`` -- the activation shadow of a LoRA fine-tune.

How much of what a fine-tune does to the residual stream do a handful of steering vectors
span?  Analysis fixed in PREREGISTRATION.md (its sha256 is in the record's config).
1. Each polarity class (100 positive, 100 negative sentences) is split by a seeded shuffle
   into fit and held-out sentences.  CAA per layer: mean over tokens of the positive fit
   sentences' residuals minus the negative ones'; its split-half cosine over the fit
   sentences.  The one-step shift per class: one gradient step of the LM loss on its fit
   sentences, pushed forward exactly (forward AD), averaged over tokens.
2. Per class, a LoRA fine-tune (every attention and MLP projection of every decoder layer)
   on its fit sentences.  Regime check first (amendment 1): per held-out sentence of either
   class, d = its loss under the other class's fine-tune minus under its own class's; the
   pair counts when mean d > 2 SE.  A pair that does not is refused: nothing is measured.
3. The shadows, on neutral news openings at every token and layer: the contrast
   D_l = h_l(FT_pos) - h_l(FT_neg) (primary: it cancels the review-text shift both
   fine-tunes share, as CAA's positive-minus-negative does), and h_l(FT_c) - h_l(base) per
   class (secondary); each with its mean m_l.
4. The share of D_l (per token) and of m_l in span{CAA_l} and span{CAA_l, both shifts_l},
   against random subspaces of the same dimension and, per token, the top-k singular
   directions of D_l itself (:mod:`.spans`); the words come from :mod:`.verdicts`.
Amendment 2: CAA, the one-step shifts' token mean and every shadow leave out each
sequence's first token (``skip_first_token``), whose residual in SmolLM2 is a massive
activation; the record keeps the diagnostic (``metrics.first_token``).
Amendment 3: per layer, the first tokens' massive coordinate c_l; its share of every shadow
(``metrics.massive``), and every measure again without it, in d - 1 coordinates
(``metrics.shadow_without_massive``, primary; the full-space ``metrics.shadow`` is secondary).
Amendment 4: the fine-tunes train on all but the last ``n_val`` fit sentences of their class
and are restored to the step (one of every ``val_every``) whose mean d on those validation
sentences is highest (``metrics.selection``); the regime check and everything after it are
unchanged.
"""

from __future__ import annotations

import copy
import hashlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.experiments import Result, config_record, heads
from updatescope.experiments import sentiment_texts as texts
from updatescope.experiments.steering_shadow import figures, spans, verdicts
from updatescope.experiments.steering_shadow.config import DIRECTIONS, SHADOWS, SPANS, SteeringShadowConfig

NAME = "steering_shadow"
PREREG = Path(__file__).with_name("PREREGISTRATION.md")


def _log(msg: str) -> None:
    print(f"steering-shadow: {msg}", file=sys.stderr, flush=True)


def _cos(a: Tensor, b: Tensor) -> list[float]:
    """Row-wise cosine of (n_layers, d) tensors."""
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=1).tolist()


@torch.no_grad()
def token_residuals(
    model: Any, ids: Tensor, mask: Tensor, layers: list[int], bs: int, skip_first: bool = False
) -> Tensor:
    """Decoder-layer outputs at every real token, rows in batch order.  ids, mask (n, T)
    -> (len(layers), kept tokens, d) float32.  Right padding (default positions).
    ``skip_first``: each row's first real token is left out."""
    from updatescope.steering.positions import layer_outputs_hooked

    keep_all = (texts.first_dropped(mask, mask) if skip_first else mask).bool()
    out = []
    with layer_outputs_hooked(model, layers) as got:
        for s in range(0, ids.shape[0], bs):
            keep = keep_all[s : s + bs]
            model(input_ids=ids[s : s + bs], attention_mask=mask[s : s + bs], use_cache=False)
            out.append(torch.stack([got[x].float()[keep] for x in layers]))
    return torch.cat(out, dim=1)


@torch.no_grad()
def first_token_norms(model: Any, ids: Tensor, mask: Tensor, layers: list[int], bs: int) -> dict[str, list]:
    """Amendment 2's diagnostic, per layer, on right-padded sequences ids, mask (n, T):
    the mean norm of the first token's residual and of the other real tokens' residuals, the
    coordinate with the largest share of the first tokens' summed squared norm, and that share.
    -> {"first_norm", "other_norm", "top_coordinate", "top_share"}, each a list over ``layers``."""
    from updatescope.steering.positions import layer_outputs_hooked

    if not bool(mask[:, 0].bool().all()):
        raise InputError("first_token_norms needs right padding (every row's first position real)")
    first_norm = torch.zeros(len(layers), dtype=torch.float64)
    other_norm = torch.zeros(len(layers), dtype=torch.float64)
    first_sq: Tensor | None = None  # (Lyr, d) summed squares of the first tokens' coordinates
    n_other = 0
    with layer_outputs_hooked(model, layers) as got:
        for s in range(0, ids.shape[0], bs):
            m = mask[s : s + bs].bool()
            model(input_ids=ids[s : s + bs], attention_mask=mask[s : s + bs], use_cache=False)
            h = torch.stack([got[x].double() for x in layers])  # (Lyr, B, T, d)
            first = h[:, :, 0]  # (Lyr, B, d)
            rest = h[:, :, 1:][:, m[:, 1:]]  # (Lyr, kept, d)
            first_norm += first.norm(dim=-1).sum(1)
            other_norm += rest.norm(dim=-1).sum(1)
            sq = first.pow(2).sum(1)
            first_sq = sq if first_sq is None else first_sq + sq
            n_other += rest.shape[1]
    assert first_sq is not None
    top = first_sq.argmax(1)
    return {
        "first_norm": (first_norm / ids.shape[0]).tolist(),
        "other_norm": (other_norm / max(n_other, 1)).tolist(),
        "top_coordinate": top.tolist(),
        "top_share": (first_sq.gather(1, top[:, None])[:, 0] / first_sq.sum(1)).tolist(),
    }


def _coordinate_share(v: Tensor, coords: list[int]) -> list[float]:
    """Per layer, the share of ``v[l]``'s squared norm in coordinate ``coords[l]``.  v (Lyr, d)."""
    v = v.double()
    return (v[torch.arange(v.shape[0]), coords].pow(2) / v.pow(2).sum(1)).tolist()


def sentence_losses(model: Any, ids: Tensor, mask: Tensor, bs: int) -> Tensor:
    """Mean next-token NLL of each sentence.  ids, mask (n, T), right padding -> (n,) float64."""
    sums, counts = texts.sentence_nll(model, ids, mask, bs)
    return sums / counts


def finetune(
    model: Any,
    ids: Tensor,
    mask: Tensor,
    config: SteeringShadowConfig,
    seed: int,
    val: dict[str, tuple[Tensor, Tensor]] | None = None,
) -> tuple[Any, list, dict[int, dict[str, Any]]]:
    """A copy of ``model`` with LoRA adapters on every attention and MLP projection of every
    decoder layer, trained by Adam on the LM loss of every token of ``ids`` (n, T).

    val: class -> its validation sentences (ids, mask).  With it, after every
    ``config.val_every`` steps the LoRA weights are kept and each class's validation losses
    measured (amendment 4).  -> (the fine-tuned copy in eval mode after the last step, the
    training loss of each step, {step: {"state": LoRA weights, "val": {class: (n_val,)}}})."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as exc:  # pragma: no cover - peft is in the hf extra
        from updatescope.errors import MissingExtraError

        raise MissingExtraError("peft", "hf") from exc
    from updatescope.constants import IGNORE_INDEX
    from updatescope.experiments.configs import LORA_TARGETS
    from updatescope.experiments.groundtruth import minibatch_indices

    ft = copy.deepcopy(model)
    for p in ft.parameters():
        p.requires_grad_(False)
    torch.manual_seed(seed)  # LoRA's A matrices are randomly initialised
    lc = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,
        target_modules=list(LORA_TARGETS),
        bias="none",
    )
    inject_adapter_in_model(lc, ft)
    params = {name: p for name, p in ft.named_parameters() if "lora_" in name}
    for p in params.values():
        p.requires_grad_(True)
    opt = torch.optim.Adam(params.values(), lr=config.lr)
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    losses: list[float] = []
    kept: dict[int, dict[str, Any]] = {}
    ft.train()
    for step, idx in enumerate(minibatch_indices(ids.shape[0], config.batch, config.steps, seed), 1):
        loss = ft(input_ids=ids[idx], attention_mask=mask[idx], labels=labels[idx], use_cache=False).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if val is not None and step % config.val_every == 0:
            ft.eval()
            state = {name: p.detach().clone() for name, p in params.items()}
            kept[step] = {"state": state, "val": {c: sentence_losses(ft, *val[c], config.batch_size) for c in val}}
            ft.train()
    ft.eval()
    for p in params.values():
        p.requires_grad_(False)
    return ft, losses, kept


def restore(ft: Any, state: dict[str, Tensor]) -> None:
    """Set ``ft``'s LoRA weights to ``state`` (a kept step of :func:`finetune`)."""
    params = dict(ft.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def _pair_d(loss: dict[str, dict[str, Tensor]]) -> dict[str, Tensor]:
    """Amendment 1's d per sentence of each class: loss[f][c] are class c's sentence losses
    under fine-tune f; d(x) = x's loss under the other class's fine-tune minus under its own
    class's (higher under the other: the pair learned the class).  -> {class: (n_c,)}"""
    return {c: loss[DIRECTIONS[1 - j]][c] - loss[c][c] for j, c in enumerate(DIRECTIONS)}


def _fine_tunes(model: Any, fit_ids: dict, val_ids: dict, config: SteeringShadowConfig) -> tuple[dict, dict, dict]:
    """Both fine-tunes, restored to the step whose mean validation d is highest (amendment 4).
    -> ({class: fine-tune}, {class: training losses}, the step selection's record)."""
    fts, training, kept = {}, {}, {}
    for j, d in enumerate(DIRECTIONS):
        fts[d], losses, kept[d] = finetune(model, *fit_ids[d], config, config.seed * 100 + j, val=val_ids)
        training[d] = {"first": losses[0], "last": losses[-1], "per_step": losses}
        _log(f"{d}: fine-tuned ({losses[0]:.3f} -> {losses[-1]:.3f})")
    steps = sorted(kept[DIRECTIONS[0]])
    per_step = []
    for s in steps:
        dv = _pair_d({f: kept[f][s]["val"] for f in DIRECTIONS})
        pooled = verdicts.pair_regime(dv["positive"].tolist(), dv["negative"].tolist(), config.regime_z)
        per_step.append(
            {
                "step": s,
                "mean": pooled["mean"],
                "se": pooled["se"],
                "loss": {f: {c: float(kept[f][s]["val"][c].mean()) for c in DIRECTIONS} for f in DIRECTIONS},
            }
        )
    best = max(per_step, key=lambda r: r["mean"])  # the first of the maxima: the earliest step
    for d in DIRECTIONS:
        restore(fts[d], kept[d][best["step"]]["state"])
    _log(f"validation chose step {best['step']} of {config.steps} (d_val {best['mean']:+.4f} ± {best['se']:.4f})")
    return fts, training, {"chosen_step": best["step"], "n_val": config.n_val, "per_step": per_step}


def _split(n: int, n_fit: int, n_heldout: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    order = torch.randperm(n, generator=g).tolist()
    return order[:n_fit], order[n_fit : n_fit + n_heldout]


def _measure(gram: Tensor, mean: Tensor, bases: dict[str, Tensor], config: SteeringShadowConfig, g) -> dict:
    """Every fraction of one layer's shadow for every span, with its null and ceiling."""
    out = {}
    for name, q in bases.items():
        k = q.shape[1]
        tok, mf = spans.random_null(gram, mean, k, config.random_draws, g)
        out[name] = {
            "token": spans.token_fraction(gram, q),
            "mean": spans.mean_fraction(mean, q),
            "null_token_mean": float(tok.mean()),
            "null_token_q": float(torch.quantile(tok, config.quantile)),
            "null_mean_mean": float(mf.mean()),
            "null_mean_q": float(torch.quantile(mf, config.quantile)),
            "ceiling_token": spans.top_k_fraction(gram, k),
        }
    return out


def _regime(base_loss: dict[str, Tensor], ft_loss: dict[str, dict[str, Tensor]], z: float) -> dict[str, Any]:
    """The pair's regime check (primary, amendment 1) and each fine-tune's own-minus-other
    loss drop paired by held-out index (the pre-registered check, kept as a secondary fact)."""
    d_per = {c: d.tolist() for c, d in _pair_d(ft_loss).items()}
    pair = verdicts.pair_regime(d_per["positive"], d_per["negative"], z)
    pair.update({f"d_{c}": d_per[c] for c in DIRECTIONS})
    per_direction = {}
    for j, d in enumerate(DIRECTIONS):
        other = DIRECTIONS[1 - j]
        own = (base_loss[d] - ft_loss[d][d]).tolist()
        oth = (base_loss[other] - ft_loss[d][other]).tolist()
        diff = np.asarray(own) - np.asarray(oth)  # paired by held-out index (arbitrary pairing)
        mean, se = float(diff.mean()), float(diff.std(ddof=1) / math.sqrt(len(diff)))
        per_direction[d] = {
            "own_drop": own,
            "other_drop": oth,
            "own_mean": float(np.mean(own)),
            "other_mean": float(np.mean(oth)),
            "mean": mean,
            "se": se,
            "old_rule_passes": verdicts.regime_passes(mean, se, z),
        }
    return {"pair": pair, "per_direction": per_direction}


def _bases(caa: Tensor, shift: dict[str, Tensor]) -> list[dict[str, Tensor]]:
    """Per layer, an orthonormal basis (d, k) of each span.  caa, shift[c] (Lyr, d)."""
    return [
        {
            "caa": spans.orthonormal(caa[x][None]),
            "caa+shifts": spans.orthonormal(torch.stack([caa[x], shift["positive"][x], shift["negative"][x]])),
        }
        for x in range(caa.shape[0])
    ]


def _massive_share(D: Tensor, coords: list[int]) -> dict[str, list[float]]:
    """Per layer, coordinate ``coords[l]``'s share of shadow D's per-token energy and of its
    mean's squared norm.  D (Lyr, N, d) -> {"token", "mean"}, each a list over layers."""
    shares = [spans.coordinate_share(D[x].T @ D[x], D[x].mean(0), c) for x, c in enumerate(coords)]
    return {"token": [t for t, _ in shares], "mean": [m for _, m in shares]}


def _shadow(
    D: Tensor, bases: list, toward: Tensor, base_norm: Tensor, config: SteeringShadowConfig, g: torch.Generator
) -> tuple[dict, Tensor]:
    """One shadow's numbers per layer, and its mean.  D (Lyr, N, d) float64, ``toward``
    (Lyr, d) the signed CAA its mean is compared with, ``base_norm`` (Lyr,) the base
    residuals' Frobenius norms.  -> (record, mean shadow (Lyr, d))."""
    gram = torch.einsum("lnd,lne->lde", D, D)
    m = D.mean(1)  # (Lyr, d)
    per_layer = [_measure(gram[x], m[x], bases[x], config, g) for x in range(D.shape[0])]
    energy = gram.diagonal(dim1=1, dim2=2).sum(1)
    rec = {
        "token_rms": (energy / D.shape[1]).sqrt().tolist(),
        "relative": (energy.sqrt() / base_norm).tolist(),
        "mean_norm": m.norm(dim=1).tolist(),
        "cos_mean_caa": _cos(m, toward),
        "spans": {s: {key: [pl[s][key] for pl in per_layer] for key in per_layer[0][s]} for s in SPANS},
    }
    return rec, m


def _measure_shadows(ft_h: dict[str, Tensor], base_h: Tensor, full: tuple, restricted: tuple, massive, config):
    """Every shadow (contrast, then each fine-tune against the base) measured in the full space
    and without each layer's massive coordinate, plus that coordinate's share of it ->
    (full-space measures, restricted measures, shares).  ``full`` / ``restricted``: (span
    bases per layer, CAA, the base residuals' norm) in that space.  The random subspaces are
    drawn in the order shadow, layer, span; the restricted nulls (d − 1 dimensions) draw from
    their own generator (amendment 3), so the full-space draws are those of earlier records."""
    null_g = torch.Generator().manual_seed(config.seed * 1000 + 7)
    null_g_r = torch.Generator().manual_seed(config.seed * 1000 + 11)
    (bases, caa, base_norm), (bases_r, caa_r, base_norm_r) = full, restricted
    shadow: dict[str, Any] = {}
    without: dict[str, Any] = {}
    share: dict[str, Any] = {}
    means, means_r = {}, {}
    for name in SHADOWS:
        a, b = (ft_h["positive"], ft_h["negative"]) if name == "contrast" else (ft_h[name], base_h)
        sign = -1.0 if name == "negative" else 1.0  # toward the class: CAA points positive
        D = a.double() - b.double()
        shadow[name], means[name] = _shadow(D, bases, sign * caa, base_norm, config, null_g)
        share[name] = _massive_share(D, massive)
        D = spans.drop_coordinates(D, massive)
        without[name], means_r[name] = _shadow(D, bases_r, sign * caa_r, base_norm_r, config, null_g_r)
        del D
    for d in DIRECTIONS:
        # how much of one fine-tune's mean shadow is the sentiment contrast (the rest: shared text)
        shadow[d]["cos_mean_contrast"] = _cos(means[d], means["contrast"])
        without[d]["cos_mean_contrast"] = _cos(means_r[d], means_r["contrast"])
    return shadow, without, share


def run(config: SteeringShadowConfig, out_dir: Path) -> Result:
    from updatescope.steering import decoder_layers, encode_prompts

    t0 = time.perf_counter()
    prereg_sha = hashlib.sha256(PREREG.read_bytes()).hexdigest() if PREREG.exists() else None
    vader = texts.Vader()
    model, tok = heads.load_model(config.model)
    n_layers = len(decoder_layers(model))
    layers = list(range(n_layers))
    rule_layers = verdicts.rule_layers(n_layers, config.verdict_layers)
    bs = config.batch_size
    _log(f"{n_layers}-layer model loaded")

    # --- polarity sentences: fit / held-out per class (one seeded generator, fixed order)
    pos, neg = texts.polarity_sentences()
    if config.n_fit + config.n_heldout > min(len(pos), len(neg)):
        raise InputError(
            f"n_fit + n_heldout = {config.n_fit + config.n_heldout} but a polarity class has "
            f"{min(len(pos), len(neg))} sentences"
        )
    g = torch.Generator().manual_seed(config.seed)
    fit, held = {}, {}
    for direction, sents in zip(DIRECTIONS, (pos, neg)):
        f_idx, h_idx = _split(len(sents), config.n_fit, config.n_heldout, g)
        fit[direction], held[direction] = [sents[i] for i in f_idx], [sents[i] for i in h_idx]

    # --- CAA over the fit sentences, its split halves, the one-step shifts
    ids, mask = encode_prompts(tok, fit["positive"] + fit["negative"], side="right")
    skip = config.skip_first_token
    acts = texts.token_means(model, ids, mask, mask, layers, bs, skip_first=skip)  # (Lyr, 2 n_fit, d)
    a_pos, a_neg = acts[:, : config.n_fit], acts[:, config.n_fit :]
    caa = a_pos.mean(1) - a_neg.mean(1)  # (Lyr, d)
    # amendment 2's diagnostic, recorded: the first token's residual against the others', and
    # CAA with every token (the pre-amendment vector) against the CAA used here
    first_token = first_token_norms(model, ids, mask, layers, bs)
    with_first = texts.token_means(model, ids, mask, mask, layers, bs)
    caa_all = with_first[:, : config.n_fit].mean(1) - with_first[:, config.n_fit :].mean(1)
    first_token.update(
        caa_with_first_top_share=_coordinate_share(caa_all, first_token["top_coordinate"]),
        caa_top_share=_coordinate_share(caa, first_token["top_coordinate"]),
        cos_caa_with_first=_cos(caa, caa_all),
    )
    del with_first
    halves = []
    half = config.n_fit // 2
    for _ in range(texts.SPLITS):
        pp, pn = torch.randperm(config.n_fit, generator=g), torch.randperm(config.n_fit, generator=g)
        h1 = a_pos[:, pp[:half]].mean(1) - a_neg[:, pn[:half]].mean(1)
        h2 = a_pos[:, pp[half:]].mean(1) - a_neg[:, pn[half:]].mean(1)
        halves.append(_cos(h1, h2))
    split_half = np.mean(halves, axis=0).tolist()
    shift = {
        d: texts.one_step_shift(
            model, texts.class_step(model, tok, fit[d]), config.pushforward_sentences, bs, skip_first=skip
        )
        for d in DIRECTIONS
    }
    _log("CAA and one-step shifts done")
    bases = _bases(caa, shift)  # per layer: {span: Q (d, k)}
    # amendment 3: the same vectors without each layer's massive coordinate, orthonormalised in d - 1
    massive = first_token["top_coordinate"]
    caa_r = spans.drop_coordinates(caa, massive)
    bases_r = _bases(caa_r, {d: spans.drop_coordinates(v, massive) for d, v in shift.items()})

    # --- prompts: neutral news openings, as sentiment-steering makes them
    openings = texts.neutral_openings(
        texts.news_sentences(), vader.compound, config.prompt_words, config.neutral_tol, config.seed
    )
    _, prompts = texts.split_prompts(openings, 0, config.n_prompts, config.seed)
    p_ids, p_mask = encode_prompts(tok, prompts, side="right")
    base_h = token_residuals(model, p_ids, p_mask, layers, bs, skip)  # (Lyr, N, d)
    base_norm = base_h.double().pow(2).sum((1, 2)).sqrt()  # (Lyr,) Frobenius norm of H_l
    base_norm_r = spans.drop_coordinates(base_h, massive).double().pow(2).sum((1, 2)).sqrt()
    h_ids, h_mask = {}, {}
    base_loss = {}
    for d in DIRECTIONS:
        h_ids[d], h_mask[d] = encode_prompts(tok, held[d], side="right")
        base_loss[d] = sentence_losses(model, h_ids[d], h_mask[d], bs)
    # amendment 4: the fine-tunes train on the first n_fit - n_val fit sentences; the last
    # n_val choose their step count
    n_train = config.n_fit - config.n_val
    f_ids = {d: encode_prompts(tok, fit[d][:n_train], side="right") for d in DIRECTIONS}
    v_ids = {d: encode_prompts(tok, fit[d][n_train:], side="right") for d in DIRECTIONS}
    fts, training, selection = _fine_tunes(model, f_ids, v_ids, config)
    # ft_loss[f][c]: class c's held-out losses under fine-tune f; ft_h[f]: its residuals on the prompts
    ft_loss = {f: {c: sentence_losses(fts[f], h_ids[c], h_mask[c], bs) for c in DIRECTIONS} for f in DIRECTIONS}
    ft_h = {f: token_residuals(fts[f], p_ids, p_mask, layers, bs, skip) for f in DIRECTIONS}
    del fts
    regime = _regime(base_loss, ft_loss, config.regime_z)
    pair = regime["pair"]
    _log(f"pair regime: d = {pair['mean']:+.4f} ± {pair['se']:.4f} (n {pair['n']}); passes {pair['passes']}")

    # amendment 1: nothing is measured unless the pair learned sentiment
    shadow: dict[str, Any] = dict.fromkeys(SHADOWS)  # full space (secondary)
    without: dict[str, Any] = dict.fromkeys(SHADOWS)  # without the massive coordinate (primary)
    share: dict[str, Any] = dict.fromkeys(SHADOWS)
    if pair["passes"]:
        shadow, without, share = _measure_shadows(
            ft_h, base_h, (bases, caa, base_norm), (bases_r, caa_r, base_norm_r), massive, config
        )
    del ft_h

    words = _words(shadow, regime, rule_layers)
    words_r = _words(without, regime, rule_layers)
    head = verdicts.headline_layer(split_half, rule_layers)
    metrics = {
        "n": {"fit": config.n_fit, "heldout": config.n_heldout, "prompts": len(prompts), "tokens": base_h.shape[1]},
        "n_layers": n_layers,
        "d": int(caa.shape[1]),
        "rule_layers": rule_layers,
        "headline_layer": head,
        "cosine": {
            "layers": layers,
            "split_half_caa": split_half,
            "split_half_per_split": halves,
            "shift_positive_caa": _cos(shift["positive"], caa),
            "shift_negative_caa": _cos(shift["negative"], -caa),
        },
        "first_token": first_token,
        "training": training,
        "selection": selection,
        "regime": regime,
        "massive": {"coordinate": massive, "share": share},
        "shadow_without_massive": without,
        "verdicts_without_massive": words_r,
        "shadow": shadow,
        "verdicts": words,
        "prompts": prompts,
    }
    _print(metrics)
    return Result(
        NAME,
        config_record(config, preregistration_sha256=prereg_sha),
        metrics,
        time.perf_counter() - t0,
        # the figure exists only where something was measured
        {"steering_shadow.png": lambda path: figures.draw_fractions(metrics, path)} if pair["passes"] else {},
    )


def _words(shadow: dict, regime: dict, rule_layers: list[int]) -> dict[str, Any]:
    """Per shadow (contrast: primary) and span, the word for the mean and the per-token
    fraction; every word is "not measured" when the pair failed its regime check."""
    measured = regime["pair"]["passes"]
    out: dict[str, Any] = {}
    for name in SHADOWS:
        out[name] = {}
        for s in SPANS:
            rec = shadow[name]["spans"][s] if shadow[name] is not None else None
            row = {}
            for measure in ("mean", "token"):
                frac = rec[measure] if rec else []
                null = rec[f"null_{measure}_q"] if rec else []
                row[measure] = verdicts.span_word(frac, null, rule_layers, measured and rec is not None)
                row[f"{measure}_layers_above"] = verdicts.layers_above(frac, null, rule_layers) if rec else []
            out[name][s] = row
    return out


def _print(m: dict[str, Any]) -> None:
    from updatescope.report.console import print_rows

    x = m["headline_layer"]
    pair = m["regime"]["pair"]
    for key, words, what in (
        ("shadow_without_massive", "verdicts_without_massive", f"without coordinate {m['massive']['coordinate'][x]}"),
        ("shadow", "verdicts", "full space, secondary"),
    ):
        rows = []
        for name, sh in m[key].items():
            if sh is None:
                rows.append([name, "—", "not measured", "", "", "", "", ""])
                continue
            for s, v in sh["spans"].items():
                rows.append(
                    [
                        name,
                        s,
                        f"{v['mean'][x]:.3f}",
                        f"{v['null_mean_q'][x]:.4f}",
                        f"{v['token'][x]:.4f}",
                        f"{v['null_token_q'][x]:.4f}",
                        f"{v['ceiling_token'][x]:.3f}",
                        m[words][name][s]["mean"],
                    ]
                )
        print_rows(
            f"shadow fractions at layer {x} ({what}); pair regime d = {pair['mean']:+.4f} ± {pair['se']:.4f} "
            f"({'passes' if pair['passes'] else 'refused'})",
            ["shadow", "span", "mean frac", "null q", "token frac", "null q", "top-k", "verdict (mean)"],
            rows,
        )
