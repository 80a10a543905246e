"""docs/locallinear.md's generated tables equal what docs/locallinear_table.py makes of the records."""

import copy
import json
import re
from pathlib import Path

from _docs_script import docs_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return docs_script("locallinear_table")


def test_doc_tables_match_records():
    mod = _script()
    text = (ROOT / "docs" / "locallinear.md").read_text()
    blocks = mod.BLOCK.findall(text)
    assert any(kind == "recovery" for _, kind, *_ in blocks)
    assert mod.render(text) == text, "docs/locallinear.md is stale: run `python docs/locallinear_table.py --write`"


def test_table_changes_when_a_record_number_changes():
    mod = _script()
    text = (ROOT / "docs" / "locallinear.md").read_text()
    name = re.search(r"<!-- generated: recovery (\w+) -->", text).group(1)
    m = json.loads((ROOT / "docs" / "results" / f"{name}.json").read_text())["metrics"]
    before = "\n".join(mod.recovery_table(m))
    m2 = copy.deepcopy(m)
    m2["summary"]["curve.prefix"]["mean"][9] += 0.05  # a different k = 10 capture
    assert "\n".join(mod.recovery_table(m2)) != before
    # the verdict follows the numbers: a prefix far below its nulls is not "beyond" them
    m2["summary"]["curve.prefix_rest"]["mean"] = [0.0] * len(m2["summary"]["curve.prefix_rest"]["mean"])
    assert "structure beyond step norms" not in "\n".join(mod.recovery_table(m2))


def test_regime_words_flip_with_the_numbers():
    """Each regime word of the recovery, search and schedules tables follows its rule."""
    mod = _script()
    f = {"steps": 400, "cap": 400, "value": 0.60, "target": 0.498}
    assert mod.criterion_word(f).startswith("not reached")
    assert mod.criterion_word({**f, "value": 0.40}) == "reached"
    assert mod.criterion_word(None, 400, 400) == "not recorded (stopped at the cap)"
    assert mod.criterion_word(None, 30, 400) == "not recorded"
    assert mod.radius_word({"converged": True}) == "converged"
    assert mod.radius_word({"converged": False}) == "not converged"
    assert mod.report_word({"refused": []}) == "reported"
    assert mod.report_word({"refused": ["why"]}) == "refused: why"
    tests = [
        {"comparison": "trajectory_prefix - isotropic", "word": "better"},
        {"comparison": "trajectory_prefix - random", "word": "better"},
        {"comparison": "small_aligned_r2 - large_containing_r40", "word": "no difference"},
    ]
    assert mod.search_claim(tests, "trajectory_prefix") == "reproduced"
    assert mod.search_claim(tests, "small_aligned_r2") == "not shown"
    tests[1]["word"] = "no difference"
    assert mod.search_claim(tests, "trajectory_prefix") == "not shown"
    tests[1]["word"] = "worse"
    assert mod.search_claim(tests, "trajectory_prefix") == "contradicted"


def _draw(radius, converged):
    return {"radius": radius, "converged": converged, "iters": 12, "residual": 0.01 if converged else 0.4}


def test_a_replicate_that_missed_the_criterion_is_refused_in_the_table():
    """A record with one replicate whose forgetting stopped at the cap and whose power iteration
    did not converge: the regime table names both and says it is refused; with every replicate
    refused no number is shown."""
    mod = _script()
    forget = {"steps": 3000, "cap": 3000, "value": 0.6, "target": 0.5}
    rep = {
        "replicate": 0,
        "lab_seed": 0,
        "forget": forget,
        "radius_draws": [_draw(218.0, False), _draw(12.0, True)],
        "refused": ["forgetting stopped at the cap", "the power iteration that set eta did not converge"],
    }
    m = {"replicates": [rep], "summary": None, "config": {"lab": {"forget_cap": 3000}}}
    text = "\n".join(mod.recovery_table(m))
    assert "not reached (stopped at the cap)" in text and "not converged" in text
    assert "refused: forgetting stopped at the cap" in text and "No replicate is reported" in text
    rep2 = copy.deepcopy(rep)
    rep2["forget"]["value"], rep2["refused"] = 0.4, []
    rep2["radius_draws"] = [_draw(218.0, True)]
    rows = mod.recovery_regime_rows({"replicates": [rep2]})
    assert "| reached |" in rows[2] and "218 (converged" in rows[2] and rows[2].endswith("| – | reported |")
