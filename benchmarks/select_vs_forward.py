"""Tokens/s of document scoring (``select``: forward + capture + features + per-document
sums, what ``updatescope select`` runs) against the bare forward pass on the packaged
SmolLM2-135M: the same documents, the same batching, alternated in one run.

    python benchmarks/select_vs_forward.py [--threads 2] [--tokens 4096 --reps 3]
    python benchmarks/select_vs_forward.py --table benchmarks/results/select_vs_forward.json

The target signature is sketched once, before timing, from a different text.  Documents
are cut to ``--doc-len`` tokens so both arms forward identical batches.  The model's
fingerprint (one read of every weight) is computed once before timing and passed to each
scoring call, as ``updatescope select`` computes it once per run however large the pool; its
time is in the record (``fingerprint_s``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent
POOL = (
    "The committee reviewed the proposal in detail and asked for a revised budget, "
    "a clearer schedule, and an independent assessment of the risks involved. "
)
#: issue 36's goal for the scoring pass (``select_scale.py`` measures it on a heterogeneous pool)
FORWARD_GOAL = 0.95
TARGET = "def merge(a, b):\n    out = dict(a)\n    for k, v in b.items():\n        out[k] = v\n    return out\n"


def table(path: str) -> str:
    """The record as the sentence the docs carry; whether the goal is met is computed."""
    rec = json.loads(Path(path).read_text(encoding="utf-8"))
    res, cfg = rec["result"], rec["config"]
    ratios = res["ratio_all"]
    met = "met" if res["ratio"] >= FORWARD_GOAL else "not met"
    doc_len = res["tokens_bare"] // res["documents"]
    return (
        f"`select`'s scoring runs at **{res['ratio']:.2f}×** [{min(ratios):.2f}–{max(ratios):.2f}] the bare "
        f"forward pass's tokens/s on SmolLM2-135M ({res['bare_tokens_per_s']:.0f} vs "
        f"{res['select_tokens_per_s']:.0f} tokens/s; median of {len(ratios)} alternated repetitions, "
        f"{res['tokens_bare']:,} tokens in {res['documents']} documents of {doc_len} tokens, "
        f"{cfg['threads']} thread(s), load average {res['loadavg_before'][0]:.1f} before"
        + (
            f"; the model's fingerprint, {res['fingerprint_s']:.2f} s once per run, computed before timing"
            if "fingerprint_s" in res
            else ""
        )
        + f"; `{path}`). "
        f"Goal ≥ {FORWARD_GOAL}: {met}."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=4096, help="pool tokens per repetition")
    p.add_argument("--doc-len", type=int, default=256, help="tokens per document")
    p.add_argument("--token-budget", type=int, default=1024)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sketch-dim", type=int, default=4096)
    p.add_argument("--out", default=str(HERE / "results" / "select_vs_forward.json"))
    p.add_argument("--table", default=None, metavar="JSON", help="print the docs sentence of this record")
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    torch.set_num_threads(args.threads)
    from updatescope.models.smollm2 import load_smollm2
    from updatescope.pipeline import SketchOptions, score_documents, sketch_corpus

    model, tok = load_smollm2()
    model.eval()
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ids = tok(POOL * (args.tokens // 20 + 1), add_special_tokens=False)["input_ids"][: args.tokens]
    docs = [ids[i : i + args.doc_len] for i in range(0, len(ids), args.doc_len)]  # token-id documents
    target = sketch_corpus(model, tok, [TARGET * 20], SketchOptions(sketch_dim=args.sketch_dim), progress=False)
    batch = max(1, args.token_budget // args.doc_len)
    from updatescope.models.hf import head_fingerprint

    t = time.perf_counter()
    fingerprint = head_fingerprint(model, tok)  # once per run, as `select` does
    fingerprint_s = time.perf_counter() - t

    def bare() -> int:
        n = 0
        with torch.inference_mode():
            for i in range(0, len(docs), batch):
                x = torch.tensor(docs[i : i + batch])
                _ = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
                n += x.numel()
        return n

    def scored() -> int:
        res = score_documents(
            model, tok, docs, target, token_budget=args.token_budget, progress=False, fingerprint=fingerprint
        )
        return int(res.tokens.sum()) + len(docs)  # counted targets + the first token of each document

    bare(), scored()  # warm-up
    load_before = os.getloadavg()
    t_bare, t_sel = [], []
    for _ in range(args.reps):
        t = time.perf_counter()
        nb = bare()
        t_bare.append(nb / (time.perf_counter() - t))
        t = time.perf_counter()
        ns = scored()
        t_sel.append(ns / (time.perf_counter() - t))
    ratios = [s / b for s, b in zip(t_sel, t_bare)]
    res = {
        "bare_tokens_per_s": statistics.median(t_bare),
        "select_tokens_per_s": statistics.median(t_sel),
        "ratio": statistics.median(ratios),
        "bare_all": t_bare,
        "select_all": t_sel,
        "ratio_all": ratios,
        "tokens_bare": nb,
        "tokens_select": ns,
        "documents": len(docs),
        "fingerprint_s": fingerprint_s,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    print(
        f"median of {args.reps} reps [min-max]: bare forward {res['bare_tokens_per_s']:.0f} tok/s "
        f"[{min(t_bare):.0f}-{max(t_bare):.0f}], select scoring {res['select_tokens_per_s']:.0f} tok/s "
        f"[{min(t_sel):.0f}-{max(t_sel):.0f}], ratio {res['ratio']:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]",
        flush=True,
    )
    write_json_atomic(
        {
            "name": "select_vs_forward",
            "config": portable_config(args),
            "result": res,
            "env": env_info(),
            "command": portable_command("benchmarks/select_vs_forward.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
