"""``python -m build`` gives an sdist and a wheel without warnings, and the wheel alone runs the
README quickstart: installed non-editable into a fresh virtual environment, run from a folder
outside the repository, with nothing of the checkout on its path."""

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from test_readme import quickstart_lines

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    pytest.importorskip("build", reason="the 'build' package is not installed: python -m pip install build")
    out = tmp_path_factory.mktemp("dist")
    # PYTHONDONTWRITEBYTECODE makes setuptools warn that it skips byte-compiling: a setting of
    # the caller's environment, not of the project
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = _run([sys.executable, "-m", "build", "--no-isolation", "-o", str(out), str(ROOT)], env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    warnings = [ln for ln in (run.stdout + run.stderr).splitlines() if re.search(r"warn|deprecat", ln, re.I)]
    assert warnings == [], "python -m build warned:\n" + "\n".join(warnings)
    return out


def test_build_gives_an_sdist_and_a_wheel(dist):
    assert len(list(dist.glob("updatescope-*.tar.gz"))) == 1
    assert len(list(dist.glob("updatescope-*-py3-none-any.whl"))) == 1


def test_installed_wheel_runs_the_quickstart_outside_the_repo(dist, tmp_path):
    pytest.importorskip("transformers")
    try:
        from updatescope.models.smollm2 import smollm2_gguf_path

        smollm2_gguf_path()
    except Exception as exc:  # the packaged model is part of `make` set-up
        pytest.skip(f"packaged SmolLM2 not installed: {exc}")
    wheel = next(dist.glob("updatescope-*.whl"))
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120).returncode == 0
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # the dependencies (torch, transformers, the packaged model) come from this environment's
    # site-packages, added as a plain path: its .pth files, the editable install's among them,
    # are not run, so src/ never reaches the new environment's path
    deps = Path(sysconfig.get_path("purelib"))
    (site / "reuse_dependencies.pth").write_text(f"{deps}\n")
    install = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)]
    run = _run(install, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = _run(
        [str(py), "-c", "import updatescope, sys; print(updatescope.__file__); print(sys.path)"], cwd=work, env=env
    )
    assert where.returncode == 0, where.stderr
    file, path = where.stdout.splitlines()[:2]
    assert Path(file).resolve().is_relative_to(site.resolve()), file
    assert not Path(file).resolve().is_relative_to(ROOT), file
    assert str(ROOT / "src") not in path

    exe, printed = venv / "bin" / "updatescope", {}
    for line in quickstart_lines():
        argv = shlex.split(line)
        assert argv[0] == "updatescope"
        run = _run([str(exe), *argv[1:], *(["--quiet"] if argv[1] == "sketch" else [])], cwd=work, env=env, timeout=300)
        assert run.returncode == 0, f"{line}: {run.stderr}"
        printed[argv[1]] = run.stdout
    assert "http" in printed["rank"] and "space" in printed["rank"]
    for name in ("email", "http", "space"):
        assert (work / f"{name}.safetensors").stat().st_size > 100_000
