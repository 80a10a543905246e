"""Local-linear lab: recovery trajectories, subspace capture and drift, effective rank,
Krylov bases and Best-of-N random search (paper B, see docs/locallinear.md).
:func:`run_protocol` runs the whole recovery protocol and its measures on any model;
:mod:`.lora` maps a peft model's LoRA vector to its weight change Delta W = s B A.

Vectors live in the flat parameter space R^D; subspaces are orthonormal bases (r, D).
Nothing stores a D x D matrix.

The namespace is lazy (PEP 562): importing a submodule such as ``locallinear.config``
(the lab's torch-free settings) does not import torch; a public name imports its module on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_LAZY = {
    "BAPair": "updatescope.locallinear.lora",
    "DigitTasks": "updatescope.locallinear.synthetic",
    "INDEX_OFFSETS": "updatescope.locallinear.protocol",
    "LabConfig": "updatescope.locallinear.config",
    "ModelConfig": "updatescope.locallinear.synthetic",
    "ParamLayout": "updatescope.locallinear.params",
    "PhaseConfig": "updatescope.locallinear.trajectory",
    "PhaseRecord": "updatescope.locallinear.trajectory",
    "ProtocolConfig": "updatescope.locallinear.protocol",
    "ProtocolRecord": "updatescope.locallinear.protocol",
    "RankStats": "updatescope.locallinear.rank",
    "RecoveryConfig": "updatescope.locallinear.trajectory",
    "RecoveryRun": "updatescope.locallinear.trajectory",
    "SearchResult": "updatescope.locallinear.search",
    "TASKS": "updatescope.locallinear.synthetic",
    "TinyTransformer": "updatescope.locallinear.synthetic",
    "ba_increments": "updatescope.locallinear.lora",
    "ba_pairs": "updatescope.locallinear.lora",
    "best_of_n": "updatescope.locallinear.search",
    "candidate_direction": "updatescope.locallinear.search",
    "candidate_seed": "updatescope.locallinear.search",
    "capture_fraction": "updatescope.locallinear.capture",
    "delta_w": "updatescope.locallinear.lora",
    "drift_curve": "updatescope.locallinear.drift",
    "effective_rank": "updatescope.locallinear.rank",
    "effective_ranks": "updatescope.locallinear.rank",
    "gram": "updatescope.locallinear.rank",
    "expected_max_normal": "updatescope.locallinear.search",
    "flat_grad": "updatescope.locallinear.params",
    "flat_params": "updatescope.locallinear.params",
    "gaussian_like": "updatescope.locallinear.rank",
    "gradient_plane": "updatescope.locallinear.subspaces",
    "gradient_stack": "updatescope.locallinear.subspaces",
    "hvp": "updatescope.locallinear.krylov",
    "krylov_basis": "updatescope.locallinear.krylov",
    "krylov_curves": "updatescope.locallinear.krylov",
    "make_hvp": "updatescope.locallinear.krylov",
    "matched_horizon": "updatescope.locallinear.krylov",
    "orthonormal_basis": "updatescope.locallinear.subspaces",
    "prefix_capture_curve": "updatescope.locallinear.capture",
    "principal_angles": "updatescope.locallinear.drift",
    "push_w": "updatescope.locallinear.lora",
    "random_basis": "updatescope.locallinear.subspaces",
    "random_subspace_null": "updatescope.locallinear.capture",
    "random_walk_prefix_null": "updatescope.locallinear.capture",
    "record_phase": "updatescope.locallinear.trajectory",
    "rest_capture_curve": "updatescope.locallinear.capture",
    "restrict": "updatescope.locallinear.subspaces",
    "run_protocol": "updatescope.locallinear.protocol",
    "run_recovery": "updatescope.locallinear.trajectory",
    "set_flat_params": "updatescope.locallinear.params",
    "singular_values": "updatescope.locallinear.rank",
    "subspace_overlap": "updatescope.locallinear.drift",
    "swapped_params": "updatescope.locallinear.params",
    "top_directions": "updatescope.locallinear.subspaces",
    "top_eigenvalue": "updatescope.locallinear.krylov",
    "spectral_radius": "updatescope.locallinear.krylov",
    "PowerIteration": "updatescope.locallinear.krylov",
    "train_phase": "updatescope.locallinear.trajectory",
    "unit_rows": "updatescope.locallinear.protocol",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'updatescope.locallinear' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
