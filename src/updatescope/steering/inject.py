"""Adding a steering vector to the residual stream while a model runs (``steer``).

Hooks sit on decoder-layer outputs.  A pre-hook on the model itself reads each call's 2-D
attention mask and KV-cache length, which is what lets one rule work for a plain forward,
padded batches and ``generate``: position t of the current chunk has absolute index
``past + t``, and the prompt is whatever the first cache-less call of a sequence saw.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import InputError
from .positions import decoder_layers, hidden_of, resolve_layers, with_hidden
from .vector import SteeringVector

__all__ = ["steer", "INJECT_POSITIONS"]

#: ``all``: every real token; ``prompt``: tokens of the prompt only; ``generated``: tokens
#: produced by ``generate`` (needs the KV cache, the default); ``last``: the last real token of
#: each forward call (the prompt's last token, then each new token).
INJECT_POSITIONS = ("all", "prompt", "generated", "last")

Vectors = SteeringVector | Tensor | Mapping[int, Tensor]


def _per_layer(model: nn.Module, vector: Vectors, layers: int | Sequence[int] | None) -> dict[int, Tensor]:
    """Normalise the accepted vector forms to {layer: (d,) tensor}."""
    n = len(decoder_layers(model))
    if isinstance(vector, SteeringVector):
        table = vector.as_dict()
        chosen = list(table) if layers is None else resolve_layers(model, layers)
        missing = [x for x in chosen if x not in table]
        if missing:
            raise InputError(f"steering vector has no layer {missing[0]} (it has {list(table)})")
        return {x: table[x] for x in chosen}
    if isinstance(vector, Mapping):
        chosen = resolve_layers(model, list(vector) if layers is None else layers)
        table = {int(k) % n: v for k, v in vector.items()}
        return {x: table[x] for x in chosen}
    if not isinstance(vector, Tensor):
        raise InputError(
            f"vector must be a SteeringVector, a tensor or a {{layer: tensor}} dict, got {type(vector).__name__}"
        )
    if layers is None:
        raise InputError("a bare tensor needs layers=... to say where to add it")
    chosen = resolve_layers(model, layers)
    if vector.ndim == 1:
        return {x: vector for x in chosen}
    if vector.ndim == 2 and vector.shape[0] == len(chosen):
        return {x: vector[i] for i, x in enumerate(chosen)}
    raise InputError(
        f"vector of shape {tuple(vector.shape)} does not fit {len(chosen)} layers: give (d,) or (n_layers, d)"
    )


def _past_length(kwargs: dict[str, Any], mask: Tensor | None, q: int | None) -> int:
    """Tokens already in the KV cache before this call: the 2-D mask covers past + current
    tokens, so its excess over the current chunk is the cache length."""
    if mask is not None and q is not None and mask.shape[1] >= q:
        return int(mask.shape[1] - q)
    cache = kwargs.get("past_key_values")
    if cache is not None and hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return 0


def _ancestors(model: nn.Module, blocks: nn.Module) -> list[nn.Module]:
    """``model`` and every module between it and ``blocks`` (outermost first)."""
    path = next((name for name, m in model.named_modules() if m is blocks), None)
    if not path:
        return [model]
    mods = dict(model.named_modules())
    parts = path.split(".")
    return [model] + [mods[".".join(parts[:i])] for i in range(1, len(parts))]


@contextmanager
def steer(
    model: nn.Module,
    vector: Vectors,
    layers: int | Sequence[int] | None = None,
    scale: float = 1.0,
    positions: str = "all",
    check_finite: bool = False,
) -> Iterator[None]:
    """Within the block, decoder layer l's output h (B, q, d) becomes h + scale * v_l at the
    chosen positions (pad tokens, as given by the attention mask, are never touched).

    ``vector``: a SteeringVector (its layers by default), a (d,) or (n_layers, d) tensor with
    ``layers``, or {layer: (d,) tensor}.  Every hook is removed on exit, also on error;
    ``scale == 0`` leaves the computation bit-for-bit unchanged.

    ``check_finite``: a scale that is not finite is refused, and the residual stream is
    checked after every decoder layer from the first steered one on: when the mean square
    of a position (what the next RMSNorm computes, in float32) is not finite, the scale has
    overflowed the model's number format and an InputError names the scale and the layer,
    instead of generation going on from garbage (an empty or constant continuation).  Costs
    one reduction and one device sync per layer and call.
    """
    if positions not in INJECT_POSITIONS:
        raise InputError(f"positions must be one of {INJECT_POSITIONS}, got {positions!r}")
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise InputError(f"scale must be a number, got {scale!r}") from None
    if check_finite and not math.isfinite(scale):
        raise InputError(f"scale must be a finite number, got {scale}")
    table = _per_layer(model, vector, layers)
    blocks = decoder_layers(model)
    width = getattr(getattr(model, "config", None), "hidden_size", None)
    for layer, v in table.items():
        if v.ndim != 1 or (width is not None and v.shape[0] != width):
            raise InputError(f"vector for layer {layer} has shape {tuple(v.shape)}, model hidden size is {width}")
    # Per-call facts written by the pre-hook, read by the layer hooks.
    state: dict[str, Any] = {"mask": None, "past": 0, "prompt_len": None}

    def pre_hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        q = None if ids is None else int(ids.shape[1])
        mask = mask if isinstance(mask, Tensor) and mask.ndim == 2 else None
        past = _past_length(kwargs, mask, q)
        if past == 0 and q is not None:
            state["prompt_len"] = q  # a fresh sequence starts: this call is its prompt
        state.update(mask=mask, past=past)

    def weights(h: Tensor) -> Tensor:
        """(B, q, 1) 0/1 weights of the positions to steer in the current chunk."""
        B, q, _ = h.shape
        mask = state["mask"]
        real = (
            torch.ones(B, q, dtype=torch.bool, device=h.device)
            if mask is None
            else mask[:, -q:].to(device=h.device).bool()
        )
        if positions == "last":
            rank = real.long().cumsum(1)
            keep = real & (rank == rank[:, -1:])
        else:
            absolute = state["past"] + torch.arange(q, device=h.device)
            prompt_len = state["prompt_len"] if state["prompt_len"] is not None else q + state["past"]
            if positions == "prompt":
                keep = real & (absolute < prompt_len)
            elif positions == "generated":
                keep = real & (absolute >= prompt_len)
            else:
                keep = real
        return keep.unsqueeze(-1).to(h.dtype)

    def make_hook(v: Tensor):
        cache: dict[tuple, Tensor] = {}

        def hook(module: nn.Module, args: Any, output: Any) -> Any:
            h = hidden_of(output)
            key = (h.device, h.dtype)
            if key not in cache:
                cache[key] = (scale * v.detach().to(device=h.device, dtype=torch.float64)).to(h.dtype)
            return with_hidden(output, h + weights(h) * cache[key])

        return hook

    def make_check(layer: int):
        def check(module: nn.Module, args: Any, output: Any) -> None:
            h = hidden_of(output)
            if not bool(torch.isfinite(h.float().square().mean(-1)).all()):
                raise InputError(
                    f"steering scale {scale:g} overflows the residual stream at layer {layer} "
                    f"({h.dtype} values are no longer finite); use a smaller scale"
                )

        return check

    if scale == 0.0:
        # Adding zero can still flip -0.0 to +0.0; skipping keeps the no-op exact.
        yield
        return
    # The pre-hook must see every call that reaches the blocks: the model's own forward, and
    # also a direct call of an inner module (``model.base_model(...)``, a PEFT wrapper's inner
    # model), which would otherwise run the blocks without the attention mask and steer the
    # last *padded* position of shorter rows.  So it goes on every ancestor of the block list.
    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in _ancestors(model, blocks)]
    try:
        for layer, v in table.items():
            handles.append(blocks[layer].register_forward_hook(make_hook(v)))
        if check_finite and table:  # registered after the steering hooks: each sees the steered output
            for layer in range(min(table), len(blocks)):
                handles.append(blocks[layer].register_forward_hook(make_check(layer)))
        yield
    finally:
        for handle in handles:
            handle.remove()
