"""Command-line interface: parse, load, call the library, print.  ``main(argv) -> exit code``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from updatescope._version import __version__
from updatescope.commands import _network
from updatescope.commands._checks import (
    add_column_arguments,
    check_out_file,
    check_out_folder,
    check_report,
    one_kind,
    positive,
    print_json,
    sig_name,
    signature_kind,
    unique_names,
)
from updatescope.constants import DEFAULT_SKETCH_DIM, DTYPE_CHOICES, MAP_CHOICES, RANK_BY
from updatescope.errors import InputError, UpdatescopeError

EXIT_USER_ERROR = 2
_MATRIX_MAX = 40  # signatures up to which rank --report draws the all-pairs heatmaps


def _sketch_inputs(args: argparse.Namespace) -> tuple[Any, Any]:
    """(Corpus, SketchOptions) from the flags, read and validated before the model loads."""
    from updatescope.data.formats import Columns
    from updatescope.pipeline import Corpus, SketchOptions

    options = SketchOptions(
        sketch_dim=args.sketch_dim,
        seed=args.seed,
        act_map=args.act_map,
        error_map=args.error_map,
        max_tokens=args.max_tokens,
        token_budget=args.token_budget,
        dtype=args.dtype,
    )
    columns = Columns(args.text_column, args.prompt_column, args.completion_column, args.messages_column)
    return Corpus.from_files(args.data, columns), options


def _signature_meta(args: argparse.Namespace, out: Path, corpus: Any) -> dict[str, str]:
    meta = {"data": corpus.description, "name": args.name or out.name.split(".")[0], "dtype": args.dtype}
    if corpus.columns is not None:
        meta["columns"] = corpus.columns.describe()
    return meta


def cmd_sketch(args: argparse.Namespace) -> int:
    # every flag and path is checked before the data is read and the model loads
    positive("--max-tokens", args.max_tokens)
    positive("--token-budget", args.token_budget)
    positive("--checkpoint-every", args.checkpoint_every)
    from updatescope.distributed import init_from_env, rank_and_world, resolve_device
    from updatescope.pipeline.checkpoint import check_checkpoint_path, checkpoint_path

    rank, world = rank_and_world()
    out = check_out_file(args.out, inputs=args.data)
    ckpt = checkpoint_path(out) if (args.checkpoint_every or args.resume) else None
    if args.layers:
        if ckpt is not None:
            raise UpdatescopeError("--layers sketches run without --checkpoint-every/--resume")
        if world > 1:
            raise UpdatescopeError("--layers sketches run in a single process, not under torchrun")
    if world > 1 and ckpt is not None:
        raise UpdatescopeError(
            "--checkpoint-every/--resume run in a single process; under torchrun, sketch "
            "shards separately with checkpoints and join them with 'updatescope merge'"
        )
    if ckpt is not None:
        check_checkpoint_path(ckpt, resume=args.resume)
    if args.resume and not ckpt.exists():
        raise UpdatescopeError(f"--resume: no checkpoint at {ckpt} (run with --checkpoint-every N first)")
    corpus, options = _sketch_inputs(args)  # validates every flag and file before the model loads
    if args.layers:
        from updatescope.pipeline.network import check_layer_options

        check_layer_options(options)
    if args.error_map == "countsketch" and rank == 0:
        from updatescope.sketch.align import COUNTSKETCH_WARNING

        print(
            f"updatescope: warning: {COUNTSKETCH_WARNING}; comparisons of this signature are never marked trusted",
            file=sys.stderr,
        )
    device = resolve_device(args.device)
    if args.layers:
        return _network.sketch_network(args, out, device, corpus, options)

    from updatescope.pipeline import load_model, sketch_corpus
    from updatescope.signatures.io import save_signature

    created = init_from_env(device)
    try:
        model, tok = load_model(args.model, dtype=args.dtype)
        model.to(device)
        t0 = time.perf_counter()
        sig = sketch_corpus(
            model,
            tok,
            corpus,
            options,
            checkpoint=ckpt,
            checkpoint_every=args.checkpoint_every,
            resume=args.resume,
            progress=not args.quiet,
            meta=_signature_meta(args, out, corpus),
        )
        dt = time.perf_counter() - t0
        if rank == 0:
            save_signature(sig, out)
            if ckpt is not None:
                ckpt.unlink(missing_ok=True)  # the run is complete: its checkpoint is spent
            ranks = f" on {world} ranks" if world > 1 else ""
            print(
                f"wrote {out}: {sig.count} tokens, sketch_dim {sig.config.sketch_dim}, "
                f"{sig.count / max(dt, 1e-9):.0f} tokens/s{ranks}"
            )
        if created:
            from updatescope.distributed import shutdown

            created = False
            shutdown(synchronise=True)  # rank 0 has written before anyone leaves
    finally:
        if created:  # an error: no collective to meet, just leave
            from updatescope.distributed import shutdown

            shutdown(synchronise=False)
    return 0


def cmd_rank(args: argparse.Namespace) -> int:
    report = check_report(args.report, inputs=[args.target, *args.sources])
    if one_kind([args.target, *args.sources]) == "network":
        if args.by != "fisher":
            raise InputError(f"--by {args.by}: network signatures rank by their full alignment only")
        return _network.rank_network(args, report)
    from updatescope.select.rank import rank_sources
    from updatescope.signatures.io import load_signature

    target = load_signature(args.target)
    sources = unique_names(args.sources, load_signature)
    tname = sig_name(args.target, target)
    ranking = rank_sources(target, sources, target_name=tname, by=args.by)
    if args.json:
        print_json(ranking.as_dict())
    else:
        from updatescope.report.console import print_ranking

        print_ranking(ranking)
    if report is not None:
        from updatescope.report.html import write_report
        from updatescope.sketch.align import alignment_matrix

        names, mats = [], None
        if len(sources) + 1 <= _MATRIX_MAX:  # target first, then the sources: rows and columns alike
            names = [tname, *sources]
            mats = {k: v.numpy() for k, v in alignment_matrix([target, *sources.values()]).items()}
        cfg = target.config
        path = write_report(
            report,
            title=f"updatescope — sources for {tname}",
            meta={
                "target": tname,
                "sources": len(sources),
                "sketch_dim": cfg.sketch_dim,
                "seed": cfg.seed,
                "target tokens": target.count,
            },
            rankings=[ranking],
            names=names,
            matrices=mats,
        )
        print(f"report: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from updatescope.signatures.io import load_signature

    rows, nets = [], []
    for p in args.signatures:
        if signature_kind(p) == "network":
            nets.append(_network.inspect_network(p))
            continue
        sig = load_signature(p)
        sq = sig.sq_norm().tolist()
        rows.append(
            {
                "file": p,
                "kind": "head",
                **sig.describe(),
                "state_bytes": sig.sums.numel() * 8,
                "sq_norm": dict(zip(("fisher", "activation", "error"), sq)),
            }
        )
    if args.json:
        print_json(rows + nets if nets else rows)
        return 0
    from updatescope.report.console import fmt, print_rows

    for r in nets:
        c = r["config"]
        print_rows(
            f"network signature {r['file']} — {r['name']}: {r['count']} {c['mode']} samples, sketch_dim "
            f"{c['sketch_dim']}, seed {c['seed']}, maps {c['act_map']}/{c['error_map']}, data {r['data']}",
            ("layer", "act_dim", "out_dim", "‖F_bb‖²", "share of ‖F‖²"),
            [
                (x["name"], x["act_dim"], x["out_dim"], f"{x['sq_norm']:.4g}", fmt(x["energy_share"]))
                for x in r["layers"]
            ],
            right=("act_dim", "out_dim", "‖F_bb‖²", "share of ‖F‖²"),
        )
        print(f"  off-diagonal (cross-layer) share of ‖F‖²: {fmt(r['offdiag_share'])}")
    if not rows:
        return 0
    print_rows(
        "signatures",
        ("file", "name", "samples", "act_dim", "out_dim", "sketch_dim", "seed", "maps", "fingerprint", "data"),
        [
            (
                r["file"],
                r.get("name", ""),
                r["count"],
                r["config"]["act_dim"],
                r["config"]["out_dim"],
                r["config"]["sketch_dim"],
                r["config"]["seed"],
                f"{r['config']['act_map']}/{r['config']['error_map']}"
                + ("+bias" if r["config"].get("head_bias") else ""),
                r["config"]["fingerprint"] or "-",
                r.get("data", ""),
            )
            for r in rows
        ],
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from updatescope.demo import run_demo

    positive("--max-tokens", args.max_tokens)
    check_out_folder(args.out)
    run_demo(Path(args.out), synthetic=args.synthetic, max_tokens=args.max_tokens, quiet=args.quiet)
    return 0


def cmd_domains(args: argparse.Namespace) -> int:
    from updatescope.data.domains import list_domains, load_domain

    if args.export:
        if not args.out:
            raise UpdatescopeError("--export needs --out FILE.jsonl")
        out = check_out_file(args.out)
        docs = load_domain(args.export, split=args.split)
        from updatescope.records import write_text_atomic

        write_text_atomic("".join(json.dumps({"text": d}) + "\n" for d in docs), out)
        print(f"wrote {out}: {len(docs)} documents of domain {args.export} ({args.split} split)")
        return 0
    infos = list_domains(args.family)
    if args.json:
        print_json([{"name": d.name, "family": d.family, "source": d.source} for d in infos])
        return 0
    from updatescope.report.console import print_rows

    print_rows(
        "built-in domains (offline, from installed packages)",
        ("name", "family", "source"),
        [(d.name, d.family, d.source) for d in infos],
    )
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from updatescope.experiments import configure, run_experiment
    from updatescope.experiments.settings import parse_settings

    # the whole config is built and validated before anything heavy is imported
    config = configure(args.name, quick=args.quick, seed=args.seed, settings=parse_settings(args.set))
    if not args.out:
        Path("results").mkdir(exist_ok=True)
    out = check_out_file(args.out or os.path.join("results", f"{args.name}{'_quick' if args.quick else ''}.json"))
    record = run_experiment(config, out)
    print(f"wrote {out} ({record['seconds']:.0f} s)")
    if args.json:
        print_json(record["metrics"])
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="updatescope",
        description="Geometry of parameter updates: FisherSketch "
        "signatures for fine-tuning source selection, and a local-linear lab.",
    )
    p.add_argument("--version", action="version", version=f"updatescope {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("sketch", help="sketch a corpus into a signature file (forward passes only)")
    s.add_argument("--model", required=True, help="'smollm2' (packaged) or a local HF model folder")
    s.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="text files (one document per line, blank-line "
        "paragraphs), JSONL with a 'text' field, or tables (JSON, CSV, parquet, arrow, a datasets "
        "folder) with the column options below",
    )
    s.add_argument("--out", required=True, help="output signature (.safetensors)")
    s.add_argument("--max-tokens", type=int, default=None, help="stop after this many tokens")
    s.add_argument("--sketch-dim", type=int, default=DEFAULT_SKETCH_DIM)
    s.add_argument("--seed", type=int, default=0, help="random basis; must match across compared signatures")
    s.add_argument("--token-budget", type=int, default=1024, help="padded tokens per forward pass")
    s.add_argument("--dtype", default="float32", choices=list(DTYPE_CHOICES), help="model weights' precision")
    s.add_argument(
        "--device", default="cpu", help="cpu, cuda, cuda:N or auto (under torchrun, cuda means cuda:LOCAL_RANK)"
    )
    add_column_arguments(s)
    s.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="N",
        help="write the state and position to OUT.ckpt after every N documents (atomic)",
    )
    s.add_argument(
        "--resume",
        action="store_true",
        help="continue from OUT.ckpt; gives the same file as an uninterrupted run with the same flags",
    )
    s.add_argument(
        "--act-map",
        default="auto",
        choices=[k for k in MAP_CHOICES if k != "countsketch"],
        help="activation-side projection (auto: stacked SRHTs up to width next_pow2(sketch_dim), the "
        "wide-block SRHT of spread beyond; dense and srht were the earlier default, fold is faster "
        "at a larger error, see benchmarks/README.md)",
    )
    s.add_argument(
        "--error-map",
        default="auto",
        choices=list(MAP_CHOICES),
        help="error-side projection (auto: stacked SRHTs up to next_pow2(sketch_dim) outputs, the "
        "wide-block SRHT of spread beyond; dense and srht were the earlier default, fold is faster "
        "at a larger error, foldspread folds into 4·sketch_dim buckets before spread's rows, see "
        "benchmarks/README.md; countsketch's "
        "standard errors are not calibrated and its values are never trusted); compared "
        "signatures must use the same maps",
    )
    s.add_argument(
        "--layers",
        nargs="+",
        default=None,
        metavar="PATTERN",
        help="write a network signature of "
        "these nn.Linear layers (names or fnmatch patterns, e.g. 'model.layers.2[89].*_proj'; the head "
        "is always included); one forward + one backward pass per batch",
    )
    s.add_argument(
        "--layer-mode",
        default="token",
        choices=["token", "sequence"],
        help="with --layers: a sample is a labelled token (default, as the head sketch) or a whole sequence",
    )
    s.add_argument("--name", default=None, help="name shown in rankings (default: file stem)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_sketch)

    r = sub.add_parser("rank", help="rank source signatures for a target signature")
    r.add_argument("--target", required=True)
    r.add_argument("sources", nargs="+", metavar="SOURCE_SIG")
    r.add_argument("--json", action="store_true")
    r.add_argument(
        "--by",
        choices=RANK_BY,
        default="fisher",
        help="order by the joint Fisher alignment A_F (default), or by its error-only or activation-only "
        "marginal (docs/evidence.md: which one the records support, and where)",
    )
    r.add_argument(
        "--report", default=None, metavar="DIR", help="also write an HTML report (figures inlined) to this folder"
    )
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
    from updatescope.experiments import REGISTRY

    e.add_argument("name", metavar="NAME", help="; ".join(f"{x.name}: {x.summary}" for x in REGISTRY.values()))
    e.add_argument("--quick", action="store_true", help="the reduced configuration (< 10 min on 2 CPU cores)")
    e.add_argument("--out", default=None, help="result JSON (figures go beside it)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting of the run, e.g. ground_truth=head or lora.lr=3e-4 (repeatable; "
        "values read as JSON where they parse); the result JSON records the full config",
    )
    e.add_argument("--json", action="store_true", help="also print the metrics")
    e.set_defaults(func=cmd_reproduce)

    from updatescope.commands import register_all

    register_all(sub)
    return p


def _launched() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment; (0, 1) outside torchrun, and when
    the environment is malformed (the command then says so in one line)."""
    try:
        rank, world = int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 0, 1
    return (rank, world) if world > 1 and 0 <= rank < world else (0, 1)


