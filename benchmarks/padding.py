"""Padding waste of document scoring on a heterogeneous pool: padded tokens fed to the model
per real token, for the batches ``select`` forms in file order against length buckets
(longest first, ``pipeline.score_documents(bucket=True)``, the default).

    python benchmarks/padding.py [--domains N] [--docs-per-domain K] [--token-budget 1024]

The pool mixes the first ``K`` documents of ``N`` built-in domains (code, prose, SMILES, …:
lengths from a few tokens to whole windows), shuffled with a fixed seed, tokenised with the
packaged SmolLM2's tokenizer.  No forward pass: the ratio depends only on the windows and the
packing, which the benchmark takes from the library itself.
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--domains", type=int, default=24)
    ap.add_argument("--docs-per-domain", type=int, default=40)
    ap.add_argument("--token-budget", type=int, default=1024)
    ap.add_argument("--chunk-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "results" / "padding.json"))
    args = ap.parse_args(argv)

    from updatescope.data.domains import list_domains, load_domain
    from updatescope.models.smollm2 import load_smollm2
    from updatescope.pipeline import Corpus
    from updatescope.pipeline.score import length_order, padded_ratio

    _, tok = load_smollm2()
    names = [d.name for d in list_domains()][: args.domains]
    docs = [t for n in names for t in load_domain(n)[: args.docs_per_domain]]
    random.Random(args.seed).shuffle(docs)
    tokens = Corpus.from_texts(docs).tokenise(tok, keep_empty=True)
    entries = [i for i, c in enumerate(tokens.counted()) if c > 0]
    kw = dict(chunk_len=args.chunk_len, token_budget=args.token_budget)
    file_order = padded_ratio(tokens, entries, **kw)
    bucketed = padded_ratio(tokens, length_order(tokens, entries), **kw)
    lengths = [len(tokens.ids[i]) for i in entries]
    res = {
        "documents": len(entries),
        "domains": names,
        "tokens": sum(lengths),
        "length_median": statistics.median(lengths),
        "length_min": min(lengths),
        "length_max": max(lengths),
        "padded_per_real_file_order": file_order,
        "padded_per_real_bucketed": bucketed,
    }
    print(
        f"{len(entries)} documents from {len(names)} domains, lengths {min(lengths)}–{max(lengths)} tokens "
        f"(median {statistics.median(lengths):g}): padded/real {file_order:.3f} in file order, "
        f"{bucketed:.3f} bucketed by length"
    )
    write_json_atomic(
        {
            "name": "padding",
            "command": portable_command("benchmarks/padding.py", argv),
            "config": portable_config(args),
            "results": res,
            "env": env_info(),
        },
        args.out,
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
