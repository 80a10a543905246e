"""The shell's promises: a torch-free CLI import, one registry whose every entry runs,
configs that refuse bad settings before anything loads, the record written before figures."""

import dataclasses
import json
import subprocess
import sys

import pytest

from updatescope.errors import InputError, MissingExtraError
from updatescope.experiments import REGISTRY, Result, configure, run_experiment
from updatescope.experiments.settings import apply_settings, parse_settings


def test_cli_import_is_torch_free():
    code = (
        "import sys, updatescope, updatescope.cli; "
        "print(sorted(m for m in ('torch', 'scipy', 'numpy', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_public_names_resolve_lazily():
    import updatescope as us

    for name in us.__all__:
        assert getattr(us, name) is not None
    with pytest.raises(AttributeError):
        us.no_such_name  # noqa: B018


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_entry_has_a_runner_and_valid_defaults(name):
    exp = REGISTRY[name]
    assert callable(exp.runner())
    for quick in (False, True):
        cfg = configure(name, quick=quick, seed=3)
        assert cfg.quick is quick and cfg.seed == 3
        json.dumps(dataclasses.asdict(cfg))  # recordable


@pytest.mark.parametrize("name", sorted(REGISTRY))
@pytest.mark.parametrize("bad", ["nope=1", "seed=-1", 'seed="x"', "quick=3"])
def test_every_entry_refuses_bad_settings(name, bad):
    with pytest.raises(InputError):
        configure(name, settings=parse_settings([bad]))


def test_bad_set_fails_fast_without_loading_anything():
    """``reproduce NAME --set bad=value``: one line, exit 2, no torch imported."""
    for name in REGISTRY:
        code = (
            f"import sys; from updatescope.cli import main; rc = main(['reproduce', {name!r}, '--set', 'bad=1']); "
            "print(rc, 'torch' in sys.modules)"
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert res.stdout.split() == ["2", "False"], res
        assert res.stderr.count("\n") == 1 and "unknown setting 'bad'" in res.stderr


def test_apply_settings_types_and_groups():
    cfg = configure("source-selection", quick=True)
    new = apply_settings(cfg, {"lora": {"lr": 1, "targets": ["q_proj"]}, "exact_n": None})
    assert new.lora.lr == 1.0 and isinstance(new.lora.lr, float) and new.lora.targets == ("q_proj",)
    assert new.exact_n is None and new.lora.r == cfg.lora.r and cfg.lora.lr != 1.0  # a copy
    for bad, match in [
        ({"lora": 3}, "is a group"),
        ({"sketch_dim": 100}, "multiple of 16"),
        ({"ground_truth": "lorra"}, "one of"),
        ({"lora": {"steps": 0}}, "positive"),
        ({"exact_n": 2.5}, "exact_n"),
        ({"lora": {"lr": float("nan")}}, "finite"),
    ]:
        with pytest.raises(InputError, match=match):
            apply_settings(cfg, bad)


def test_record_is_written_before_figures(tmp_path, monkeypatch):
    """A figure that cannot be drawn (missing extra) never costs the record."""
    cfg = configure("verbalizer", quick=True)
    drawn = []

    def failing(path):
        raise MissingExtraError("matplotlib", "report")

    def run(config, out_dir):
        assert config is cfg
        return Result(
            "verbalizer", dataclasses.asdict(config), {"x": 1.5}, 0.1, figures={"a.png": failing, "b.png": drawn.append}
        )

    import types

    monkeypatch.setitem(sys.modules, "updatescope.experiments._fake_runner", types.SimpleNamespace(run=run))
    monkeypatch.setitem(REGISTRY, "verbalizer", dataclasses.replace(REGISTRY["verbalizer"], module="_fake_runner"))
    warnings = []
    rec = run_experiment(cfg, tmp_path / "r.json", warn=warnings.append)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["metrics"] == {"x": 1.5, "figures": ["a.png", "b.png"]} == rec["metrics"]
    assert len(warnings) == 1 and "updatescope[report]" in warnings[0] and not drawn


def test_library_sets_no_global_state(tmp_path, monkeypatch):
    """The lab seeds torch's generator on a fork: the caller's random state is untouched."""
    import torch

    from updatescope.locallinear.lab import LabConfig, synthetic_recovery
    from updatescope.locallinear.synthetic import ModelConfig

    monkeypatch.setenv("UPDATESCOPE_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    lab = LabConfig(
        model=ModelConfig(n_layer=1, d_model=16, n_head=2, seq_len=3),
        mt_steps=3,
        forget_cap=2,
        recover_steps=2,
        dense_steps=2,
        snapshot_every=2,
        eval_n=4,
    )
    synthetic_recovery(lab)
    assert torch.equal(torch.rand(3), expected) and torch.get_num_threads() == threads


def test_imports_run_one_way():
    """Nothing below the shell imports the shell (experiments, report, demo, cli, commands),
    and the torch-free base imports nothing of ours but the base."""
    import ast
    from pathlib import Path

    import updatescope

    root = Path(updatescope.__file__).parent
    shell = (
        "updatescope.experiments",
        "updatescope.report",
        "updatescope.demo",
        "updatescope.cli",
        "updatescope.commands",
        "updatescope.__main__",
    )
    base = {"constants", "paths", "errors", "_version", "records", "__init__"}
    problems = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        module = "updatescope." + ".".join(rel.parts)
        in_shell = module.startswith(shell)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if not name.startswith("updatescope"):
                    continue
                if not in_shell and name.startswith(shell):
                    problems.append(f"{module} imports {name}")
                if rel.parts[0] in base and len(rel.parts) == 1 and rel.parts[0] != "__init__":
                    top = name.split(".")[1] if "." in name else ""
                    if top and top not in base:
                        problems.append(f"base module {module} imports {name}")
    assert not problems, problems


def test_a_diverged_run_ends_in_one_line(monkeypatch, tmp_path, capsys):
    """An experiment whose training diverges (the lab raises FloatingPointError on a NaN
    loss) ends with one line and exit 1, not a traceback; nothing is written."""
    import updatescope.experiments.random_search as rs
    from updatescope.cli import main

    def diverge(config, out_dir):
        raise FloatingPointError("recover: loss is nan at step 5")

    monkeypatch.setattr(rs, "run", diverge)
    out = tmp_path / "r.json"
    assert main(["reproduce", "random-search", "--quick", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "loss is nan" in err and not out.exists()
