"""Command-line interface: parse, load, call the library, print.  ``main(argv) -> exit code``."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from updatescope._version import __version__
from updatescope.errors import UpdatescopeError

EXIT_USER_ERROR = 2


def _fmt(x: float, se: float | None = None) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.3f}" if se is None or not math.isfinite(se) else f"{x:.3f} ± {se:.3f}"


def _print_json(obj: Any) -> None:
    from updatescope.experiments._common import _json_default

    print(json.dumps(obj, indent=2, default=_json_default))


def print_ranking(ranking: Any, console: Any = None) -> None:
    """The ranked table (rich) for one target."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"sources for target '{ranking.target}' — regime: {ranking.regime}", title_justify="left")
    for col in ("rank", "source", "fisher", "activation-only", "error-only", "coupling", "n", "note"):
        t.add_column(col, justify="right" if col in ("rank", "n") else "left")
    for i, r in enumerate(ranking.rows, 1):
        t.add_row(str(i), r.source, _fmt(r.fisher, r.fisher_se), _fmt(r.activation, r.activation_se),
                  _fmt(r.error, r.error_se), _fmt(r.coupling, r.coupling_se), str(r.n_source), r.note)
    console.print(t)
    console.print(f"  {ranking.explanation}")


# ------------------------------------------------------------------ commands
def cmd_sketch(args: argparse.Namespace) -> int:
    from updatescope.data.textfiles import read_corpus
    from updatescope.models.hf import load_causal_lm
    from updatescope.signatures.build import sketch_causal_lm
    from updatescope.signatures.io import save_signature

    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise UpdatescopeError(f"--out is a folder: {out}")
    if not out.parent.exists():
        raise UpdatescopeError(f"output folder does not exist: {out.parent}")
    texts = read_corpus(args.data)  # validates every file before the model loads
    model, tok = load_causal_lm(args.model, dtype=args.dtype)
    t0 = time.perf_counter()
    sig = sketch_causal_lm(model, tok, texts, sketch_dim=args.sketch_dim, seed=args.seed,
                           max_tokens=args.max_tokens, token_budget=args.token_budget,
                           act_map=args.act_map, error_map=args.error_map,
                           progress=not args.quiet, meta={"data": ",".join(Path(p).name for p in args.data),
                                                          "name": args.name or out.stem.split(".")[0]})
    save_signature(sig, out)
    dt = time.perf_counter() - t0
    print(f"wrote {out}: {sig.count} tokens, sketch_dim {sig.config.sketch_dim}, "
          f"{sig.count / max(dt, 1e-9):.0f} tokens/s")
    return 0


def _sig_name(path: str, sig: Any) -> str:
    return sig.meta.get("name") or Path(path).name.split(".")[0]


def cmd_rank(args: argparse.Namespace) -> int:
    from updatescope.select.rank import rank_sources
    from updatescope.signatures.io import load_signature

    target = load_signature(args.target)
    sources = {}
    for p in args.sources:
        sig = load_signature(p)
        name = _sig_name(p, sig)
        if name in sources:
            name = p
        sources[name] = sig
    ranking = rank_sources(target, sources, target_name=_sig_name(args.target, target))
    if args.json:
        _print_json(ranking.as_dict())
    else:
        print_ranking(ranking)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from updatescope.signatures.io import load_signature

    rows = []
    for p in args.signatures:
        sig = load_signature(p)
        sq = sig.sq_norm().tolist()
        rows.append({"file": p, **sig.describe(), "state_bytes": sig.sums.numel() * 8,
                     "sq_norm": dict(zip(("fisher", "activation", "error"), sq))})
    if args.json:
        _print_json(rows)
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="signatures", title_justify="left")
    for col in ("file", "name", "samples", "act_dim", "out_dim", "sketch_dim", "seed", "maps", "fingerprint", "data"):
        t.add_column(col)
    for r in rows:
        c = r["config"]
        t.add_row(r["file"], r.get("name", ""), str(r["count"]), str(c["act_dim"]), str(c["out_dim"]),
                  str(c["sketch_dim"]), str(c["seed"]), f"{c['act_map']}/{c['error_map']}",
                  c["fingerprint"] or "-", r.get("data", ""))
    Console().print(t)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from updatescope.demo import run_demo

    run_demo(Path(args.out), synthetic=args.synthetic, max_tokens=args.max_tokens, quiet=args.quiet)
    return 0


