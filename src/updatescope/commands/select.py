"""``updatescope select``: the top-k documents of a pool for a target signature.

Scores are defined in ``updatescope.select.documents``.  The pool is text files (one score
per document) or tables with the column options of ``sketch`` (one score per row; with
prompt/completion or messages columns only the completion / assistant tokens are counted).
Writes ``--out``, the top-k best first with the pool's own fields plus the score columns
(JSONL, parquet, or a ``datasets`` folder), and a score file for every document or row
(``--scores``, default ``<out>.scores.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from updatescope.constants import DTYPE_CHOICES
from updatescope.errors import InputError

SCORE_FIELDS = ("rank", "score", "score_se", "activation", "error", "tokens", "short", "source", "index")
OUT_FORMATS = ("jsonl", "parquet", "dataset")


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _out_format(args: argparse.Namespace) -> str:
    """--out-format, or from --out: '.parquet' -> parquet; a name without a suffix when the
    pool is a datasets folder -> a datasets folder; anything else -> JSONL."""
    if args.out_format:
        return args.out_format
    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if not suffix and any(Path(p).is_dir() for p in args.data):
        return "dataset"
    return "jsonl"


def _check_suffix(args: argparse.Namespace, fmt: str) -> None:
    """Refuse an --out name that says another format than the one written (e.g. JSON lines as .csv)."""
    suffix = Path(args.out).suffix.lower()
    if not args.out_format and fmt == "jsonl" and suffix != ".jsonl":
        raise InputError(
            f"--out {Path(args.out).name}: select writes JSON lines (.jsonl), parquet (.parquet) or a datasets "
            "folder; name the file with one of those suffixes, or choose --out-format"
        )


def _read_pool(args: argparse.Namespace) -> Any:
    """The pool as a ``Corpus``, validated before the model loads; plain text and JSONL-'text'
    files keep the ``textfiles`` rules, and each document keeps its file and 0-based line
    (text, JSONL) or row (tables), so the exported ``source``/``index`` find it again."""
    from updatescope.data.formats import Columns
    from updatescope.pipeline import Corpus

    columns = Columns(args.text_column, args.prompt_column, args.completion_column, args.messages_column)
    corpus = Corpus.from_files(args.data, columns)
    if corpus.columns is not None:
        clash = sorted({k for row in corpus.documents for k in row} & set(SCORE_FIELDS))
        if clash:
            raise InputError(
                f"the pool has column(s) {', '.join(map(repr, clash))}, which the export adds; rename them"
            )
    return corpus


def _check_writer(fmt: str, items: list[Any], columns: Any) -> None:
    """Refuse, before the model loads, an export the pool's rows cannot take."""
    if fmt == "jsonl":
        return
    try:
        import pyarrow as pa

        if fmt == "dataset":
            import datasets  # noqa: F401
    except ImportError as exc:
        from updatescope.errors import MissingExtraError

        raise MissingExtraError("datasets", "hf") from exc
    rows = [{"text": x} for x in items] if columns is None else items
    try:
        pa.Table.from_pylist(rows)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise InputError(f"the pool's rows cannot be written as {fmt} ({first}); use --out-format jsonl") from None


