"""Self-contained HTML reports: heatmaps, decomposition bars, ranked tables, and a key.

One writer (:func:`write_report`) serves every command that ranks something: ``demo`` (many
targets, similarity matrices), ``rank`` / ``index query`` (one target; head or network
signatures) and ``select`` (documents).  Each kind of content is one optional section; the
page shows the sections whose inputs were given, then the key to the numbers it shows.
Figures are PNGs written atomically next to ``index.html`` and also inlined in it (base64),
so the page needs no other file.  Every string that can come from a file (names, metadata,
document text) is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.records import write_bytes_atomic, write_text_atomic

__all__ = [
    "KEY",
    "NETWORK_KEY",
    "DOCUMENT_KEY",
    "REPORT_MARKER",
    "DocumentView",
    "NetworkView",
    "check_report_folder",
    "write_report",
]

#: File written into every report folder: a folder holding it may be written again.
REPORT_MARKER = ".updatescope-report"


def check_report_folder(out_dir: Path) -> None:
    """UpdatescopeError unless ``out_dir`` is missing, empty, or holds ``REPORT_MARKER``: a
    report never overwrites files that updatescope did not write."""
    from updatescope.errors import UpdatescopeError

    out_dir = Path(out_dir)
    if not out_dir.is_dir() or (out_dir / REPORT_MARKER).is_file():
        return
    try:
        found = sorted(p.name for p in out_dir.iterdir())
    except OSError as exc:
        raise UpdatescopeError(
            f"cannot list the report folder ({exc.strerror or type(exc).__name__}): {out_dir}"
        ) from None
    if found:
        what = "index.html" if "index.html" in found else found[0]
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        raise UpdatescopeError(
            f"report folder {out_dir} is not empty ({what}{more}) and was not written by updatescope; "
            "give a new or empty folder"
        )


KEY = [
    (
        "fisher",
        "Estimated head Fisher alignment A_F: the cosine between the two corpora's head-gradient "
        "second moments. High means fine-tuning on the source moves the head the way the target needs. "
        "This is the default ranking score (`--by error` or `--by activation` orders by a marginal instead).",
    ),
    (
        "activation-only",
        "Scov(M_a): similarity of the head inputs' second moments (what representation "
        "metrics such as CKA see). Blind to which tokens follow.",
    ),
    (
        "error-only",
        "Scov(Γ_e): similarity of the prediction-error second moments — which next tokens the "
        "model gets wrong, and how.",
    ),
    (
        "coupling",
        "ρ = A_F / (activation × error). 1 when activations and errors are independent; far from "
        "1 means the joint geometry differs from the product of the marginals, so neither marginal ranks "
        "sources alone.",
    ),
    (
        "± values",
        "Standard errors: sketch error (jackknife over random-feature blocks) and sampling error "
        "(two halves of each stream) combined.",
    ),
    (
        "values above 1",
        "Norms are unbiased (self-pairs excluded), so two samples of nearly the same "
        "distribution can score slightly above 1: read it as 'indistinguishable from the target'.",
    ),
    (
        "regime",
        "activation-dark: activation similarity is flat across candidates, the error geometry "
        "carries the signal; error-dark: the converse; coupled: only the joint score ranks correctly; "
        "separable: fisher ≈ activation × error.",
    ),
]

NETWORK_KEY = [
    (
        "full",
        "Estimated full Fisher alignment A_F over all sketched layers (the layers' gradients taken "
        "together, cross-layer terms included). This is the ranking score for network signatures.",
    ),
    (
        "block-diagonal",
        "A_BD: the alignment of the block-diagonal Fishers (each layer on its own, "
        "cross-layer terms dropped, as K-FAC-style approximations do).",
    ),
    (
        "per-block alignment a_b",
        "The alignment of the two tasks' Fisher blocks of one layer: the "
        "alignment-vs-layer figure plots it in layer order.",
    ),
    (
        "profile cosine π",
        "Agreement of where the two tasks put their gradient energy across layers "
        "(cosine of the per-layer Fisher norms). A_BD is π times a weighted mean of the a_b, so a small π "
        "caps A_BD even when every layer is aligned.",
    ),
    (
        "off-diagonal share ω",
        "Share of a task's squared Fisher norm in cross-layer blocks. The bound: "
        "|A_F − A_BD| ≤ 2 max(ω_S, ω_T); small shares mean the block-diagonal view is faithful.",
    ),
    ("discrepancy", "A_F − A_BD: what the block-diagonal view misses."),
    ("± values", "Standard errors as for the head sketch: feature-block jackknife plus stream halves."),
]

DOCUMENT_KEY = [
    (
        "score",
        "A document's estimated contribution to the pool's Fisher alignment with the target: its "
        "joint features against the target's mean embedding, normalised by its length so documents of "
        "different lengths compare (see updatescope.select.documents).",
    ),
    ("activation / error", "The same score on the activation-only and error-only features."),
    ("short", "Fewer counted tokens than --min-tokens: the score is noisy; read it with its ± value."),
    ("± values", "Standard error of the score from the spread of the document's per-token features."),
]


@dataclass(frozen=True)
class NetworkView:
    """Network-signature comparisons for one target: ``rows`` = (source name,
    ``network.NetworkAlignment``) best first; ``layers`` the block names in order."""

    target: str
    layers: tuple[str, ...]
    rows: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class DocumentView:
    """Document selection for one target: ``top`` records best first (keys rank, score,
    score_se, activation, error, tokens, short, source, index, text) and ``scores`` of every
    document of the pool (for the histogram), both in the field ``by`` that ordered them."""

    target: str
    top: tuple[Mapping[str, Any], ...]
    scores: tuple[float, ...]
    by: str = "score"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1d1d1f;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0 1.2rem;font-size:.88rem}
th,td{border:1px solid #ddd;padding:.25rem .55rem;text-align:left} th{background:#f4f4f6}
td.num{text-align:right;font-variant-numeric:tabular-nums} img{max-width:100%;height:auto}
td.text{max-width:40rem;font-size:.8rem;white-space:pre-wrap;word-break:break-word}
.meta{color:#555;font-size:.9rem} .regime{display:inline-block;padding:.05rem .5rem;border-radius:.6rem;
background:#eef;font-size:.85rem} dl dt{font-weight:600;margin-top:.5rem} dl dd{margin-left:1rem}
details{margin:.4rem 0} summary{cursor:pointer;font-weight:600}
.grid{display:flex;flex-wrap:wrap;gap:1rem} .grid img{max-width:580px;flex:1 1 480px}
"""

