"""LoRA ground truth: fine-tune the last transformer blocks with ``peft`` on cached inputs.

Head-only fine-tuning (:mod:`.head`) keeps every feature fixed, so transfer
between tasks can only come from shared head rows.  Here the last ``n_last`` decoder blocks
get LoRA adapters (``peft``; attention and MLP projections, rank ``r``), so the features that
feed the head move, as in the fine-tuning people actually do.  The head stays frozen.

Cost.  The frozen blocks before the adapted ones never change, so their output — the
residual stream entering block ``L − n_last`` — is captured once per split
(:func:`capture_block_inputs`, cached on disk) and every training or evaluation step runs
only the adapted blocks, the final norm and the head: a *tail model* built from the same
modules (:func:`tail_model`).  Given the cached inputs, the tail reproduces the full model's
logits (tested on a tiny Llama), so this is exact, not an approximation.

Sequences are document chunks of ``seq_len`` tokens (right padded, attention mask), each
target token counted once as in :mod:`updatescope.capture.causal_lm`; the loss is the mean
next-token cross-entropy over counted targets, computed only at counted positions (the
verbalizer counts one position per prompt).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from updatescope.capture.chunks import document_chunks, pack_batches, pad_batch
from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments.caching import cache_key, cached
from updatescope.experiments.configs import LORA_TARGETS
from updatescope.experiments.groundtruth import minibatch_indices
from updatescope.experiments.groundtruth.store import settle

#: seconds between looks at the truth store for results another process has claimed
CLAIM_POLL = 20.0


class _Stop(Exception):
    """Raised by the capture hook: nothing after the captured block is needed."""


def _decoder(model: nn.Module) -> nn.Module:
    inner = getattr(model, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), nn.ModuleList):
        raise InputError(
            f"{type(model).__name__}: LoRA ground truth needs a decoder with `.model.layers` (Llama-style causal LM)"
        )
    return inner


def _split_layer(model: nn.Module, n_last: int) -> int:
    n = len(_decoder(model).layers)
    if not 1 <= n_last <= n:
        raise InputError(f"n_last must be in 1..{n} for this model, got {n_last}")
    return n - n_last


def capture_block_inputs(
    model: Any,
    tokenizer: Any,
    texts: Sequence[Any],
    *,
    n_last: int,
    fp: str,
    positions: Sequence[Any] | None = None,
    max_tokens: int | None = None,
    seq_len: int = 128,
    token_budget: int = 2048,
    desc: str = "capture",
    use_cache: bool = True,
) -> dict[str, Tensor]:
    """Residual stream entering block ``L − n_last`` for document chunks of ``texts``.

    -> {"hidden": (N, S, d) float32, "labels": (N, S) int64 (next token at counted positions,
    −100 elsewhere), "mask": (N, S) int64 attention mask}, S = longest chunk ≤ ``seq_len``.
    ``max_tokens`` caps the counted targets (the last chunk is cut).  Cached like
    :func:`updatescope.experiments.heads.capture_acts`.
    """
    layer = _split_layer(model, n_last)
    texts = list(texts)

    def build() -> dict[str, Tensor]:
        chunks = list(document_chunks(tokenizer, texts, chunk_len=seq_len, positions=positions))
        pad_id = int(getattr(tokenizer, "pad_token_id", None) or 0)
        grabbed: list[Tensor] = []

        def hook(_mod: nn.Module, args: tuple, kwargs: dict) -> None:
            h = args[0] if args else kwargs["hidden_states"]
            grabbed.append(h.detach().to(torch.float32).cpu())
            raise _Stop

        width = max((len(c.ids) for c in chunks), default=0)
        if width < 2:
            raise InputError(f"{desc}: nothing to capture (texts too short?)")
        hidden, labels, masks = [], [], []
        done = 0
        handle = _decoder(model).layers[layer].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            for batch in pack_batches(chunks, token_budget):
                ids, attn, lab = pad_batch(batch, pad_id, width)
                if max_tokens is not None:
                    flat = lab.reshape(-1)
                    idx = (flat != IGNORE_INDEX).nonzero().squeeze(1)
                    room = max_tokens - done
                    flat[idx[room:]] = IGNORE_INDEX
                try:
                    with torch.no_grad():
                        model(input_ids=ids, attention_mask=attn, use_cache=False)
                except _Stop:
                    pass
                hidden.append(grabbed.pop())
                labels.append(lab)
                masks.append(attn)
                done += int((lab != IGNORE_INDEX).sum())
                if max_tokens is not None and done >= max_tokens:
                    break
        finally:
            handle.remove()
        lab = torch.cat(labels)
        keep = (lab != IGNORE_INDEX).any(1)
        return {"hidden": torch.cat(hidden)[keep], "labels": lab[keep], "mask": torch.cat(masks)[keep]}

    key = cache_key(
        "blocks-v1",
        fp,
        list(texts),
        None if positions is None else [list(p) for p in positions],
        max_tokens,
        seq_len,
        layer,
    )
    return cached("blocks", key, build, use_cache=use_cache)


def tail_model(model: nn.Module, n_last: int) -> nn.Module:
    """A causal LM of the same class holding copies of the last ``n_last`` blocks and *the
    same* (shared, frozen) final norm, rotary embedding and head.  Fed the cached block inputs
    as ``inputs_embeds``, it returns the full model's logits."""
    layer = _split_layer(model, n_last)
    dec = _decoder(model)
    cfg = copy.deepcopy(model.config)
    cfg.num_hidden_layers = n_last
    if isinstance(getattr(cfg, "layer_types", None), list):
        cfg.layer_types = cfg.layer_types[layer:]
    vocab = cfg.vocab_size
    cfg.vocab_size = 2  # the embedding and head are replaced below; do not allocate them twice
    pad = getattr(cfg, "pad_token_id", None)
    cfg.pad_token_id = None
    cfg.tie_word_embeddings = False
    tail = type(model)(cfg)
    tail.config.vocab_size = vocab
    tail.config.pad_token_id = pad
    tail.model.embed_tokens = dec.embed_tokens
    tail.model.norm = dec.norm
    if hasattr(dec, "rotary_emb"):
        tail.model.rotary_emb = dec.rotary_emb
    tail.lm_head = model.lm_head
    tail.model.layers = copy.deepcopy(dec.layers[layer:])
    for i, blk in enumerate(tail.model.layers):
        attn = getattr(blk, "self_attn", None)
        if attn is not None and hasattr(attn, "layer_idx"):
            attn.layer_idx = i
    tail.eval()
    for p in tail.parameters():
        p.requires_grad_(False)
    return tail


