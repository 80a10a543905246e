"""Run the bank and document-selection worked examples of docs/guide-banks.md and
docs/guide-select.md on the packaged model and record what the commands print, so the
guides' sentences about them are generated from a
record (``python docs/results_table.py --write``) instead of typed.

    python docs/readme_examples.py     # -> docs/results/readme_examples.json (about 2 minutes)

Every step is a CLI command run through ``updatescope.cli.main`` exactly as the guides show
it (the quickstart's three 400-token signatures, moved into ``sigs/``; the bank; a pool of the
first 4 eval-split documents of ``code_email`` and ``wiki_space``, cut to 400 characters).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(*argv: str) -> str:
    from updatescope.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    if code != 0:
        raise SystemExit(f"updatescope {' '.join(argv)} exited with {code}")
    return out.getvalue()


def main() -> int:
    from updatescope.records import make_record, write_json_atomic

    t0 = time.perf_counter()
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for name, domain in (("email", "code_email"), ("http", "code_http"), ("space", "wiki_space")):
                _run("domains", "--export", domain, "--out", f"{name}.jsonl")
                _run(
                    "sketch",
                    "--model",
                    "smollm2",
                    "--data",
                    f"{name}.jsonl",
                    "--out",
                    f"{name}.safetensors",
                    "--max-tokens",
                    "400",
                    "--quiet",
                )
            Path("sigs").mkdir()
            for name in ("email", "http", "space"):
                Path(f"{name}.safetensors").rename(f"sigs/{name}.safetensors")
            _run("index", "build", "sigs", "--out", "bank")
            query = json.loads(
                _run("index", "query", "bank", "--target", "sigs/email.safetensors", "--top", "2", "--json")
            )
            dedup = json.loads(_run("index", "dedup", "bank", "--json"))
            pool = []
            for name, domain in (("email", "code_email"), ("space", "wiki_space")):
                _run("domains", "--export", domain, "--split", "eval", "--out", f"pool_{name}.jsonl")
                docs = [json.loads(line)["text"] for line in Path(f"pool_{name}.jsonl").read_text().splitlines()]
                pool += [{"text": d[:400], "domain": name} for d in docs[:4]]
            Path("pool.jsonl").write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in pool))
            top = json.loads(
                _run(
                    "select",
                    "--model",
                    "smollm2",
                    "--data",
                    "pool.jsonl",
                    "--target",
                    "sigs/email.safetensors",
                    "--top",
                    "3",
                    "--out",
                    "subset.jsonl",
                    "--quiet",
                    "--json",
                ).split("\n", 1)[1]
            )
            scores = [json.loads(x) for x in Path("subset.scores.jsonl").read_text().splitlines()]
        finally:
            os.chdir(cwd)
    domains = [r["domain"] for r in pool]
    metrics = {"query": query, "dedup": dedup, "select": {"top": top, "scores": scores, "domains": domains}}
    config = {
        "max_tokens": 400,
        "pool": "first 4 eval documents of code_email and wiki_space, 400 characters",
        "target": "email",
        "top": 3,
    }
    write_json_atomic(
        make_record("readme-examples", config, metrics, time.perf_counter() - t0),
        HERE / "results" / "readme_examples.json",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
