"""Shared by the per-map timing scripts (``chunk_rows.py``, ``update_breakdown.py``): their
common command line, and softmax-like error rows with enough copies (≥ 1 GiB in all) that
each timed call, taking the next copy, reads its errors from memory rather than from cache."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch

import updatescope as us

RESULTS = Path(__file__).resolve().parent / "results"


def parser(name: str, reps: int) -> argparse.ArgumentParser:
    """--n, --m, --reps, --threads, --out (results/NAME.json) and --table."""
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=256, help="rows per call")
    p.add_argument("--m", type=int, default=4096, help="sketch_dim")
    p.add_argument("--reps", type=int, default=reps)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / f"{name}.json"))
    p.add_argument("--table", default=None, help="print the markdown table of records (a+b+…) and exit")
    return p


def error_pool(n: int, k: int, seed: int = 0) -> list[torch.Tensor]:
    """softmax(3·N(0, 1)) − onehot rows (n, K), and identical copies up to ≥ 1 GiB (at least 3)."""
    g = torch.Generator().manual_seed(seed)
    e, _ = us.error_vectors(3.0 * torch.randn(n, k, generator=g), torch.randint(0, k, (n,), generator=g))
    return [e] + [e.clone() for _ in range(max(3, -(-(1 << 30) // (e.numel() * e.element_size()))) - 1)]


def parse(
    p: argparse.ArgumentParser, argv: list[str] | None, table: Callable[[list[str]], str]
) -> argparse.Namespace | None:
    """The arguments, with torch's threads set; None after printing the table when --table is given."""
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table.split("+")))
        return None
    torch.set_num_threads(args.threads)
    return args
