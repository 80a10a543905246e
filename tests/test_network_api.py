"""sketch_layers / network_config on a tiny random Llama: one pass per batch, same state as the
manual capture + update, sketched alignment within its error bar of the exact one."""

from __future__ import annotations

import math

import pytest
import torch

from updatescope.constants import IGNORE_INDEX
from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.network import (
    NetworkSketch,
    capture_linear_grads,
    causal_lm_labels,
    exact_network_alignment,
    network_alignment,
    network_config,
    sketch_layers,
)

pytest.importorskip("transformers")

PATTERNS = ["model.layers.1.*_proj", "lm_head"]


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.random.fork_rng():
        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=32,
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=16,
            tie_word_embeddings=False,
        )
        return LlamaForCausalLM(cfg).double().eval()


def _ids(seed: int, b: int = 6, t: int = 7, lo: int = 0, hi: int = 32):
    return torch.randint(lo, hi, (b, t), generator=torch.Generator().manual_seed(seed))


def test_causal_lm_labels_shift_and_mask():
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    y = causal_lm_labels(ids, mask)
    assert y.tolist() == [[6, 7, IGNORE_INDEX, IGNORE_INDEX], [9, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]
    assert causal_lm_labels(ids)[:, -1].eq(IGNORE_INDEX).all()
    with pytest.raises(InputError):
        causal_lm_labels(ids[0])


@pytest.mark.parametrize("mode", ["token", "sequence"])
def test_sketch_layers_equals_capture_then_update(mode):
    model = tiny_llama()
    cfg = network_config(model, PATTERNS, sketch_dim=64, seed=1, mode=mode)
    assert cfg.names[-1] == "lm_head" and len(cfg.names) == 8  # q k v o gate up down + head
    assert cfg.layers[0][1:] == (8, 8)
    b1, b2 = _ids(0), _ids(1)
    sk = sketch_layers(model, cfg, [{"input_ids": b1}, ({"input_ids": b2}, causal_lm_labels(b2))])
    ref = NetworkSketch(cfg)
    for b in (b1, b2):
        cap = capture_linear_grads(model, list(cfg.names), {"input_ids": b}, causal_lm_labels(b))
        ref.update(cap.tokens() if mode == "token" else cap.sequences())
    assert sk.count == ref.count == (12 if mode == "sequence" else 2 * 6 * 6)
    torch.testing.assert_close(sk.state_dict()["sums"], ref.state_dict()["sums"], rtol=1e-12, atol=1e-12)
    assert all(p.grad is None for p in model.parameters())
    # continuing a sketch = streaming everything at once; other data gives another state
    more = sketch_layers(model, cfg, [{"input_ids": b2}], sketch=sketch_layers(model, cfg, [{"input_ids": b1}]))
    torch.testing.assert_close(more.state_dict()["sums"], sk.state_dict()["sums"], rtol=1e-12, atol=1e-12)
    other = sketch_layers(model, cfg, [{"input_ids": _ids(2)}])
    assert not torch.allclose(other.state_dict()["sums"], sk.state_dict()["sums"])


def test_sketched_alignment_tracks_exact_within_error_bar():
    """Over four bases: where both streams' halves give a defined estimate, the value is within
    3 se of exact; where a half's estimate is undefined, the se says so (NaN), never the
    sketch part alone.  At 12 sequences per half both happen."""
    model = tiny_llama()
    src, tgt = _ids(3, b=24, lo=0, hi=20), _ids(4, b=24, lo=8, hi=32)  # overlapping token pools
    names = network_config(model, PATTERNS, sketch_dim=2048, seed=0, mode="sequence").names
    caps = [
        capture_linear_grads(model, list(names), {"input_ids": b}, causal_lm_labels(b)).sequences() for b in (src, tgt)
    ]
    ex = exact_network_alignment([caps[0][n] for n in names], [caps[1][n] for n in names], names=names)
    assert 0.05 < ex.full < 0.99  # neither trivial nor identical: the check has room to fail
    checked = 0
    for seed in range(4):
        cfg = network_config(model, PATTERNS, sketch_dim=2048, seed=seed, mode="sequence")
        ss = sketch_layers(model, cfg, [{"input_ids": src[:12]}, {"input_ids": src[12:]}])
        st = sketch_layers(model, cfg, [{"input_ids": tgt}])
        est = network_alignment(ss, st)
        for field in ("full", "block_diagonal", "profile_cosine"):
            se = est.se[field]
            if not math.isfinite(est.se_parts["sampling"][field]):
                assert math.isnan(se), (seed, field, se)
                continue
            checked += 1
            assert math.isfinite(se) and se > 0
            # ±3·se (the t-calibrated 95% interval is ±2·se): deterministic seeds, a generous margin
            assert abs(getattr(est, field) - getattr(ex, field)) <= 3 * se, (
                seed,
                field,
                getattr(est, field),
                getattr(ex, field),
                se,
            )
            # the t multiplier never shrinks the raw error: se ≥ √(sketch² + sampling²)
            raw = math.hypot(est.se_parts["sketch"][field], est.se_parts["sampling"][field])
            assert se >= raw - 1e-15 and est.se_parts["dof"][field] > 0
    assert checked >= 6


def test_bad_inputs_refused():
    model = tiny_llama()
    with pytest.raises(InputError, match="matches no nn.Linear"):
        network_config(model, ["model.layers.9.*"])
    cfg = network_config(model, ["lm_head"], sketch_dim=32)
    with pytest.raises(InputError, match="settings"):
        sketch_layers(model, cfg, [], seed=3)
    with pytest.raises(InputError, match="input_ids"):
        sketch_layers(model, cfg, [{"ids": _ids(0)}])
    other = NetworkSketch(network_config(model, ["lm_head"], sketch_dim=32, seed=9))
    with pytest.raises(IncompatibleSignatureError, match="seed"):
        sketch_layers(model, cfg, [{"input_ids": _ids(0)}], sketch=other)
    small = tiny_llama()
    small.lm_head = torch.nn.Linear(8, 16, bias=False).double()
    with pytest.raises(InputError, match="the model has"):
        sketch_layers(small, cfg, [{"input_ids": _ids(0, hi=16)}])
