"""docs/network.md's generated tables equal what docs/network_table.py makes of the records."""

import copy
import json
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return docs_script("network_table")


def test_doc_tables_match_records():
    mod = _script()
    text = (ROOT / "docs" / "network.md").read_text()
    assert {kind for kind, _ in mod._blocks.blocks(text)} >= {"selection", "profiles", "cost"}
    assert mod.render(text) == text, "docs/network.md is stale: run `python docs/network_table.py --write`"
    assert mod.main(["--check"]) == 0


def test_table_and_verdict_follow_the_numbers():
    mod = _script()
    text = (ROOT / "docs" / "network.md").read_text()
    name = re.search(r"<!-- generated: selection (\w+) -->", text).group(1)
    m = json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())["metrics"]
    before = "\n".join(mod.selection_table(m))
    m2 = copy.deepcopy(m)
    m2["methods"]["lora_layers"]["spearman"]["mean"] += 0.05
    assert "\n".join(mod.selection_table(m2)) != before
    # the verdict is read off the paired CI: one excluding 0 from above says "better", from below "worse"
    m2["paired"]["lora_layers - head"]["spearman"]["ci"] = [0.01, 0.2]
    assert "**better**" in mod.verdict(m2)
    m2["paired"]["lora_layers - head"]["spearman"]["ci"] = [-0.2, -0.01]
    assert "**worse**" in mod.verdict(m2)
    m2["paired"]["lora_layers - head"]["spearman"]["ci"] = [-0.2, 0.1]
    assert "no resolvable difference" in mod.verdict(m2)


def test_validation_verdicts_follow_the_record():
    mod = _script()
    rec = json.loads((ROOT / "docs" / "results" / "network_quick.json").read_text())
    rows = mod.validation_verdicts(rec)
    assert len(rows) == 2 + 5 and all(r.count("|") == 5 for r in rows)  # 4 cells each, no stray pipes
    rec2 = copy.deepcopy(rec)
    for mm in rec2["metrics"]["models"]:
        mm["tracking"]["sketch"]["head_token"]["spearman"] = 0.95
        mm["bound_holds"] = 0.5
    rows2 = mod.validation_verdicts(rec2)
    assert "| **supported** (rule: Spearman ≥ 0.9" in rows2[4] and "**partly**" not in rows2[4]
    assert "fails on some pairs" in rows2[6]
    # the setting line names the record's own size and commit
    assert f"{rec['config']['n_seq']} sequences per task" in mod.validation_tables(rec)[-1]


def test_reading_sentences_follow_their_rules():
    """Each claim of the generated reading flips when the numbers its rule reads are changed."""
    mod = _script()
    rec = json.loads((ROOT / "docs" / "results" / "network_selection_quick.json").read_text())
    text = "\n".join(mod.selection_reading(rec))
    assert "**No resolvable difference** against the head sketch" in text
    assert "A_BD ranks better than A_F" in text
    assert "**Every sketch is below the noise ceiling**" in text

    r2 = copy.deepcopy(rec)
    m = r2["metrics"]
    m["paired"]["lora_layers - head"]["spearman"]["ci"] = [0.02, 0.3]
    m["paired"]["lora_layers - lora_layers_bd"]["spearman"]["ci"] = [-0.05, 0.02]
    m["truth_noise"]["ceiling"]["spearman"]["ci"] = [0.2, 0.9]
    m["paired"]["head - family"]["top1"]["ci"] = [-0.3, 0.1]
    for d in m["diagnostics"].values():
        d["profile_cosine_min"] = 0.5
    flipped = "\n".join(mod.selection_reading(r2))
    assert "**Resolved against the head sketch:** LoRA-targeted layers, A_F" in flipped
    assert "A_F and A_BD are not resolved" in flipped
    assert "**The best sketch reaches the noise ceiling**" in flipped
    assert "top-1 is not resolved from the head's" in flipped
    assert "spread their gradient energy differently" in flipped
    # identical argmax sources for every target and sketch: the picks sentence changes too
    for k in ("lora_layers", "lora_layers_bd", "last_blocks_head"):
        m["scores"][k] = copy.deepcopy(m["scores"]["head"])
    assert "pick the same best source for every target" in "\n".join(mod.selection_reading(r2))


def test_layer_cost_reading_follows_the_ratios():
    mod = _script()
    rec = json.loads((ROOT / "benchmarks" / "results" / "layer_sketch_cost.json").read_text())
    line = mod.layer_cost_reading(rec)[0]
    assert "at most a forward + backward pass: the last block's linear layers + head (0.68×)" in line
    assert "more: every linear layer + head, per sequence (4.51×)" in line
    assert "the most expensive is every linear layer + head, per sequence." in line
    r2 = copy.deepcopy(rec)
    q = r2["result"]["ratios"]
    q["layers_last_block"]["forward_backward"] = 1.2
    q["layers_all"].update(forward_backward=0.9, head_sketch=1.0)
    line = mod.layer_cost_reading(r2)[0]
    assert "at most a forward + backward pass: q/v of the last 2 blocks + head (0.58×); every linear" in line
    assert "more: the last block's linear layers + head (1.20×)" in line
    assert "the most expensive is the last block's linear layers + head." in line
