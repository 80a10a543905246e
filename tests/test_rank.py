"""Ranking quality gates on a synthetic family with known structure, and the CKA-blind witness."""

import pytest
import torch

import updatescope as us
from updatescope.models.head_tasks import HeadTaskFamily
from updatescope.select.baselines import linear_cka


def sketch(fam, task, m=1024):
    return us.FisherSketch(fam.act_dim, fam.out_dim, sketch_dim=m, seed=0).update_logits(*task).signature()


def test_right_source_ranks_first():
    fam = HeadTaskFamily(act_dim=32, out_dim=256)
    target = sketch(fam, fam.sample(0, 0, 800, seed=100))
    sources = {f"c{c}b{b}": sketch(fam, fam.sample(c, b, 800, seed=10 * c + b)) for c in range(3) for b in range(3)}
    ranking = us.rank_sources(target, sources, target_name="c0b0")
    assert ranking.rows[0].source == "c0b0"
    # sources sharing the label block beat every source that does not
    top3 = {r.source for r in ranking.rows[:3]}
    assert top3 == {"c0b0", "c1b0", "c2b0"}


def test_activation_dark_regime_and_witness():
    """Identical activations, disjoint label sets: CKA = 1, Fisher alignment ≈ 0 (Thm 3.2)."""
    g = torch.Generator().manual_seed(0)
    n, d, k = 600, 16, 64
    acts = torch.randn(n, d, generator=g)
    w = torch.randn(k, d, generator=g)

    def task(lo, hi):
        # the model has learnt task [lo, hi): its softmax puts no mass outside that label set
        logits = acts @ w.T
        logits[:, :lo] = -1e4
        logits[:, hi:] = -1e4
        labels = torch.randint(lo, hi, (n,), generator=g)
        return acts, logits, labels

    t = task(0, 16)
    same = task(0, 16)
    disjoint = task(32, 48)
    e = lambda x: us.error_vectors(x[1], x[2])[0]
    assert linear_cka(t[0], disjoint[0]) == pytest.approx(1.0, abs=1e-12)
    ex = us.exact_alignment(disjoint[0], e(disjoint), t[0], e(t))
    assert ex.fisher == pytest.approx(0.0, abs=1e-12)
    fam = HeadTaskFamily(act_dim=d, out_dim=k)
    sig = lambda x: us.FisherSketch(d, k, sketch_dim=1024, seed=1).update_logits(*x).signature()
    ranking = us.rank_sources(
        sig(t), {"same-labels": sig(same), "disjoint-labels": sig(disjoint), "half": sig(task(8, 24))}
    )
    assert [r.source for r in ranking.rows] == ["same-labels", "half", "disjoint-labels"]
    assert ranking.regime == "activation-dark"
    dis = next(r for r in ranking.rows if r.source == "disjoint-labels")
    assert abs(dis.fisher) < 4 * dis.fisher_se + 1e-3
    del fam


def test_rank_by_a_marginal_orders_by_it_and_keeps_the_diagnosis():
    fam = HeadTaskFamily(act_dim=32, out_dim=256)
    target = sketch(fam, fam.sample(0, 0, 800, seed=100))
    sources = {f"c{c}b{b}": sketch(fam, fam.sample(c, b, 800, seed=10 * c + b)) for c in range(3) for b in range(3)}
    joint = us.rank_sources(target, sources)
    assert joint.by == "fisher" and joint.as_dict()["by"] == "fisher"
    for by in ("error", "activation"):
        ranking = us.rank_sources(target, sources, by=by)
        values = [getattr(r, by) for r in ranking.rows]
        assert values == sorted(values, reverse=True) and ranking.as_dict()["by"] == by
        assert {r.source: getattr(r, by) for r in ranking.rows} == {r.source: getattr(r, by) for r in joint.rows}
        assert (ranking.regime, ranking.explanation) == (joint.regime, joint.explanation)
    assert [r.source for r in us.rank_sources(target, sources, by="fisher").rows] == [r.source for r in joint.rows]
    with pytest.raises(us.InputError, match="rank by 'coupling': choose one of fisher, error, activation"):
        us.rank_sources(target, sources, by="coupling")


def test_rank_needs_sources_and_handles_untrusted():
    fam = HeadTaskFamily(act_dim=8, out_dim=32)
    t = sketch(fam, fam.sample(0, 0, 100, seed=1), m=64)
    with pytest.raises(us.InputError):
        us.rank_sources(t, {})
    tiny = sketch(fam, fam.sample(0, 0, 3, seed=2), m=64)
    r = us.rank_sources(t, {"tiny": tiny, "ok": sketch(fam, fam.sample(0, 0, 100, seed=3), m=64)})
    row = {x.source: x for x in r.rows}["tiny"]
    assert not row.trusted and "few samples" in row.note
