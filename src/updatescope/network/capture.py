"""Per-token (input activation, output gradient) of chosen ``nn.Linear`` layers, one batch at a time.

One forward and one backward pass per batch.  The loss is the *summed* cross-entropy over
labelled positions (label ``IGNORE_INDEX`` skipped), so that e_t = ∂L/∂y_t makes
Σ_t a_t ⊗ e_t the gradient of the batch's total loss, split exactly by sample: sample i's
loss depends only on sample i's rows, hence layer-gradient of sequence i = Σ_t a_it ⊗ e_it.
For the head, e_t = softmax(z_t) − onehot(y_t), the head sketch's error vector.

Gradients are taken with ``torch.autograd.grad`` with respect to the hooked outputs only:
nothing is written to the parameters' ``.grad`` and the model is not modified; the hooks
are removed on exit, also after an error.  Memory: one batch of activations and output
gradients per chosen layer (the caller feeds them to a sketch and drops them).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError

__all__ = ["LinearGrads", "capture_linear_grads", "match_linear_layers"]


def match_linear_layers(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Names of the ``nn.Linear`` modules matching any fnmatch pattern, in registration order.
    Raises InputError for a pattern that matches no linear layer."""
    if isinstance(patterns, str):
        patterns = [patterns]
    linears = [n for n, mod in model.named_modules() if isinstance(mod, nn.Linear)]
    for p in patterns:
        if not any(fnmatch.fnmatchcase(n, p) for n in linears):
            raise InputError(
                f"layer pattern {p!r} matches no nn.Linear of {type(model).__name__} "
                f"(e.g. {', '.join(linears[:3]) or 'none'})"
            )
    return [n for n in linears if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


@dataclass(frozen=True)
class LinearGrads:
    """What one batch left at the chosen layers.

    layers: {name: (acts (B, T, d), grads (B, T, k))}, float32 or the model dtype, detached;
    labelled: (B, T) bool, positions whose label is not IGNORE_INDEX.  Non-sequence models
    (logits (B, K)) get T = 1.
    """

    layers: dict[str, tuple[Tensor, Tensor]]
    labelled: Tensor

    def tokens(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Per-token samples: labelled positions only (the head sketch's samples).  (n, d), (n, k)"""
        m = self.labelled
        for k, (a, _) in self.layers.items():
            if a.shape[:2] != m.shape:
                raise InputError(
                    f"layer {k!r} sees {a.shape[1]} positions per sample but the labels have "
                    f"{m.shape[1]}: its per-token samples are undefined, use sequences()"
                )
        return {k: (a[m], e[m]) for k, (a, e) in self.layers.items()}

    def sequences(self) -> dict[str, tuple[Tensor, Tensor]]:
        """Per-sequence samples: all positions (unlabelled ones still carry later tokens'
        gradient; padding carries zero).  (B, T, d), (B, T, k)"""
        return dict(self.layers)


def _logits(out: Any) -> Tensor:
    if isinstance(out, Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
        return out[0]
    raise InputError(f"cannot find logits in the model output of type {type(out).__name__}")


def capture_linear_grads(model: nn.Module, patterns: Sequence[str], inputs: Any, labels: Any) -> LinearGrads:
    """Run one forward + backward and return per-position (a_t, e_t) of the matching layers.

    inputs: a tensor (model(inputs)) or a mapping (model(**inputs)); labels: (B, T) or (B,),
    aligned with the logits (B, T, K) or (B, K): label of position t is the target of logits
    t (shift causal-LM labels before calling).  Each layer must run once per forward.
    """
    names = match_linear_layers(model, patterns)
    modules = dict(model.named_modules())
    acts: dict[str, Tensor] = {}
    outs: dict[str, Tensor] = {}

    def hook(name: str):
        def fn(mod: nn.Module, args: tuple[Any, ...], output: Tensor) -> Tensor | None:
            if name in acts:
                raise InputError(f"layer {name!r} ran twice in one forward pass; capture needs one call per layer")
            acts[name] = args[0].detach()
            if not output.requires_grad:  # frozen weights and inputs: make the output a graph leaf's child
                output = output + torch.zeros((), dtype=output.dtype, device=output.device, requires_grad=True)
                outs[name] = output
                return output
            outs[name] = output
            return None

        return fn

    handles = [modules[n].register_forward_hook(hook(n)) for n in names]
    try:
        with torch.enable_grad():
            out = model(**inputs) if isinstance(inputs, Mapping) else model(inputs)
            logits = _logits(out)
            y = labels if isinstance(labels, Tensor) else torch.as_tensor(labels)
            y = y.to(logits.device).long()
            if tuple(y.shape) != tuple(logits.shape[:-1]):
                raise InputError(
                    f"labels have shape {tuple(y.shape)}, logits {tuple(logits.shape)}: "
                    "expected labels of shape logits.shape[:-1]"
                )
            k = logits.shape[-1]
            bad = (y != IGNORE_INDEX) & ((y < 0) | (y >= k))
            if bool(bad.any()):
                raise InputError(f"label {int(y[bad][0])} out of range for {k} outputs (use {IGNORE_INDEX} to skip)")
            labelled = y != IGNORE_INDEX
            missing = [n for n in names if n not in outs]
            if missing:
                raise InputError(f"layers {missing} did not run in the forward pass")
            if bool(labelled.any()):
                z = logits if logits.dtype == torch.float64 else logits.float()  # fp16/bf16 logits: loss in fp32
                loss = F.cross_entropy(z.reshape(-1, k), y.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum")
                grads = torch.autograd.grad(loss, [outs[n] for n in names], allow_unused=True)
            else:
                grads = (None,) * len(names)
    finally:
        for h in handles:
            h.remove()
    layers = {}
    for n, g in zip(names, grads):
        a = acts[n]
        e = torch.zeros_like(outs[n]) if g is None else g.detach()
        if a.ndim == 2:  # (B, d): one position per sample
            a, e = a.unsqueeze(1), e.unsqueeze(1)
        layers[n] = (a, e)
    lab = labelled if labelled.ndim == 2 else labelled.unsqueeze(1)
    return LinearGrads(layers, lab)
