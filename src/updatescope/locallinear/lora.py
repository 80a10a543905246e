"""LoRA space to weight space: the map theta -> Delta W = s B A of a peft model.

A peft LoRA module adds s * B A to a frozen weight W (out, in), with A (r, in), B (out, r)
and s = ``module.scaling[adapter]`` (alpha / r, or alpha / sqrt(r) with rsLoRA).  The lab's
flat vector theta holds the trainable tensors (for a peft model: the A's and B's), so two
points theta, theta_0 of a LoRA trajectory map to

    x(theta) = concat over adapted modules of vec(s (B A - B_0 A_0))          (P,)

the weight change the adapters make, P = sum of out * in.  The map is bilinear, so LoRA
space and weight space can disagree: a prefix that spans little of Delta theta may span
much of Delta W, and the reverse.  Its Jacobian at theta_0 is
d x = concat vec(s (dB A_0 + B_0 dA)) (:func:`push_w`), which carries a static plane of
LoRA directions into weight space.

Plain LoRA on ``nn.Linear``-like modules only: DoRA's magnitude vector and peft's
``fan_in_fan_out`` storage are not modelled (Delta W is in the (out, in) convention of
``nn.Linear``).  Nothing here imports peft; the modules are found by the names peft gives
its tensors (``<module>.lora_A.<adapter>.weight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.params import ParamLayout

__all__ = ["BAPair", "ba_pairs", "delta_w", "push_w", "ba_increments"]


class BAPair(NamedTuple):
    """Where one adapted module's A and B live in the flat vector, and its scaling s."""

    a: slice  # slice of the flat vector holding A
    a_shape: tuple  # (r, in)
    b: slice  # slice holding B
    b_shape: tuple  # (out, r)
    scaling: float  # s, peft's module.scaling[adapter]


def ba_pairs(model: nn.Module) -> list[BAPair]:
    """Every adapted module of a peft model, in the layout order of the flat vector.

    The flat vector is the model's trainable tensors (:class:`ParamLayout`); each trainable
    ``lora_A`` tensor must have its ``lora_B`` partner trainable too.  A model without
    trainable LoRA tensors gives an empty list.
    """
    layout = ParamLayout.of(model)
    sl = layout.slices()
    shapes = dict(zip(layout.names, layout.shapes))
    out = []
    for name in layout.names:
        if ".lora_A." not in name:
            continue
        prefix, rest = name.split(".lora_A.", 1)
        b = f"{prefix}.lora_B.{rest}"
        if b not in sl:
            raise InputError(f"{name} is trainable but its partner {b} is not; train both or neither")
        adapter = rest.split(".", 1)[0]
        scale = float(model.get_submodule(prefix).scaling[adapter])
        out.append(BAPair(sl[name], shapes[name], sl[b], shapes[b], scale))
    return out


def delta_w(theta: Tensor, theta0: Tensor, pairs: Sequence[tuple]) -> Tensor:
    """concat vec(s (B A - B_0 A_0)) over modules.  (D,), (D,) -> (P,) float32.

    Products in float64.  ``delta_w(theta, zeros, pairs)`` is the adapters' whole weight
    change, equal to peft's ``get_delta_weight`` of each module.
    """
    parts = []
    for a, sa, b, sb, s in pairs:
        A, B = theta[a].double().view(sa), theta[b].double().view(sb)
        A0, B0 = theta0[a].double().view(sa), theta0[b].double().view(sb)
        parts.append((s * (B @ A - B0 @ A0)).reshape(-1))
    return torch.cat(parts).float()


def push_w(v: Tensor, theta0: Tensor, pairs: Sequence[tuple]) -> Tensor:
    """Jacobian of theta -> BA at theta0 applied to v: concat vec(s (dB A_0 + B_0 dA)).  (D,) -> (P,)."""
    parts = []
    for a, sa, b, sb, s in pairs:
        dA, dB = v[a].double().view(sa), v[b].double().view(sb)
        A0, B0 = theta0[a].double().view(sa), theta0[b].double().view(sb)
        parts.append((s * (dB @ A0 + B0 @ dA)).reshape(-1))
    return torch.cat(parts).float()


def ba_increments(
    thetas: Sequence[Tensor], theta0: Tensor, pairs: Sequence[tuple], keep: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Weight-space increments x_t - x_{t-1} of a parameter sequence starting at theta0.

    thetas: T vectors (D,) after steps 1..T; x_t = delta_w(thetas[t], theta0).  Computed
    one at a time (a T x P stack may not fit) -> (the first ``keep`` increments (keep, P)
    float32, every increment's norm (T,) float64, the end point x_T (P,) float64).  The
    span of the first k increments is the span of x_1..x_k.
    """
    prev = delta_w(theta0, theta0, pairs)
    kept, norms = [], []
    for t, th in enumerate(thetas):
        now = delta_w(th, theta0, pairs)
        step = now - prev
        norms.append(float(step.double().norm()))
        if t < keep:
            kept.append(step)
        prev = now
    return torch.stack(kept), torch.tensor(norms, dtype=torch.float64), prev.double()
