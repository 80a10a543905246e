"""How a corpus is sketched: the settings a user chooses, validated before any model loads.

``SketchOptions`` holds what decides the signature (sketch size, basis seed, maps, token cap,
forward precision, window length) and what only batches the work (the token budget).  Once
the model's head is known, :meth:`SketchOptions.config` turns it into the ``SketchConfig``
that is the signature's compatibility key.
"""

from __future__ import annotations

import operator
from dataclasses import asdict, dataclass
from typing import Any

from updatescope.constants import (
    DEFAULT_SKETCH_DIM,
    DEFAULT_TOKEN_BUDGET,
    DTYPE_NAMES,
    MAP_CHOICES,
    check_seed,
    check_sketch_dim,
)
from updatescope.errors import InputError

__all__ = ["SketchOptions"]


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    try:
        ok = not isinstance(value, bool) and operator.index(value) >= minimum
    except TypeError:
        ok = False
    if not ok:
        raise InputError(f"{name} must be an integer of at least {minimum}, got {value!r}")
    return operator.index(value)


@dataclass(frozen=True)
class SketchOptions:
    """Settings of one sketching run.

    - ``sketch_dim``, ``seed``, ``act_map``, ``error_map``: the random basis (see ``SketchConfig``);
    - ``max_tokens``: stop after this many counted next-token targets, in document order
      (None: all);
    - ``token_budget``: padded tokens per forward pass; it only batches (any budget counts
      the same targets with the same contexts);
    - ``dtype``: None runs the model as loaded; "bfloat16"/"float16" run the forward under
      autocast (the sketch still accumulates in float64);
    - ``chunk_len``: window for long documents (None: the model's context, at most 1,024 tokens).
    """

    sketch_dim: int = DEFAULT_SKETCH_DIM
    seed: int = 0
    act_map: str = "auto"
    error_map: str = "auto"
    max_tokens: int | None = None
    token_budget: int = DEFAULT_TOKEN_BUDGET
    dtype: str | None = None
    chunk_len: int | None = None

    def __post_init__(self) -> None:
        check_sketch_dim(self.sketch_dim)
        check_seed(self.seed)
        for name in ("act_map", "error_map"):
            if getattr(self, name) not in MAP_CHOICES:
                raise InputError(f"{name} must be one of {', '.join(MAP_CHOICES)}, got {getattr(self, name)!r}")
        if self.max_tokens is not None:
            object.__setattr__(self, "max_tokens", _positive_int("max_tokens", self.max_tokens))
        object.__setattr__(self, "token_budget", _positive_int("token_budget", self.token_budget))
        if self.chunk_len is not None:
            object.__setattr__(self, "chunk_len", _positive_int("chunk_len", self.chunk_len, 2))
        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise InputError(f"dtype must be one of {', '.join(sorted(set(DTYPE_NAMES.values())))}, got {self.dtype!r}")

    def config(self, act_dim: int, out_dim: int, *, fingerprint: str = "", head_bias: bool = False) -> Any:
        """The ``SketchConfig`` of a head (K = out_dim, d = act_dim) under these options."""
        from updatescope.sketch.config import SketchConfig

        return SketchConfig(
            act_dim, out_dim, self.sketch_dim, self.seed, self.act_map, self.error_map, fingerprint, head_bias
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
