"""Sharded sketching on one machine: tokens/s vs number of ranks, and the all-reduce cost vs
sketch_dim.

1. ``ranks``: ``updatescope sketch`` on a small random Llama (saved to a temporary folder,
   no download) over a random-word corpus, run as one process and under
   ``torchrun --standalone --nproc-per-node N`` (gloo), every rank with one thread
   (OMP_NUM_THREADS=1).  Reported per N: median and spread of the wall time of the whole
   command (start-up, model load, sketch, exact fold, write) and of the tokens/s the
   command prints (rank 0's sketch phase, which includes waiting for the slowest rank and
   the all-reduce); ``speedup`` is relative to N = 1 in the same run.  The files of every
   N are checked to be byte-identical (``same_bytes``).
2. ``allreduce``: 2 gloo ranks, ``gather_slots`` of one slot per rank (what
   ``all_reduce_sketch`` does) for each sketch_dim; median and spread over ``--reps`` after
   a warm-up, with the bytes moved per rank.

Multi-node and NCCL are designed (same code path, backend chosen by device) but not
measured here: this machine has 2 CPU cores and no GPU.

    python benchmarks/scaling.py [--ranks 1 2] [--docs 400] [--reps 3] [--out results/scaling.json]
    python benchmarks/scaling.py --table benchmarks/results/scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from updatescope.records import make_record, portable_command, portable_config, write_json_atomic

ROOT = Path(__file__).resolve().parents[1]


def _model(path: Path, vocab: int, hidden: int) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = {f"w{i}": i + 2 for i in range(vocab - 2)}
    tk = Tokenizer(models.WordLevel(vocab={"[PAD]": 0, "[UNK]": 1, **words}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(path)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=256,
            pad_token_id=0,
        )
        LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def _corpus(path: Path, n_docs: int, vocab: int) -> Path:
    g = torch.Generator().manual_seed(1)
    lines = []
    for n in torch.randint(20, 200, (n_docs,), generator=g).tolist():
        ids = torch.randint(2, vocab, (n,), generator=g).tolist()
        lines.append(json.dumps({"text": " ".join(f"w{i - 2}" for i in ids)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _sketch(n: int, model: Path, data: Path, out: Path, sketch_dim: int) -> tuple[float, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    args = [
        "-m",
        "updatescope",
        "sketch",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(out),
        "--sketch-dim",
        str(sketch_dim),
        "--quiet",
        "--name",
        "bench",
    ]
    cmd = (
        [sys.executable, *args]
        if n == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", *args]
    )
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    tps = float(re.search(r"([0-9.]+) tokens/s", r.stdout).group(1))
    return wall, tps


def _allreduce_worker(rank: int, world: int, port: int, dims: list[int], reps: int, q) -> None:
    import torch.distributed as dist

    from updatescope.distributed import all_reduce_sketch
    from updatescope.sketch.fishersketch import FisherSketch

    torch.set_num_threads(1)  # a benchmark process, not library code
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {}
    for m in dims:
        g = torch.Generator().manual_seed(rank)
        sk = FisherSketch(16, 32, m, 0).update(torch.randn(64, 16, generator=g), torch.randn(64, 32, generator=g))
        all_reduce_sketch(sk)  # warm-up
        times = []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            all_reduce_sketch(sk)
            times.append(time.perf_counter() - t0)
        out[m] = times
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def _allreduce(dims: list[int], reps: int) -> dict[str, dict[str, float]]:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_allreduce_worker, args=(r, 2, port, dims, reps, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    world = 2
    return {
        str(m): {
            "median_ms": 1e3 * statistics.median(t),
            "min_ms": 1e3 * min(t),
            "max_ms": 1e3 * max(t),
            "bytes_per_rank": world * (6 * m + 6 * 16) * 8,
        }
        for m, t in res.items()
    }


def table(path: str) -> str:
    """The record as the docs' sentence (every figure read from it)."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    m, cfg = rec["metrics"], rec["config"]
    ranks = sorted(m["ranks"], key=int)
    tps = " and ".join(
        f"{m['ranks'][n]['tokens_per_s_median']:,.0f}{' tokens/s' * (i == 0)} on {n} rank{'s' * (n != '1')}"
        for i, n in enumerate(ranks)
    )
    speed = ", ".join(f"{m['ranks'][n]['speedup']:.2f}× on {n}" for n in ranks[1:])
    wall = " and ".join(f"{m['ranks'][n]['wall_s_median']:.1f} s on {n}" for n in ranks)
    dims = sorted(m["allreduce"], key=int)
    ar = " / ".join(f"{m['allreduce'][d]['median_ms']:.1f}" for d in dims)
    load = cfg.get("load_average")
    load_s = f"; load average {load[0]:.1f} after the run" if load else ""
    return (
        f"A random Llama (vocabulary {cfg['vocab']}, width {cfg['hidden']}), {cfg['docs']} random-word documents, "
        f"sketch_dim {cfg['sketch_dim']}, one thread per rank: the sketch phase ran at {tps} ({speed}; "
        f"medians of {cfg['reps']}); the files of every rank count are the same bytes: "
        f"{'yes' if m['same_bytes'] else 'no'}. End to end the command took {wall} (start-up included). "
        f"The all-reduce of the state took {ar} ms at sketch_dim {' / '.join(f'{int(d):,}' for d in dims)}"
        f"{load_s}; `{path}`."
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--sketch-dim", type=int, default=1024)
    ap.add_argument("--dims", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    ap.add_argument("--table", default=None, metavar="JSON", help="print the docs sentence of this record")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    t0 = time.perf_counter()
    metrics: dict[str, object] = {"ranks": {}, "allreduce": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = _model(tmp / "model", args.vocab, args.hidden)
        data = _corpus(tmp / "docs.jsonl", args.docs, args.vocab)
        files = {}
        for n in args.ranks:
            runs = [_sketch(n, model, data, tmp / f"r{n}.safetensors", args.sketch_dim) for _ in range(args.reps)]
            walls, tps = [w for w, _ in runs], [t for _, t in runs]
            files[n] = (tmp / f"r{n}.safetensors").read_bytes()
            metrics["ranks"][str(n)] = {
                "wall_s_median": statistics.median(walls),
                "wall_s_min": min(walls),
                "wall_s_max": max(walls),
                "tokens_per_s_median": statistics.median(tps),
                "tokens_per_s_min": min(tps),
                "tokens_per_s_max": max(tps),
            }
            print(n, metrics["ranks"][str(n)], flush=True)
        base = metrics["ranks"][str(args.ranks[0])]["tokens_per_s_median"]
        for n in args.ranks:
            metrics["ranks"][str(n)]["speedup"] = metrics["ranks"][str(n)]["tokens_per_s_median"] / base
        metrics["same_bytes"] = len({files[n] for n in args.ranks}) == 1
    metrics["allreduce"] = _allreduce(args.dims, max(args.reps, 5))
    print(json.dumps(metrics["allreduce"], indent=1))
    config = {
        **portable_config(args),
        "command": portable_command("benchmarks/scaling.py"),
        "threads_per_rank": 1,
        "load_average": os.getloadavg(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(make_record("scaling", config, metrics, time.perf_counter() - t0), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
