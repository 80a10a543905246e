"""The CLI's network-signature paths (``sketch --layers``, and ``rank``/``inspect`` of network
signatures): per-layer sketches in one forward and backward pass per batch."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from updatescope.commands._checks import print_json, sig_name, unique_names


def sketch_network(args: argparse.Namespace, out: Path, device: Any, corpus: Any, options: Any) -> int:
    """``sketch --layers``: a network signature of the matching nn.Linear layers plus the head
    (one forward + one backward pass per batch)."""
    from updatescope.capture.hook import find_output_linear
    from updatescope.models.hf import head_fingerprint
    from updatescope.network import save_network_signature
    from updatescope.pipeline import load_model, sketch_network_corpus

    model, tok = load_model(args.model, dtype=args.dtype)
    model.to(device)
    model.eval()
    t0 = time.perf_counter()
    sk = sketch_network_corpus(model, tok, corpus, args.layers, options, mode=args.layer_mode, progress=not args.quiet)
    meta = {
        "data": corpus.description,
        "name": args.name or out.name.split(".")[0],
        "dtype": args.dtype,
        "model": str(args.model),
        "fingerprint": head_fingerprint(model, tok, find_output_linear(model)),
    }
    if corpus.columns is not None:
        meta["columns"] = corpus.columns.describe()
    save_network_signature(sk, out, **meta)
    dt = time.perf_counter() - t0
    print(
        f"wrote {out}: network signature of {len(sk.config.layers)} layers ({sk.count} {sk.config.mode}s), "
        f"sketch_dim {sk.config.sketch_dim}, {sk.count / max(dt, 1e-9):.0f} samples/s"
    )
    return 0


def rank_network(args: argparse.Namespace, report: Path | None) -> int:
    import math

    from updatescope.network import load_network_signature, network_alignment

    target = load_network_signature(args.target)
    tname = sig_name(args.target, target)
    sources = unique_names(args.sources, load_network_signature)
    aligns = {n: network_alignment(sk, target) for n, sk in sources.items()}
    order = sorted(aligns, key=lambda n: -aligns[n].full if math.isfinite(aligns[n].full) else math.inf)
    layers = target.config.names
    if args.json:
        print_json(
            {
                "target": tname,
                "kind": "network",
                "layers": list(layers),
                "rows": [{"source": n, **aligns[n].as_dict()} for n in order],
            }
        )
    else:
        from updatescope.report.console import WIDE, fmt, make_console, print_rows

        console = make_console()
        wide = console.width >= WIDE  # standard errors only where they fit on one line

        def v(x: float, se: float | None = None) -> str:
            return fmt(x, se if wide else None)

        print_rows(
            f"network sources for target '{tname}' ({len(layers)} layers, {target.config.mode} samples)",
            ("rank", "source", "full", "block-diag", "profile", "off-diag S/T", "full−bd"),
            [
                (
                    i,
                    n,
                    v(a.full, a.se.get("full")),
                    v(a.block_diagonal, a.se.get("block_diagonal")),
                    v(a.profile_cosine, a.se.get("profile_cosine")),
                    f"{fmt(a.offdiag_share_source, digits=2)}/{fmt(a.offdiag_share_target, digits=2)}",
                    v(a.discrepancy, a.se.get("discrepancy")),
                )
                for i, (n, a) in enumerate(((n, aligns[n]) for n in order), 1)
            ],
            console,
            right=("rank",),
        )
        console.print(
            "  full: A_F over all sketched layers; block-diag: A_BD (cross-layer terms dropped); profile: "
            "profile cosine π; off-diag: cross-layer share of ‖F‖² (source/target); full−bd: A_F − A_BD"
        )
        shown = order[:4]
        print_rows(
            "per-block alignment a_b (alignment vs layer)",
            ("layer", *shown),
            [
                (b, *(v(aligns[n].profile[j], aligns[n].se.get(f"profile[{b}]")) for n in shown))
                for j, b in enumerate(layers)
            ],
            console,
        )
    if report is not None:
        from updatescope.report.html import NetworkView, write_report

        cfg = target.config
        path = write_report(
            report,
            title=f"updatescope — network sources for {tname}",
            meta={
                "target": tname,
                "sources": len(sources),
                "layers": len(layers),
                "sketch_dim": cfg.sketch_dim,
                "seed": cfg.seed,
                "mode": cfg.mode,
            },
            network=NetworkView(tname, tuple(layers), tuple((n, aligns[n]) for n in order)),
        )
        print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def inspect_network(path: str) -> dict[str, Any]:
    """What a network signature holds, with its per-layer view: each layer's estimated
    ‖F_bb‖² and share of ‖F‖², and the off-diagonal (cross-layer) share."""
    from updatescope.network import load_network_signature

    sk = load_network_signature(path)
    _, sq = sk.terms()
    sq = sq.tolist()
    full = sq[-1]
    share = lambda v: v / full if full > 0 else float("nan")
    cfg = sk.config
    return {
        "file": path,
        "kind": "network",
        "name": sk.meta.get("name", ""),
        "count": sk.count,
        "config": {**cfg.to_dict(), "layers": [list(x) for x in cfg.layers]},
        "data": sk.meta.get("data", ""),
        "fingerprint": sk.meta.get("fingerprint", ""),
        "full_sq_norm": full,
        "offdiag_share": share(full - sum(sq[:-1])),
        "layers": [
            {"name": n, "act_dim": d, "out_dim": k, "sq_norm": v, "energy_share": share(v)}
            for (n, d, k), v in zip(cfg.layers, sq[:-1])
        ],
    }
