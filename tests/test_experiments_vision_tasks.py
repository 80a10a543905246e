"""Vision tasks over a shared pool of views: sizes, label maps, determinism, the pool cache."""

import pytest
import torch
from torch import nn

from updatescope.errors import InputError
from updatescope.experiments import heads
from updatescope.experiments.estimator import vision as _vision


def _pool(n_photos=6, per_photo=20, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    photo = torch.arange(n_photos).repeat_interleave(per_photo)
    # views of one photo share a centre, so the model's top-1 depends on the photo
    acts = torch.randn(n_photos, d, generator=g)[photo] * 3 + torch.randn(n_photos * per_photo, d, generator=g)
    return {"acts": acts, "photo": photo}


def _head(k=40, d=8):
    g = torch.Generator().manual_seed(1)
    return torch.randn(k, d, generator=g), torch.randn(k, generator=g) * 0.1


def test_specs_sizes_rules_and_determinism():
    specs = _vision.task_specs(10, 6, 20, 50, seed=0)
    assert len(specs) == 10 and len({s.name for s in specs}) == 10
    assert [s.rule for s in specs] == list(_vision.RULES) * 2
    for s in specs:
        assert 3 <= len(s.photos) <= 6 and len(set(s.photos)) == len(s.photos)  # k_min = ceil(50/20) = 3
        assert s.n == 50
        assert (
            (s.param in _vision.RANKS)
            if s.rule == "rank"
            else (s.param in _vision.GROUPS)
            if s.rule == "coarse"
            else s.param == 0
        )
    assert _vision.task_specs(10, 6, 20, 50, seed=0) == specs
    assert _vision.task_specs(10, 6, 20, 50, seed=1) != specs
    with pytest.raises(InputError, match="cannot build"):
        _vision.task_specs(3, 2, 10, 50)


def test_label_maps_follow_their_rules():
    pool = _pool()
    w, b = _head()
    z = heads.logits_of(w, b, pool["acts"])
    top1, order = z.argmax(1), z.argsort(1, descending=True)
    spec = _vision.TaskSpec

    def lab(rule, param=0, map_seed=0):
        return _vision.label_map(spec("x", (), rule, param, map_seed, 1), z, pool["photo"], 6)

    assert torch.equal(lab("top1"), top1)
    assert torch.equal(lab("rank", 3), order[:, 2])
    ph = lab("photo")
    # one class per photo, different photos get different classes
    per_photo = [ph[pool["photo"] == i].unique() for i in range(6)]
    assert all(c.numel() == 1 for c in per_photo) and len({int(c) for c in per_photo}) == 6
    perm = lab("permuted")
    assert not torch.equal(perm, top1)
    assert all(perm[top1 == c].unique().numel() == 1 for c in top1.unique())  # a function of top-1
    assert perm.unique().numel() == top1.unique().numel()  # and one-to-one
    co = lab("coarse", 5)
    assert co.unique().numel() <= 5 and all(co[top1 == c].unique().numel() == 1 for c in top1.unique())
    # the random maps depend on the map seed
    assert not torch.equal(lab("photo", map_seed=0), lab("photo", map_seed=1))
    with pytest.raises(InputError, match="unknown label rule"):
        lab("nope")


def test_make_tasks_rows_labels_and_variety():
    pool = _pool()
    w, b = _head()
    specs = _vision.task_specs(10, 6, 20, 50, seed=0)
    tasks, info = _vision.make_tasks(pool, w, b, specs, 6, seed=0)
    assert list(tasks) == [s.name for s in specs]
    for s in specs:
        t = tasks[s.name]
        assert t["acts"].shape == (50, 8) and t["labels"].shape == (50,) and t["labels"].dtype == torch.int64
        assert int(t["labels"].min()) >= 0 and int(t["labels"].max()) < 40
        # rows are distinct views of the task's own photos
        rows = [int((pool["acts"] == a).all(1).nonzero()) for a in t["acts"]]
        assert len(set(rows)) == 50 and set(pool["photo"][rows].tolist()) <= set(s.photos)
        assert 0.0 <= info[s.name]["agree_top1"] <= 1.0
    assert info[specs[0].name]["agree_top1"] == 1.0  # rule top1
    assert info[specs[1].name]["agree_top1"] == 0.0  # rule rank k >= 2
    # label maps differ: applied to the whole pool, tasks of different rules never agree
    z = heads.logits_of(w, b, pool["acts"])
    maps = {s.name: _vision.label_map(s, z, pool["photo"], 6) for s in specs}
    for i, a in enumerate(specs):
        for b_ in specs[i + 1 :]:
            if a.rule != b_.rule:
                assert not torch.equal(maps[a.name], maps[b_.name]), (a.name, b_.name)
    assert len({tuple(m.tolist()) for m in maps.values()}) >= len(_vision.RULES)
    again, _ = _vision.make_tasks(pool, w, b, specs, 6, seed=0)
    assert all(torch.equal(again[n]["labels"], tasks[n]["labels"]) for n in tasks)
    with pytest.raises(InputError, match="views of its photos"):
        _vision.make_tasks(pool, w, b, [_vision.TaskSpec("big", (0,), "top1", 0, 0, 21)], 6)


def test_speed_streams_wrap_and_label():
    pool = _pool()
    w, b = _head()
    streams, distinct = _vision.speed_streams(pool, w, b, 100, 6)
    assert distinct == 120 and [s["acts"].shape[0] for s in streams] == [100, 100]
    assert torch.equal(streams[1]["acts"][:20], pool["acts"][100:])  # wraps to row 0 after the pool ends
    assert torch.equal(streams[1]["acts"][20:], pool["acts"][:80])
    assert torch.equal(streams[0]["labels"], heads.logits_of(w, b, pool["acts"][:100]).argmax(1))


def test_capture_pool_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path))
    torch.manual_seed(0)
    model = nn.Sequential(nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(12, 6), nn.ReLU(), nn.Linear(6, 5)).eval()
    photos = ["coins", "chelsea"]
    a = _vision.capture_pool(model, "fp", photos, 3, size=32, batch=4)
    assert a["acts"].shape == (6, 6) and a["photo"].tolist() == [0, 0, 0, 1, 1, 1]
    assert len(list((tmp_path / "experiments").glob("vision-*.pt"))) == 1
    with torch.no_grad():  # a second call reads the file: a changed model is not run
        model[2].weight.mul_(2)
    assert torch.equal(_vision.capture_pool(model, "fp", photos, 3, size=32, batch=4)["acts"], a["acts"])
    fresh = _vision.capture_pool(model, "fp", photos, 3, size=32, batch=4, use_cache=False)["acts"]
    assert not torch.equal(fresh, a["acts"])


def test_spanning_mix_tasks_interpolate_and_nest():
    """mix λ relabels λ% of the task's photographs with their per-photo class, the others keep
    the model's top-1; the relabelled sets grow with λ (nested), all on one photo set."""
    specs = _vision.task_specs(4, 6, 20, 50, seed=0, spanning=5)
    mix = [s for s in specs if s.rule == _vision.MIX]
    assert [s.param for s in mix] == [0, 25, 50, 75, 100] and len({s.photos for s in mix}) == 1
    g = torch.Generator().manual_seed(0)
    z = torch.randn(120, 30, generator=g)
    photo = torch.tensor(mix[0].photos).repeat(20)[:120]
    top1 = z.argmax(1)
    changed = [set(photo[_vision.label_map(s, z, photo, 6) != top1].tolist()) for s in mix]
    # λ = 100%: every photograph relabelled (a view keeps its label only where the drawn
    # class happens to be its top-1, which cannot hold for all 20 views of a photo here)
    assert changed[0] == set() and changed[-1] == set(mix[0].photos)
    assert all(a <= b for a, b in zip(changed, changed[1:]))  # nested
    with pytest.raises(InputError, match="spanning"):
        _vision.task_specs(4, 6, 20, 50, spanning=1)
