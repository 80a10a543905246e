"""Flat views of a model's trainable parameters.

Every analysis in the lab works on vectors of length D (the number of trainable
parameters, concatenated in ``named_parameters`` order).  :class:`ParamLayout` records
where each tensor lives in that vector, so per-layer analyses slice the same vectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from updatescope.errors import InputError

__all__ = ["ParamLayout", "flat_params", "set_flat_params", "flat_grad", "swapped_params"]


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of the trainable tensors of a model."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, model: nn.Module) -> ParamLayout:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise InputError("model has no trainable parameters")
        return cls(tuple(n for n, _ in named), tuple(tuple(p.shape) for _, p in named))

    @property
    def numels(self) -> tuple[int, ...]:
        return tuple(int(torch.Size(s).numel()) for s in self.shapes)

    @property
    def dim(self) -> int:
        """D, the length of the flat vector."""
        return sum(self.numels)

    def slices(self) -> dict[str, slice]:
        """Tensor name -> its slice of the flat vector."""
        out, start = {}, 0
        for name, n in zip(self.names, self.numels):
            out[name] = slice(start, start + n)
            start += n
        return out

    def groups(self, key: Callable[[str], str]) -> dict[str, list[slice]]:
        """Group tensor slices by ``key(name)`` (e.g. the block index) for per-layer work."""
        out: dict[str, list[slice]] = {}
        for name, sl in self.slices().items():
            out.setdefault(key(name), []).append(sl)
        return out

    def split(self, vec: Tensor) -> list[Tensor]:
        """(D,) -> one view per tensor, in layout order, reshaped."""
        if vec.shape != (self.dim,):
            raise InputError(f"expected a vector of shape ({self.dim},), got {tuple(vec.shape)}")
        return [c.view(s) for c, s in zip(vec.split(self.numels), self.shapes)]


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def flat_params(model: nn.Module) -> Tensor:
    """Detached copy of the trainable parameters, (D,), in the model's dtype."""
    return torch.cat([p.detach().reshape(-1) for p in _trainable(model)]).clone()


@torch.no_grad()
def set_flat_params(model: nn.Module, vec: Tensor) -> None:
    """Write a flat (D,) vector into the trainable parameters in place."""
    params = _trainable(model)
    d = sum(p.numel() for p in params)
    if vec.shape != (d,):
        raise InputError(f"expected a vector of shape ({d},), got {tuple(vec.shape)}")
    start = 0
    for p in params:
        p.copy_(vec[start : start + p.numel()].view_as(p))
        start += p.numel()


def flat_grad(loss: Tensor, model: nn.Module, create_graph: bool = False) -> Tensor:
    """Gradient of a scalar loss w.r.t. the trainable parameters, flattened to (D,).

    Parameters the loss does not touch get zeros (not an error), so per-task losses that
    skip part of the model still give full-length vectors.
    """
    params = _trainable(model)
    grads = torch.autograd.grad(loss, params, create_graph=create_graph, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(params, grads)])


class swapped_params:
    """Context manager: temporarily load a flat vector into the model, restore on exit."""

    def __init__(self, model: nn.Module, vec: Tensor) -> None:
        self.model, self.vec = model, vec

    def __enter__(self) -> nn.Module:
        self._saved = flat_params(self.model)
        set_flat_params(self.model, self.vec.to(self._saved.dtype))
        return self.model

    def __exit__(self, *exc: object) -> None:
        set_flat_params(self.model, self._saved)


def iter_named(layout: ParamLayout, vec: Tensor) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor view) pairs of a flat vector."""
    return zip(layout.names, layout.split(vec))
