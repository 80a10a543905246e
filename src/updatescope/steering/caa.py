"""Residual-stream capture and contrastive activation addition (CAA) vectors.

CAA (Rimsky et al.) takes the difference of the mean residual stream on prompts with and
without a behaviour: v_l = mean_pos h_l - mean_neg h_l, where h_l is decoder layer l's
output at a chosen token position.  Means are accumulated in float64 sums and counts, so
the batch size cannot change the vector beyond float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import InputError
from .pairs import ContrastPairs
from .positions import (
    Position,
    check_position,
    decoder_layers,
    hidden_of,
    pad_sequences,
    resolve_layers,
    select_positions,
)
from .vector import SteeringVector

__all__ = ["capture_residuals", "encode_prompts", "caa_from_activations", "caa_from_inputs", "caa_vector"]


@torch.no_grad()
def capture_residuals(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    layers: int | Sequence[int] | None = None,
    position: Position = "last",
    batch_size: int = 16,
) -> Tensor:
    """Decoder-layer outputs at one position per row.  ids (n, L) -> (n_layers, n, d).

    Layers default to all of them.  The result is float32 (float64 for a float64 model) on
    the model's device; pad tokens are located through ``attention_mask``.
    """
    check_position(position)
    idx = resolve_layers(model, layers)
    if input_ids.ndim != 2 or input_ids.shape[0] == 0:
        raise InputError(f"input_ids must be (n, L) with n >= 1, got {tuple(input_ids.shape)}")
    if attention_mask is not None and attention_mask.shape != input_ids.shape:
        raise InputError(
            f"attention_mask {tuple(attention_mask.shape)} does not match input_ids {tuple(input_ids.shape)}"
        )
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    blocks = decoder_layers(model)
    device = next(model.parameters()).device
    out: list[list[Tensor]] = [[] for _ in idx]
    current: dict[str, Any] = {}

    def make_hook(slot: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            h = hidden_of(output)
            picked = select_positions(h, current["mask"], position)
            out[slot].append(picked.to(torch.promote_types(picked.dtype, torch.float32)))

        return hook

    handles = [blocks[layer].register_forward_hook(make_hook(slot)) for slot, layer in enumerate(idx)]
    try:
        for start in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[start : start + batch_size].to(device)
            mask = None if attention_mask is None else attention_mask[start : start + batch_size].to(device)
            current["mask"] = mask
            model(input_ids=ids, attention_mask=mask, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack([torch.cat(chunks) for chunks in out])


def encode_prompts(
    tokenizer: Any, prompts: Sequence[str], side: str = "left", pad_id: int | None = None
) -> tuple[Tensor, Tensor]:
    """Tokenize each prompt on its own and pad.  -> (input_ids (n, L), attention_mask (n, L)).

    Any callable returning ``{"input_ids": [...]}`` works (Hugging Face tokenizers do); we pad
    ourselves so the tokenizer's padding settings cannot change the result.
    """
    seqs = []
    for text in prompts:
        ids = tokenizer(text)["input_ids"]
        seqs.append(ids.tolist() if isinstance(ids, Tensor) else list(ids))
    if pad_id is None:
        pad_id = getattr(tokenizer, "pad_token_id", None)
        pad_id = 0 if pad_id is None else int(pad_id)
    return pad_sequences(seqs, pad_id=pad_id, side=side)


def caa_from_activations(pos: Tensor, neg: Tensor) -> Tensor:
    """mean(pos) - mean(neg) over examples, in float64.  (n_layers, n+, d), (n_layers, n-, d)
    -> (n_layers, d)."""
    if pos.ndim != 3 or neg.ndim != 3 or pos.shape[0] != neg.shape[0] or pos.shape[2] != neg.shape[2]:
        raise InputError(
            f"activations must be (n_layers, n, d) with matching layers and d, got "
            f"{tuple(pos.shape)} and {tuple(neg.shape)}"
        )
    if pos.shape[1] == 0 or neg.shape[1] == 0:
        raise InputError("CAA needs at least one positive and one negative example")
    return pos.double().sum(1) / pos.shape[1] - neg.double().sum(1) / neg.shape[1]


def caa_from_inputs(
    model: nn.Module,
    pos_ids: Tensor,
    pos_mask: Tensor | None,
    neg_ids: Tensor,
    neg_mask: Tensor | None,
    *,
    layers: int | Sequence[int] | None = None,
    position: Position = "last",
    batch_size: int = 16,
    fingerprint: str | None = None,
) -> SteeringVector:
    """CAA vector from already tokenized positives (n+, L) and negatives (n-, L')."""
    idx = resolve_layers(model, layers)
    kw = dict(layers=idx, position=position, batch_size=batch_size)
    pos = capture_residuals(model, pos_ids, pos_mask, **kw)
    neg = capture_residuals(model, neg_ids, neg_mask, **kw)
    v = caa_from_activations(pos, neg).to(pos.dtype)
    return SteeringVector(
        v.cpu(),
        tuple(idx),
        position=position,
        method="caa",
        model_fingerprint=fingerprint,
        provenance={"n_positive": str(pos.shape[1]), "n_negative": str(neg.shape[1])},
    )


def caa_vector(
    model: nn.Module,
    tokenizer: Any,
    pairs: ContrastPairs,
    *,
    layers: int | Sequence[int] | None = None,
    position: Position = "last",
    batch_size: int = 16,
    padding_side: str = "left",
) -> SteeringVector:
    """CAA vector per layer from a contrast set, stamped with the model's fingerprint."""
    from .io import model_fingerprint  # io imports vector; local import keeps modules acyclic

    pos_ids, pos_mask = encode_prompts(tokenizer, pairs.positives, side=padding_side)
    neg_ids, neg_mask = encode_prompts(tokenizer, pairs.negatives, side=padding_side)
    vec = caa_from_inputs(
        model,
        pos_ids,
        pos_mask,
        neg_ids,
        neg_mask,
        layers=layers,
        position=position,
        batch_size=batch_size,
        fingerprint=model_fingerprint(model),
    )
    prov = dict(vec.provenance, paired=str(pairs.paired))
    return SteeringVector(vec.vectors, vec.layers, vec.position, vec.method, vec.model_fingerprint, provenance=prov)
