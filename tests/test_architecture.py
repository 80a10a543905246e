"""The architecture rules are checked by a machine: import-linter's contracts hold for the
package, a forbidden import breaks them, and docs/architecture.md says what they say."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (extra 'dev')")


def _lint(src: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "HOME": str(src)}
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_contracts_hold_and_a_forbidden_import_breaks_them(tmp_path):
    ok = _lint(ROOT / "src")
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert "0 broken" in ok.stdout
    scratch = tmp_path / "src"
    shutil.copytree(ROOT / "src", scratch, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    config = scratch / "updatescope" / "sketch" / "config.py"
    config.write_text(
        config.read_text().replace("\nimport operator\n", "\nimport operator\nimport updatescope.models.hf\n", 1)
    )
    bad = _lint(scratch)
    assert bad.returncode != 0
    assert "updatescope.sketch is not allowed to import updatescope.models" in bad.stdout


def test_architecture_page_is_generated_from_the_contracts():
    out = subprocess.run(
        [sys.executable, "docs/architecture_table.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert "| 6 | `pipeline` |" in page and "`core-no-models`" in page


def test_every_experiment_folder_is_in_the_independence_contract():
    import tomllib

    from updatescope.experiments import REGISTRY

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (indep,) = [c for c in contracts if c["id"] == "experiments-independent"]
    folders = {f"updatescope.experiments.{e.module}" for e in REGISTRY.values()}
    assert folders == set(indep["modules"])
