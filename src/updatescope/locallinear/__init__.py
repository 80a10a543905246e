"""Local-linear lab: recovery trajectories, subspace capture and drift, effective rank,
Krylov bases and Best-of-N random search (paper B, see docs/locallinear.md).

Vectors live in the flat parameter space R^D; subspaces are orthonormal bases (r, D).
Nothing stores a D x D matrix.
"""
from updatescope.locallinear.capture import (
    capture_fraction,
    prefix_capture_curve,
    random_subspace_null,
    random_walk_prefix_null,
    rest_capture_curve,
)
from updatescope.locallinear.drift import drift_curve, principal_angles, subspace_overlap
from updatescope.locallinear.krylov import hvp, krylov_basis, make_hvp, top_eigenvalue
from updatescope.locallinear.params import (
    ParamLayout,
    flat_grad,
    flat_params,
    set_flat_params,
    swapped_params,
)
from updatescope.locallinear.rank import RankStats, effective_rank, gaussian_like, singular_values
from updatescope.locallinear.search import (
    SearchResult,
    best_of_n,
    candidate_direction,
    candidate_seed,
    expected_max_normal,
)
from updatescope.locallinear.subspaces import (
    gradient_plane,
    gradient_stack,
    orthonormal_basis,
    random_basis,
    restrict,
    top_directions,
)
from updatescope.locallinear.synthetic import TASKS, DigitTasks, ModelConfig, TinyTransformer
from updatescope.locallinear.trajectory import (
    PhaseConfig,
    RecoveryConfig,
    PhaseRecord,
    RecoveryRun,
    record_phase,
    run_recovery,
    train_phase,
)

__all__ = [
    "ParamLayout", "flat_params", "set_flat_params", "flat_grad", "swapped_params",
    "orthonormal_basis", "top_directions", "random_basis", "gradient_stack", "gradient_plane",
    "restrict",
    "capture_fraction", "prefix_capture_curve", "random_subspace_null", "random_walk_prefix_null", "rest_capture_curve",
    "principal_angles", "subspace_overlap", "drift_curve",
    "RankStats", "effective_rank", "singular_values", "gaussian_like",
    "hvp", "make_hvp", "krylov_basis", "top_eigenvalue",
    "SearchResult", "best_of_n", "candidate_direction", "candidate_seed", "expected_max_normal",
    "TASKS", "ModelConfig", "TinyTransformer", "DigitTasks",
    "PhaseConfig", "RecoveryConfig", "RecoveryRun", "PhaseRecord", "train_phase", "record_phase", "run_recovery",
]
