"""Capture (head input, logits, label) from any model whose last layer is an ``nn.Linear``.

The user supplies the labels (the class observed for each example), so the error is the
empirical-Fisher error ``softmax(z) - onehot(y)`` exactly as for a language model. Labels
equal to -100 are passed through (the sketch ignores them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from updatescope.capture.causal_lm import CaptureBatch
from updatescope.capture.hook import LinearCapture, find_output_linear
from updatescope.constants import IGNORE_INDEX
from updatescope.errors import InputError

__all__ = ["capture_classifier"]


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, Tensor):
        return x.to(device)
    if isinstance(x, Mapping):
        return {k: _to(v, device) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def capture_classifier(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    *,
    head: nn.Linear | None = None,
    max_examples: int | None = None,
    dtype: torch.dtype | None = None,
    progress: bool = True,
    desc: str = "capture",
) -> Iterator[CaptureBatch]:
    """Yield ``CaptureBatch(acts (n,d), logits (n,K), labels (n,))`` for ``(inputs, labels)`` pairs.

    ``inputs`` is passed to the model as ``model(inputs)`` (a tensor or tuple) or
    ``model(**inputs)`` (a mapping). ``head`` defaults to ``find_output_linear(model)``.
    The head input must be (n, d), one row per labelled example. ``dtype`` (e.g. bfloat16)
    runs the forward under autocast; outputs are float32 on the model's device.
    """
    head = head if head is not None else find_output_linear(model)
    device = next(model.parameters()).device
    param_dtype = next(model.parameters()).dtype
    autocast = (
        torch.autocast(device_type=device.type, dtype=dtype)
        if dtype is not None and dtype != param_dtype
        else nullcontext()
    )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=max_examples, unit="ex", unit_scale=True, desc=desc, dynamic_ncols=True)
    was_training = model.training
    model.eval()
    done = 0
    try:
        with LinearCapture(head) as cap:
            for b, (inputs, labels) in enumerate(batches):
                labels = torch.as_tensor(labels, dtype=torch.long).reshape(-1)
                with torch.no_grad(), autocast:
                    if isinstance(inputs, Mapping):
                        model(**_to(inputs, device))
                    else:
                        model(_to(inputs, device))
                acts, logits = cap.pop()
                assert logits is not None
                if acts.dim() != 2 or acts.shape[0] != labels.shape[0]:
                    raise InputError(
                        f"batch {b}: head input has shape {tuple(acts.shape)} but {labels.shape[0]} labels; "
                        "expected (n, d) with one label per example"
                    )
                k = logits.shape[1]
                bad = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= k))
                if bool(bad.any()):
                    raise InputError(f"batch {b}: label {int(labels[bad][0])} out of range for {k} classes")
                if max_examples is not None:
                    room = max_examples - done
                    acts, logits, labels = acts[:room], logits[:room], labels[:room]
                out = CaptureBatch(acts.to(torch.float32), logits.to(torch.float32), labels.to(acts.device))
                done += labels.shape[0]
                if bar is not None:
                    bar.update(labels.shape[0])
                yield out
                if max_examples is not None and done >= max_examples:
                    break
    finally:
        if bar is not None:
            bar.close()
        if was_training:
            model.train()
