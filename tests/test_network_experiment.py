"""``reproduce network`` on a tiny set-up: record shape, exact identities, bound, figures."""

from __future__ import annotations

import math

import pytest
from tests._tiny_lm import reproduce

pytest.importorskip("transformers")

TINY = {
    "width": 8,
    "n_layer": 1,
    "vocab": 16,
    "seq_len": 5,
    "n_seq": 6,
    "label_agreement": [0.0, 1.0],
    "input_overlap": [0.0, 1.0],
    "pretrain_steps": 3,
    "sketch_dim": 64,
    "cost_repeats": 1,
}


def test_network_experiment_tiny(tmp_path):
    rec = reproduce("network", tmp_path, TINY)
    m = rec["metrics"]
    assert [mm["model"] for mm in m["models"]] == ["synthetic", "llama"]
    for mm in m["models"]:
        assert len(mm["pairs"]) == 4 and mm["layers"][-1] in ("head", "lm_head")
        assert mm["bound_holds"] == 1.0  # the bound holds for the plug-in (PSD) Fishers
        for r in mm["pairs"]:
            ex = r["exact"]
            assert -1.0 <= r["full"] <= 1.5 and math.isfinite(ex["all_linear"])
            # a one-block restriction is that block's profile entry; last-k ⊂ all linear layers
            assert len(ex["profile"]) == len(mm["layers"])
            assert 0.0 <= ex["profile_cosine"] <= 1.0 + 1e-12
        shares = mm["target_energy_share"]
        assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-9)
        assert set(mm["tracking"]["sketch"]) == {"head_token", "head", "block_diag", "last_k", "all_linear"}
        # the all-layers-agreeing pair (same distribution as the target) is the most aligned
        top = max(mm["pairs"], key=lambda r: r["full"])
        assert (top["label_agreement"], top["input_overlap"]) == (1.0, 1.0)
    assert m["cost"]["ratios"]["forward_backward"]["vs_forward_backward"] == 1.0
    assert (tmp_path / "network_profile.png").exists() and (tmp_path / "network_tracking.png").exists()
