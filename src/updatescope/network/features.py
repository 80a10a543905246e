"""Random features of linear-layer gradients, per token and per sequence, on the head's maps.

A linear layer y = W a (W ∈ R^{k×d}) has, per token, the rank-one gradient
g = vec(e aᵀ) = a ⊗ e with e = ∂L/∂y; a weight shared over positions t has, per sequence,
g = Σ_t a_t ⊗ e_t.  The head sketch's Random Maclaurin map for the Fisher kernel (g·g')² is
q_j(g) = (u_j·g)(v_j·g) with u_j = r_j ⊗ s_j, v_j = r'_j ⊗ s'_j, where (r_j, r'_j) are the two
factors of the activation map and (s_j, s'_j) those of the error map (``sketch.maps``).  The
Kronecker structure makes the projections cheap:

    per token:     u_j·g = (r_j·a)(s_j·e)
    per sequence:  u_j·g = Σ_t (r_j·a_t)(s_j·e_t)        (a sum over positions of products)

and likewise for v_j.  Unbiased for both: E[u_j u_jᵀ] = E[r rᵀ] ⊗ E[s sᵀ] = I because r and s
are independent with identity second moment, and u_j, v_j are independent, so
E[(u_j·g)(v_j·g)(u_j·g')(v_j·g')] = (gᵀ E[u uᵀ] g')(gᵀ E[v vᵀ] g') = (g·g')².  The per-token
case is the head sketch's joint feature q^a_j(a) q^e_j(e) exactly.

Several blocks: block b gets its own basis (a seed derived from the layer name), so the
concatenated gradient (g_1, …, g_L) has projections U_j = Σ_b u_bj·g_b, V_j = Σ_b v_bj·g_b
with independent zero-mean u_b across blocks: E[U U'] = Σ_b g_b·g'_b = g·g', and
φ_j = U_j V_j / √m is an unbiased feature of the full-network kernel (g·g')².
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import Tensor

from updatescope.errors import InputError
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.maps import QuadraticMap, build_maps

__all__ = ["layer_config", "layer_maps", "layer_seed", "linear_projections"]

_CHUNK_ELEMS = 1 << 21  # token rows per projection step: (rows, m) temporaries stay ~8 MB


def layer_seed(seed: int, name: str) -> int:
    """The basis seed of layer ``name`` under the network seed: a hash, so it depends on the
    layer's name only (not on which other layers are sketched) and differs between layers."""
    h = hashlib.sha256(f"updatescope.network:{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 62) - 1)


def layer_config(
    name: str, act_dim: int, out_dim: int, sketch_dim: int, seed: int, act_map: str = "auto", error_map: str = "auto"
) -> SketchConfig:
    """The head-sketch config (and so the random maps) of one layer."""
    if out_dim < 2:
        raise InputError(f"layer {name!r}: out_dim must be at least 2, got {out_dim}")
    return SketchConfig(act_dim, out_dim, sketch_dim, layer_seed(seed, name), act_map, error_map)


def layer_maps(cfg: SketchConfig, device: torch.device | str = "cpu") -> tuple[QuadraticMap, QuadraticMap]:
    """The (activation, error) maps of a layer: the head sketch's maps, regenerated from the
    config's seed on one CPU generator (same basis on every device), then moved to ``device``."""
    if "countsketch" in (cfg.act_map, cfg.error_map):
        raise InputError("layer sketches need two-factor maps (dense, srht, fold, spread, stack), not countsketch")
    a, e = build_maps(cfg.act_dim, cfg.out_dim, cfg.sketch_dim, cfg.seed, cfg.act_map, cfg.error_map)
    return a.to(device), e.to(device)


def linear_projections(
    cfg: SketchConfig, acts: Tensor, grads: Tensor, maps: tuple[QuadraticMap, QuadraticMap] | None = None
) -> tuple[Tensor, Tensor]:
    """(u_j·g, v_j·g) for each sample's layer gradient g, unscaled.

    per token:    acts (n, d), grads (n, k)         -> two (n, m)
    per sequence: acts (n, T, d), grads (n, T, k)   -> two (n, m), summed over positions
    Computed in the inputs' dtype (float64 in, float64 out); zero rows (padding) add nothing.
    The map kinds must have two factors (dense, srht, fold, spread, stack; not countsketch).  ``maps`` from
    ``layer_maps(cfg)`` (pass them when calling repeatedly; built on the fly otherwise).
    """
    seq = acts.ndim == 3
    if not seq:
        acts, grads = acts.unsqueeze(1), grads.unsqueeze(1)
    n, t, d = acts.shape
    k = grads.shape[-1]
    if d != cfg.act_dim or k != cfg.out_dim or grads.shape[:2] != (n, t):
        raise InputError(
            f"layer inputs must be (n[, T], {cfg.act_dim}) and (n[, T], {cfg.out_dim}), "
            f"got {tuple(acts.shape)} and {tuple(grads.shape)}"
        )
    amap, emap = layer_maps(cfg, acts.device) if maps is None else maps
    m = cfg.sketch_dim
    pu = acts.new_zeros(n, m)
    pv = acts.new_zeros(n, m)
    rows = max(1, _CHUNK_ELEMS // (4 * m * t))  # samples per step (each has t token rows)
    for i in range(0, n, rows):
        a = acts[i : i + rows].reshape(-1, d)
        e = grads[i : i + rows].reshape(-1, k)
        ra, rb = amap.factors(a)
        sa, sb = emap.factors(e)
        r = a.shape[0] // t
        pu[i : i + r] = (ra * sa).view(r, t, m).sum(1)
        pv[i : i + r] = (rb * sb).view(r, t, m).sum(1)
    return pu, pv


def joint_features(pu: Tensor, pv: Tensor) -> Tensor:
    """φ = (u·g)(v·g)/√m from the projections.  (n, m), (n, m) -> (n, m);  E[φ·φ'] = (g·g')²."""
    return pu * pv * (1.0 / math.sqrt(pu.shape[-1]))


def check_factored(acts: Tensor, grads: Tensor, seq: bool, name: str) -> None:
    want = 3 if seq else 2
    if acts.ndim != want or grads.ndim != want:
        kind = "(n, T, d) and (n, T, k) per sequence" if seq else "(n, d) and (n, k) per token"
        raise InputError(f"layer {name!r}: expected {kind}, got {tuple(acts.shape)} and {tuple(grads.shape)}")
    if torch.is_complex(acts) or torch.is_complex(grads):
        raise InputError(f"layer {name!r}: complex inputs are not supported")
