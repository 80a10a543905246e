"""The experiments' layout: one folder per registry entry, folders independent, runners short."""

import ast
from pathlib import Path

import updatescope.experiments as experiments
from updatescope.experiments import REGISTRY

ROOT = Path(experiments.__file__).parent
#: the longest function body (lines from ``def`` to its last line) allowed in an experiment
MAX_BODY = 150


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from updatescope.experiments import x``
    counts as importing ``updatescope.experiments.x``)."""
    package = ".".join(("updatescope", *path.relative_to(ROOT.parent).with_suffix("").parts[:-1]))
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def test_every_registry_entry_is_a_folder_with_a_config_and_a_runner():
    for name, exp in REGISTRY.items():
        folder = ROOT / exp.module
        assert folder.is_dir(), f"{name}: no folder {exp.module}/"
        for part in ("__init__.py", "config.py", "runner.py"):
            assert (folder / part).is_file(), f"{name}: {exp.module}/{part} is missing"
        assert exp.config.__module__.startswith(
            ("updatescope.experiments.configs", f"updatescope.experiments.{exp.module}.")
        ), f"{name}: its config class comes from {exp.config.__module__}"
        assert callable(exp.package().run)
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "runner.py").exists()}
    assert folders == {e.module for e in REGISTRY.values()}, "a runner folder without a registry line"


def test_no_experiment_folder_imports_another():
    folders = {e.module for e in REGISTRY.values()}
    problems = []
    for folder in sorted(folders):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in _imported(path):
                parts = name.split(".")
                if parts[:2] == ["updatescope", "experiments"] and len(parts) > 2:
                    if parts[2] in folders and parts[2] != folder:
                        problems.append(f"{path.relative_to(ROOT)} imports {name}")
    # shared modules import no experiment folder either
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in folders or rel == Path("__init__.py"):
            continue
        for name in _imported(path):
            parts = name.split(".")
            if parts[:2] == ["updatescope", "experiments"] and len(parts) > 2 and parts[2] in folders:
                problems.append(f"shared {rel} imports {name}")
    assert not problems, problems


def test_folder_packages_and_configs_do_not_import_torch_at_module_level():
    """``updatescope --help`` and the settings check load every folder's package and config."""
    problems = []
    for exp in REGISTRY.values():
        for part in ("__init__.py", "config.py"):
            tree = ast.parse((ROOT / exp.module / part).read_text())
            for node in tree.body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    if any(m.split(".")[0] in ("torch", "transformers", "peft") for m in mods):
                        problems.append(f"{exp.module}/{part}")
    assert not problems, problems


def test_no_long_runner_bodies():
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.end_lineno - node.lineno
                if body > MAX_BODY:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({body} lines)")
    assert not long, f"function bodies over {MAX_BODY} lines: {long}"
