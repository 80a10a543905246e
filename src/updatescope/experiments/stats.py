"""Summary statistics the experiments share (replicate means and standard errors)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["mean_se"]


def mean_se(values: list) -> dict[str, Any]:
    """Mean and standard error over replicates (ddof 1; None with one replicate)."""
    a = np.asarray(values, dtype=float)
    mean = a.mean(0)
    se = a.std(0, ddof=1) / math.sqrt(a.shape[0]) if a.shape[0] > 1 else None
    tolist = lambda x: x.tolist() if isinstance(x, np.ndarray) else (None if x is None else float(x))
    return {"mean": tolist(mean), "se": tolist(se), "n": int(a.shape[0])}
