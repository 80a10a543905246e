"""HTML reports of the user's own rankings: ``rank``, ``index query`` and ``select`` with
``--report DIR``.  The page is self-contained (every image inlined, no external reference),
text from signature metadata and documents is escaped, and a bad folder is refused first."""

import json
from html.parser import HTMLParser

import pytest
import torch

import updatescope as us
from updatescope.cli import main
from updatescope.models.head_tasks import HeadTaskFamily

pytest.importorskip("matplotlib")

HOSTILE = "<script>alert(1)</script>"
M = 256


class _Refs(HTMLParser):
    """Every tag and every src/href attribute of a page."""

    def __init__(self):
        super().__init__()
        self.tags, self.refs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.refs += [v for k, v in attrs if k in ("src", "href")]


def _check_page(path):
    """The page parses, has inlined PNGs only, and no script element (escaped text stays text)."""
    text = path.read_text(encoding="utf-8")
    p = _Refs()
    p.feed(text)
    assert "script" not in p.tags and "<script>" not in text
    assert p.refs and all(r.startswith("data:image/png;base64,") for r in p.refs), p.refs[:3]
    return text, p


@pytest.fixture(scope="module")
def sigs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sigs")
    fam = HeadTaskFamily(act_dim=16, out_dim=64)
    paths = {}
    for c, b in ((0, 0), (0, 1), (1, 0), (2, 2)):
        name = f"c{c}b{b}" if (c, b) != (2, 2) else HOSTILE
        sig = (
            us.FisherSketch(16, 64, sketch_dim=M, seed=0)
            .update_logits(*fam.sample(c, b, 300, seed=10 * c + b))
            .signature(name=name)
        )
        paths[f"c{c}b{b}"] = us.save_signature(sig, d / f"c{c}b{b}.safetensors")
    target = (
        us.FisherSketch(16, 64, sketch_dim=M, seed=0)
        .update_logits(*fam.sample(0, 0, 300, seed=99))
        .signature(name="target & co")
    )
    paths["target"] = us.save_signature(target, d / "target.safetensors")
    return paths


def test_rank_report_is_self_contained_and_escaped(sigs, tmp_path, capsys):
    rep = tmp_path / "rep"
    srcs = [str(sigs[k]) for k in ("c0b1", "c1b0", "c2b2", "c0b0")]
    assert main(["rank", "--target", str(sigs["target"]), *srcs, "--json", "--report", str(rep)]) == 0
    out, err = capsys.readouterr()
    ranking = json.loads(out)  # stdout stays pure JSON; the report path goes to stderr
    assert ranking["rows"][0]["source"] == "c0b0" and "index.html" in err
    text, _ = _check_page(rep / "index.html")
    # heatmaps over target + sources, one decomposition bar chart, the key
    assert {p.name for p in rep.glob("*.png")} == {
        "heatmap_fisher.png",
        "heatmap_activation.png",
        "heatmap_error.png",
        "bars_00.png",
    }
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "target &amp; co" in text
    assert "What the numbers mean" in text and "coupling" in text
    for row in ranking["rows"]:  # every ranked source is in the table, best first
        assert text.index(f"{row['fisher']:.3f}") > 0
    # without --json the table prints and the path follows on stdout
    assert main(["rank", "--target", str(sigs["target"]), *srcs, "--report", str(rep)]) == 0
    assert "report:" in capsys.readouterr().out


