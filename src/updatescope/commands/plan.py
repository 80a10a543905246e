"""``updatescope plan --tasks SIG...``: a training order and replay shares against predicted interference.

Parses, checks every input before any work, calls :func:`updatescope.select.interference.plan`
and prints the order, the per-stage replay shares and the interference table (``--json``:
strict JSON).  Writes nothing.  Bad input — fewer than two tasks, a replay budget outside
[0, 1), the same task twice (by path, link or byte-identical copy), signatures of another
model, basis or sketch size, network signatures, NaN/inf state or a non-positive norm
estimate — gives one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

_SCORES = ("inner", "fisher", "error", "activation")
_HEADERS = ("<F_A,F_B>", "A_F", "Scov(Γ_e)", "Scov(M_a)")


def _pm(value: float, se: float, kind: str) -> str:
    """``value±se``, compact enough for four columns at 80 characters; ``n/a`` when undefined."""
    if not math.isfinite(value):
        return "n/a"
    text = f"{value:.3g}" if kind == "inner" else f"{value:.3f}"
    if math.isfinite(se):
        text += f"±{se:.2g}" if kind == "inner" else f"±{se:.3f}"
    return text


def _budget(text: str) -> float:
    from updatescope.errors import InputError

    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--replay-budget must be a number in [0, 1), got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value < 1.0:
        raise InputError(f"--replay-budget must be a finite fraction in [0, 1), got {text!r}")
    return value + 0.0  # -0.0 is the budget 0, shown and written as 0


def cmd_plan(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import file_sha256, same_path, sig_name, signature_kind
    from updatescope.errors import IncompatibleSignatureError, InputError

    budget = _budget(args.replay_budget)
    paths = list(args.tasks)
    if len(paths) < 2:
        raise InputError(f"plan needs at least two tasks, got {len(paths)}")
    digests = [file_sha256(p) for p in paths]  # also refuses a FIFO, a device or a folder in one line
    for i, p in enumerate(paths):
        for j in range(i):
            q = paths[j]
            if same_path(Path(p), Path(q)):
                raise InputError(f"{p} is given twice (as {q}): each task once")
            if digests[i] == digests[j]:
                raise InputError(f"{p} is a byte-identical copy of {q}: each task once")
    for p in paths:
        if signature_kind(p) == "network":
            raise InputError(f"{p} is a network signature; plan takes head signatures (sketched without --layers)")

    from updatescope.select.interference import plan
    from updatescope.signatures.io import load_signature

    sigs = [load_signature(p) for p in paths]
    for p, sig in zip(paths[1:], sigs[1:]):
        try:
            sigs[0].config.check_compatible(sig.config)
        except IncompatibleSignatureError as exc:
            raise InputError(
                f"{p} cannot be compared with {paths[0]}: {exc.field} differs ({exc.right!r} vs {exc.left!r}); "
                "every task must be sketched with the same model, basis and sketch size"
            ) from None
    for i, sig in enumerate(sigs):
        for j in range(i):
            if sig.same_state(sigs[j]):
                raise InputError(f"{paths[i]} holds the same signature state as {paths[j]}: each task once")
    names: list[str] = []
    for p, sig in zip(paths, sigs):
        name = sig_name(p, sig)
        names.append(p if name in names else name)
    result = plan(sigs, names, replay_budget=budget, score=args.score)
    if args.json:
        from updatescope.commands._checks import print_json

        print_json(result.as_dict())
    else:
        _print_plan(result)
    return 0


def _print_plan(result: Any) -> None:
    from updatescope.report.console import fmt, make_console, print_rows

    console = make_console()
    print_rows(
        f"training order (score {result.score}, replay budget {result.replay_budget:g})",
        ("stage", "task", "predicted forgetting", "replay from earlier tasks"),
        [
            (
                k + 1,
                task,
                fmt(result.forgetting[task], digits=4),
                ", ".join(f"{a} {v:.3f}" for a, v in result.replay[k].items() if v > 0) or "-",
            )
            for k, task in enumerate(result.order)
        ],
        console,
        right=("stage", "predicted forgetting"),
    )
    console.print(f"  predicted total forgetting ({result.search} search): plan {result.cost_plan:.4g}")
    console.print(f"  order given {result.cost_input:.4g}, worst order found {result.cost_worst:.4g}")
    table = result.table
    n = len(table.names)
    rows = []
    for i in range(n):
        for j in range(i + 1, n):
            rows.append(
                (
                    table.names[i],
                    table.names[j],
                    *(_pm(float(table.values[q][i, j]), float(table.ses[q][i, j]), q) for q in _SCORES),
                )
            )
    print_rows(
        "predicted interference (symmetric; ± standard error)",
        ("task A", "task B", *_HEADERS),
        rows,
        console,
        right=_HEADERS,
    )
    for note in result.notes:
        console.print(f"  note: {note}")
    console.print("  an unvalidated proxy: not yet checked against measured forgetting")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="order tasks and share replay against predicted interference",
        description="Propose the training order of several tasks that minimises total predicted "
        "forgetting, and per stage a replay share of every earlier task, from their signatures. "
        "The prediction is an unvalidated proxy (see docs/guide-plan.md).",
    )
    p.add_argument("--tasks", nargs="+", required=True, metavar="SIG", help="head signatures, one per task")
    p.add_argument(
        "--replay-budget",
        default="0",
        metavar="FRACTION",
        help="share of each stage's tokens spent replaying earlier tasks, in [0, 1) (default 0)",
    )
    p.add_argument(
        "--score",
        default="inner",
        choices=list(_SCORES),
        help="damage score: inner (<F_A,F_B>, default: scale matters), fisher (A_F), error, activation",
    )
    p.add_argument("--json", action="store_true", help="the plan and the table as JSON")
    p.set_defaults(func=cmd_plan)
