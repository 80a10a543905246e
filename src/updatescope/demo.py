"""``updatescope demo``: sketch built-in real domains with the packaged SmolLM2, rank every
domain's sources, print the tables and write an HTML report.

``synthetic=True`` runs the same pipeline on the synthetic head-task family instead (no
model; seconds) — used by tests and when the model extra is not installed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.constants import DEFAULT_SKETCH_DIM
from updatescope.select.rank import Ranking, rank_sources
from updatescope.sketch.align import alignment_matrix
from updatescope.sketch.signature import Signature

DEMO_TOKENS = 2500  # tokens sketched per domain (≈ 6 s each on 2 CPU cores)


def _matrices(names: list[str], sigs: dict[str, Signature]) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in alignment_matrix([sigs[n] for n in names]).items()}


def _synthetic_signatures(quiet: bool) -> tuple[dict[str, Signature], dict[str, str], dict[str, str]]:
    from updatescope.models.head_tasks import HeadTaskFamily
    from updatescope.sketch.fishersketch import FisherSketch

    fam = HeadTaskFamily(act_dim=32, out_dim=512)
    sigs, families = {}, {}
    for c in range(3):
        for b in range(3):
            name = f"cluster{c}-labels{b}"
            sk = FisherSketch(fam.act_dim, fam.out_dim, 1024, 0)
            sigs[name] = sk.update_logits(*fam.sample(c, b, 600, seed=10 * c + b)).signature(name=name)
            families[name] = f"labels{b}"
    return (
        sigs,
        families,
        {"model": "synthetic head-task family (d=32, K=512)", "samples per task": "600", "sketch_dim": "1024"},
    )


def _model_signatures(max_tokens: int, quiet: bool) -> tuple[dict[str, Signature], dict[str, str], dict[str, str]]:
    from updatescope.data.domains import demo_domains, list_domains
    from updatescope.models.hf import head_fingerprint, load_causal_lm
    from updatescope.pipeline import SketchOptions, sketch_corpus

    t0 = time.perf_counter()
    model, tok = load_causal_lm("smollm2")
    fp = head_fingerprint(model, tok)
    if not quiet:
        print(f"loaded SmolLM2-135M-Instruct in {time.perf_counter() - t0:.1f} s (model fingerprint {fp})")
    family_of = {d.name: d.family for d in list_domains()}
    sigs, families = {}, {}
    for name, texts in demo_domains(split="sketch").items():
        sigs[name] = sketch_corpus(
            model,
            tok,
            texts,
            SketchOptions(max_tokens=max_tokens),
            progress=not quiet,
            fingerprint=fp,
            meta={"name": name, "family": family_of.get(name, "")},
        )
        families[name] = family_of.get(name, "")
    return (
        sigs,
        families,
        {
            "model": "SmolLM2-135M-Instruct (packaged, offline)",
            "tokens per domain": str(max_tokens),
            "sketch_dim": str(DEFAULT_SKETCH_DIM),
            "seed": "0",
        },
    )


def run_demo(
    out: Path, *, synthetic: bool = False, max_tokens: int | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Sketch, rank every domain's sources, print the tables, write ``out/index.html``."""
    from updatescope.records import write_json_atomic
    from updatescope.report.console import make_console, print_best_sources, print_ranking
    from updatescope.report.html import write_report

    console = make_console()
    t0 = time.perf_counter()
    if synthetic:
        sigs, families, meta = _synthetic_signatures(quiet)
    else:
        sigs, families, meta = _model_signatures(max_tokens or DEMO_TOKENS, quiet)
    names = list(sigs)
    rankings: list[Ranking] = []
    for t in names:
        rankings.append(rank_sources(sigs[t], {s: sigs[s] for s in names if s != t}, target_name=t))
    mats = _matrices(names, sigs)
    if not quiet:
        print_ranking(rankings[0], console)
        print_best_sources(rankings, console)
    meta = {**meta, "seconds": f"{time.perf_counter() - t0:.0f}"}
    html_path = write_report(
        out,
        title="updatescope — source ranking report",
        meta=meta,
        rankings=rankings,
        names=names,
        matrices=mats,
        families=families,
    )
    summary = {
        "names": names,
        "families": families,
        "meta": meta,
        "rankings": [r.as_dict() for r in rankings],
        "matrices": {k: v.tolist() for k, v in mats.items()},
    }
    write_json_atomic(summary, out / "ranking.json")
    if not quiet:
        console.print(f"\nreport: {html_path}")
    return summary