def test_report_folder_refused_before_work(sigs, tmp_path, capsys):
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    for argv in (
        ["rank", "--target", str(sigs["target"]), str(sigs["c0b1"]), "--report", str(afile)],
        ["rank", "--target", str(sigs["target"]), str(sigs["c0b1"]), "--report", str(sigs["c0b1"])],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("updatescope: error:"), err
    assert afile.read_text() == "x"


def test_index_query_report(sigs, tmp_path, capsys):
    assert (
        main(
            [
                "index",
                "build",
                *[str(sigs[k]) for k in ("c0b0", "c0b1", "c1b0", "c2b2")],
                "--out",
                str(tmp_path / "bank"),
            ]
        )
        == 0
    )
    rep = tmp_path / "qrep"
    assert (
        main(
            [
                "index",
                "query",
                str(tmp_path / "bank"),
                "--target",
                str(sigs["target"]),
                "--top",
                "2",
                "--report",
                str(rep),
            ]
        )
        == 0
    )
    capsys.readouterr()
    text, p = _check_page(rep / "index.html")
    assert "bank entries for target &amp; co" in text and "c0b0" in text
    assert len(p.refs) == 1 and (rep / "bars_00.png").exists()  # no matrix here: bars only
    assert "<th>fisher</th>" in text and "What the numbers mean" in text


def test_select_report_shows_top_documents_and_histogram(tmp_path, capsys):
    from test_cli import _save_tiny
    from updatescope.models.hf import load_causal_lm
    from updatescope.pipeline import SketchOptions, sketch_corpus

    path = _save_tiny(tmp_path / "m", 0)
    model, tok = load_causal_lm(str(path))
    g = torch.Generator().manual_seed(0)
    code = "def return class import self if else x y z ( ) : = +".split()
    prose = "the a of to and in is it for on with as at by".split()
    docs = [
        " ".join((code if i % 2 else prose)[int(j)] for j in torch.randint(0, 14, (30,), generator=g)) for i in range(8)
    ]
    docs[1] = HOSTILE + " " + docs[1]  # a document whose text is markup
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    us.save_signature(
        sketch_corpus(model, tok, docs[3::2], SketchOptions(sketch_dim=M), progress=False), tmp_path / "t.safetensors"
    )
    rep = tmp_path / "srep"
    assert (
        main(
            [
                "select",
                "--model",
                str(path),
                "--data",
                str(pool),
                "--target",
                str(tmp_path / "t.safetensors"),
                "--top",
                "3",
                "--out",
                str(tmp_path / "sub.jsonl"),
                "--quiet",
                "--token-budget",
                "128",
                "--report",
                str(rep),
            ]
        )
        == 0
    )
    capsys.readouterr()
    text, p = _check_page(rep / "index.html")
    top = [json.loads(x) for x in (tmp_path / "sub.jsonl").read_text().splitlines()]
    assert len(p.refs) == 1 and (rep / "score_histogram.png").exists()
    assert "Top 3 of 8 documents" in text
    for r in top:  # every kept document's score and (escaped) text prefix is in the table
        assert f"{r['score']:.3f}" in text
    assert "&lt;script&gt;" in text or all(r["index"] != 1 for r in top)
    assert "by the error-only score" not in text
    # ordered by a marginal: the page says so, and its top rows are that column's largest
    argv = ["select", "--model", str(path), "--data", str(pool), "--target", str(tmp_path / "t.safetensors")]
    argv += ["--top", "3", "--out", str(tmp_path / "sub_e.jsonl"), "--quiet", "--by", "error"]
    assert main([*argv, "--report", str(tmp_path / "erep")]) == 0
    capsys.readouterr()
    text, _ = _check_page(tmp_path / "erep" / "index.html")
    assert "Top 3 of 8 documents for target t by the error-only score" in text and "ordered by" in text
    for r in (json.loads(x) for x in (tmp_path / "sub_e.jsonl").read_text().splitlines()):
        assert f"{r['error']:.3f}" in text
    # the report folder must not be one of the inputs or outputs
    assert (
        main(
            [
                "select",
                "--model",
                str(path),
                "--data",
                str(pool),
                "--target",
                str(tmp_path / "t.safetensors"),
                "--top",
                "3",
                "--out",
                str(tmp_path / "s2.jsonl"),
                "--report",
                str(pool),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "s2.jsonl").exists()


def test_write_report_escapes_every_field(tmp_path):
    """The writer itself: title, meta, document text and source names are all escaped."""
    from updatescope.report.html import DocumentView, write_report

    view = DocumentView(
        HOSTILE,
        (
            {
                "rank": 1,
                "score": 0.5,
                "score_se": 0.1,
                "activation": 0.2,
                "error": 0.3,
                "tokens": 12,
                "short": False,
                "source": f"/x/{HOSTILE}.txt",
                "index": 0,
                "text": HOSTILE * 3,
            },
        ),
        (0.5, 0.1, float("nan"), -0.2),
    )
    path = write_report(tmp_path / "r", title=HOSTILE, meta={HOSTILE: HOSTILE}, documents=view)
    text, _ = _check_page(path)
    assert text.count("&lt;script&gt;") >= 5 and "score" in text


def test_report_of_rankings_by_a_marginal_says_so_and_keeps_the_fisher_summary(sigs, tmp_path):
    from updatescope.report.html import write_report

    target = us.load_signature(sigs["target"])
    sources = {k: us.load_signature(sigs[k]) for k in ("c0b1", "c1b0", "c2b2", "c0b0")}
    rankings = [us.rank_sources(target, sources, target_name=t, by="error") for t in ("t1", "t2")]
    path = write_report(tmp_path / "r", title="by error", meta={}, rankings=rankings)
    text, _ = _check_page(path)
    assert text.count("ranked by error-only") == 2
    best = max(rankings[0].rows, key=lambda r: r.fisher)  # the summary's fisher column, whatever the order
    summary = text[text.index("Summary: best source") : text.index("Ranked sources per target")]
    assert f"<td>{best.source}</td><td class='num'>{best.fisher:.3f}" in summary


def _chromium():
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium (make setup installs Debian's chromium)")
def test_rank_report_renders_in_a_headless_browser(sigs, tmp_path, capsys):
    """The report as a reader sees it: Chromium loads the page from disk (no network, no
    script), and its screenshot shows the inlined figures: the page is taller than one
    screen and a good part of it is the figures' colours, not white page or black text.
    A page whose images fail to decode shows only text (the control: < 1% coloured; the real page measured 8%)."""
    import subprocess

    import matplotlib.image as mpimg

    rep = tmp_path / "rep"
    srcs = [str(sigs[k]) for k in ("c0b1", "c1b0", "c2b2", "c0b0")]
    assert main(["rank", "--target", str(sigs["target"]), *srcs, "--report", str(rep)]) == 0
    capsys.readouterr()
    broken = tmp_path / "broken.html"  # the same page with every image's data cut: the control
    text = (rep / "index.html").read_text(encoding="utf-8")
    broken.write_text(text.replace("data:image/png;base64,", "data:image/png;base64,AAAA"), encoding="utf-8")

    def coloured_share(page):
        shot = tmp_path / f"{page.stem}.png"
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / ('profile_' + page.stem)}",
            "--hide-scrollbars",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            page.as_uri(),
        ]
        subprocess.run([_chromium(), *flags], capture_output=True, timeout=120, check=False)
        img = mpimg.imread(shot)[..., :3]  # floats in [0, 1]
        saturation = img.max(-1) - img.min(-1)
        return float((saturation > 0.25).mean())

    good, bad = coloured_share(rep / "index.html"), coloured_share(broken)
    print(f"coloured share: page {good:.3f}, broken control {bad:.4f}")
    assert good > 0.03 and bad < 0.01
