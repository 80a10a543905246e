"""Sketch chosen linear layers of a model: one forward + one backward pass per batch.

    cfg = network_config(model, ["model.layers.2[89].*_proj", "lm_head"], sketch_dim=1024)
    sk = sketch_layers(model, cfg, batches)          # batches: (inputs, labels) or {"input_ids", ...}
    save_network_signature(sk, "task.network.safetensors")
    al = network_alignment(sk_source, sk_target)     # full, block_diagonal, profile, ... ± se

Layers are ``nn.Linear`` modules named exactly or by fnmatch patterns (``match_linear_layers``).
Memory is bounded by one batch: the captured (activation, output gradient) pairs of the
chosen layers are fed to the sketch and dropped before the next batch; the sketch itself
holds (2, L + 1, m) float64 sums.  The model is not modified (no ``.grad`` written, hooks
removed on exit) and its train/eval mode is left as it is: call ``model.eval()`` first if
dropout should be off.

Default mode: ``token`` (a sample is a labelled token, as in the head sketch, so a head-only
network sketch and ``FisherSketch`` estimate the same Fisher); ``sequence`` gives the exact
per-sequence gradient of weights shared across positions, the Fisher of an SGD step on
whole sequences (see ``network.sketch``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from updatescope.constants import DEFAULT_SKETCH_DIM, IGNORE_INDEX
from updatescope.errors import InputError
from updatescope.network.capture import capture_linear_grads, match_linear_layers
from updatescope.network.sketch import NetworkConfig, NetworkSketch

__all__ = ["causal_lm_labels", "network_config", "sketch_layers"]


def network_config(
    model: nn.Module,
    layers: str | Sequence[str],
    *,
    sketch_dim: int = DEFAULT_SKETCH_DIM,
    seed: int = 0,
    mode: str = "token",
    act_map: str = "auto",
    error_map: str = "auto",
) -> NetworkConfig:
    """The NetworkConfig of the ``nn.Linear`` layers of ``model`` matching ``layers`` (names or
    fnmatch patterns), in registration order, with their (in_features, out_features)."""
    names = match_linear_layers(model, [layers] if isinstance(layers, str) else list(layers))
    mods = dict(model.named_modules())
    spec = tuple((n, int(mods[n].in_features), int(mods[n].out_features)) for n in names)
    return NetworkConfig(spec, sketch_dim, seed, mode, act_map, error_map)


def causal_lm_labels(input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Next-token labels aligned with a causal LM's logits: label[t] = input_ids[t + 1], the
    last position and padded targets ignored (IGNORE_INDEX).  (B, T) -> (B, T) int64"""
    if input_ids.ndim != 2:
        raise InputError(f"input_ids must be (batch, length), got {tuple(input_ids.shape)}")
    y = torch.full_like(input_ids, IGNORE_INDEX, dtype=torch.long)
    y[:, :-1] = input_ids[:, 1:]
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise InputError(
                f"attention_mask {tuple(attention_mask.shape)} does not match input_ids {tuple(input_ids.shape)}"
            )
        keep = torch.zeros_like(y, dtype=torch.bool)
        keep[:, :-1] = attention_mask[:, 1:].bool()
        y = y.masked_fill(~keep, IGNORE_INDEX)
    return y


def _split(batch: Any, i: int) -> tuple[Any, Any]:
    """A batch -> (inputs, labels).  Accepts (inputs, labels) pairs, or a mapping with
    ``input_ids`` (causal LM; ``labels`` used if present and already aligned with the logits,
    else derived with ``causal_lm_labels``)."""
    if isinstance(batch, Mapping):
        if "input_ids" not in batch:
            raise InputError(f"batch {i}: a mapping batch needs 'input_ids', got keys {sorted(batch)[:5]}")
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        labels = batch.get("labels")
        if labels is None:
            labels = causal_lm_labels(batch["input_ids"], batch.get("attention_mask"))
        return inputs, labels
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    raise InputError(f"batch {i}: expected (inputs, labels) or a mapping with input_ids, got {type(batch).__name__}")


def _to(x: Any, device: torch.device) -> Any:
    if isinstance(x, Tensor):
        return x.to(device)
    if isinstance(x, Mapping):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def sketch_layers(
    model: nn.Module,
    config: NetworkConfig | str | Sequence[str],
    batches: Iterable[Any],
    *,
    sketch: NetworkSketch | None = None,
    **config_kwargs: Any,
) -> NetworkSketch:
    """Stream ``batches`` through ``model`` and sketch its chosen linear layers.

    config: a NetworkConfig (e.g. from ``network_config``) or layer names/patterns (then
    ``config_kwargs`` go to ``network_config``: sketch_dim, seed, mode, maps).  batches:
    iterable of (inputs, labels) with labels aligned with the logits (B, T) or (B,), or
    mappings with ``input_ids`` (causal LM).  sketch: an existing sketch to continue
    (``--resume``); else a new one on the model's device.  -> the sketch (updated in place).
    One forward + one backward per batch.
    """
    if not isinstance(config, NetworkConfig):
        config = network_config(model, config, **config_kwargs)
    elif config_kwargs:
        raise InputError(f"settings {sorted(config_kwargs)} given with a NetworkConfig: put them in the config")
    mods = dict(model.named_modules())
    for name, d, k in config.layers:
        mod = mods.get(name)
        if not isinstance(mod, nn.Linear) or (mod.in_features, mod.out_features) != (d, k):
            have = (
                f"{type(mod).__name__}"
                if not isinstance(mod, nn.Linear)
                else f"Linear({mod.in_features}, {mod.out_features})"
            )
            raise InputError(f"layer {name!r}: the config says Linear({d}, {k}), the model has {have}")
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    if sketch is None:
        sketch = NetworkSketch(config, device)
    else:
        config.check_compatible(sketch.config)
    names = list(config.names)
    for i, batch in enumerate(batches):
        inputs, labels = _split(batch, i)
        cap = capture_linear_grads(model, names, _to(inputs, device), labels)
        sketch.update(cap.sequences() if config.mode == "sequence" else cap.tokens())
        del cap  # one batch of captures at a time
    return sketch
