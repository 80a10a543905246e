"""docs/steering.md's shadow block equals what docs/steering_table.py makes of the record,
and its words follow the recorded numbers."""

import copy
import json
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _record():
    text = (ROOT / "docs" / "steering.md").read_text()
    name = re.search(r"<!-- generated: shadow (\w+) -->", text).group(1)
    return name, json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())


def _block(mod, kind, text):
    start = text.index(f"<!-- generated: {kind} ")
    return text[start : text.index("<!-- end generated -->", start)]


def test_shadow_block_is_generated():
    mod = docs_script("steering_table")
    text = (ROOT / "docs" / "steering.md").read_text()
    assert ("shadow", "steering_shadow_quick") in set(mod._blocks.blocks(text))
    assert _block(mod, "shadow", mod.render(text)) == _block(mod, "shadow", text), (
        "docs/steering.md is stale: run `python docs/steering_table.py --write`"
    )
    assert "LoRA-shadow stretch goal is not implemented" not in text


def test_shadow_words_flip_with_the_numbers():
    mod = docs_script("steering_table")
    name, rec = _record()
    r = copy.deepcopy(rec)
    m = r["metrics"]
    n_layers = m["n_layers"]
    # whatever the record says, let the pair pass and give every shadow numbers, in the full
    # space and without the massive coordinate (amendment 3), so both ways of flipping can be
    # checked on any record
    for key in ("shadow", "shadow_without_massive"):
        m.setdefault(key, dict.fromkeys(("contrast", "positive", "negative")))
        for s in ("contrast", "positive", "negative"):
            if m[key][s] is None:
                m[key][s] = _fake_shadow(n_layers)
                if s == "contrast":
                    del m[key][s]["cos_mean_contrast"]
    m["massive"] = {
        "coordinate": [507] * n_layers,
        "share": {
            s: {"token": [0.8] * n_layers, "mean": [0.25] * n_layers} for s in ("contrast", "positive", "negative")
        },
    }
    m["regime"]["pair"].update(mean=0.5, se=0.01, mean_positive=0.6, mean_negative=0.4)
    full = m["shadow"]["contrast"]["spans"]["caa"]
    full["null_mean_q"], full["mean"] = [0.01] * n_layers, [0.9] * n_layers  # the full space: above everywhere
    f = m["shadow_without_massive"]["contrast"]["spans"]["caa"]
    f["null_mean_q"] = [0.01] * n_layers
    f["mean"] = [0.5] * n_layers  # above the null everywhere
    assert mod.shadow_words(r)["contrast"]["caa"]["mean"] == "spans more than random"
    text = "\n".join(mod.shadow_block(r, name))
    # the primary table reads the restricted numbers, the secondary one the full-space numbers
    assert "| **FT_pos − FT_neg** (primary) | CAA (k = 1) | 0.500 |" in text
    assert "| FT_pos − FT_neg | CAA (k = 1) | 0.900 |" in text
    assert text.index("(primary) | CAA (k = 1) | 0.500") < text.index("**Full-space fractions")
    x = m["headline_layer"]
    assert f"layer {x}, coordinate 507: FT_pos − FT_neg 80.0% per token, 25.0% of the mean shadow" in text
    assert f"| {m['regime']['pair']['n']} | +0.5000 ± 0.0100 | +0.6000 | +0.4000 | passes |" in text
    assert "nothing was measured" not in text
    f["mean"] = [0.001] * n_layers  # below it everywhere: the primary word flips, the full-space one does not
    assert mod.shadow_words(r)["contrast"]["caa"]["mean"] == "no more than random"
    assert mod.shadow_words(r, "shadow")["contrast"]["caa"]["mean"] == "spans more than random"
    assert "no more than random" in "\n".join(mod.shadow_block(r, name))
    # exactly at a majority of the rule layers, and one short of it
    rl = m["rule_layers"]
    need = len(rl) // 2 + 1
    f["mean"] = [0.5 if x in rl[:need] else 0.001 for x in range(n_layers)]
    assert mod.shadow_words(r)["contrast"]["caa"]["mean"] == "spans more than random"
    assert f"spans more than random ({need} of {len(rl)})" in "\n".join(mod.shadow_block(r, name))
    f["mean"][rl[need - 1]] = 0.001
    assert mod.shadow_words(r)["contrast"]["caa"]["mean"] == "no more than random"
    # the per-token word follows its own numbers, not the mean shadow's
    g = m["shadow_without_massive"]["contrast"]["spans"]["caa+shifts"]
    g["null_token_q"], g["token"] = [0.01] * n_layers, [0.2] * n_layers
    assert mod.shadow_words(r)["contrast"]["caa+shifts"]["token"] == "spans more than random"
    # the first-token line (amendment 2) reads the record's diagnostic, at the headline and last rule layer
    m["first_token"] = {
        k: [v] * n_layers
        for k, v in (
            ("first_norm", 23456.0),
            ("other_norm", 121.0),
            ("top_coordinate", 507),
            ("top_share", 0.9),
            ("caa_with_first_top_share", 0.98),
            ("caa_top_share", 0.01),
            ("cos_caa_with_first", 0.2),
        )
    }
    m["first_token"]["first_norm"][rl[-1]] = 98765.0
    text = "\n".join(mod.shadow_block(r, name))
    assert f"layer {m['headline_layer']}: first token 23,456 against 121 for the others" in text
    assert f"layer {rl[-1]}: first token 98,765 against 121" in text and "coordinate 507" in text
    del m["first_token"]
    assert "**First token**" not in "\n".join(mod.shadow_block(r, name))
    # the pair fails its regime check: every word of every shadow is "not measured"
    m["regime"]["pair"].update(mean=0.01, se=0.02)
    for key in ("shadow_without_massive", "shadow"):
        words = mod.shadow_words(r, key)
        assert {w for sh in words.values() for span in sh.values() for w in span.values()} == {"not measured"}
    text = "\n".join(mod.shadow_block(r, name))
    assert "refused: not measured" in text and "nothing was measured" in text


def _fake_shadow(n):
    span = {
        k: [0.1] * n
        for k in (
            "token",
            "mean",
            "null_token_mean",
            "null_token_q",
            "null_mean_mean",
            "null_mean_q",
            "ceiling_token",
        )
    }
    return {
        "token_rms": [1.0] * n,
        "relative": [0.1] * n,
        "mean_norm": [1.0] * n,
        "cos_mean_caa": [0.0] * n,
        "cos_mean_contrast": [0.5] * n,
        "spans": {"caa": copy.deepcopy(span), "caa+shifts": copy.deepcopy(span)},
    }


def test_a_failed_regime_says_what_the_full_run_showed():
    mod = docs_script("steering_table")
    _, rec = _record()
    r = copy.deepcopy(rec)
    r["config"]["quick"] = True
    assert mod._regime_followup(r) == "Whether the full run's longer fine-tune changes that is untested."
    r["config"]["quick"] = False
    r["metrics"]["training"] = {"positive": {"first": 5.0, "last": 0.4}, "negative": {"first": 5.0, "last": 0.5}}
    r["metrics"]["regime"]["per_direction"] = {
        d: {"own_mean": -1.9, "other_mean": -2.1} for d in ("positive", "negative")
    }
    assert "memorised their sentences" in mod._regime_followup(r)
    r["metrics"]["regime"]["per_direction"]["negative"]["own_mean"] = 0.2  # one class's own loss improved
    assert mod._regime_followup(r) == "The full run's longer fine-tune did not change that."