def _write_subset(fmt: str, records: list[dict[str, Any]], out: Path) -> None:
    """The top-k records, best first, in ``fmt``; atomic (nothing half-written on failure)."""
    from updatescope.records import write_bytes_atomic, write_text_atomic

    if fmt == "jsonl":
        write_text_atomic("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records), out)
        return
    import pyarrow as pa

    table = pa.Table.from_pylist(records)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_bytes_atomic(sink.getvalue().to_pybytes(), out)
        return
    import os
    import shutil

    import datasets

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        datasets.Dataset(table).save_to_disk(str(tmp))
        os.replace(tmp, out)  # a new name, or an empty folder: replaced in one step
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cmd_select(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file, check_out_folder, check_report
    from updatescope.distributed import rank_and_world
    from updatescope.records import write_text_atomic
    from updatescope.signatures.io import load_signature

    if rank_and_world()[1] > 1:  # no sharded path: every rank would score the whole pool and write the same files
        raise InputError("select runs in a single process, not under torchrun (WORLD_SIZE > 1)")
    if args.top < 1:
        raise InputError(f"--top must be a positive integer, got {args.top}")
    if args.min_tokens < 1:
        raise InputError(f"--min-tokens must be a positive integer, got {args.min_tokens}")
    if args.token_budget < 2:
        raise InputError(f"--token-budget must be at least 2, got {args.token_budget}")
    fmt = _out_format(args)
    if fmt == "dataset":
        out = check_out_folder(args.out, inputs=[*args.data, args.target])
        if out.exists() and any(out.iterdir()):
            raise InputError(f"--out {out} is a folder that is not empty; a datasets export needs a new folder")
    else:
        out = check_out_file(args.out, inputs=[*args.data, args.target])
    default_scores = out.with_name((out.name.rsplit(".", 1)[0] if fmt != "dataset" else out.name) + ".scores.jsonl")
    scores_path = check_out_file(args.scores or str(default_scores), inputs=[*args.data, args.target, str(out)])
    report = check_report(args.report, inputs=[*args.data, args.target, str(out), str(scores_path)])
    _check_suffix(args, fmt)
    corpus = _read_pool(args)  # every file is validated before the model loads
    items, origin, columns = corpus.documents, corpus.origin, corpus.columns
    if args.top > len(items):
        raise InputError(f"--top {args.top} is larger than the pool ({len(items)} documents)")
    _check_writer(fmt, list(items), columns)
    target = load_signature(args.target)

    from updatescope.pipeline import load_model, score_documents

    model, tok = load_model(args.model, dtype=args.dtype)
    res = score_documents(
        model, tok, corpus, target, token_budget=args.token_budget, min_tokens=args.min_tokens, progress=not args.quiet
    )
    order = res.order().tolist()
    rank_of = {d: r for r, d in enumerate(order, 1)}

    def record(i: int) -> dict[str, Any]:
        return {
            "rank": rank_of[i],
            "score": _num(float(res.score[i])),
            "score_se": _num(float(res.se[i])),
            "activation": _num(float(res.activation[i])),
            "error": _num(float(res.error[i])),
            "tokens": int(res.tokens[i]),
            "short": bool(res.short[i]),
            "source": origin[i][0],
            "index": origin[i][1],
        }

    def exported(i: int) -> dict[str, Any]:  # the pool's own fields first, then the scores
        return {"text": items[i], **record(i)} if columns is None else {**items[i], **record(i)}

    top = [i for i in order if math.isfinite(float(res.score[i]))][: args.top]
    if not top:
        raise InputError(
            f"no document of the pool has a token to score ({len(items)} documents, all shorter than two tokens "
            "or with nothing counted)"
        )
    _write_subset(fmt, [exported(i) for i in top], out)
    write_text_atomic("".join(json.dumps(record(i)) + "\n" for i in range(len(items))), scores_path)
    n_short = int(res.short.sum())
    print(
        f"wrote {out} ({fmt}): top {len(top)} of {len(items)} documents ({n_short} with fewer than "
        f"{args.min_tokens} counted tokens flagged); scores of all in {scores_path}"
    )
    if args.json:
        from updatescope.records import to_json

        print(to_json([record(i) for i in top], strict=True))
    else:
        from updatescope.report.console import fmt as fmt_value
        from updatescope.report.console import print_rows

        print_rows(
            f"top {len(top)} documents for target {Path(args.target).name}",
            ("rank", "score", "tokens", "short", "source", "index"),
            [
                (
                    rank_of[i],
                    fmt_value(float(res.score[i]), float(res.se[i]), digits=4),
                    int(res.tokens[i]),
                    "yes" if bool(res.short[i]) else "",
                    Path(origin[i][0]).name,
                    origin[i][1],
                )
                for i in top[:20]
            ],
            right=("rank", "tokens", "index"),
        )
    if report is not None:
        import sys

        from updatescope.report.html import DocumentView, write_report

        tname = target.meta.get("name") or Path(args.target).name.split(".")[0]
        view = DocumentView(
            tname,
            tuple({"text": corpus.text(i), **record(i)} for i in top),
            tuple(float(v) for v in res.score.tolist()),
        )
        path = write_report(
            report,
            title=f"updatescope — documents selected for {tname}",
            meta={
                "target": tname,
                "pool": ", ".join(Path(p).name for p in args.data),
                "documents": len(items),
                "kept": len(top),
                "short": n_short,
                "model": str(args.model),
            },
            documents=view,
        )
        print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "select",
        help="score every document of a pool against a target signature; write the top-k (forward passes only)",
    )
    p.add_argument(
        "--model",
        required=True,
        help="'smollm2' (packaged) or a local HF model folder; the target must have been sketched with the same model",
    )
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        metavar="POOL",
        help="text files, JSONL with a 'text' "
        "field, or tables (JSON, CSV, parquet, arrow, a datasets folder) with the column options below: "
        "one score per row",
    )
    p.add_argument("--target", required=True, metavar="SIG", help="target signature")
    p.add_argument("--top", type=int, required=True, metavar="K", help="documents to keep")
    p.add_argument(
        "--out",
        required=True,
        metavar="SUBSET",
        help="top-k documents (rows), best first, with score "
        "columns: JSONL, or parquet (.parquet), or a datasets folder (a name without suffix when the "
        "pool is a datasets folder); see --out-format",
    )
    p.add_argument(
        "--out-format", default=None, choices=list(OUT_FORMATS), help="override the format chosen from --out"
    )
    from updatescope.commands._checks import add_column_arguments

    add_column_arguments(p)
    p.add_argument("--scores", default=None, help="score file of every document (default <out>.scores.jsonl)")
    p.add_argument("--min-tokens", type=int, default=16, help="documents with fewer counted tokens are flagged short")
    p.add_argument("--token-budget", type=int, default=1024, help="padded tokens per forward pass")
    p.add_argument("--dtype", default="float32", choices=list(DTYPE_CHOICES), help="forward precision")
    p.add_argument("--json", action="store_true", help="print the top-k records as JSON")
    p.add_argument(
        "--report",
        default=None,
        metavar="DIR",
        help="also write an HTML report (top documents, score histogram; figures inlined) to this folder",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_select)
