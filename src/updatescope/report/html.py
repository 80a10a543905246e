"""A self-contained HTML report: heatmaps, decomposition bars, ranked tables, and a key."""
from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from updatescope.records import write_text_atomic
from updatescope.report.figures import decomposition_bars, heatmaps

KEY = [
    ("fisher", "Estimated head Fisher alignment A_F: the cosine between the two corpora's head-gradient "
     "second moments. High means fine-tuning on the source moves the head the way the target needs. "
     "This is the ranking score."),
    ("activation-only", "Scov(M_a): similarity of the head inputs' second moments (what representation "
     "metrics such as CKA see). Blind to which tokens follow."),
    ("error-only", "Scov(Γ_e): similarity of the prediction-error second moments — which next tokens the "
     "model gets wrong, and how."),
    ("coupling", "ρ = A_F / (activation × error). 1 when activations and errors are independent; far from "
     "1 means the joint geometry differs from the product of the marginals, so neither marginal ranks "
     "sources alone."),
    ("± values", "Standard errors: sketch error (jackknife over random-feature blocks) and sampling error "
     "(two halves of each stream) combined."),
    ("values above 1", "Norms are unbiased (self-pairs excluded), so two samples of nearly the same "
     "distribution can score slightly above 1: read it as 'indistinguishable from the target'."),
    ("regime", "activation-dark: activation similarity is flat across candidates, the error geometry "
     "carries the signal; error-dark: the converse; coupled: only the joint score ranks correctly; "
     "separable: fisher ≈ activation × error."),
]


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def _f(x: float, se: float | None = None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.3f}" if se is None or not math.isfinite(se) else f"{x:.3f} <small>± {se:.3f}</small>"


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1d1d1f;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0 1.2rem;font-size:.88rem}
th,td{border:1px solid #ddd;padding:.25rem .55rem;text-align:left} th{background:#f4f4f6}
td.num{text-align:right;font-variant-numeric:tabular-nums} img{max-width:100%;height:auto}
.meta{color:#555;font-size:.9rem} .regime{display:inline-block;padding:.05rem .5rem;border-radius:.6rem;
background:#eef;font-size:.85rem} dl dt{font-weight:600;margin-top:.5rem} dl dd{margin-left:1rem}
details{margin:.4rem 0} summary{cursor:pointer;font-weight:600}
.grid{display:flex;flex-wrap:wrap;gap:1rem} .grid img{max-width:580px;flex:1 1 480px}
"""


def write_report(out_dir: Path, names: Sequence[str], matrices: dict[str, np.ndarray], rankings: Sequence[Any],
                 *, title: str, meta: dict[str, str], families: dict[str, str] | None = None) -> Path:
    """Write ``out_dir/index.html`` (figures embedded) plus the PNGs; returns the HTML path.

    matrices: name -> (n, n) array, rows targets, columns sources (diagonal ignored).
    rankings: ``Ranking`` objects, one per target.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    heat = [heatmaps(names, {k: matrices[k]}, out_dir / f"heatmap_{k}.png")
            for k in ("fisher", "activation", "error") if k in matrices]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts.append("<p class='meta'>" + " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in meta.items())
                 + "</p>")
    parts.append("<h2>Summary: best source for each target</h2><table><tr><th>target</th><th>family</th>"
                 "<th>best source (fisher)</th><th>fisher</th><th>best by activation-only</th>"
                 "<th>best by error-only</th><th>regime</th></tr>")
    for rk in rankings:
        rows = rk.rows
        best = rows[0]
        by_act = max(rows, key=lambda r: r.activation if math.isfinite(r.activation) else -math.inf)
        by_err = max(rows, key=lambda r: r.error if math.isfinite(r.error) else -math.inf)
        fam = (families or {}).get(rk.target, "")
        parts.append(f"<tr><td>{html.escape(rk.target)}</td><td>{html.escape(fam)}</td><td>{html.escape(best.source)}"
                     f"</td><td class='num'>{_f(best.fisher, best.fisher_se)}</td><td>{html.escape(by_act.source)}</td>"
                     f"<td>{html.escape(by_err.source)}</td><td><span class='regime'>{html.escape(rk.regime)}</span></td></tr>")
    parts.append("</table>")
    parts.append("<h2>Similarity matrices</h2><p>Rows are targets, columns candidate sources.</p>"
                 "<div class='grid'>" + "".join(_img(h) for h in heat) + "</div>")
    parts.append("<h2>Ranked sources per target</h2>")
    for i, rk in enumerate(rankings):
        rows = [r.as_dict() for r in rk.rows]
        png = decomposition_bars(rk.target, rows, out_dir / f"bars_{i:02d}.png")
        parts.append(f"<details{' open' if i == 0 else ''}><summary>{html.escape(rk.target)} — "
                     f"<span class='regime'>{html.escape(rk.regime)}</span></summary>")
        parts.append(f"<p>{html.escape(rk.explanation)}</p><table><tr><th>#</th><th>source</th><th>fisher</th>"
                     "<th>activation-only</th><th>error-only</th><th>coupling</th><th>n</th><th>note</th></tr>")
        for j, r in enumerate(rk.rows, 1):
            parts.append(f"<tr><td class='num'>{j}</td><td>{html.escape(r.source)}</td>"
                         f"<td class='num'>{_f(r.fisher, r.fisher_se)}</td><td class='num'>{_f(r.activation, r.activation_se)}</td>"
                         f"<td class='num'>{_f(r.error, r.error_se)}</td><td class='num'>{_f(r.coupling, r.coupling_se)}</td>"
                         f"<td class='num'>{r.n_source}</td><td>{html.escape(r.note)}</td></tr>")
        parts.append("</table>" + _img(png) + "</details>")
    parts.append("<h2>What the numbers mean</h2><dl>")
    for k, v in KEY:
        parts.append(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>")
    parts.append("</dl></body></html>")
    return write_text_atomic("\n".join(parts), out_dir / "index.html")
