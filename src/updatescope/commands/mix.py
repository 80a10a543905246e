"""``updatescope mix --target T SOURCE...``: mixture weights of several sources for a target.

The weights maximise the estimated alignment of the mixture's Fisher with the target's
(``select.mixture``).  With ``--budget`` each source gets an integer number of tokens;
with ``--export`` a mixed JSONL sample is written from the sources' data files.

Token counting for ``--export`` needs ``--model``: a document's tokens are counted as the
sketch counts them (``Corpus.tokenise`` with the model's tokenizer: the next-token targets
of the document), so the budget is in the same unit as the signatures' token counts.  For
each source a seeded permutation of its documents is taken in order until its share is
met; the last document may overshoot the share by less than its own length.  A source
whose file holds fewer tokens than its share is refused before anything is written.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

from updatescope.errors import UpdatescopeError


def _warn(msg: str) -> None:
    print(f"updatescope: warning: {msg}", file=sys.stderr)


def parse_budget(text: str | None) -> int | None:
    """An integer token count: digits with optional ``_``/``,`` separators, or an integral
    value in scientific notation (``2e6``)."""
    from updatescope.select.mixture import MAX_BUDGET

    if text is None:
        return None
    t = text.strip().replace("_", "").replace(",", "")
    value: int | None = None
    if re.fullmatch(r"[+-]?\d+", t):
        value = int(t)
    elif re.fullmatch(r"[+-]?\d+(\.\d*)?[eE][+-]?\d+", t):
        f = float(t)
        if math.isfinite(f) and f == int(f):
            value = int(f)
    if value is None:
        raise UpdatescopeError(f"--budget must be a whole number of tokens, got {text!r}")
    if not 0 < value <= MAX_BUDGET:
        raise UpdatescopeError(f"--budget must be in 1..{MAX_BUDGET:.0e} tokens, got {text}")
    return value


def _parse_data(items: list[str], names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UpdatescopeError(f"--data takes NAME=FILE, got {item!r}")
        if name not in names:
            raise UpdatescopeError(f"--data {name}: no source of that name (sources: {', '.join(names)})")
        if name in out:
            raise UpdatescopeError(f"--data {name} is given twice")
        out[name] = path
    return out


def cmd_mix(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file, same_path, sig_name

    sources = list(args.sources)
    if len(sources) < 2:
        raise UpdatescopeError(f"mix needs at least two sources, got {len(sources)}")
    for i, p in enumerate(sources):
        if same_path(Path(p), Path(args.target)):
            raise UpdatescopeError(f"the target {args.target} is also a source ({p})")
        for q in sources[:i]:
            if same_path(Path(p), Path(q)):
                raise UpdatescopeError(f"source {p} is given twice (as {q})")
    budget = parse_budget(args.budget)
    if args.max_sources is not None and not 1 <= args.max_sources <= len(sources):
        raise UpdatescopeError(
            f"--max-sources must be in 1..{len(sources)} (the number of sources), got {args.max_sources}"
        )
    out = None
    if args.export:
        if budget is None:
            raise UpdatescopeError("--export needs --budget TOKENS (the size of the sample)")
        if not args.model:
            raise UpdatescopeError("--export needs --model to count tokens as the sketch does (e.g. --model smollm2)")
        if not args.export.endswith(".jsonl"):
            raise UpdatescopeError(f"--export writes JSONL: give a .jsonl file, got {args.export}")
        out = check_out_file(args.export, inputs=[args.target, *sources, *(d.partition("=")[2] for d in args.data)])
    elif args.data:
        raise UpdatescopeError("--data is only used with --export")

    from updatescope.commands._checks import signature_kind as _signature_kind
    from updatescope.errors import SignatureFileError
    from updatescope.select.mixture import mix
    from updatescope.signatures.io import load_signature

    for p in (args.target, *sources):
        if _signature_kind(p) == "network":
            raise UpdatescopeError(f"{p} is a network signature: mix takes head signatures (sketched without --layers)")
    target = load_signature(args.target)
    named: dict[str, Any] = {}
    paths: dict[str, str] = {}
    dropped: list[str] = []
    for p in sources:
        try:
            sig = load_signature(p)
        except SignatureFileError as exc:
            if "NaN or inf" not in str(exc):
                raise
            _warn(f"dropped {p}: its state contains NaN or inf")
            dropped.append(p)
            continue
        name = sig_name(p, sig)
        name = p if name in named else name
        named[name], paths[name] = sig, p
    if len(named) < 2:
        raise UpdatescopeError(
            f"fewer than two usable sources remain ({len(named)}) after dropping {', '.join(dropped)}"
        )
    for name, sig in named.items():
        if sig.same_state(target):
            raise UpdatescopeError(f"source {paths[name]} holds the same data as the target {args.target}")
    data = _parse_data(args.data, list(named)) if args.export else {}
    result = mix(
        target,
        named,
        objective=args.objective,
        budget=budget,
        max_sources=args.max_sources,
        target_name=sig_name(args.target, target),
    )
    for line in result.warnings:
        _warn(line)
    if out is not None:
        _export(result, data, out, args)
    if args.json:
        from updatescope.commands._checks import print_json

        print_json({**result.as_dict(), "files": paths, "exported": str(out) if out else None})
        return 0
    _print(result, out)
    return 0


def _export(result: Any, data: dict[str, str], out: Path, args: argparse.Namespace) -> None:
    """Sample documents per source to its token share and write them, shuffled, as JSONL."""
    import json
    import random

    from updatescope.pipeline import Corpus, load_model
    from updatescope.records import write_text_atomic

    assert result.tokens is not None
    need = {s: t for s, t in zip(result.sources, result.tokens) if t > 0}
    missing = [s for s in need if s not in data]
    if missing:
        raise UpdatescopeError(f"--export: no --data NAME=FILE for {', '.join(missing)} (their share is not zero)")
    corpora = {s: Corpus.from_files([data[s]]) for s in need}  # every file validated before the model loads
    _, tokenizer = load_model(args.model)
    rng = random.Random(args.seed)
    rows: list[str] = []
    for s, share in need.items():
        corpus = corpora[s]
        counts = corpus.tokenise(tokenizer, keep_empty=True).counted()
        if sum(counts) < share:
            raise UpdatescopeError(
                f"--export: {data[s]} holds {sum(counts)} counted tokens, source {s} needs {share}: lower --budget"
            )
        order = list(range(len(corpus)))
        rng.shuffle(order)
        got = 0
        for i in order:
            if got >= share:
                break
            if counts[i] == 0:
                continue
            doc = corpus.documents[i]
            row = {"text": doc, "source": s} if isinstance(doc, str) else {**doc, "mix_source": s}
            rows.append(json.dumps(row, ensure_ascii=False) + "\n")
            got += counts[i]
    rng.shuffle(rows)
    write_text_atomic("".join(rows), out)


def _print(result: Any, out: Path | None) -> None:
    from updatescope.report.console import fmt, print_rows

    rows = []
    order = sorted(range(len(result.sources)), key=lambda i: (-result.weights[i], i))
    for i in order:
        row = [result.sources[i], f"{result.weights[i]:.3f}"]
        if result.tokens is not None:
            row.append(f"{result.tokens[i]:,}")
        rows.append(row)
    cols = ["source", "weight"] + (["tokens"] if result.tokens is not None else [])
    print_rows(f"mixture for target '{result.target}' — objective: {result.objective}", cols, rows, right=cols[1:])
    print(f"  predicted {result.objective} alignment of the mixture: {fmt(result.predicted, result.predicted_se)}")
    print(
        f"  best single source: {result.best_single} {fmt(result.best_single_value, result.best_single_se)}"
        f" (gain {fmt(result.gain)})"
    )
    psd = result.psd
    print(
        f"  Gram correction: {psd['clipped_eigenvalues']} eigenvalue(s) clipped, relative change "
        f"{psd['relative_change']:.2g}; support: {result.solver['selection']}"
    )
    if out is not None:
        print(f"  wrote {out}: {result.budget:,} tokens sampled at these weights")


def register(subparsers: Any) -> None:
    m = subparsers.add_parser(
        "mix",
        help="mixture weights of several source signatures for a target",
        description="Choose token shares of several sources that maximise the estimated Fisher "
        "alignment of the mixture with the target, from the signatures alone.",
    )
    m.add_argument("--target", required=True, help="target signature")
    m.add_argument("sources", nargs="+", metavar="SOURCE", help="source signatures (at least two)")
    m.add_argument("--budget", default=None, help="total tokens to split among the sources (1..1e15)")
    m.add_argument("--max-sources", type=int, default=None, help="at most K sources with a nonzero weight")
    m.add_argument(
        "--objective",
        choices=("fisher", "error", "activation"),
        default="fisher",
        help="fisher (default), error-only Scov(Γ_e) or activation-only Scov(M_a)",
    )
    m.add_argument("--json", action="store_true", help="strict JSON on stdout")
    m.add_argument("--export", default=None, metavar="OUT.jsonl", help="write a mixed sample at these weights")
    m.add_argument(
        "--data", action="append", default=[], metavar="NAME=FILE", help="a source's data file, for --export"
    )
    m.add_argument("--model", default=None, help="tokenizer that counts tokens for --export (e.g. smollm2)")
    m.add_argument("--seed", type=int, default=0, help="seed of the --export sample")
    m.set_defaults(func=cmd_mix)
