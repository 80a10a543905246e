"""docs/steering.md's generated blocks equal what docs/steering_table.py makes of the records,
and its verdicts follow the recorded numbers."""

import copy
import json
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return docs_script("steering_table")


def _record():
    text = (ROOT / "docs" / "steering.md").read_text()
    name = re.search(r"<!-- generated: steering (\w+) -->", text).group(1)
    return name, json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())


def test_doc_blocks_match_records():
    mod = _script()
    text = (ROOT / "docs" / "steering.md").read_text()
    kinds = {kind for kind, _ in mod._blocks.blocks(text)}
    assert {"run", "setup", "cosine", "steering", "search"} <= kinds
    assert mod.render(text) == text, "docs/steering.md is stale: run `python docs/steering_table.py --write`"
    assert mod.main(["--check"]) == 0


def test_no_table_row_outside_a_generated_block():
    # every table in the doc is generated: strip the blocks, no table row may remain
    mod = _script()
    rest = mod._blocks.strip((ROOT / "docs" / "steering.md").read_text())
    assert not [ln for ln in rest.splitlines() if ln.startswith("|")]


def test_blocks_change_with_the_numbers():
    mod = _script()
    name, rec = _record()
    before = "\n".join(mod.cosine_block(rec, name))
    r2 = copy.deepcopy(rec)
    c = r2["metrics"]["cosine"]
    for i in mod.paper_layers(r2["metrics"]["n_layers"]):
        c["half_caa"]["mean"][i] = 0.9  # a CAA that reproduces across halves
        c["pushforward_mean"][i] = 0.7  # and a step shift far above both nulls
    after = "\n".join(mod.cosine_block(r2, name))
    assert after != before and "Verdict: reproduced." in after and "cannot be decided" in before
    for i in mod.paper_layers(r2["metrics"]["n_layers"]):
        c["pushforward_mean"][i] = 0.0
    assert "Verdict: not reproduced." in "\n".join(mod.cosine_block(r2, name))

    st = r2["metrics"]["steering_test"]
    st["caa"]["gain"], st["caa"]["gain_se"] = 0.2, 0.05
    st["caa"]["layer"], st["caa"]["scale"] = 24, -0.25
    st["caa"]["test"]["accuracy"] = 0.458
    st["pushforward"]["gain"], st["pushforward"]["gain_se"] = 0.0, 0.05
    text = "\n".join(mod.steering_block(r2, name))
    assert "Verdict: not reproduced: CAA steers, the one-step shift does not." in text
    assert "| CAA | 24, -0.25 | 0.458 | +0.200 ± 0.050 |" in text
    st["pushforward"]["gain"], st["pushforward"]["gain_se"] = 0.18, 0.05
    assert "Verdict: reproduced." in "\n".join(mod.steering_block(r2, name))


def test_search_block_from_a_record_with_search():
    mod = _script()
    name, rec = _record()
    r2 = copy.deepcopy(rec)
    m = r2["metrics"]
    old = copy.deepcopy(rec)  # a record written before the search existed
    old["metrics"].pop("search", None)
    assert "predates" in "\n".join(mod.search_block(old, name))
    r2["config"].update(search_n=4, search_seeds=3, search_norms=[0.1])
    n_layers = m["n_layers"]
    m["search"] = [
        {
            "best": k,
            "n": 4,
            "norm": 0.1,
            "gain_select": 0.1 * (k + 1),
            "gain_heldout": 0.05 - 0.04 * k,
            "cosine": [0.01 * k] * n_layers,
        }
        for k in range(3)
    ]
    m["cosine"]["search_mean"] = {"mean": [0.01] * n_layers, "se": [0.005] * n_layers}
    for k in range(3):
        m["steering_test"][f"search_{k}"] = {
            **copy.deepcopy(m["steering_test"]["caa"]),
            "layer": 24,
            "scale": -0.25,
            "gain": 0.0,
            "gain_se": 0.0,
        }
    m["steering_test"]["search_mean"] = {"gain": 0.0, "gain_se": 0.0}
    text = "\n".join(mod.search_block(r2, name))
    assert "| 2 | 2 / 4, 0.1 | +0.300 | -0.030 | 0.020 | 24, -0.25 | +0.000 ± 0.000 |" in text
    assert "do not improve the test margin in every seed; their shadows do not steer" in text
    assert "random-search shift, Best-of-N (3 seeds)" in "\n".join(mod.steering_block(r2, name))
    assert "searched δθ (Best-of-N), mean" in "\n".join(mod.cosine_block(r2, name))
    assert "best of 4 weight perturbations per seed" in "\n".join(mod.setup_block(r2, name))
