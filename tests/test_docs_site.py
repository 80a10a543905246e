"""The documentation site builds with ``mkdocs build --strict`` (broken links, missing pages and
unresolved API references fail) and holds the home page, the guides and a rendered API page."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the 'docs' extra): the site is not built")
    pytest.importorskip("material", reason="mkdocs-material is not installed (the 'docs' extra)")
    pytest.importorskip(
        "mkdocstrings_handlers.python", reason="mkdocstrings-python is not installed (the 'docs' extra)"
    )
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    yield out
    shutil.rmtree(out, ignore_errors=True)


def _text(page: Path) -> str:
    return re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))


def test_home_page_links_every_guide(site):
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "FisherSketch" in html and "make demo" in _text(site / "index.html")
    for guide in ("guide-rank", "guide-select", "guide-banks", "guide-scale", "guide-network", "guide-steering"):
        assert f'href="{guide}.html"' in html, guide
        assert (site / f"{guide}.html").is_file()
    assert 'href="guide-lab.html"' in html and 'href="guide-reproduce.html"' in html


def test_guide_shows_the_quickstart_commands(site):
    text = _text(site / "guide-rank.html")
    assert "updatescope sketch --model smollm2 --data email.jsonl" in text
    assert "updatescope rank --target email.safetensors" in text


def test_results_pages_carry_the_generated_tables(site):
    assert "FisherSketch A_F" in _text(site / "evidence.html")
    assert "stack/spread (default)" in _text(site / "accuracy.html")
    assert (site / "results.html").is_file() and (site / "locallinear.html").is_file()


def test_api_page_renders_signatures_from_docstrings(site):
    html = (site / "api-sketch.html").read_text(encoding="utf-8")
    assert 'id="updatescope.sketch.FisherSketch"' in html
    assert 'class="doc-signature' in html  # a rendered call signature, not just a name
    assert "sketch_dim" in _text(site / "api-sketch.html")


def test_site_fetches_nothing_at_view_time(site):
    """Offline: no web fonts, no CDN scripts or styles, no analytics."""
    for page in site.glob("*.html"):
        html = page.read_text(encoding="utf-8")
        for tag in re.findall(r"<(?:link|script|img)\b[^>]*>", html):
            assert not re.search(r"(?:src|href)=\"(?:https?:)?//", tag), f"{page.name}: {tag}"


def test_reproduce_guide_lists_every_registered_experiment():
    import re

    from updatescope.experiments import REGISTRY

    text = (ROOT / "docs" / "guide-reproduce.md").read_text()
    listed = set(re.findall(r"^\| `([\w-]+)` \|", text, re.M))
    assert listed == set(REGISTRY), (set(REGISTRY) - listed, listed - set(REGISTRY))
