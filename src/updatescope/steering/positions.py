"""Where in a model and where in a sequence: decoder layers, hidden states, position rules.

Shared by capture (CAA), injection and the pushforward, so that "layer 5, last token" means
the same residual-stream entry everywhere: the *output* of decoder block 5, before the final
norm, at the last non-pad token of each row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import InputError

__all__ = [
    "Position",
    "check_position",
    "decoder_layers",
    "resolve_layers",
    "select_positions",
    "pad_sequences",
    "hidden_of",
    "with_hidden",
    "layer_outputs_hooked",
]

#: ``"last"`` (last non-pad token), ``"all"`` (mean over non-pad tokens) or an int ``k``
#: (the k-th non-pad token of each row; negative counts from the end, so -1 == "last").
Position = str | int

# Attribute paths where Hugging Face families keep their decoder blocks, most common first.
_LAYER_PATHS = (
    "model.layers",
    "model.decoder.layers",
    "transformer.h",
    "gpt_neox.layers",
    "transformer.layers",
    "layers",
    "h",
)


def check_position(position: Position) -> Position:
    """Return ``position`` if it is a valid rule, else raise InputError."""
    if isinstance(position, bool) or not (position in ("last", "all") or isinstance(position, int)):
        raise InputError(f"position must be 'last', 'all' or an int token index, got {position!r}")
    return position


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's list of decoder blocks (``model.model.layers`` for Llama-like models)."""
    for path in _LAYER_PATHS:
        obj: Any = model
        for name in path.split("."):
            obj = getattr(obj, name, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    # Wrappers (PEFT, custom heads) nest the blocks deeper: take the first ModuleList named
    # like a block list whose length matches the config's layer count.
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for name, module in model.named_modules():
        if (
            isinstance(module, nn.ModuleList)
            and name.rsplit(".", 1)[-1] in ("layers", "h")
            and len(module) > 0
            and (n is None or len(module) == n)
        ):
            return module
    raise InputError(
        f"{type(model).__name__}: cannot find its decoder layers (looked for "
        f"{', '.join(_LAYER_PATHS)}); pass a Hugging Face causal LM"
    )


def resolve_layers(model: nn.Module, layers: int | Sequence[int] | None) -> list[int]:
    """Layer indices in [0, n_layers) (negative ones count from the end); None means all."""
    n = len(decoder_layers(model))
    if layers is None:
        return list(range(n))
    raw = [layers] if isinstance(layers, int) else list(layers)
    if not raw:
        raise InputError("layers is empty: give at least one decoder layer index")
    out = []
    for layer in raw:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n <= layer < n:
            raise InputError(f"layer {layer!r} is out of range for a model with {n} decoder layers")
        out.append(layer % n)
    if len(set(out)) != len(out):
        raise InputError(f"layers {raw} name the same decoder layer twice")
    return out


def hidden_of(output: Any) -> Tensor:
    """The hidden state in a decoder block's output (a tensor, or the first item of a tuple)."""
    return output if isinstance(output, Tensor) else output[0]


@contextmanager
def layer_outputs_hooked(model: nn.Module, layers: Sequence[int]) -> Iterator[dict[int, Tensor]]:
    """While open, every forward pass of ``model`` stores the hidden state each decoder layer
    in ``layers`` outputs (whole sequences, the model's dtype) in the yielded dict, keyed by
    layer index; the hooks are removed on exit."""
    blocks = decoder_layers(model)
    got: dict[int, Tensor] = {}
    handles = [blocks[x].register_forward_hook(lambda m, a, o, x=x: got.__setitem__(x, hidden_of(o))) for x in layers]
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def with_hidden(output: Any, hidden: Tensor) -> Any:
    """``output`` with its hidden state replaced, keeping the container type."""
    if isinstance(output, Tensor):
        return hidden
    return (hidden, *output[1:])


def select_positions(hidden: Tensor, attention_mask: Tensor | None, position: Position) -> Tensor:
    """Pick one vector per row by the position rule.  (B, L, d), mask (B, L) -> (B, d).

    Works for left, right or any padding because it only counts positions where the mask
    is 1; "all" is the mean over those positions.
    """
    B, L, _ = hidden.shape
    mask = (
        torch.ones(B, L, dtype=torch.bool, device=hidden.device)
        if attention_mask is None
        else attention_mask.to(device=hidden.device).bool()
    )
    counts = mask.sum(1)
    if bool((counts == 0).any()):
        raise InputError("a row of attention_mask has no real tokens")
    if position == "all":
        w = mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * w).sum(1) / counts.to(hidden.dtype).unsqueeze(-1)
    k = -1 if position == "last" else check_position(position)
    assert isinstance(k, int)
    target = torch.full_like(counts, k) + (counts if k < 0 else 0)
    if bool(((target < 0) | (target >= counts)).any()):
        raise InputError(f"position {k} is outside a row with {int(counts.min())} real tokens")
    rank = mask.long().cumsum(1) - 1  # rank of each real token within its row
    idx = (mask & (rank == target.unsqueeze(1))).long().argmax(1)  # (B,)
    return hidden[torch.arange(B, device=hidden.device), idx]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0, side: str = "left") -> tuple[Tensor, Tensor]:
    """Token-id lists -> (input_ids (n, L), attention_mask (n, L)), padded on ``side``."""
    if side not in ("left", "right"):
        raise InputError(f"padding side must be 'left' or 'right', got {side!r}")
    if not seqs or any(len(s) == 0 for s in seqs):
        raise InputError("cannot pad an empty list of sequences or an empty sequence")
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(L - len(s), L) if side == "left" else slice(0, len(s))
        ids[i, sl] = torch.as_tensor(list(s), dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask
