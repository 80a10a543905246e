"""NetworkSketch: a mergeable float64 sketch of per-layer and full-network Fisher geometry.

For layers b = 1..L (``nn.Linear`` weights) every sample's projections (u_b·g_b, v_b·g_b)
come from ``features.linear_projections``; the sketch keeps, per half of the stream, the
float64 sums of L + 1 feature vectors

    φ_b = (u_b·g_b)(v_b·g_b)/√m                 E[φ_b·φ_b'] = (g_b·g_b')²   (block b)
    φ   = (Σ_b u_b·g_b)(Σ_b v_b·g_b)/√m         E[φ·φ']     = (g·g')²       (whole network)

and Σ_i ‖f_i‖² per feature block (as the head sketch's ``diag``).  Estimators, for tasks S, T:

    <F_S,bb, F_T,bb> ≈ μ_b^S·μ_b^T,       μ_b = (1/n) Σ_i φ_b(x_i)
    ‖F_bb‖²          ≈ (‖Σ_i φ_b‖² − Σ_i ‖φ_b(x_i)‖²) / (n(n − 1))

and the same with φ for <F_S, F_T> and ‖F‖².  The cross term is unbiased because S and T
use the same basis and are independent samples; the norm is unbiased because removing the
self-pairs leaves Σ_{i≠i'} φ_i·φ_i', whose terms are each unbiased for k(x_i, x_i') (as the
head sketch's ``Signature.sq_norm``).  The off-diagonal sums follow as full − Σ_b diagonal,
also unbiased; the ratios (alignments) are consistent, not unbiased.

Modes.  ``token`` (default): a sample is a labelled token and the layer gradient at it is
a_t ⊗ e_t, with e_t = ∂L/∂y_t from one backward pass of the summed loss.  That is the unit
of the head sketch (FisherSketch counts tokens), so layer and head sketches estimate Fishers
over the same samples and can be put in one decomposition, and T-fold more samples give
lower variance.  For internal layers e_t also carries later tokens' losses (one backward
pass cannot separate them), so a token's gradient is its position's contribution to the
sequence gradient.  ``sequence``: a sample is a sequence and g = Σ_t a_t ⊗ e_t, the exact
per-example gradient of a shared weight: the Fisher an SGD step on whole sequences sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.network.decompose import NetworkAlignment, decompose
from updatescope.network.features import check_factored, joint_features, layer_config, layer_maps, linear_projections
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.inputs import as_tensor, check_finite
from updatescope.sketch.signature import N_BLOCKS

__all__ = ["NetworkConfig", "NetworkSketch", "network_alignment"]

MODES = ("token", "sequence")
_CHUNK_ELEMS = 1 << 22  # feature elements per update step (32 MiB in float64)


@dataclass(frozen=True)
class NetworkConfig:
    """The compatibility key of a network sketch.

    layers: ((name, act_dim d, out_dim k), ...) in block order; sketch_dim m (multiple of 16);
    seed: network seed (layer b's basis seed is ``layer_seed(seed, name)``); mode: "token"
    (default) or "sequence"; act_map / error_map: projection kinds as in SketchConfig.
    """

    layers: tuple[tuple[str, int, int], ...]
    sketch_dim: int = DEFAULT_SKETCH_DIM
    seed: int = 0
    mode: str = "token"
    act_map: str = "auto"
    error_map: str = "auto"

    def __post_init__(self) -> None:
        layers = tuple((str(n), int(d), int(k)) for n, d, k in self.layers)
        if not layers:
            raise InputError("a network sketch needs at least one layer")
        names = [n for n, _, _ in layers]
        if len(set(names)) != len(names):
            raise InputError(f"layer names must be unique, got {names}")
        object.__setattr__(self, "layers", layers)
        if self.mode not in MODES:
            raise InputError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for cfg in self.layer_configs():  # validates sizes, seed and map kinds
            if "countsketch" in (cfg.act_map, cfg.error_map):
                raise InputError(
                    "layer sketches need two-factor maps (dense, srht, fold, spread, stack), not countsketch"
                )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _, _ in self.layers)

    def layer_configs(self) -> list[SketchConfig]:
        return [
            layer_config(n, d, k, self.sketch_dim, self.seed, self.act_map, self.error_map) for n, d, k in self.layers
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_compatible(self, other: NetworkConfig) -> None:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                raise IncompatibleSignatureError(f.name, a, b)


class NetworkSketch:
    """Streaming per-layer + full-network Fisher sketch (update in place, merge, alignment).

    >>> sk = NetworkSketch(NetworkConfig((("mlp.up", 16, 32), ("lm_head", 16, 256)), sketch_dim=1024))
    >>> sk.update({"mlp.up": (a1, e1), "lm_head": (a2, e2)})   # same n samples in every layer
    """

    def __init__(self, config: NetworkConfig, device: torch.device | str = "cpu") -> None:
        if not isinstance(config, NetworkConfig):
            raise InputError(f"NetworkSketch needs a NetworkConfig, got {type(config).__name__}")
        self.config = config
        self.device = torch.device(device)
        L, m = len(config.layers), config.sketch_dim
        self._cfgs = config.layer_configs()
        self._maps: list[Any] | None = None  # built on first update: regenerated from the seeds, never stored
        self._sums = torch.zeros(2, L + 1, m, dtype=torch.float64, device=self.device)  # blocks..., full
        self._diag = torch.zeros(2, L + 1, N_BLOCKS, dtype=torch.float64, device=self.device)
        self._counts = torch.zeros(2, dtype=torch.int64)
        self._batches = 0
        self.meta: dict[str, str] = {}  # free-form strings saved with the signature (model, data)

    @property
    def count(self) -> int:
        return int(self._counts.sum())

    def update(self, layers: Mapping[str, tuple[Any, Any]]) -> NetworkSketch:
        """Add n samples.  layers: {name: (acts, grads)} for every configured layer, with
        (n, d), (n, k) per token or (n, T, d), (n, T, k) per sequence.  Returns self.
        A bad batch leaves the sketch unchanged."""
        c = self.config
        missing = [n for n in c.names if n not in layers]
        extra = [n for n in layers if n not in c.names]
        if missing or extra:
            raise InputError(f"update needs exactly the configured layers; missing {missing}, unexpected {extra}")
        seq = c.mode == "sequence"
        data = []
        for name in c.names:
            a = as_tensor(layers[name][0], f"{name} acts")
            e = as_tensor(layers[name][1], f"{name} grads")
            check_factored(a, e, seq, name)
            check_finite(a.reshape(a.shape[0], -1), f"{name} acts", self._batches)
            check_finite(e.reshape(e.shape[0], -1), f"{name} grads", self._batches)
            data.append((a, e))
        ns = {a.shape[0] for a, _ in data}
        if len(ns) != 1:
            raise InputError(f"layers have different numbers of samples in one update: {sorted(ns)}")
        n = ns.pop()
        if n == 0:
            self._batches += 1
            return self
        dt = torch.float64 if all(a.dtype == e.dtype == torch.float64 for a, e in data) else torch.float32
        # Row chunks bound the temporaries (rows × (L + 1) × m features) whatever the batch; the
        # batch is summed into its own buffers and added only if finite (a bad batch adds nothing).
        L, m = len(self._cfgs), c.sketch_dim
        sums, diag, counts = torch.zeros_like(self._sums), torch.zeros_like(self._diag), torch.zeros_like(self._counts)
        t = max(a.shape[1] if seq else 1 for a, _ in data)
        rows = max(1, _CHUNK_ELEMS // ((L + 3) * m * t))
        if self._maps is None:
            self._maps = [layer_maps(cfg, self.device) for cfg in self._cfgs]
        for i in range(0, n, rows):
            U = V = None
            feats = []
            for cfg, maps, (a, e) in zip(self._cfgs, self._maps, data):
                pu, pv = linear_projections(
                    cfg, a[i : i + rows].to(self.device, dt), e[i : i + rows].to(self.device, dt), maps
                )
                U, V = (pu, pv) if U is None else (U + pu, V + pv)
                feats.append(joint_features(pu, pv))
            feats.append(joint_features(U, V))
            f = torch.stack(feats, 1).double()  # (r, L + 1, m)
            first = int(self._counts.sum() + counts.sum()) % 2  # stream sample j goes to half j mod 2
            half = (torch.arange(f.shape[0], device=self.device) + first) % 2
            for h in (0, 1):
                fh = f[half == h]
                sums[h] += fh.sum(0)
                diag[h] += fh.square().view(fh.shape[0], L + 1, N_BLOCKS, m // N_BLOCKS).sum((0, 3))
                counts[h] += fh.shape[0]
        if not (bool(torch.isfinite(sums).all()) and bool(torch.isfinite(diag).all())):
            raise InputError(
                f"batch {self._batches}: the features overflow (inputs too large for the "
                "projection dtype); nothing was added"
            )
        self._sums += sums
        self._diag += diag
        self._counts += counts
        self._batches += 1
        return self

    def merge(self, other: NetworkSketch) -> NetworkSketch:
        """A new sketch equal to streaming self's samples, then other's.  Inputs untouched."""
        if not isinstance(other, NetworkSketch):
            raise InputError(f"can only merge a NetworkSketch, got {type(other).__name__}")
        self.config.check_compatible(other.config)
        out = NetworkSketch(self.config, self.device)
        swap = [1, 0] if self.count % 2 else [0, 1]  # other's sample i is global sample count + i
        out._sums = self._sums + other._sums.to(self.device)[swap]
        out._diag = self._diag + other._diag.to(self.device)[swap]
        out._counts = self._counts + other._counts[swap]
        out._batches = self._batches + other._batches
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "sums": self._sums.clone(),
            "diag": self._diag.clone(),
            "counts": self._counts.clone(),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> NetworkSketch:
        cfg = dict(state["config"])
        cfg["layers"] = tuple(tuple(x) for x in cfg["layers"])
        sk = cls(NetworkConfig(**cfg))
        if tuple(state["sums"].shape) != tuple(sk._sums.shape):
            raise InputError(f"state sums have shape {tuple(state['sums'].shape)}, expected {tuple(sk._sums.shape)}")
        sk._sums = state["sums"].clone().to(torch.float64)
        sk._diag = state["diag"].clone().to(torch.float64)
        sk._counts = state["counts"].clone().to(torch.int64)
        return sk

    def terms(self) -> tuple[Tensor, Tensor]:
        """(mean features μ (L + 1, m), unbiased squared norms (L + 1,)), blocks then full."""
        n = self.count
        if n == 0:
            raise InputError("the network sketch is empty: no samples were added")
        s, d = self._sums.sum(0).cpu(), self._diag.sum(0).cpu()
        sq = (
            ((s * s).sum(-1) - d.sum(-1)) / (n * (n - 1))
            if n >= 2
            else torch.full((s.shape[0],), float("nan"), dtype=torch.float64)
        )
        return s / n, sq


_SE_FIELDS = (
    "full",
    "block_diagonal",
    "profile_cosine",
    "offdiag_share_source",
    "offdiag_share_target",
    "offdiag_term",
    "discrepancy",
)


def _terms(s: Tensor, d: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Feature sums s (L + 1, m) and diag d (L + 1, G) -> per feature block g: the mean-feature
    sums (L + 1, G, m/G) kept as sums over features, and Σ_{i≠i'} products (L + 1, G)."""
    g = d.shape[-1]
    mean = (s / n).view(s.shape[0], g, -1)
    pairs = (s * s).view(s.shape[0], g, -1).sum(-1) - d
    return mean, pairs


def _estimate(
    src: tuple[Tensor, Tensor, int], tgt: tuple[Tensor, Tensor, int], names: tuple[str, ...], drop: int | None = None
) -> NetworkAlignment:
    """decompose() on the features, optionally without feature block ``drop`` (jackknife)."""
    (ms, ps), (mt, pt) = _terms(*src), _terms(*tgt)
    cross = (ms * mt).sum(-1)  # (L + 1, G)
    keep = torch.ones(cross.shape[1], dtype=torch.bool)
    if drop is not None:
        keep[drop] = False
    ns, nt = src[2], tgt[2]
    c = cross[:, keep].sum(1)
    qs = ps[:, keep].sum(1) / (ns * (ns - 1)) if ns >= 2 else torch.full_like(c, float("nan"))
    qt = pt[:, keep].sum(1) / (nt * (nt - 1)) if nt >= 2 else torch.full_like(c, float("nan"))
    return decompose(c[:-1], qs[:-1], qt[:-1], c[-1], qs[-1], qt[-1], blocks=names)


def _values(al: NetworkAlignment) -> Tensor:
    return torch.tensor([getattr(al, f) for f in _SE_FIELDS] + list(al.profile), dtype=torch.float64)


def network_alignment(source: NetworkSketch, target: NetworkSketch) -> NetworkAlignment:
    """Estimated full/block-diagonal alignment, profile, profile cosine, off-diagonal shares,
    with standard errors in ``se`` (keys: the scalar fields and ``profile[name]``).

    Plug-in of the unbiased block terms (see module) into ``decompose``; same config required.
    The standard errors follow the head sketch's rule (``sketch.align``): se² = sketch part
    (delete-one-feature-block jackknife, (G−1)/G Σ_g (θ_−g − θ̄)², G−1 dof) + source and target
    sampling parts from the four half-by-half estimates θ_hk (one dof each), times the
    Student-t multiplier t₀.₉₇₅(ν)/z₀.₉₇₅ on the Welch–Satterthwaite ν, so value ± 2·se is a
    ≈95% interval.  ``se_parts``: "sketch", "sampling" (unscaled) and "dof".  A standard error
    is NaN where its sampling part cannot be measured (a stream half with fewer than 2
    samples, or a half whose norm estimate is not positive).
    """
    from updatescope.sketch.align import Z975, t975

    if not isinstance(source, NetworkSketch) or not isinstance(target, NetworkSketch):
        raise InputError("network_alignment() takes two NetworkSketch objects")
    source.config.check_compatible(target.config)
    if source.count == 0 or target.count == 0:
        raise InputError("the network sketch is empty: no samples were added")
    names = source.config.names
    whole = [(sk._sums.sum(0).cpu(), sk._diag.sum(0).cpu(), sk.count) for sk in (source, target)]
    point = _estimate(*whole, names)
    g = N_BLOCKS
    loo = torch.stack([_values(_estimate(*whole, names, drop=b)) for b in range(g)])
    var_sketch = (g - 1) / g * ((loo - loo.mean(0)) ** 2).sum(0)
    th = {}
    for h in (0, 1):
        for k in (0, 1):
            ps = (source._sums[h].cpu(), source._diag[h].cpu(), int(source._counts[h]))
            pt = (target._sums[k].cpu(), target._diag[k].cpu(), int(target._counts[k]))
            if min(ps[2], pt[2]) >= 2:
                th[h, k] = _values(_estimate(ps, pt, names))
    if len(th) == 4:  # θ_hk ≈ θ + f_h + g_k: var(f_0 − f_1) = 4 var_full(f), likewise for g
        d_s = ((th[0, 0] - th[1, 0]) + (th[0, 1] - th[1, 1])) / 2
        d_t = ((th[0, 0] - th[0, 1]) + (th[1, 0] - th[1, 1])) / 2
        var_s, var_t = d_s.square() / 4, d_t.square() / 4
    else:
        var_s = var_t = torch.full_like(var_sketch, float("nan"))
    # as for the head sketch: a sampling part that cannot be measured (a half with fewer than 2
    # samples, or a half-by-half estimate undefined because a half's norm estimate is not
    # positive) leaves the standard error undefined (NaN), never silently the sketch part alone
    var_total = var_sketch + var_s + var_t
    den = var_sketch.square() / max(g - 1, 1) + var_s.square() + var_t.square()
    nu = torch.where(
        den > 0,
        var_total.square() / torch.where(den > 0, den, torch.ones_like(den)),
        torch.full_like(den, float("inf")),
    )
    total = var_total.sqrt() * t975(nu) / Z975
    keys = list(_SE_FIELDS) + [f"profile[{n}]" for n in names]
    return replace(
        point,
        se=dict(zip(keys, total.tolist())),
        se_parts={
            "sketch": dict(zip(keys, var_sketch.sqrt().tolist())),
            "sampling": dict(zip(keys, (var_s + var_t).sqrt().tolist())),
            "dof": dict(zip(keys, nu.tolist())),
        },
    )