def _user_error(line: str | None, rank: int, world: int) -> int:
    """Print a user error's one line (under torchrun: once, for all ranks) and give exit code 2."""
    if world > 1:
        from updatescope.distributed import report_error

        report_error(line, rank, world)
    else:
        print(line, file=sys.stderr)
    return EXIT_USER_ERROR


def _parse_distributed(parser: argparse.ArgumentParser, argv: Sequence[str] | None, rank: int, world: int) -> Any:
    """Parse under torchrun: a bad flag is one ``updatescope: error:`` line from one rank (not
    argparse's usage and error from every rank); ``--help``/``--version`` print on rank 0."""
    import contextlib
    import io

    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            return parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code in (0, None):
            if rank == 0:
                sys.stdout.write(out.getvalue())
            raise
        text = err.getvalue().strip().splitlines()
        reason = text[-1].split(": error: ", 1)[-1] if text else "invalid arguments"
        raise SystemExit(_user_error(f"updatescope: error: {reason} (see --help)", rank, world)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    rank, world = _launched()
    args = parser.parse_args(argv) if world == 1 else _parse_distributed(parser, argv, rank, world)
    try:
        return int(args.func(args) or 0)
    except UpdatescopeError as exc:
        line: str | None = f"updatescope: error: {exc}"
        if world > 1:
            from updatescope.distributed import PeerFailed

            line = None if isinstance(exc, PeerFailed) else line  # the failing rank's line is printed
        return _user_error(line, rank, world)
    except KeyboardInterrupt:
        print("updatescope: interrupted; no output was written", file=sys.stderr)
        return 130
    except (OSError, MemoryError, FloatingPointError) as exc:  # FloatingPointError: a training run diverged
        if os.environ.get("UPDATESCOPE_DEBUG"):
            raise
        print(
            f"updatescope: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr
        )
        return 1


def entry() -> None:
    """The console script and ``python -m updatescope``: run :func:`main` and exit with its code.

    Under torchrun (``WORLD_SIZE`` > 1) the process leaves without interpreter finalisation:
    by then every collective has finished and the output is written (``distributed.shutdown``
    ran), but finalisation could still meet gloo's worker threads and abort the rank
    ("terminate called without an active exception"), failing a finished run about one time
    in three on a loaded 2-core machine.
    """
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
