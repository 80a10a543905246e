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
