"""The steering vector: one direction per decoder layer plus the record of how it was made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from ..errors import InputError
from .positions import Position, check_position

__all__ = ["SteeringVector", "NORMALISATIONS"]

#: ``unit``: every layer's vector has norm 1 (scale is then in hidden-state units);
#: ``none``: raw vectors as computed.
NORMALISATIONS = ("none", "unit")


@dataclass(frozen=True, eq=False)
class SteeringVector:
    """Directions in the residual stream, one row per decoder layer.

    ``vectors`` is (n_layers, d); row i belongs to decoder layer ``layers[i]`` and is added at
    that layer's *output*.  ``position`` is the rule used to read activations when the vector
    was built (it does not restrict where it is injected).  ``model_fingerprint`` ties the
    vector to one model (see ``io.model_fingerprint``); ``norms`` keeps the raw per-layer norms
    when the vector was normalised, so the original can be recovered.
    """

    vectors: Tensor
    layers: tuple[int, ...]
    position: Position = "last"
    method: str = "caa"
    model_fingerprint: str | None = None
    normalisation: str = "none"
    norms: tuple[float, ...] | None = None
    provenance: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v = self.vectors
        if not isinstance(v, Tensor) or v.ndim != 2 or v.shape[0] == 0 or v.shape[1] == 0:
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise InputError(f"steering vectors must be a (n_layers, d) tensor, got {shape}")
        if not torch.is_floating_point(v) or not bool(torch.isfinite(v).all()):
            raise InputError("steering vectors must be finite floating-point values")
        object.__setattr__(self, "layers", tuple(int(x) for x in self.layers))
        if len(self.layers) != v.shape[0]:
            raise InputError(f"{v.shape[0]} vectors but {len(self.layers)} layer indices")
        if len(set(self.layers)) != len(self.layers) or min(self.layers) < 0:
            raise InputError(f"layer indices must be distinct and >= 0, got {list(self.layers)}")
        check_position(self.position)
        if self.normalisation not in NORMALISATIONS:
            raise InputError(f"normalisation must be one of {NORMALISATIONS}, got {self.normalisation!r}")
        if self.norms is not None and len(self.norms) != len(self.layers):
            raise InputError(f"{len(self.norms)} norms for {len(self.layers)} layers")
        object.__setattr__(self, "provenance", {str(k): str(x) for k, x in self.provenance.items()})

    @property
    def dim(self) -> int:
        """Hidden size d."""
        return int(self.vectors.shape[1])

    def for_layer(self, layer: int) -> Tensor:
        """The (d,) vector of decoder layer ``layer``."""
        if layer not in self.layers:
            raise InputError(f"no steering vector for layer {layer}; this one has layers {list(self.layers)}")
        return self.vectors[self.layers.index(layer)]

    def as_dict(self) -> dict[int, Tensor]:
        """{layer: (d,) vector}."""
        return {layer: self.vectors[i] for i, layer in enumerate(self.layers)}

    def select(self, layers: int | Sequence[int]) -> SteeringVector:
        """The same vector restricted to some of its layers."""
        keep = [layers] if isinstance(layers, int) else list(layers)
        rows = torch.stack([self.for_layer(layer) for layer in keep])
        norms = None if self.norms is None else tuple(self.norms[self.layers.index(x)] for x in keep)
        return replace(self, vectors=rows, layers=tuple(keep), norms=norms)

    def normalised(self) -> SteeringVector:
        """Each layer's vector divided by its norm; the raw norms are kept in ``norms``."""
        if self.normalisation == "unit":
            return self
        n = self.vectors.double().norm(dim=1)
        if bool((n == 0).any()):
            raise InputError("cannot normalise a steering vector with a zero layer")
        return replace(
            self,
            vectors=(self.vectors.double() / n[:, None]).to(self.vectors.dtype),
            normalisation="unit",
            norms=tuple(float(x) for x in n),
        )

    def allclose(self, other: SteeringVector, rtol: float = 1e-6, atol: float = 0.0) -> bool:
        """Same metadata and numerically close vectors (dataclass == would compare tensors)."""
        meta = ("layers", "position", "method", "model_fingerprint", "normalisation", "provenance")
        if any(getattr(self, k) != getattr(other, k) for k in meta):
            return False
        if self.vectors.shape != other.vectors.shape:
            return False
        return bool(torch.allclose(self.vectors.double().cpu(), other.vectors.double().cpu(), rtol=rtol, atol=atol))
