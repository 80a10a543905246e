"""``updatescope index build|query|dedup``: banks of signatures (see ``signatures.bank``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from updatescope.constants import RANK_BY
from updatescope.errors import InputError


def print_json(obj: Any) -> None:
    from updatescope.records import to_json

    print(to_json(obj, strict=True))


def cmd_build(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_folder
    from updatescope.signatures.bank import build_bank

    out = check_out_folder(args.out, inputs=args.inputs)
    if args.append and not out.is_dir():
        raise InputError(f"--append needs an existing bank folder: {out}")
    if not args.append and out.exists():
        raise InputError(f"--out {out} already exists (use --append to add to a bank)")
    bank = build_bank(args.inputs, out, append=args.append)
    print(f"wrote {out}: {len(bank)} signatures, sketch_dim {bank.config.sketch_dim}, seed {bank.config.seed}")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_report
    from updatescope.select.bank_query import query
    from updatescope.signatures.bank import open_bank
    from updatescope.signatures.io import load_signature

    if args.top < 1:
        raise InputError(f"--top must be a positive integer, got {args.top}")
    report = check_report(args.report, inputs=[args.bank, args.target])
    bank = open_bank(args.bank)
    target = load_signature(args.target)
    name = target.meta.get("name") or Path(args.target).name.split(".")[0]
    ranking = query(bank, target, top=args.top, target_name=name, by=args.by)
    if args.json:
        print_json({"bank": str(args.bank), "entries": len(bank), **ranking.as_dict()})
    else:
        from updatescope.report.console import print_ranking

        print_ranking(ranking)
        print(f"  top {len(ranking.rows)} of {len(bank)} bank entries")
    if report is not None:
        import sys

        from updatescope.report.html import write_report

        cfg = bank.config
        path = write_report(
            report,
            title=f"updatescope — bank entries for {name}",
            meta={
                "target": name,
                "bank": str(args.bank),
                "entries": len(bank),
                "shown": len(ranking.rows),
                "sketch_dim": cfg.sketch_dim,
                "seed": cfg.seed,
            },
            rankings=[ranking],
        )
        print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_dedup(args: argparse.Namespace) -> int:
    import math

    from updatescope.signatures.bank import dedup, open_bank

    if not (math.isfinite(args.tol) and 0 <= args.tol < 1):
        raise InputError(f"--tol must be a finite number in [0, 1), got {args.tol}")
    if not (math.isfinite(args.screen) and 0 < args.screen <= 1):
        raise InputError(f"--screen must be a number in (0, 1], got {args.screen}")
    bank = open_bank(args.bank)
    pairs = dedup(bank, screen=args.screen, tol=args.tol)
    if args.json:
        print_json({"entries": len(bank), "duplicates": [p.as_dict() for p in pairs]})
        return 0
    if not pairs:
        print(f"no near-duplicates among the {len(bank)} entries of {args.bank}")
        return 0
    from updatescope.report.console import fmt, print_rows

    print_rows(
        f"near-duplicate corpora in {args.bank} ({len(bank)} entries)",
        ("first", "second", "fisher", "activation"),
        [(p.first, p.second, fmt(p.fisher, p.fisher_se), fmt(p.activation, p.activation_se)) for p in pairs],
    )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("index", help="banks of signatures: build, query a target, find near-duplicates")
    sub = p.add_subparsers(dest="index_command", required=True, metavar="ACTION")

    b = sub.add_parser("build", help="build (or --append to) a bank from signature files or folders")
    b.add_argument("inputs", nargs="+", metavar="SIG|DIR", help="signature files, or folders of *.safetensors")
    b.add_argument("--out", required=True, metavar="BANK", help="bank folder")
    b.add_argument("--append", action="store_true", help="add to the existing bank at --out")
    b.set_defaults(func=cmd_build)

    q = sub.add_parser("query", help="rank a bank's entries for a target signature")
    q.add_argument("bank", metavar="BANK")
    q.add_argument("--target", required=True, metavar="SIG")
    q.add_argument("--top", type=int, default=10, help="entries shown with full alignment (default 10)")
    q.add_argument(
        "--by",
        choices=RANK_BY,
        default="fisher",
        help="order by the joint alignment (default: one product with the bank's matrix, then the short list) "
        "or by one marginal (every entry's full alignment: exact, slower on large banks)",
    )
    q.add_argument("--json", action="store_true")
    q.add_argument(
        "--report", default=None, metavar="DIR", help="also write an HTML report (figures inlined) to this folder"
    )
    q.set_defaults(func=cmd_query)

    d = sub.add_parser("dedup", help="near-duplicate corpora (fisher and activation within 2·se of 1)")
    d.add_argument("bank", metavar="BANK")
    d.add_argument("--screen", type=float, default=0.8, help="vector-product threshold of the first pass")
    d.add_argument("--tol", type=float, default=0.02, help="smallest distance from 1 still called a duplicate")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_dedup)