_TEXT_CHARS = 300  # document text shown per row


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _f(x: Any, se: Any = None) -> str:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "n/a"
    if se is None or not isinstance(se, (int, float)) or not math.isfinite(se):
        return f"{x:.3f}"
    return f"{x:.3f} <small>± {se:.3f}</small>"


class _Figures:
    """Draws each figure in a private temporary folder, then writes it atomically into the
    report folder and returns the inlined ``<img>`` tag."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    def img(self, name: str, draw: Callable[[Path], Any], alt: str) -> str:
        with tempfile.TemporaryDirectory(prefix=".updatescope-fig.") as tmp:
            p = Path(tmp) / name
            draw(p)
            data = p.read_bytes()
        write_bytes_atomic(data, self.out_dir / name)
        return f'<img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _summary(rankings: Sequence[Any], families: Mapping[str, str] | None) -> list[str]:
    parts = [
        "<h2>Summary: best source for each target</h2><table><tr><th>target</th><th>family</th>"
        "<th>best source (fisher)</th><th>fisher</th><th>best by activation-only</th>"
        "<th>best by error-only</th><th>regime</th></tr>"
    ]
    for rk in rankings:
        if not rk.rows:
            continue
        rows = rk.rows
        best = max(rows, key=lambda r: r.fisher if math.isfinite(r.fisher) else -math.inf)  # whatever the order
        by_act = max(rows, key=lambda r: r.activation if math.isfinite(r.activation) else -math.inf)
        by_err = max(rows, key=lambda r: r.error if math.isfinite(r.error) else -math.inf)
        fam = (families or {}).get(rk.target, "")
        parts.append(
            f"<tr><td>{_e(rk.target)}</td><td>{_e(fam)}</td><td>{_e(best.source)}</td>"
            f"<td class='num'>{_f(best.fisher, best.fisher_se)}</td><td>{_e(by_act.source)}</td>"
            f"<td>{_e(by_err.source)}</td><td><span class='regime'>{_e(rk.regime)}</span></td></tr>"
        )
    parts.append("</table>")
    return parts


def _matrices(figs: _Figures, names: Sequence[str], matrices: Mapping[str, np.ndarray]) -> list[str]:
    from updatescope.report.figures import heatmaps

    tags = [
        figs.img(f"heatmap_{k}.png", lambda p, k=k: heatmaps(list(names), {k: matrices[k]}, p), f"heatmap {k}")
        for k in ("fisher", "activation", "error")
        if k in matrices
    ]
    return [
        "<h2>Similarity matrices</h2><p>Rows are targets, columns candidate sources.</p>"
        "<div class='grid'>" + "".join(tags) + "</div>"
    ]


def _rankings(figs: _Figures, rankings: Sequence[Any]) -> list[str]:
    from updatescope.report.figures import decomposition_bars

    parts = ["<h2>Ranked sources per target</h2>"]
    for i, rk in enumerate(rankings):
        rows = [r.as_dict() for r in rk.rows]
        parts.append(
            f"<details{' open' if i == 0 else ''}><summary>{_e(rk.target)} — "
            + ("" if rk.by == "fisher" else f"ranked by {_e(rk.by)}-only — ")
            + f"<span class='regime'>{_e(rk.regime)}</span></summary>"
        )
        parts.append(
            f"<p>{_e(rk.explanation)}</p><table><tr><th>#</th><th>source</th><th>fisher</th>"
            "<th>activation-only</th><th>error-only</th><th>coupling</th><th>n</th><th>note</th></tr>"
        )
        for j, r in enumerate(rk.rows, 1):
            parts.append(
                f"<tr><td class='num'>{j}</td><td>{_e(r.source)}</td>"
                f"<td class='num'>{_f(r.fisher, r.fisher_se)}</td>"
                f"<td class='num'>{_f(r.activation, r.activation_se)}</td>"
                f"<td class='num'>{_f(r.error, r.error_se)}</td><td class='num'>{_f(r.coupling, r.coupling_se)}</td>"
                f"<td class='num'>{r.n_source}</td><td>{_e(r.note)}</td></tr>"
            )
        parts.append("</table>")
        for name, why in dict(getattr(rk, "skipped", {})).items():
            parts.append(f"<p class='meta'>not ranked: {_e(name)} ({_e(why)})</p>")
        if rows:
            parts.append(
                figs.img(
                    f"bars_{i:02d}.png",
                    lambda p, rk=rk, rows=rows: decomposition_bars(rk.target, rows, p),
                    f"decomposition for {rk.target}",
                )
            )
        parts.append("</details>")
    return parts


_MAX_PROFILES = 8  # sources drawn in the alignment-vs-layer figure and the profile table


def _network(figs: _Figures, view: NetworkView) -> list[str]:
    from updatescope.report.figures import layer_profiles

    parts = [
        f"<h2>Network signatures: sources for target {_e(view.target)}</h2>",
        "<table><tr><th>#</th><th>source</th><th>full A_F</th><th>block-diagonal</th><th>profile cosine</th>"
        "<th>off-diagonal share (source / target)</th><th>discrepancy</th><th>bound on A_F</th></tr>",
    ]
    for j, (src, al) in enumerate(view.rows, 1):
        se = dict(al.se)
        parts.append(
            f"<tr><td class='num'>{j}</td><td>{_e(src)}</td><td class='num'>{_f(al.full, se.get('full'))}</td>"
            f"<td class='num'>{_f(al.block_diagonal, se.get('block_diagonal'))}</td>"
            f"<td class='num'>{_f(al.profile_cosine, se.get('profile_cosine'))}</td>"
            f"<td class='num'>{_f(al.offdiag_share_source)} / {_f(al.offdiag_share_target)}</td>"
            f"<td class='num'>{_f(al.discrepancy, se.get('discrepancy'))}</td>"
            f"<td class='num'>[{_f(al.bound_lower)}, {_f(al.bound_upper)}]</td></tr>"
        )
    parts.append("</table>")
    shown = view.rows[:_MAX_PROFILES]
    if shown:
        profiles = {src: list(al.profile) for src, al in shown}
        ses = {src: [dict(al.se).get(f"profile[{b}]", float("nan")) for b in view.layers] for src, al in shown}
        parts.append("<h2>Alignment vs layer</h2>")
        parts.append(
            figs.img(
                "alignment_vs_layer.png",
                lambda p: layer_profiles(
                    view.layers, profiles, p, ses=ses, title=f"per-block alignment with target {view.target}"
                ),
                "alignment vs layer",
            )
        )
        parts.append(
            "<details><summary>per-block alignment table</summary><table><tr><th>layer</th>"
            + "".join(f"<th>{_e(src)}</th>" for src, _ in shown)
            + "</tr>"
        )
        for b, layer in enumerate(view.layers):
            cells = "".join(
                f"<td class='num'>{_f(al.profile[b], dict(al.se).get(f'profile[{layer}]'))}</td>" for _, al in shown
            )
            parts.append(f"<tr><td>{_e(layer)}</td>{cells}</tr>")
        parts.append("</table></details>")
    return parts


def _documents(figs: _Figures, view: DocumentView) -> list[str]:
    from updatescope.report.figures import score_histogram

    kept = [float(r[view.by]) for r in view.top if isinstance(r.get(view.by), (int, float))]
    thr = min(kept) if kept else None
    which = "" if view.by == "score" else f" by the {view.by}-only score"
    parts = [
        f"<h2>Top {len(view.top)} of {len(view.scores)} documents for target {_e(view.target)}{_e(which)}</h2>",
        figs.img(
            "score_histogram.png",
            lambda p: score_histogram(view.scores, p, threshold=thr),
            f"histogram of document scores{which}",
        ),
        "<table><tr><th>#</th><th>score</th><th>activation</th><th>error</th><th>tokens</th><th>short</th>"
        "<th>source</th><th>index</th><th>text</th></tr>",
    ]
    for r in view.top:
        text = str(r.get("text", ""))
        if len(text) > _TEXT_CHARS:
            text = text[:_TEXT_CHARS] + "…"
        parts.append(
            f"<tr><td class='num'>{_e(r.get('rank', ''))}</td><td "
            f"class='num'>{_f(r.get('score'), r.get('score_se'))}</td>"
            f"<td class='num'>{_f(r.get('activation'))}</td><td class='num'>{_f(r.get('error'))}</td>"
            f"<td class='num'>{_e(r.get('tokens', ''))}</td><td>{'yes' if r.get('short') else ''}</td>"
            f"<td>{_e(Path(str(r.get('source', ''))).name)}</td><td class='num'>{_e(r.get('index', ''))}</td>"
            f"<td class='text'>{_e(text)}</td></tr>"
        )
    parts.append("</table>")
    return parts


def write_report(
    out_dir: Path,
    *,
    title: str,
    meta: Mapping[str, Any],
    rankings: Sequence[Any] = (),
    names: Sequence[str] = (),
    matrices: Mapping[str, np.ndarray] | None = None,
    families: Mapping[str, str] | None = None,
    network: NetworkView | None = None,
    documents: DocumentView | None = None,
) -> Path:
    """Write ``out_dir/index.html`` (figures inlined) plus the PNGs; returns the HTML path.

    rankings: ``select.rank.Ranking`` objects, one per target (head signatures); a summary
    table is shown when there are several.  names + matrices: name -> (n, n) array, rows
    targets, columns sources (diagonal ignored) for the heatmaps.  network: per-layer
    comparisons (network signatures).  documents: document selection.  Sections without
    inputs are left out; the key lists the quantities the page shows.
    """
    out_dir = Path(out_dir)
    check_report_folder(out_dir)  # also checked by the commands before any work
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(
        "written by updatescope: this folder's report may be replaced by the next one\n", out_dir / REPORT_MARKER
    )
    figs = _Figures(out_dir)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>",
        "<p class='meta'>" + " · ".join(f"{_e(k)}: {_e(v)}" for k, v in meta.items()) + "</p>",
    ]
    if len(rankings) > 1:
        parts += _summary(rankings, families)
    if matrices:
        parts += _matrices(figs, names, matrices)
    if rankings:
        parts += _rankings(figs, rankings)
    if network is not None:
        parts += _network(figs, network)
    if documents is not None:
        parts += _documents(figs, documents)
    key = (
        (KEY if rankings or matrices else [])
        + (NETWORK_KEY if network is not None else [])
        + (DOCUMENT_KEY if documents is not None else [])
    )
    parts.append("<h2>What the numbers mean</h2><dl>")
    for k, v in key:
        parts.append(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>")
    parts.append("</dl></body></html>")
    return write_text_atomic("\n".join(parts), out_dir / "index.html")
