"""``updatescope select``: the top-k documents of a pool for a target signature.

Scores are defined in ``updatescope.select.documents``.  The pool is text files (one score
per document) or tables with the column options of ``sketch`` (one score per row; with
prompt/completion or messages columns only the completion / assistant tokens are counted).
Writes ``--out``, the top-k best first with the pool's own fields plus the score columns
(JSONL, parquet, or a ``datasets`` folder), and a score file for every document or row
(``--scores``, default ``<out>.scores.jsonl``; ``rank`` is set for the kept documents only).
The pool is streamed in chunks (``pipeline.select_stream``): never held in memory, sharded over
the ranks under torchrun (rank 0 writes; the same bytes as one process), and resumable with
``--checkpoint-every``/``--resume``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from updatescope.constants import DTYPE_CHOICES, RANK_BY
from updatescope.errors import InputError

SCORE_FIELDS = ("rank", "score", "score_se", "activation", "error", "tokens", "short", "source", "index")
OUT_FORMATS = ("jsonl", "parquet", "dataset")


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


def _pool_columns(args: argparse.Namespace) -> Any:
    from updatescope.data.formats import Columns

    return Columns(args.text_column, args.prompt_column, args.completion_column, args.messages_column)


def _chunk_check(fmt: str, table: bool) -> Any:
    """The check ``scan_pool`` runs on every chunk of the pool, before the model loads: no pool
    column the export would overwrite, and rows the export format can take (one arrow schema
    across the chunks)."""
    schema: list[Any] = []

    def check(docs: list[Any]) -> None:
        if table:
            clash = sorted({k for row in docs for k in row} & set(SCORE_FIELDS))
            if clash:
                raise InputError(
                    f"the pool has column(s) {', '.join(map(repr, clash))}, which the export adds; rename them"
                )
        if fmt == "jsonl":
            return
        try:
            import pyarrow as pa

            if fmt == "dataset":
                import datasets  # noqa: F401
        except ImportError as exc:
            from updatescope.errors import MissingExtraError

            raise MissingExtraError("datasets", "hf") from exc
        rows = docs if table else [{"text": x} for x in docs]
        try:
            got = pa.Table.from_pylist(rows).schema
            schema[:] = [pa.unify_schemas([schema[0], got]) if schema else got]
        except (pa.ArrowException, TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
            raise InputError(f"the pool's rows cannot be written as {fmt} ({first}); use --out-format jsonl") from None

    return check


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


def _check_paths(args: argparse.Namespace) -> tuple[str, Path, Path, Path | None, Path | None]:
    """(format, out, scores, report, checkpoint), every path checked before any work."""
    from updatescope.commands._checks import check_out_file, check_out_folder, check_report, positive

    if args.top < 1:
        raise InputError(f"--top must be a positive integer, got {args.top}")
    if args.min_tokens < 1:
        raise InputError(f"--min-tokens must be a positive integer, got {args.min_tokens}")
    if args.token_budget < 2:
        raise InputError(f"--token-budget must be at least 2, got {args.token_budget}")
    positive("--chunk-docs", args.chunk_docs)
    positive("--checkpoint-every", args.checkpoint_every)
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
    from updatescope.inputs import check_inputs

    check_inputs(args.data, allow_dir=True)  # stat only: a missing file is named before any work
    ckpt = None
    if args.checkpoint_every or args.resume:
        ckpt = out.with_name(out.name + ".ckpt")
        if ckpt.exists() and not ckpt.is_file():
            raise InputError(f"checkpoint {ckpt} is not a regular file; remove it or choose another --out")
        if args.resume and not ckpt.exists():
            raise InputError(f"--resume: no checkpoint at {ckpt} (run with --checkpoint-every N first)")
    return fmt, out, scores_path, report, ckpt


def cmd_select(args: argparse.Namespace) -> int:
    from updatescope.distributed import init_from_env, rank_and_world, resolve_device, shutdown

    rank, world = rank_and_world()
    # every rank checks every path and flag before any work (on one node they all see the same
    # files, so all of them stop here; a rank that alone fails stops the run through torchrun)
    paths = _check_paths(args)
    device = resolve_device(args.device)
    created = init_from_env(device)
    try:
        code = _select(args, paths, world, device)
        if created:
            created = False
            shutdown(synchronise=True)  # rank 0 has written before anyone leaves
        return code
    finally:
        if created:  # an error on this rank: the others learn it at their next agreement
            shutdown(synchronise=False)


def _select(args: argparse.Namespace, paths: Any, world: int, device: Any) -> int:
    from updatescope.commands._checks import file_sha256
    from updatescope.data.formats import is_table_input
    from updatescope.distributed import agree
    from updatescope.pipeline.select_stream import SelectOptions, check_resume, check_shards, scan_pool, select_pool
    from updatescope.signatures.io import load_signature

    fmt, out, scores_path, report, ckpt = paths
    columns = _pool_columns(args)
    table = is_table_input(args.data, columns)
    options = SelectOptions(args.top, args.chunk_docs, args.token_budget, args.min_tokens, args.by)
    pool = scan_pool(args.data, columns, chunk_docs=args.chunk_docs, check_chunk=_chunk_check(fmt, table))
    if args.top > pool.documents:
        raise InputError(f"--top {args.top} is larger than the pool ({pool.documents} documents)")
    settings = {
        "model": str(args.model),
        "dtype": args.dtype,
        "target": file_sha256(args.target),
        "columns": [args.text_column, args.prompt_column, args.completion_column, args.messages_column],
        "format": fmt,
    }
    resume = check_resume(ckpt, options, settings, pool) if args.resume else None
    check_shards(options, pool, world, int(resume["next_chunk"]) if resume else 0)
    target = load_signature(args.target)
    agree(False)  # every rank's pool and flags are good: load the model

    from updatescope.pipeline import load_model

    model, tok = load_model(args.model, dtype=args.dtype)
    model.to(device)
    sel = select_pool(
        model,
        tok,
        args.data,
        columns,
        target,
        options,
        pool,
        scores=scores_path,
        checkpoint=ckpt,
        checkpoint_every=args.checkpoint_every,
        resume=resume,
        settings=settings,
        progress=not args.quiet,
    )
    if sel is None:  # another rank writes
        return 0
    if not sel.top:
        scores_path.unlink(missing_ok=True)
        raise InputError(
            f"no document of the pool has a token to score ({pool.documents} documents, all shorter than two tokens "
            "or with nothing counted)"
        )
    layout = columns if table else None
    records = [rec for rec, _ in sel.top]
    exported = [{"text": doc, **rec} if layout is None else {**doc, **rec} for rec, doc in sel.top]
    _write_subset(fmt, exported, out)
    if ckpt is not None:
        ckpt.unlink(missing_ok=True)  # the run is complete: its checkpoint is spent
    rate = f"{sel.tokens} tokens scored in {sel.seconds:.2f} s, {sel.tokens / max(sel.seconds, 1e-9):.0f} tokens/s"
    print(
        f"wrote {out} ({fmt}): top {len(sel.top)} of {pool.documents} documents ({sel.short} with fewer than "
        f"{args.min_tokens} counted tokens flagged); scores of all in {scores_path}; {rate}"
        + (f" on {world} ranks" if world > 1 else "")
    )
    if args.json:
        from updatescope.records import to_json

        print(to_json(records, strict=True))
    else:
        from updatescope.report.console import fmt as fmt_value
        from updatescope.report.console import print_rows

        def value(x: float | None) -> float:
            return float("nan") if x is None else float(x)

        by = options.column
        print_rows(
            f"top {len(records)} documents for target {Path(args.target).name}"
            + ("" if by == "score" else f", by the {by}-only score"),
            ("rank", by, "tokens", "short", "source", "index"),
            [
                (
                    r["rank"],
                    fmt_value(value(r["score"]), value(r["score_se"]), digits=4)
                    if by == "score"
                    else f"{value(r[by]):.4f}",
                    r["tokens"],
                    "yes" if r["short"] else "",
                    Path(r["source"]).name,
                    r["index"],
                )
                for r in records[:20]
            ],
            right=("rank", "tokens", "index"),
        )
    if report is not None:
        _write_report(args, report, target, layout, sel, scores_path, options.column)
    return 0


def _write_report(
    args: argparse.Namespace, report: Path, target: Any, layout: Any, sel: Any, scores: Path, by: str
) -> None:
    """The HTML report: the top documents, and the histogram of every score in the field ``by``
    that ordered them (read back from the score file: the only per-document state of the run)."""
    import sys

    from updatescope.pipeline import Corpus
    from updatescope.report.html import DocumentView, write_report

    tname = target.meta.get("name") or Path(args.target).name.split(".")[0]
    with open(scores, encoding="utf-8") as fh:
        values = tuple(float("nan") if (v := json.loads(line)[by]) is None else float(v) for line in fh)
    top = tuple({"text": Corpus((doc,), layout).text(0), **rec} for rec, doc in sel.top)
    view = DocumentView(tname, top, values, by)
    path = write_report(
        report,
        title=f"updatescope — documents selected for {tname}",
        meta={
            "target": tname,
            "pool": ", ".join(Path(p).name for p in args.data),
            "documents": sel.documents,
            "kept": len(sel.top),
            "short": sel.short,
            "model": str(args.model),
            "ordered by": args.by,
        },
        documents=view,
    )
    print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)


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
        "--by",
        choices=RANK_BY,
        default="fisher",
        help="keep the documents with the highest joint score (default), or the highest error-only or "
        "activation-only marginal; the score file holds all three (docs/guide-select.md: what the records show)",
    )
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
    p.add_argument(
        "--chunk-docs",
        type=int,
        default=1024,
        metavar="N",
        help="documents scored together (length-bucketed inside a chunk); the pool is streamed one round of "
        "chunks at a time, and under torchrun the chunks of a round are shared among the ranks by size",
    )
    p.add_argument(
        "--device", default="cpu", help="cpu, cuda, cuda:N or auto (under torchrun, cuda means cuda:LOCAL_RANK)"
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="N",
        help="write the progress (the top-k so far, the score rows written) to OUT.ckpt after every N documents",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT.ckpt; gives the same files as an uninterrupted run with the same flags",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_select)
