"""The scratch workspace: maps and the sketch give the same numbers with and without it,
whatever the buffers held before (every element a call reads is written first), across
chunk boundaries and shrinking batches, in and out of inference mode."""

import pytest
import torch

import updatescope as us
import updatescope.sketch.maps as maps
from updatescope.sketch import workspace
from updatescope.sketch.maps import CountSketchMap, DenseMap, FoldMap, FoldSpreadMap, SpreadMap, SRHTMap, StackMap


def _poison() -> None:
    for buf in workspace._local.bufs.values():
        buf.fill_(float("nan"))


@pytest.mark.parametrize(
    "cls,dim,m",
    [
        (DenseMap, 30, 64),
        (SRHTMap, 1000, 64),  # dim not a multiple of A: padded block
        (SRHTMap, 1024, 64),  # fused layout
        (FoldMap, 50, 64),  # no collisions, padded to the (P, Q) view
        (FoldMap, 1000, 64),  # folded blocks plus a partial one
        (SpreadMap, 1000, 64),  # two layouts, partial block and partial run
        (SpreadMap, 50, 64),  # scattered into the transform
        (StackMap, 50, 64),  # one 64-point block, padded rows
        (StackMap, 20, 64),  # several blocks
        (StackMap, 700, 48),  # m < N: kept rows selected for u
        (FoldMap, 700, 48),  # m < F: kept rows selected for u
        (CountSketchMap, 300, 64),
        (FoldSpreadMap, 1000, 64),  # folded blocks plus a partial one, then the spread's wide rows
    ],
)
def test_tagged_call_equals_fresh_call(monkeypatch, cls, dim, m):
    monkeypatch.setattr(maps, "_CHUNK_ELEMS", 3 * 2 * max(dim, m))  # several chunks per call
    workspace.release()
    mp = cls(dim, m, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(4)
    for n in (17, 5, 1):  # shrinking batches reuse larger buffers
        x = torch.randn(n, dim, dtype=torch.float64, generator=g)
        ref = mp(x)
        _poison()
        got = mp(x, tag="t")
        assert torch.equal(got, ref)
    assert workspace.held_bytes() > 0
    workspace.release()
    assert workspace.held_bytes() == 0


@pytest.mark.parametrize(
    "act_map,error_map",
    [("dense", "dense"), ("fold", "fold"), ("dense", "srht"), ("spread", "spread"), ("stack", "spread")],
)
def test_sketch_unchanged_by_stale_buffers(act_map, error_map):
    """Same-kind act and error maps use distinct tags; poisoned buffers change nothing."""
    g = torch.Generator().manual_seed(5)
    a, z = torch.randn(40, 12, generator=g), 3 * torch.randn(40, 300, generator=g)
    y = torch.randint(0, 300, (40,), generator=g)

    def sig():
        sk = us.FisherSketch(act_dim=12, out_dim=300, sketch_dim=64, seed=1, act_map=act_map, error_map=error_map)
        return sk.update_logits(a, z, y).update(a[:7], us.error_vectors(z[:7], y[:7])[0]).signature()

    workspace.release()
    first = sig()
    _poison()
    second = sig()
    assert torch.equal(first.sums, second.sums) and torch.equal(first.diag, second.diag)
    assert bool(torch.isfinite(second.sums).all())


def test_disabled_workspace_gives_the_same_sketch(monkeypatch):
    """enabled = False (fresh allocations, used by benchmarks/alloc_faults.py) changes nothing."""
    g = torch.Generator().manual_seed(8)
    a, z = torch.randn(300, 10, generator=g), 3 * torch.randn(300, 5000, generator=g)
    y = torch.randint(0, 5000, (300,), generator=g)
    make = lambda: us.FisherSketch(act_dim=10, out_dim=5000, sketch_dim=128, seed=2).update_logits(a, z, y).signature()  # noqa: E731
    on = make()
    monkeypatch.setattr(workspace, "enabled", False)
    workspace.release()
    off = make()
    assert workspace.held_bytes() == 0
    assert torch.equal(on.sums, off.sums) and torch.equal(on.diag, off.diag)


def test_buffers_made_in_inference_mode_work_outside_it():
    workspace.release()
    g = torch.Generator().manual_seed(6)
    a, e = torch.randn(9, 8, generator=g, dtype=torch.float64), torch.randn(9, 20, generator=g, dtype=torch.float64)
    sk = us.FisherSketch(act_dim=8, out_dim=20, sketch_dim=32, seed=0)
    with torch.inference_mode():
        sk.update(a, e)
    sk.update(a.requires_grad_(), e)  # normal tensors, even ones that require grad
    ref = us.FisherSketch(act_dim=8, out_dim=20, sketch_dim=32, seed=0).update(
        torch.cat([a, a]).detach(), torch.cat([e, e])
    )
    assert torch.allclose(sk.signature().sums, ref.signature().sums, rtol=1e-12, atol=1e-12)


def test_float32_chunk_sums_stay_at_projection_precision():
    """Within-chunk sums run in the projections' dtype (float32 GEMMs of ≤ 256 rows) before the
    float64 state: the float32 sketch stays within float32 projection rounding of the float64
    one (eps·√K ≈ 4e-6 relative at K = 4,096), for chunks that start on either half."""
    g = torch.Generator().manual_seed(7)
    a = torch.randn(601, 16, generator=g, dtype=torch.float64)
    e, _ = us.error_vectors(
        3 * torch.randn(601, 4096, generator=g, dtype=torch.float64), torch.randint(0, 4096, (601,), generator=g)
    )
    s64 = us.FisherSketch(act_dim=16, out_dim=4096, sketch_dim=256, seed=0).update(a, e).signature()
    sk = us.FisherSketch(act_dim=16, out_dim=4096, sketch_dim=256, seed=0)
    sk.update(a[:301].float(), e[:301].float()).update(a[301:].float(), e[301:].float())
    s32 = sk.signature()
    assert torch.equal(s32.counts, s64.counts)
    for k in range(3):
        rel = float((s32.sums[:, k] - s64.sums[:, k]).norm() / s64.sums[:, k].norm())
        assert rel < 4e-6, (k, rel)
        assert float(((s32.diag[:, k] - s64.diag[:, k]).abs() / s64.diag[:, k]).max()) < 4e-6


@pytest.mark.parametrize(
    "error_map,k",
    [("dense", 300), ("srht", 3000), ("srht", 4096), ("fold", 1000), ("fold", 70), ("spread", 1000), ("spread", 70)],
)
def test_strided_inputs_equal_contiguous(error_map, k):
    """Column-strided or transposed-back inputs (views a user may pass) give the same sketch."""
    g = torch.Generator().manual_seed(9)
    wide = torch.randn(30, 2 * k, dtype=torch.float64, generator=g)
    e = wide[:, ::2]  # stride 2 along the errors
    a = torch.randn(12, 30, dtype=torch.float64, generator=g).T  # (30, 12), transposed view
    make = lambda a_, e_: (
        us.FisherSketch(
            act_dim=12,
            out_dim=k,
            sketch_dim=64,
            seed=3,
            act_map="srht",  # noqa: E731
            error_map=error_map,
        )
        .update(a_, e_)
        .signature()
    )
    e_t = torch.randn(k, 30, dtype=torch.float64, generator=g).T  # (30, k), column-major
    for err in (e, e_t):
        s1, s2 = make(a, err), make(a.contiguous(), err.contiguous())
        assert torch.allclose(s1.sums, s2.sums, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("act_map,error_map", [("stack", "srht"), ("dense", "spread"), ("dense", "countsketch")])
def test_tagged_features_equal_fresh_features(act_map, error_map):
    """``features(..., tag=)`` (what the scoring and routing stream uses) gives the same bits as
    the fresh call, whatever the workspace held, and its result is the workspace's."""
    from updatescope.sketch.config import SketchConfig
    from updatescope.sketch.fishersketch import features

    cfg = SketchConfig(act_dim=40, out_dim=300, sketch_dim=64, seed=5, act_map=act_map, error_map=error_map)
    g = torch.Generator().manual_seed(6)
    workspace.release()
    for n in (23, 4):  # a smaller second call reuses the larger buffers
        a = torch.randn(n, 40, generator=g)
        e = torch.softmax(torch.randn(n, 300, generator=g), dim=1)
        ref = features(cfg, a, e)
        _poison()
        got = features(cfg, a, e, tag="f")
        assert got.shape == (n, 3, 64)
        assert torch.equal(got, ref)
    assert features(cfg, a, e, tag="f").data_ptr() == got.data_ptr()  # reused, not reallocated
