"""``updatescope select``: the top-k documents of a pool for a target signature.

Scores are defined in ``updatescope.select.documents``.  Writes ``--out`` (JSONL, the top-k
documents best first, each with its text and score) and a score file for every document
(``--scores``, default ``<out>.scores.jsonl``).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from updatescope.errors import InputError


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def cmd_select(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file, check_report
    from updatescope.data.textfiles import check_inputs, read_documents
    from updatescope.records import write_text_atomic
    from updatescope.signatures.io import load_signature

    if args.top < 1:
        raise InputError(f"--top must be a positive integer, got {args.top}")
    if args.min_tokens < 1:
        raise InputError(f"--min-tokens must be a positive integer, got {args.min_tokens}")
    if args.token_budget < 2:
        raise InputError(f"--token-budget must be at least 2, got {args.token_budget}")
    out = check_out_file(args.out, inputs=[*args.data, args.target])
    scores_path = check_out_file(args.scores or str(out.with_name(out.name.rsplit(".", 1)[0] + ".scores.jsonl")),
                                  inputs=[*args.data, args.target, str(out)])
    report = check_report(args.report, inputs=[*args.data, args.target, str(out), str(scores_path)])
    check_inputs(args.data)  # regular, readable, size-capped files; the same file twice is refused
    target = load_signature(args.target)
    docs, origin = [], []
    for path in args.data:  # every file is validated before the model loads
        part = read_documents(path)
        docs.extend(part)
        origin.extend((str(path), i) for i in range(len(part)))

    from updatescope.models.hf import load_causal_lm
    from updatescope.select.documents import score_documents

    model, tok = load_causal_lm(args.model, dtype=args.dtype)
    res = score_documents(model, tok, docs, target, token_budget=args.token_budget, min_tokens=args.min_tokens,
                          progress=not args.quiet)
    order = res.order().tolist()
    rank_of = {d: r for r, d in enumerate(order, 1)}

    def record(i: int, text: bool) -> dict[str, Any]:
        rec: dict[str, Any] = {"rank": rank_of[i], "score": _num(float(res.score[i])), "score_se": _num(float(res.se[i])),
                               "activation": _num(float(res.activation[i])), "error": _num(float(res.error[i])),
                               "tokens": int(res.tokens[i]), "short": bool(res.short[i]),
                               "source": origin[i][0], "index": origin[i][1]}
        return {"text": docs[i], **rec} if text else rec

    top = [i for i in order if math.isfinite(float(res.score[i]))][: args.top]
    write_text_atomic("".join(json.dumps(record(i, True), ensure_ascii=False) + "\n" for i in top), out)
    write_text_atomic("".join(json.dumps(record(i, False)) + "\n" for i in range(len(docs))), scores_path)
    n_short = int(res.short.sum())
    print(f"wrote {out}: top {len(top)} of {len(docs)} documents ({n_short} shorter than {args.min_tokens} tokens "
          f"flagged); scores of all in {scores_path}")
    if args.json:
        from updatescope.records import to_json

        print(to_json([record(i, False) for i in top], strict=True))
    else:
        from updatescope.report.console import fmt, print_rows

        print_rows(f"top {len(top)} documents for target {Path(args.target).name}",
                   ("rank", "score", "tokens", "short", "source", "index"),
                   [(rank_of[i], fmt(float(res.score[i]), float(res.se[i]), digits=4), int(res.tokens[i]),
                     "yes" if bool(res.short[i]) else "", Path(origin[i][0]).name, origin[i][1]) for i in top[:20]],
                   right=("rank", "tokens", "index"))
    if report is not None:
        import sys

        from updatescope.report.html import DocumentView, write_report

        tname = target.meta.get("name") or Path(args.target).name.split(".")[0]
        view = DocumentView(tname, tuple(record(i, True) for i in top), tuple(float(v) for v in res.score.tolist()))
        path = write_report(report, title=f"updatescope — documents selected for {tname}",
                            meta={"target": tname, "pool": ", ".join(Path(p).name for p in args.data),
                                  "documents": len(docs), "kept": len(top), "short": n_short,
                                  "model": str(args.model)}, documents=view)
        print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("select", help="score every document of a pool against a target signature; "
                              "write the top-k (forward passes only)")
    p.add_argument("--model", required=True, help="'smollm2' (packaged) or a local HF model folder; the target "
                   "must have been sketched with the same model")
    p.add_argument("--data", required=True, nargs="+", metavar="POOL", help="text files or JSONL with a 'text' field")
    p.add_argument("--target", required=True, metavar="SIG", help="target signature")
    p.add_argument("--top", type=int, required=True, metavar="K", help="documents to keep")
    p.add_argument("--out", required=True, metavar="SUBSET.jsonl", help="top-k documents, best first")
    p.add_argument("--scores", default=None, help="score file of every document (default <out>.scores.jsonl)")
    p.add_argument("--min-tokens", type=int, default=16, help="documents with fewer counted tokens are flagged short")
    p.add_argument("--token-budget", type=int, default=1024, help="padded tokens per forward pass")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="forward precision")
    p.add_argument("--json", action="store_true", help="print the top-k records as JSON")
    p.add_argument("--report", default=None, metavar="DIR", help="also write an HTML report (top documents, "
                   "score histogram; figures inlined) to this folder")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_select)