def _head_inputs(tail: nn.Module, hidden: Tensor, mask: Tensor, keep: Tensor) -> Tensor:
    out = tail.model(inputs_embeds=hidden, attention_mask=mask, use_cache=False)
    return out.last_hidden_state[keep]


def sequence_losses(tail: nn.Module, data: Mapping[str, Tensor], batch: int = 16) -> tuple[Tensor, Tensor]:
    """Summed next-token cross-entropy (nats, float64) and counted targets of each sequence of
    ``data`` -> (sums (N,), counts (N,)).  The sequences are the resampling unit of the
    evaluation bootstrap (:func:`updatescope.experiments.scoring.eval_noise`): tokens within
    one chunk of a document are not independent, whole chunks nearly are."""
    sums, counts = [], []
    with torch.no_grad():
        for i in range(0, data["hidden"].shape[0], batch):
            lab = data["labels"][i : i + batch]
            keep = lab != IGNORE_INDEX
            z = tail.lm_head(_head_inputs(tail, data["hidden"][i : i + batch], data["mask"][i : i + batch], keep))
            tok = F.cross_entropy(z.float(), lab[keep], reduction="none").double()
            row = keep.nonzero()[:, 0]  # the sequence (within the batch) of each counted target
            n = lab.shape[0]
            sums.append(torch.zeros(n, dtype=torch.float64).index_add_(0, row, tok))
            counts.append(keep.sum(1))
    return torch.cat(sums), torch.cat(counts)


