"""Forward-hook capture of the input and output of one ``nn.Linear`` layer.

The head-gradient geometry only needs, per example, the head input ``a`` (n, d) and the head
output ``z = W a + b`` (n, K). Both are read from a forward hook, so any model whose last
layer is an ``nn.Linear`` works unchanged and no backward pass is ever run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from updatescope.errors import InputError

__all__ = ["LinearCapture", "find_output_linear"]


def find_output_linear(model: nn.Module) -> nn.Linear:
    """The model's linear output head.

    Hugging Face models answer ``get_output_embeddings()``; other models use the last
    ``nn.Linear`` in registration order (the usual place of a classifier head). Raises
    InputError when there is none, since the sketch is defined for a linear head only.
    """
    head: Any = None
    getter = getattr(model, "get_output_embeddings", None)
    if callable(getter):
        head = getter()
    if head is None:
        linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
        head = linears[-1] if linears else None
    if not isinstance(head, nn.Linear):
        kind = type(head).__name__ if head is not None else "no layer"
        raise InputError(
            f"{type(model).__name__} has no linear output head (found {kind}); FisherSketch needs a final nn.Linear"
        )
    return head


class LinearCapture:
    """Context manager recording what flows through ``linear`` during forward passes.

    >>> with LinearCapture(head) as cap:
    ...     model(x)
    ...     acts, out = cap.pop()   # acts (..., d), out (..., K); detached, model dtype

    Only the most recent call is kept (a model that calls its head twice per forward is
    rejected rather than silently half-captured). Tensors are detached, not copied, so the
    caller decides when to convert and when to free them.
    """

    def __init__(self, linear: nn.Module, keep_output: bool = True) -> None:
        if not isinstance(linear, nn.Linear):
            raise InputError(f"LinearCapture needs an nn.Linear, got {type(linear).__name__}")
        self.linear = linear
        self.keep_output = keep_output
        self._handle: Any = None
        self._input: Tensor | None = None
        self._output: Tensor | None = None
        self._calls = 0

    def _hook(self, module: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        self._calls += 1
        self._input = args[0].detach()
        self._output = output.detach() if self.keep_output else None

    def __enter__(self) -> LinearCapture:
        if self._handle is not None:
            raise RuntimeError("LinearCapture is already active")
        self._handle = self.linear.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the hook and drop any captured tensors."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._input = self._output = None
        self._calls = 0

    def pop(self) -> tuple[Tensor, Tensor | None]:
        """Return ``(input, output)`` of the last forward and forget them.

        ``input`` has shape (..., d); ``output`` (..., K) or None when ``keep_output=False``.
        """
        if self._input is None:
            raise RuntimeError("the head was not called since the last pop(): nothing captured")
        if self._calls > 1:
            calls = self._calls
            self._input = self._output = None
            self._calls = 0
            raise RuntimeError(f"the head was called {calls} times in one forward; capture is ambiguous")
        out = (self._input, self._output)
        self._input = self._output = None
        self._calls = 0
        return out


def head_logits(linear: nn.Linear, acts: Tensor) -> Tensor:
    """``acts @ W.T + b`` in float32; (n, d) -> (n, K). Reference used by tests."""
    w = linear.weight.to(torch.float32)
    b = linear.bias.to(torch.float32) if linear.bias is not None else None
    return torch.nn.functional.linear(acts.to(torch.float32), w, b)
