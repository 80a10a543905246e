"""Principal angles between subspaces, and the drift of a plane along a trajectory.

For orthonormal bases U (p, D) and V (q, D) the cosines of the principal angles are the
singular values of U V^T (p x q).  arccos of a cosine near 1 loses half the digits, so
small angles come from the sines instead: the singular values of the part of V outside
U, V - (V U^T) U (Bjorck & Golub 1973; the same split scipy.linalg.subspace_angles uses).
Memory O((p + q) D); the only dense products are p x q.

overlap(U, V) = ||U V^T||_F^2 / min(p, q) = mean of cos^2 over the min(p, q) angles:
1 when the smaller subspace lies inside the larger one, 0 when they are orthogonal, and
about max(p, q)/D for independent random subspaces of R^D.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from updatescope.errors import InputError

__all__ = ["principal_angles", "subspace_overlap", "drift_curve"]


def _check(u: Tensor, v: Tensor) -> None:
    if u.ndim != 2 or v.ndim != 2 or u.shape[1] != v.shape[1]:
        raise InputError(f"need bases (p, D) and (q, D), got {tuple(u.shape)} and {tuple(v.shape)}")
    if u.shape[0] == 0 or v.shape[0] == 0:
        raise InputError("principal angles need non-empty bases")


def principal_angles(u: Tensor, v: Tensor) -> Tensor:
    """Principal angles (radians, ascending) between span(u) and span(v).

    u (p, D), v (q, D) with orthonormal rows -> (min(p, q),) float64.
    """
    _check(u, v)
    u, v = u.double(), v.double()
    if u.shape[0] < v.shape[0]:
        u, v = v, u  # u is the larger basis; angles are those of v's directions to span(u)
    c = u @ v.T  # (p, q)
    cos = torch.linalg.svdvals(c).clamp(0.0, 1.0)  # descending -> angles ascending
    resid = v - c.T @ u  # (q, D): part of each v-row outside span(u)
    # svdvals of the residual via its q x q Gram (no D x D): sines, ascending angles need
    # them in ascending order.
    gram = resid @ resid.T
    sin = torch.linalg.eigvalsh(gram).clamp_min(0.0).sqrt().clamp(0.0, 1.0)  # ascending
    ang_cos = torch.arccos(cos)
    ang_sin = torch.arcsin(sin)
    # cos^2 >= 1/2 <=> angle <= pi/4: the sine is the accurate one there.
    return torch.where(cos**2 >= 0.5, ang_sin, ang_cos)


def subspace_overlap(u: Tensor, v: Tensor) -> float:
    """Mean squared cosine of the principal angles, in [0, 1].  (p, D), (q, D) -> float."""
    _check(u, v)
    c = u.double() @ v.double().T
    return float((c**2).sum()) / min(u.shape[0], v.shape[0])


def drift_curve(reference: Tensor, planes: Sequence[Tensor]) -> list[float]:
    """Overlap of each plane along a trajectory with the reference plane.  -> len(planes)."""
    return [subspace_overlap(reference, p) for p in planes]
