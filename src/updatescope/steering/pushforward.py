"""The pushforward of a weight direction to the residual stream.

A weight move θ -> θ + δθ shifts decoder layer l's output by
    Δh_l = J_θ h_l · δθ + O(|δθ|²),
a Jacobian-vector product.  We compute it exactly with forward-mode AD (``torch.func.jvp``
over ``torch.func.functional_call``), one forward pass per batch, never materialising J and
never differencing (finite differences lose half the digits and need a step size).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..constants import IGNORE_INDEX
from ..errors import InputError
from .positions import Position, check_position, decoder_layers, hidden_of, resolve_layers, select_positions

__all__ = ["pushforward", "layer_outputs", "gradient_step", "random_direction", "direction_norm", "displaced"]


def _check_direction(model: nn.Module, delta: Mapping[str, Tensor]) -> dict[str, Tensor]:
    params = dict(model.named_parameters())
    if not delta:
        raise InputError("the parameter direction is empty")
    for name, t in delta.items():
        if name not in params:
            raise InputError(f"direction names parameter {name!r}, which the model does not have")
        if tuple(t.shape) != tuple(params[name].shape):
            raise InputError(
                f"direction for {name!r} has shape {tuple(t.shape)}, parameter has {tuple(params[name].shape)}"
            )
    return params


def layer_outputs(
    model: nn.Module,
    params: Mapping[str, Tensor],
    input_ids: Tensor,
    attention_mask: Tensor | None,
    layers: Sequence[int],
    position: Position,
) -> tuple[Tensor, ...]:
    """Decoder-layer outputs at one position per row with ``params`` swapped in.
    ids (B, L) -> n_layers tensors of shape (B, d).  Pure in ``params``, so it can be jvp'd."""
    blocks = decoder_layers(model)
    got: dict[int, Tensor] = {}

    def make_hook(layer: int):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            got[layer] = select_positions(hidden_of(output), attention_mask, position)

        return hook

    handles = [blocks[layer].register_forward_hook(make_hook(layer)) for layer in layers]
    try:
        torch.func.functional_call(
            model,
            dict(params),
            args=(),
            kwargs={"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False},
            strict=False,
        )
    finally:
        for handle in handles:
            handle.remove()
    return tuple(got[layer] for layer in layers)


def pushforward(
    model: nn.Module,
    delta: Mapping[str, Tensor],
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    layers: int | Sequence[int] | None = None,
    position: Position = "last",
    batch_size: int = 16,
) -> Tensor:
    """Activation shift J_θ h_l · δθ for each chosen layer.  ids (n, L) -> (n_layers, n, d).

    ``delta`` maps parameter names (as in ``model.named_parameters()``) to tensors of the
    parameter's shape; parameters it omits are held fixed.  Layers default to all.  Put the
    model in eval mode first (dropout would make the map random).  Attention kernels without
    forward-mode AD support (other than SDPA, which is
    switched to its math kernel here) may need ``attn_implementation="eager"``.
    """
    check_position(position)
    idx = resolve_layers(model, layers)
    params = _check_direction(model, delta)
    if input_ids.ndim != 2 or input_ids.shape[0] == 0:
        raise InputError(f"input_ids must be (n, L) with n >= 1, got {tuple(input_ids.shape)}")
    names = sorted(delta)
    primals = tuple(params[k].detach() for k in names)
    tangents = tuple(delta[k].detach().to(device=params[k].device, dtype=params[k].dtype) for k in names)
    device = primals[0].device
    chunks: list[Tensor] = []
    for start in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[start : start + batch_size].to(device)
        mask = None if attention_mask is None else attention_mask[start : start + batch_size].to(device)

        def f(*ps: Tensor) -> tuple[Tensor, ...]:
            return layer_outputs(model, dict(zip(names, ps)), ids, mask, idx, position)

        try:
            # Fused SDPA kernels have no forward-mode derivative; the math kernel is composite
            # and has one.  The context restores the kernel choice on exit.
            with sdpa_kernel(SDPBackend.MATH):
                _, shifts = torch.func.jvp(f, primals, tangents)
        except (NotImplementedError, RuntimeError) as err:
            if "forward AD" not in str(err) and "forward-mode" not in str(err):
                raise
            raise InputError(
                f"{type(model).__name__}: an operation lacks forward-mode AD; load the "
                f"model with attn_implementation='eager'"
            ) from None
        chunks.append(torch.stack(shifts))
    return torch.cat(chunks, dim=1)


def _lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean next-token cross-entropy; labels equal to IGNORE_INDEX are skipped."""
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1).to(logits.device)
    if bool((shift_labels == IGNORE_INDEX).all()):
        raise InputError("every label is IGNORE_INDEX: no target to take a gradient step on")
    return F.cross_entropy(
        shift_logits.float() if shift_logits.dtype in (torch.float16, torch.bfloat16) else shift_logits,
        shift_labels,
        ignore_index=IGNORE_INDEX,
    )


def gradient_step(
    model: nn.Module,
    input_ids: Tensor,
    labels: Tensor,
    attention_mask: Tensor | None = None,
    *,
    lr: float = 1.0,
    params: Sequence[str] | None = None,
) -> dict[str, Tensor]:
    """δθ = -lr · ∇_θ L, L the mean next-token loss (labels aligned with input_ids, (n, L);
    IGNORE_INDEX marks positions without a target).  Params default to every trainable one."""
    named = dict(model.named_parameters())
    names = [k for k, p in named.items() if p.requires_grad] if params is None else list(params)
    unknown = [k for k in names if k not in named]
    if unknown or not names:
        raise InputError(f"unknown parameter {unknown[0]!r}" if unknown else "no parameters to step")
    if labels.shape != input_ids.shape:
        raise InputError(f"labels {tuple(labels.shape)} must match input_ids {tuple(input_ids.shape)}")
    device = named[names[0]].device
    leaves = {k: named[k].detach().requires_grad_(True) for k in names}
    mask = None if attention_mask is None else attention_mask.to(device)
    out = torch.func.functional_call(
        model,
        leaves,
        args=(),
        strict=False,
        kwargs={"input_ids": input_ids.to(device), "attention_mask": mask, "use_cache": False},
    )
    logits = out.logits if hasattr(out, "logits") else out[0]
    grads = torch.autograd.grad(_lm_loss(logits, labels), [leaves[k] for k in names], allow_unused=True)
    return {k: (torch.zeros_like(leaves[k]) if g is None else -lr * g).detach() for k, g in zip(names, grads)}


def direction_norm(delta: Mapping[str, Tensor]) -> float:
    """Euclidean norm of a parameter direction over all its tensors."""
    return float(sum(float(t.detach().double().pow(2).sum()) for t in delta.values()) ** 0.5)


def random_direction(like: Mapping[str, Tensor], seed: int = 0, norm: float | None = None) -> dict[str, Tensor]:
    """Gaussian direction with the names and shapes of ``like`` and total norm ``norm``
    (default: the norm of ``like``) -- the same-norm null for a gradient step.

    Drawn on the CPU from one local generator in sorted-name order, so the result does not
    depend on the device.
    """
    if not like:
        raise InputError("cannot draw a random direction like an empty one")
    target = direction_norm(like) if norm is None else float(norm)
    g = torch.Generator().manual_seed(seed)
    raw = {k: torch.randn(like[k].shape, generator=g, dtype=torch.float64) for k in sorted(like)}
    factor = target / direction_norm(raw)
    return {k: (raw[k] * factor).to(device=like[k].device, dtype=like[k].dtype) for k in like}


@contextmanager
def displaced(model: nn.Module, names: Sequence[str], u: Tensor, saved: Mapping[str, Tensor]) -> Iterator[None]:
    """The model with θ + u in place, θ restored exactly from ``saved`` (clones of the named
    parameters, taken once by the caller) on exit.  u (D,) is flat over ``names`` in order
    (D = their total size)."""
    params = dict(model.named_parameters())
    try:
        with torch.no_grad():
            off = 0
            for k in names:
                p = params[k]
                p.add_(u[off : off + p.numel()].view_as(p).to(device=p.device, dtype=p.dtype))
                off += p.numel()
        yield
    finally:
        with torch.no_grad():
            for k in names:
                params[k].copy_(saved[k])
