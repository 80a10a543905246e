"""FisherSketch: a streaming, mergeable sketch of a task's head Fisher geometry.

Per sample x = (a, e) with head input a ∈ R^d and error e = softmax(Wa) − onehot(y) ∈ R^K,
the features are (factored Random Maclaurin, see ``maps``)

    φ_j = q^a_j(a) q^e_j(e) / √m,   ψ_j = q^a_j(a) / √m,   χ_j = q^e_j(e) / √m,

so that E[φ(x)·φ(x')] = (a·a')²(e·e')² (the Fisher kernel), E[ψ·ψ'] = (a·a')² and
E[χ·χ'] = (e·e')².  The Fisher never appears: d·K or K×K objects are never formed.
The state is float64 sums of these features (per half, see ``signature``), so merging is
addition, the empty sketch is the identity, and batching cannot change the answer beyond
float rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.devices import resolve_device
from updatescope.errors import InputError
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.inputs import (
    as_tensor,
    check_2d,
    check_finite,
    compute_dtype,
    error_dtype,
    kept_rows,
    softmax_minus_onehot,
)
from updatescope.sketch.maps import QuadraticMap, build_maps
from updatescope.sketch.signature import N_BLOCKS, Signature
from updatescope.sketch.workspace import scratch, temp

_BASIS_CACHE: dict[tuple, tuple[QuadraticMap, QuadraticMap]] = {}
_ACC_ROWS = 256  # rows per accumulation step: two (256, m) projections, 4 MB each at m = 4096
# Logit rows turned into error vectors per step of update_logits: the softmax output of a
# step (rows × K floats, ≤ 16 MB) is still in the last-level cache when the error map reads
# it, instead of a full (n, K) error matrix making a round trip through memory.
_LOGIT_ELEMS = 1 << 22


def sketch_basis(cfg: SketchConfig, device: torch.device) -> tuple[QuadraticMap, QuadraticMap]:
    """The random maps for a config, regenerated from the seed (cached per device)."""
    key = (cfg.map_act_dim, cfg.out_dim, cfg.sketch_dim, cfg.seed, cfg.act_map, cfg.error_map, str(device))
    if key not in _BASIS_CACHE:
        if len(_BASIS_CACHE) >= 8:
            _BASIS_CACHE.pop(next(iter(_BASIS_CACHE)))
        a, e = build_maps(cfg.map_act_dim, cfg.out_dim, cfg.sketch_dim, cfg.seed, cfg.act_map, cfg.error_map)
        _BASIS_CACHE[key] = (a.to(device), e.to(device))
    return _BASIS_CACHE[key]


def _halves(r: int, first: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """(2, r) 0/1 weights sending row i of a chunk to half (first + i) mod 2."""
    w = torch.zeros(2, r, dtype=dtype, device=device)
    w[first, 0::2] = 1
    w[1 - first, 1::2] = 1
    return w


def _row_chunks(kept: Tensor, n: int, rows: int) -> list[slice | Tensor]:
    """Kept row indices (sorted) -> chunks of at most ``rows`` rows, in stream order.

    Runs of consecutive kept rows (a causal LM keeps all but the last position of each
    sequence) become slices, so the logits are read in place; when runs are short (sparse
    targets) index chunks are gathered instead, to keep the chunks few and full.
    """
    if kept.numel() == n:
        return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]
    ks = kept.cpu()
    breaks = (torch.nonzero(ks[1:] - ks[:-1] != 1).squeeze(1) + 1).tolist()
    starts = [0] + breaks
    if len(starts) * 8 > kept.numel():  # average run shorter than 8 rows
        return [kept[i : i + rows] for i in range(0, kept.numel(), rows)]
    out: list[slice | Tensor] = []
    for b, e in zip(starts, breaks + [kept.numel()]):
        first, last = int(ks[b]), int(ks[e - 1]) + 1
        out.extend(slice(i, min(i + rows, last)) for i in range(first, last, rows))
    return out


def error_chunks(
    acts: Tensor, logits: Tensor, labels: Tensor, kept: Tensor, device: torch.device
) -> Iterator[tuple[Tensor, Tensor]]:
    """``(acts, softmax(logits) − onehot(labels))`` of the ``kept`` rows (sorted indices), one
    cache-sized chunk at a time, in row order.

    Runs of kept rows are read in place (scattered rows are gathered a chunk at a time), and
    each chunk's errors are written to this thread's reused scratch buffer on ``device``: no
    (n, K) copy of the logits and no fresh (n, K) allocation per batch.  A chunk's errors are
    overwritten by the next chunk, so use them before asking for it."""
    rows = max(1, min(_ACC_ROWS, _LOGIT_ELEMS // logits.shape[1]))
    for sel in _row_chunks(kept, logits.shape[0], rows):
        if isinstance(sel, slice):  # a run of kept rows: views, no copy
            zc, yc, ac = logits[sel], labels[sel], acts[sel]
        else:  # scattered kept rows: gather one cache-sized chunk at a time
            zc, yc, ac = logits[sel], labels[sel], acts[sel.to(acts.device)]
        zc = zc.to(device)
        buf = scratch("logits.err", tuple(zc.shape), error_dtype(zc.dtype), device)
        yield ac, softmax_minus_onehot(zc, yc.to(device), out=buf)


def with_bias(cfg: SketchConfig, acts: Tensor) -> Tensor:
    """The activation the map reads: (n, d) -> (n, d + 1) with a column of ones when the
    head has a bias (``SketchConfig.head_bias``), else ``acts`` itself."""
    if not cfg.head_bias:
        return acts
    return torch.cat((acts, acts.new_ones(acts.shape[0], 1)), dim=1)


def features(cfg: SketchConfig, acts: Tensor, errors: Tensor, tag: str | None = None) -> Tensor:
    """The three feature vectors of each sample under cfg's basis.  (n,d),(n,K) -> (n, 3, m)

    Kinds in order: joint φ, activation-only ψ, error-only χ (see module docstring).
    With ``tag``, the maps' temporaries and the result live in the thread's workspace under
    that tag (no fresh allocation per call; the result is valid until the next call with the
    same tag); the values are the same either way.
    """
    amap, emap = sketch_basis(cfg, acts.device)
    qa = amap(with_bias(cfg, acts), None if tag is None else f"{tag}.act")
    qe = emap(errors, None if tag is None else f"{tag}.err")
    scale = 1.0 / math.sqrt(cfg.sketch_dim)
    out = temp(tag, "features", (qa.shape[0], 3, qa.shape[1]), qa)
    torch.mul(qa, qe, out=out[:, 0])
    out[:, 1].copy_(qa)
    out[:, 2].copy_(qe)
    return out.mul_(scale)


class FisherSketch:
    """Streaming sketch of head Fisher geometry (update in place, merge, signature).

    >>> sk = FisherSketch(act_dim=576, out_dim=49152, sketch_dim=4096, seed=0)
    >>> sk.update_logits(acts, logits, labels)   # or sk.update(acts, errors)
    >>> sig = sk.signature()
    """

    def __init__(
        self,
        act_dim: int | None = None,
        out_dim: int | None = None,
        sketch_dim: int = DEFAULT_SKETCH_DIM,
        seed: int = 0,
        *,
        config: SketchConfig | None = None,
        act_map: str = "auto",
        error_map: str = "auto",
        fingerprint: str = "",
        head_bias: bool = False,
        device: torch.device | str = "cpu",
        meta: Mapping[str, str] | None = None,
    ) -> None:
        if config is None:
            if act_dim is None or out_dim is None:
                raise InputError("FisherSketch needs act_dim and out_dim (or config=)")
            config = SketchConfig(act_dim, out_dim, sketch_dim, seed, act_map, error_map, fingerprint, head_bias)
        self.config = config
        self.device = resolve_device(device)
        m = config.sketch_dim
        self._sums = torch.zeros(2, 3, m, dtype=torch.float64, device=self.device)
        self._diag = torch.zeros(2, 3, N_BLOCKS, dtype=torch.float64, device=self.device)
        self._counts = torch.zeros(2, dtype=torch.int64)
        self._batches = 0
        self.meta: dict[str, str] = dict(meta or {})

    # ------------------------------------------------------------------ streaming
    @property
    def count(self) -> int:
        return int(self._counts.sum())

    def update(self, acts: Any, errors: Any) -> FisherSketch:
        """Add samples.  acts (n, d), errors (n, K); torch or numpy.  Returns self.

        A bad batch leaves the sketch unchanged: shapes are checked first, and the batch is
        summed into its own buffers, which are added only if they are finite.  Every map
        writes each feature as a ±1 combination of all input coordinates, so a NaN or inf
        anywhere in the errors reaches the sums; only then is the (n, K) error matrix
        scanned to name the first bad row.  This saves a full pass over the errors, the
        largest tensor the sketch ever reads.
        """
        batch = self._batches
        a = as_tensor(acts, "activations")
        e = as_tensor(errors, "errors")
        check_2d(a, "activations", self.config.act_dim, "act_dim")
        check_2d(e, "errors", self.config.out_dim, "out_dim")
        if a.shape[0] != e.shape[0]:
            raise InputError(f"activations and errors have different numbers of rows: {a.shape[0]} vs {e.shape[0]}")
        check_finite(a, "activations", batch)
        if a.shape[0] == 0:
            self._batches += 1
            return self
        dt = compute_dtype(a, e)
        part = self._new_part()
        self._accumulate(part, a.to(self.device, dt), e.to(self.device, dt))
        self._commit(part, batch, checks=((e, "errors"),))
        return self

    def update_logits(self, acts: Any, logits: Any, labels: Any) -> FisherSketch:
        """Add samples from logits: errors = softmax(logits) − onehot(labels); label −100 ignored.

        acts (n, d), logits (n, K), labels (n,).  A batch whose labels are all −100 is a no-op.
        """
        batch = self._batches
        a = as_tensor(acts, "activations")
        z = as_tensor(logits, "logits")
        y = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
        check_2d(a, "activations", self.config.act_dim, "act_dim")
        check_2d(z, "logits", self.config.out_dim, "out_dim")
        if a.shape[0] != z.shape[0]:
            raise InputError(f"activations and logits have different numbers of rows: {a.shape[0]} vs {z.shape[0]}")
        check_finite(a, "activations", batch)
        check_finite(z, "logits", batch)
        y, kept = kept_rows(y.to(z.device), self.config.out_dim, z.shape[0], batch=batch)
        if kept.numel() == 0:
            self._batches += 1
            return self
        dt = compute_dtype(a, z)
        part = self._new_part()
        for ac, e in error_chunks(a, z, y, kept, self.device):
            self._accumulate(part, ac.to(self.device, dt), e.to(dt))
        self._commit(part, batch, checks=())  # logits were checked above: only overflow is left
        return self

    def _new_part(self) -> tuple[Tensor, Tensor, Tensor]:
        """Empty per-batch buffers shaped like (_sums, _diag, _counts)."""
        return torch.zeros_like(self._sums), torch.zeros_like(self._diag), torch.zeros_like(self._counts)

    def _commit(self, part: tuple[Tensor, Tensor, Tensor], batch: int, checks: tuple[tuple[Tensor, str], ...]) -> None:
        """Add a batch's sums, or raise naming the input that made them non-finite."""
        sums, diag, counts = part
        if not (bool(torch.isfinite(sums).all()) and bool(torch.isfinite(diag).all())):
            for t, name in checks:
                check_finite(t, name, batch)  # raises, naming the first bad row
            raise InputError(
                f"batch {batch}: the sketch's features overflow (input entries too large for the "
                "projection dtype); nothing was added"
            )
        self._sums += sums
        self._diag += diag
        self._counts += counts
        self._batches += 1

    def _accumulate(self, part: tuple[Tensor, Tensor, Tensor], a: Tensor, e: Tensor) -> None:
        # Row chunks bound the projections (_ACC_ROWS × m each) whatever the batch.  Within a
        # chunk, the sums over rows (per half) and the sums of squares are three small GEMMs
        # each, (2, r) @ (r, m), in the projections' dtype (float32 for float32 input: partial
        # sums of ≤ _ACC_ROWS terms, relative rounding ~1e-7·√r, the same order as the
        # projections' own); each chunk's result is added to the float64 state.  This avoids
        # writing a (r, 3, m) float64 block and reading it back three times, which cost more
        # than both random maps at small out_dim.
        sums, diag, counts = part
        m = self.config.sketch_dim
        amap, emap = sketch_basis(self.config, a.device)
        for i in range(0, a.shape[0], _ACC_ROWS):
            # projections and their temporaries live in the thread's workspace (see ``workspace``)
            qa = amap(with_bias(self.config, a[i : i + _ACC_ROWS]), tag="act")
            qe = emap(e[i : i + _ACC_ROWS], tag="err")
            r = qa.shape[0]
            # Sample i of the whole stream goes to half (count + i) mod 2.
            first = int(self._counts.sum() + counts.sum()) % 2
            w = _halves(r, first, qa.dtype, qa.device)  # (2, r) of 0/1
            phi = torch.mul(qa, qe, out=scratch("acc.phi", tuple(qa.shape), qa.dtype, qa.device))  # φ·√m
            lin = torch.stack((w @ phi, w @ qa, w @ qe), dim=1)  # (2, 3, m)
            sq = torch.stack((w @ phi.square_(), w @ qa.square_(), w @ qe.square_()), dim=1)
            sums += lin.to(torch.float64).mul_(1.0 / math.sqrt(m))  # features carry 1/√m each
            diag += sq.to(torch.float64).view(2, 3, N_BLOCKS, m // N_BLOCKS).sum(-1).mul_(1.0 / m)
            counts[first] += (r + 1) // 2
            counts[1 - first] += r // 2

    # ------------------------------------------------------------------ combining
    def merge(self, other: FisherSketch) -> FisherSketch:
        """A new sketch equal to streaming self's samples, then other's.  Inputs untouched."""
        if not isinstance(other, FisherSketch):
            raise InputError(f"can only merge a FisherSketch, got {type(other).__name__}")
        self.config.check_compatible(other.config)
        out = FisherSketch(config=self.config, device=self.device, meta=self.meta)
        # other's local sample i is global sample count+i: its halves swap when count is odd.
        swap = [1, 0] if self.count % 2 else [0, 1]
        out._sums = self._sums + other._sums.to(self.device)[swap]
        out._diag = self._diag + other._diag.to(self.device)[swap]
        out._counts = self._counts + other._counts[swap]
        out._batches = self._batches + other._batches
        return out

    def signature(self, **meta: str) -> Signature:
        """Frozen snapshot of the state (copies; later updates do not change it)."""
        if self.count == 0:
            raise InputError("the sketch is empty: no samples were added")
        return Signature(
            self.config,
            self._sums.detach().cpu().clone(),
            self._diag.detach().cpu().clone(),
            self._counts.clone(),
            {**self.meta, **{k: str(v) for k, v in meta.items()}},
        )

    @classmethod
    def from_signature(cls, sig: Signature, device: torch.device | str = "cpu") -> FisherSketch:
        """Resume streaming from a saved signature."""
        sk = cls(config=sig.config, device=device, meta=dict(sig.meta))
        sk._sums = sig.sums.clone().to(sk.device)
        sk._diag = sig.diag.clone().to(sk.device)
        sk._counts = sig.counts.clone()
        return sk

    def state_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "sums": self._sums.clone(),
            "diag": self._diag.clone(),
            "counts": self._counts.clone(),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], device: torch.device | str = "cpu") -> FisherSketch:
        """The sketch of a ``state_dict()`` (tensors cloned), on ``device``."""
        sk = cls(config=SketchConfig.from_dict(state["config"]), meta=state.get("meta"), device=device)
        sums, diag = state["sums"], state["diag"]
        if tuple(sums.shape) != tuple(sk._sums.shape) or tuple(diag.shape) != tuple(sk._diag.shape):
            raise InputError(
                f"sketch state has shapes {tuple(sums.shape)}/{tuple(diag.shape)}, the config needs "
                f"{tuple(sk._sums.shape)}/{tuple(sk._diag.shape)}"
            )
        sk._sums = sums.clone().to(sk.device, torch.float64)
        sk._diag = diag.clone().to(sk.device, torch.float64)
        sk._counts = state["counts"].clone().to(torch.int64)
        return sk

    def __repr__(self) -> str:
        c = self.config
        return (
            f"FisherSketch(act_dim={c.act_dim}, out_dim={c.out_dim}, sketch_dim={c.sketch_dim}, "
            f"seed={c.seed}, maps={c.act_map}/{c.error_map}, count={self.count})"
        )