def mean_loss(tail: nn.Module, data: Mapping[str, Tensor], batch: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over the counted targets of ``data``."""
    sums, counts = sequence_losses(tail, data, batch)
    return float(sums.sum()) / max(int(counts.sum()), 1)


def finetune_lora(
    model: nn.Module,
    data: Mapping[str, Tensor],
    *,
    n_last: int,
    r: int,
    alpha: float,
    lr: float,
    steps: int,
    batch: int,
    seed: int = 0,
    targets: Sequence[str] = LORA_TARGETS,
) -> nn.Module:
    """A fresh tail with LoRA adapters trained by Adam on ``data`` -> the tail (eval mode).

    ``steps`` minibatches of ``batch`` sequences, drawn without replacement within an epoch
    from a generator seeded by ``seed``; loss = mean CE over the counted targets.
    """
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError as exc:  # pragma: no cover - peft is in the hf extra
        from updatescope.errors import MissingExtraError

        raise MissingExtraError("peft", "hf") from exc
    tail = tail_model(model, n_last)
    torch.manual_seed(seed)  # LoRA A matrices are randomly initialised
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), bias="none")
    try:
        inject_adapter_in_model(cfg, tail.model.layers)
    except ValueError as exc:  # peft's "target modules not found"
        raise InputError(f"no LoRA target module among {list(targets)} in the last {n_last} blocks") from exc
    params = [p for name, p in tail.named_parameters() if "lora_" in name]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    tail.train()
    for idx in minibatch_indices(data["hidden"].shape[0], batch, steps, seed):
        lab = data["labels"][idx]
        keep = lab != IGNORE_INDEX
        z = tail.lm_head(_head_inputs(tail, data["hidden"][idx], data["mask"][idx], keep))
        loss = F.cross_entropy(z.float(), lab[keep])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    tail.eval()
    return tail


def finetune_from_config(
    model: nn.Module, data: Mapping[str, Tensor], lc: Any, *, seed: int, steps: int | None = None
) -> nn.Module:
    """:func:`finetune_lora` with the recipe of a ``LoRAConfig`` ``lc`` (n_last, r, alpha, lr,
    batch, targets; ``steps`` unless given)."""
    return finetune_lora(
        model,
        data,
        n_last=lc.n_last,
        r=lc.r,
        alpha=lc.alpha,
        lr=lc.lr,
        steps=lc.steps if steps is None else steps,
        batch=lc.batch,
        seed=seed,
        targets=list(lc.targets),
    )


def _digest(t: Tensor) -> str:
    return cache_key(list(t.shape), str(t.dtype), hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest())


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """A digest of the code a cached fine-tuning result depends on, so results computed by
    an earlier version of it are never loaded (the package version where no source is read).
    Read once per process: the code does not change while it runs."""
    import inspect

    from updatescope import __version__

    try:
        src = "".join(
            inspect.getsource(f) for f in (tail_model, _head_inputs, sequence_losses, finetune_lora, minibatch_indices)
        )
    except (OSError, TypeError):
        src = __version__
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def _recipe(
    n_last: int, r: int, alpha: float, lr: float, steps: int, batch: int, targets: Sequence[str], seed: int
) -> dict[str, Any]:
    """A fine-tuning's recipe as the truth store keys it."""
    return {
        "n_last": n_last,
        "r": r,
        "alpha": alpha,
        "lr": lr,
        "steps": steps,
        "batch": batch,
        "targets": list(targets),
        "finetune_seed": seed,
    }


def _finetuned(
    model: nn.Module,
    train: Mapping[str, Tensor],
    evals: Mapping[str, Mapping[str, Tensor]],
    seed: int,
    hyper: Mapping[str, Any],
    key: str | None,
) -> dict[str, Any]:
    """One source's fine-tuning (``finetune_lora`` with ``hyper`` and ``seed``) and its
    evaluation on ``evals`` -> {"train_after", "eval": {t: summed CE per sequence}, "seconds"};
    kept in the experiment cache under ``key`` when one is given."""

    def build() -> dict[str, Any]:
        t1 = time.perf_counter()
        tail = finetune_lora(model, train, seed=seed, **hyper)
        out = {
            "train_after": mean_loss(tail, train),
            "eval": {t: sequence_losses(tail, ev)[0] for t, ev in evals.items()},
        }
        out["seconds"] = time.perf_counter() - t1
        return out

    return build() if key is None else cached("lora-gt", key, build)


def _claimed_results(
    store: Any,
    seed: int,
    names: Sequence[str],
    stored: Callable[[str], dict[str, Any] | None],
    computed: Callable[[str], dict[str, Any]],
    keep: Callable[[str, dict[str, Any], bool, float], None],
    log: Callable[[str], None] | None,
) -> None:
    """``keep(s, result, read from the store, start time)`` for every source of ``names``: read
    from the truth store, or computed (and saved) under this process's claim on (s, seed).  A
    source another live process has claimed is passed over, then waited for (every
    ``CLAIM_POLL`` seconds) once the rest is done, and computed here if that process stops."""

    def attempt(s: str, first: bool) -> bool:
        t0 = time.perf_counter()
        got = store.claimed(s, seed, lambda: stored(s), lambda: computed(s))
        if got.holder is not None:
            if log and first:
                log(f"LoRA on {s}: claimed by {got.holder}; its result is read from the truth store when it is saved")
            return False
        keep(s, got.value, got.stored, t0)
        return True

    settle(names, attempt, lambda: CLAIM_POLL)


def transfer_matrix(
    model: nn.Module,
    train: Mapping[str, Mapping[str, Tensor]],
    evals: Mapping[str, Mapping[str, Tensor]],
    *,
    n_last: int,
    r: int,
    alpha: float,
    lr: float,
    steps: int,
    batch: int,
    seed: int = 0,
    targets: Sequence[str] = LORA_TARGETS,
    candidates: Mapping[str, Sequence[str]] | None = None,
    resume_tag: str | None = None,
    store: Any = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """LoRA ground truth, same layout as :func:`.head.transfer_matrix`:
    {"base_loss": {t: L0}, "loss": {t: {s: L}}, "transfer": {t: {s: L0 − L}},
    "train_loss": {s: {"after": L}}, "tokens": {"train"|"eval": {name: counted targets}},
    "eval_sequences": {"base": {t: [summed CE per sequence]}, "loss": {t: {s: [...]}},
    "tokens": {t: [counted targets per sequence]}}, "finetune_seconds": {s: seconds}}.
    Source k trains with seed ``seed + k``; self-transfer is kept for reference.

    ``candidates``: target -> the sources evaluated for it (default: every source), so a
    run at the paper's shape (24 candidates per target) evaluates each fine-tuned source
    only on the targets that list it (and on itself).
    ``resume_tag`` (e.g. the model fingerprint): store each (source, seed) result in the
    experiment cache, keyed by the tag, the hyper-parameters, digests of the data and of the
    fine-tuning code, so an interrupted run resumes where it stopped (the base model's
    per-sequence losses too, once for every seed); ``finetune_seconds`` are the times measured
    when each result was computed.
    ``store`` (a :class:`.store.TruthStore`): each (source, seed) result is read from it when
    present (a file of another configuration is refused) and written to it as soon as it is
    computed, so a run can be finished on another machine with the caches gone.  A missing
    result is claimed first (``TruthStore.claim``): one claimed by another live process sharing
    the store is skipped, then waited for (polling every ``CLAIM_POLL`` seconds) once the rest
    is done, and computed here if that process stops; so several processes running the same
    configuration on one store split the work, and each ends with every result."""
    names = list(train)
    if candidates is not None:
        bad = [t for t in candidates if t not in evals] + [s for c in candidates.values() for s in c if s not in train]
        if bad:
            raise InputError(f"candidates name unknown domains: {sorted(set(bad))[:5]}")
    wanted = {s: [t for t in names if t == s or candidates is None or s in candidates.get(t, ())] for s in names}

    def base_losses() -> dict[str, tuple[Tensor, Tensor]]:
        base_tail = tail_model(model, n_last)
        return {t: sequence_losses(base_tail, evals[t]) for t in names}

    digests, code = None, None
    if resume_tag is None:
        base_seq = base_losses()
    else:
        code = _code_digest()
        digests = {
            f"{split}/{n}/{k}": _digest(d[k])
            for split, src in (("train", train), ("eval", evals))
            for n, d in src.items()
            for k in ("hidden", "labels", "mask")
        }
        # the base model's losses do not depend on the seed: one evaluation per machine, not per seed
        ev = {t: [digests[f"eval/{t}/{x}"] for x in ("hidden", "labels", "mask")] for t in names}
        base_seq = cached("lora-base", cache_key("lora-base", code, resume_tag, n_last, ev), base_losses)
    base = {t: float(v[0].sum()) / max(int(v[1].sum()), 1) for t, v in base_seq.items()}
    loss: dict[str, dict[str, float]] = {t: {} for t in names}
    loss_seq: dict[str, dict[str, list[float]]] = {t: {} for t in names}
    train_loss: dict[str, dict[str, float]] = {}
    seconds: dict[str, float] = {}

    def compute(s: str, k: int) -> dict[str, Any]:
        key = None
        if digests is not None:
            parts = {
                f"{split}/{t}": [digests[f"{split}/{t}/{x}"] for x in ("hidden", "labels", "mask")]
                for split, ts in (("train", [s]), ("eval", wanted[s]))
                for t in ts
            }
            hp = (n_last, r, alpha, lr, steps, batch, seed + k, list(targets))
            key = cache_key("lora-gt", code, resume_tag, *hp, parts)
        hyper = {"n_last": n_last, "r": r, "alpha": alpha, "lr": lr, "steps": steps, "batch": batch, "targets": targets}
        return _finetuned(model, train[s], {t: evals[t] for t in wanted[s]}, seed + k, hyper, key)

    def stored(s: str) -> dict[str, Any] | None:
        res = store.load(s, seed, wanted[s], recipes[s])
        if res is not None:
            short = [t for t in wanted[s] if res["eval"][t].numel() != base_seq[t][1].numel()]
            if short:
                raise InputError(
                    f"truth store: {store.path(s, seed)} holds another number of eval sequences for "
                    f"{short[0]} than this machine's capture ({res['eval'][short[0]].numel()} vs "
                    f"{base_seq[short[0]][1].numel()})"
                )
        return res

    def computed(s: str) -> dict[str, Any]:
        res = compute(s, names.index(s))
        if store is not None:
            store.save(s, seed, wanted[s], recipes[s], res)
        return res

    def keep(s: str, res: dict[str, Any], from_store: bool, t0: float) -> None:
        train_loss[s] = {"after": float(res["train_after"])}
        seconds[s] = float(res["seconds"])
        for t in wanted[s]:
            sums = res["eval"][t]
            loss[t][s] = float(sums.sum()) / max(int(base_seq[t][1].sum()), 1)
            loss_seq[t][s] = [float(v) for v in sums]
        if log:
            log(
                f"LoRA on {s}: own eval loss {base[s]:.3f} -> {loss[s][s]:.3f}, train loss after "
                f"{train_loss[s]['after']:.3f}, {len(wanted[s])} targets ({time.perf_counter() - t0:.1f}s"
                + (", from the truth store)" if from_store else ")")
            )

    recipes = {s: _recipe(n_last, r, alpha, lr, steps, batch, targets, seed + k) for k, s in enumerate(names)}
    if store is None:
        for s in names:
            t0 = time.perf_counter()
            keep(s, computed(s), False, t0)
    else:  # filed under the run's fine-tuning seed: one folder per seed of the ground truth
        _claimed_results(store, seed, names, stored, computed, keep, log)
    # every table in source order, however the results arrived (ties are broken by that order)
    loss = {t: {s: loss[t][s] for s in names if s in loss[t]} for t in names}
    loss_seq = {t: {s: loss_seq[t][s] for s in names if s in loss_seq[t]} for t in names}
    train_loss = {s: train_loss[s] for s in names}
    seconds = {s: seconds[s] for s in names}
    transfer = {t: {s: base[t] - loss[t][s] for s in loss[t]} for t in names}
    counted = {
        split: {n: int((d["labels"] != IGNORE_INDEX).sum()) for n, d in src.items()}
        for split, src in (("train", train), ("eval", evals))
    }
    seq = {
        "base": {t: [float(v) for v in base_seq[t][0]] for t in names},
        "loss": loss_seq,
        "tokens": {t: [int(v) for v in base_seq[t][1]] for t in names},
    }
    return {
        "base_loss": base,
        "loss": loss,
        "transfer": transfer,
        "train_loss": train_loss,
        "tokens": counted,
        "eval_sequences": seq,
        "finetune_seconds": seconds,
    }


def transfer_from_config(
    model: nn.Module,
    train: Mapping[str, Mapping[str, Tensor]],
    evals: Mapping[str, Mapping[str, Tensor]],
    lc: Any,
    *,
    seed: int,
    **kw: Any,
) -> dict[str, Any]:
    """:func:`transfer_matrix` with the recipe of a ``LoRAConfig`` ``lc`` (n_last, r, alpha,
    lr, steps, batch, targets); ``kw``: candidates, resume_tag, store, log."""
    return transfer_matrix(
        model,
        train,
        evals,
        n_last=lc.n_last,
        r=lc.r,
        alpha=lc.alpha,
        lr=lc.lr,
        steps=lc.steps,
        batch=lc.batch,
        seed=seed,
        targets=list(lc.targets),
        **kw,
    )


def tail_state(model: nn.Module, n_last: int) -> dict[str, Tensor]:
    """A copy of the state dict of ``model``'s last ``n_last`` blocks (keys relative to those
    blocks); :func:`load_tail_state` puts it back."""
    layers = _decoder(model).layers[_split_layer(model, n_last) :]
    return {k: v.detach().clone() for k, v in layers.state_dict().items()}


def merged_tail_state(model: nn.Module, tail: nn.Module, n_last: int) -> dict[str, Tensor]:
    """The state dict of ``model``'s last ``n_last`` blocks with the LoRA deltas of ``tail``
    (:func:`finetune_lora`) added to their weights (keys relative to those blocks).  Load it
    with :func:`load_tail_state` to continue from the merged model."""
    state = tail_state(model, n_last)
    n = 0
    for name, mod in tail.model.layers.named_modules():
        if hasattr(mod, "get_delta_weight") and hasattr(mod, "base_layer"):
            key = f"{name}.weight"
            with torch.no_grad():
                state[key] += mod.get_delta_weight("default").to(state[key].dtype)
            n += 1
    if n == 0:
        raise RuntimeError("merge: the tail holds no LoRA module")
    return state


def load_tail_state(model: nn.Module, state: Mapping[str, Tensor], n_last: int) -> None:
    """Load ``state`` (:func:`merged_tail_state`, or the blocks' own state) into ``model``'s
    last ``n_last`` blocks, in place."""
    _decoder(model).layers[_split_layer(model, n_last) :].load_state_dict(state)