def cmd_domains(args: argparse.Namespace) -> int:
    from updatescope.data.domains import list_domains, load_domain

    if args.export:
        if not args.out:
            raise UpdatescopeError("--export needs --out FILE.jsonl")
        docs = load_domain(args.export, split=args.split)
        out = Path(args.out)
        if not out.parent.exists():
            raise UpdatescopeError(f"output folder does not exist: {out.parent}")
        tmp = out.with_name(f".{out.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps({"text": d}) + "\n")
        os.replace(tmp, out)
        print(f"wrote {out}: {len(docs)} documents of domain {args.export} ({args.split} split)")
        return 0
    infos = list_domains(args.family)
    if args.json:
        _print_json([{"name": d.name, "family": d.family, "source": d.source} for d in infos])
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="built-in domains (offline, from installed packages)", title_justify="left")
    for col in ("name", "family", "source"):
        t.add_column(col)
    for d in infos:
        t.add_row(d.name, d.family, d.source)
    Console().print(t)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from updatescope.experiments import run_experiment
    from updatescope.experiments._common import parse_settings, write_json_atomic

    settings = parse_settings(args.set)
    out = Path(args.out) if args.out else Path("results") / f"{args.name}{'_quick' if args.quick else ''}.json"
    result = run_experiment(args.name, quick=args.quick, out_dir=out.parent, seed=args.seed, config=settings)
    write_json_atomic(result, out)
    print(f"wrote {out} ({result.get('seconds', 0):.0f} s)")
    metrics = result.get("metrics", {})
    if args.json:
        _print_json(metrics)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="updatescope", description="Geometry of parameter updates: FisherSketch "
                                "signatures for fine-tuning source selection, and a local-linear lab.")
    p.add_argument("--version", action="version", version=f"updatescope {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("sketch", help="sketch a corpus into a signature file (forward passes only)")
    s.add_argument("--model", required=True, help="'smollm2' (packaged) or a local HF model folder")
    s.add_argument("--data", required=True, nargs="+", help="text files (one document per line, blank-line "
                   "paragraphs) or JSONL with a 'text' field")
    s.add_argument("--out", required=True, help="output signature (.safetensors)")
    s.add_argument("--max-tokens", type=int, default=None, help="stop after this many tokens")
    s.add_argument("--sketch-dim", type=int, default=4096)
    s.add_argument("--seed", type=int, default=0, help="random basis; must match across compared signatures")
    s.add_argument("--token-budget", type=int, default=1024, help="padded tokens per forward pass")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="forward precision")
    s.add_argument("--act-map", default="auto", choices=["auto", "dense", "srht", "fold"],
                   help="activation-side projection (auto: dense up to width 1,024, block SRHT beyond)")
    s.add_argument("--error-map", default="auto", choices=["auto", "dense", "srht", "fold", "countsketch"],
                   help="error-side projection (auto: dense up to 1,024 outputs, block SRHT beyond; fold is "
                        "faster at a slightly larger error, see benchmarks/README.md); compared signatures "
                        "must use the same maps")
    s.add_argument("--name", default=None, help="name shown in rankings (default: file stem)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_sketch)

    r = sub.add_parser("rank", help="rank source signatures for a target signature")
    r.add_argument("--target", required=True)
    r.add_argument("sources", nargs="+", metavar="SOURCE_SIG")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_rank)

    i = sub.add_parser("inspect", help="show what signature files hold")
    i.add_argument("signatures", nargs="+", metavar="SIG")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=cmd_inspect)

    d = sub.add_parser("demo", help="sketch built-in domains with the packaged SmolLM2, rank, write a report")
    d.add_argument("--out", default="demo-report", help="report folder")
    d.add_argument("--synthetic", action="store_true", help="synthetic head tasks instead of the model (seconds)")
    d.add_argument("--max-tokens", type=int, default=None, help="tokens per domain (default: the demo's)")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=cmd_demo)

    dm = sub.add_parser("domains", help="list the built-in offline domains, or export one as JSONL")
    dm.add_argument("--family", default=None, help="only this family (code, wiki, prose, smiles, numeric)")
    dm.add_argument("--export", default=None, metavar="NAME", help="write this domain's documents")
    dm.add_argument("--split", default="sketch", choices=["sketch", "train", "eval"])
    dm.add_argument("--out", default=None, help="output JSONL file for --export")
    dm.add_argument("--json", action="store_true")
    dm.set_defaults(func=cmd_domains)

    e = sub.add_parser("reproduce", help="rerun one of the papers' experiments (JSON + figures)")
    e.add_argument("name", help="estimator, source-selection, verbalizer, smiles, recovery, random-search, steering")
    e.add_argument("--quick", action="store_true", help="the reduced configuration (< 10 min on 2 CPU cores)")
    e.add_argument("--out", default=None, help="result JSON (figures go beside it)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a setting of the run, e.g. ground_truth=head or lora.lr=3e-4 (repeatable; "
                        "values read as JSON where they parse); the result JSON records the full config")
    e.add_argument("--json", action="store_true", help="also print the metrics")
    e.set_defaults(func=cmd_reproduce)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UpdatescopeError as exc:
        print(f"updatescope: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("updatescope: interrupted; no output was written", file=sys.stderr)
        return 130
    except (OSError, MemoryError) as exc:
        if os.environ.get("UPDATESCOPE_DEBUG"):
            raise
        print(f"updatescope: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
