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
import time
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from updatescope.capture.chunks import document_chunks, pack_batches, pad_batch
from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.experiments.caching import cache_key, cached
from updatescope.experiments.groundtruth import minibatch_indices
from updatescope.experiments.configs import LORA_TARGETS



class _Stop(Exception):
    """Raised by the capture hook: nothing after the captured block is needed."""


def _decoder(model: nn.Module) -> nn.Module:
    inner = getattr(model, "model", None)
    if inner is None or not isinstance(getattr(inner, "layers", None), nn.ModuleList):
        raise InputError(f"{type(model).__name__}: LoRA ground truth needs a decoder with `.model.layers` "
                         "(Llama-style causal LM)")
    return inner


def _split_layer(model: nn.Module, n_last: int) -> int:
    n = len(_decoder(model).layers)
    if not 1 <= n_last <= n:
        raise InputError(f"n_last must be in 1..{n} for this model, got {n_last}")
    return n - n_last


def capture_block_inputs(model: Any, tokenizer: Any, texts: Sequence[Any], *, n_last: int, fp: str,
                         positions: Sequence[Any] | None = None, max_tokens: int | None = None,
                         seq_len: int = 128, token_budget: int = 2048, desc: str = "capture",
                         use_cache: bool = True) -> dict[str, Tensor]:
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

    key = cache_key("blocks-v1", fp, list(texts), None if positions is None else [list(p) for p in positions],
                    max_tokens, seq_len, layer)
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


def mean_loss(tail: nn.Module, data: Mapping[str, Tensor], batch: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over the counted targets of ``data``."""
    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, data["hidden"].shape[0], batch):
            lab = data["labels"][i : i + batch]
            keep = lab != IGNORE_INDEX
            z = tail.lm_head(_head_inputs(tail, data["hidden"][i : i + batch], data["mask"][i : i + batch], keep))
            tot += float(F.cross_entropy(z.float(), lab[keep], reduction="sum"))
            n += int(keep.sum())
    return tot / max(n, 1)


def finetune_lora(model: nn.Module, data: Mapping[str, Tensor], *, n_last: int, r: int, alpha: float,
                  lr: float, steps: int, batch: int, seed: int = 0,
                  targets: Sequence[str] = LORA_TARGETS) -> nn.Module:
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


def transfer_matrix(model: nn.Module, train: Mapping[str, Mapping[str, Tensor]],
                    evals: Mapping[str, Mapping[str, Tensor]], *, n_last: int, r: int, alpha: float,
                    lr: float, steps: int, batch: int, seed: int = 0,
                    targets: Sequence[str] = LORA_TARGETS,
                    log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """LoRA ground truth, same layout as :func:`.head.transfer_matrix`:
    {"base_loss": {t: L0}, "loss": {t: {s: L}}, "transfer": {t: {s: L0 − L}},
    "train_loss": {s: {"after": L}}, "tokens": {"train"|"eval": {name: counted targets}}}.
    Source k trains with seed ``seed + k``; self-transfer is kept for reference."""
    names = list(train)
    base_tail = tail_model(model, n_last)
    base = {t: mean_loss(base_tail, evals[t]) for t in names}
    del base_tail
    loss: dict[str, dict[str, float]] = {t: {} for t in names}
    train_loss: dict[str, dict[str, float]] = {}
    for k, s in enumerate(names):
        t0 = time.perf_counter()
        tail = finetune_lora(model, train[s], n_last=n_last, r=r, alpha=alpha, lr=lr, steps=steps,
                             batch=batch, seed=seed + k, targets=targets)
        train_loss[s] = {"after": mean_loss(tail, train[s])}
        for t in names:
            loss[t][s] = mean_loss(tail, evals[t])
        del tail
        if log:
            log(f"LoRA on {s}: own eval loss {base[s]:.3f} -> {loss[s][s]:.3f}, train loss after "
                f"{train_loss[s]['after']:.3f} ({time.perf_counter() - t0:.1f}s)")
    transfer = {t: {s: base[t] - loss[t][s] for s in names} for t in names}
    counted = {split: {n: int((d["labels"] != IGNORE_INDEX).sum()) for n, d in src.items()}
               for split, src in (("train", train), ("eval", evals))}
    return {"base_loss": base, "loss": loss, "transfer": transfer, "train_loss": train_loss, "tokens": counted}
