"""Activation steering and the weight -> activation pushforward.

- ``ContrastPairs`` / ``load_pairs``: positive and negative prompts (pairs or 0/1 labels).
- ``capture_residuals`` / ``caa_vector``: decoder-layer outputs and CAA mean-difference vectors.
- ``steer``: context manager adding ``scale * v`` at chosen layers and token positions.
- ``pushforward``: the exact activation shift J_θ h · δθ of a weight direction (forward AD),
  with ``gradient_step`` and ``random_direction`` to make δθ.
- ``save_vector`` / ``load_vector`` / ``model_fingerprint``: safetensors files tied to a model.
- ``sweep`` / ``plot_sweep``: layer x scale grids.
"""

from __future__ import annotations

from .caa import caa_from_activations, caa_from_inputs, caa_vector, capture_residuals, encode_prompts
from .inject import INJECT_POSITIONS, steer
from .io import load_vector, model_fingerprint, save_vector
from .pairs import ContrastPairs, load_pairs
from .positions import Position, decoder_layers, pad_sequences, select_positions
from .pushforward import direction_norm, displaced, gradient_step, layer_outputs, pushforward, random_direction
from .sweep import best_setting, plot_sweep, sweep
from .vector import NORMALISATIONS, SteeringVector

__all__ = [
    "ContrastPairs",
    "load_pairs",
    "SteeringVector",
    "NORMALISATIONS",
    "Position",
    "decoder_layers",
    "pad_sequences",
    "select_positions",
    "capture_residuals",
    "encode_prompts",
    "caa_from_activations",
    "caa_from_inputs",
    "caa_vector",
    "steer",
    "INJECT_POSITIONS",
    "pushforward",
    "layer_outputs",
    "gradient_step",
    "random_direction",
    "direction_norm",
    "displaced",
    "model_fingerprint",
    "save_vector",
    "load_vector",
    "sweep",
    "best_setting",
    "plot_sweep",
]
