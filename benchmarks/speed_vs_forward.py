"""Target 2: tokens/s of the sketch pipeline (forward + capture + sketch, what ``updatescope
sketch`` runs) against the bare forward pass (logits computed, nothing else) on the packaged
SmolLM2-135M, same texts, same chunking, alternated in one run.

The sketch arm streams with the model's fingerprint computed once beforehand (``fingerprint=``):
the fingerprint is one read of every weight per call, a fixed cost per model and run
(``fingerprint_s`` in the record) that does not grow with the corpus, so it is reported
beside the streaming ratio, and the ratio with it included (``ratio_with_fingerprint``,
what one ``updatescope sketch`` call on exactly these tokens would see) is recorded too.

    python benchmarks/speed_vs_forward.py [--threads 1] [--tokens 2048 --reps 3]
    python benchmarks/speed_vs_forward.py --threads 2 --tokens 4096 --reps 7 \
        --arms stack/spread dense/srht spread/spread fold/fold --out benchmarks/results/speed_vs_forward_arms.json

``--arms``: several act/error map pairs measured in one run, each against a bare forward pass
run just before it, the arms in a rotated order within every repetition, so every arm sees
the same machine conditions; ``result`` is then the first arm's and ``arms`` holds each.

    python benchmarks/speed_vs_forward.py --table A.json+B.json+…

prints one row per record (a sitting): its commit, the bare forward pass's tokens/s and each
arm's ratio with its min–max over the repetitions, so that runs of the same command in
different sittings can be read side by side.
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
from updatescope.sketch.config import MAP_KINDS

HERE = Path(__file__).resolve().parent
TEXT = (
    "The committee reviewed the proposal in detail and asked for a revised budget, "
    "a clearer schedule, and an independent assessment of the risks involved. "
)


def _arms(rec: dict) -> dict:
    res = rec["result"]
    return res.get("arms") or {"/".join(res["maps"]): res}


def table(paths: list[str]) -> str:
    """One row per record: commit, bare forward tok/s [min–max], each arm's ratio [min–max]."""
    recs = [(p, json.loads(Path(p).read_text(encoding="utf-8"))) for p in paths]
    names: list[str] = []
    for _, rec in recs:
        names += [a for a in _arms(rec) if a not in names]
    head = ["record", "commit", "reps", "bare forward, tok/s [min–max]"] + [f"{a}: ratio [min–max]" for a in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path, rec in recs:
        arms = _arms(rec)
        bare = [t for a in arms.values() for t in a["bare_all"]]
        commit = (rec.get("env", {}).get("git_commit") or "unknown")[:7]
        cells = [
            f"`{Path(path).name}`",
            commit,
            str(rec["config"]["reps"]),
            f"{statistics.median(bare):.0f} [{min(bare):.0f}–{max(bare):.0f}]",
        ]
        for a in names:
            r = arms.get(a)
            cells.append(
                "·" if r is None else f"{r['ratio']:.3f} [{min(r['ratio_all']):.3f}–{max(r['ratio_all']):.3f}]"
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(
        "\n- ratio: per repetition, the sketch pipeline's tokens/s over the bare forward pass run just "
        "before it (fingerprint computed once beforehand); the median over the repetitions, then the "
        "smallest and largest. Bare forward: every bare run of the record. ·: arm not in that run."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--table", default=None, help="print the table of records A.json+B.json+… and exit")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--chunk-len", type=int, default=256)
    p.add_argument("--token-budget", type=int, default=1024)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--act-map", default="auto", choices=["auto", *MAP_KINDS], help="sketch activation map")
    p.add_argument("--error-map", default="auto", choices=["auto", *MAP_KINDS], help="sketch error map")
    p.add_argument(
        "--arms",
        nargs="+",
        default=None,
        metavar="ACT/ERROR",
        help="several map pairs in one run (instead of --act-map/--error-map), e.g. stack/spread dense/srht",
    )
    p.add_argument("--out", default=str(HERE / "results" / "speed_vs_forward.json"))
    args = p.parse_args(argv)
    if args.table:
        print(table(args.table.split("+")))
        return 0
    arms = [(args.act_map, args.error_map)]
    if args.arms:
        arms = [tuple(a.split("/")) for a in args.arms]
        bad = [
            a for a in args.arms if len(a.split("/")) != 2 or any(k not in ("auto", *MAP_KINDS) for k in a.split("/"))
        ]
        if bad:
            p.error(f"--arms takes ACT/ERROR pairs of {', '.join(('auto', *MAP_KINDS))}; got {' '.join(bad)}")
    torch.set_num_threads(args.threads)
    from updatescope.models.smollm2 import load_smollm2
    from updatescope.pipeline import SketchOptions, sketch_corpus

    model, tok = load_smollm2()
    model = model.to(args.device).eval()
    ids = tok(TEXT * (args.tokens // 20 + 1))["input_ids"][: args.tokens]
    texts = [tok.decode(ids[i : i + args.chunk_len]) for i in range(0, len(ids), args.chunk_len)]
    batch = max(1, args.token_budget // args.chunk_len)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def bare() -> int:
        n = 0
        with torch.inference_mode():
            for i in range(0, len(texts), batch):
                enc = tok(texts[i : i + batch], return_tensors="pt", padding=True).to(args.device)
                _ = model(**enc).logits
                n += int(enc["attention_mask"].sum())
        sync()
        return n

    from updatescope.models.hf import head_fingerprint

    t = time.perf_counter()
    fp = head_fingerprint(model, tok)
    fp_times = [time.perf_counter() - t]

    def sketched(act_map: str, error_map: str) -> int:
        options = SketchOptions(
            chunk_len=args.chunk_len, token_budget=args.token_budget, act_map=act_map, error_map=error_map
        )
        sig = sketch_corpus(model, tok, texts, options, progress=False, fingerprint=fp)
        sync()
        return sig.count + len(texts)  # count = predicted tokens; +1 per chunk = tokens forwarded

    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    from updatescope.sketch.config import SketchConfig

    head = model.get_output_embeddings()
    resolved = [
        SketchConfig(head.in_features, head.out_features, act_map=am, error_map=em, head_bias=head.bias is not None)
        for am, em in arms
    ]
    bare()
    for am, em in arms:
        sketched(am, em)  # warm-up
    load_before = os.getloadavg()
    t_bare = {i: [] for i in range(len(arms))}
    t_sk = {i: [] for i in range(len(arms))}
    for r in range(args.reps):
        for i in [(j + r) % len(arms) for j in range(len(arms))]:  # rotated: no arm always first
            t = time.perf_counter()
            nb = bare()
            t_bare[i].append(nb / (time.perf_counter() - t))
            t = time.perf_counter()
            ns = sketched(*arms[i])
            t_sk[i].append(ns / (time.perf_counter() - t))
        t = time.perf_counter()
        head_fingerprint(model, tok)
        fp_times.append(time.perf_counter() - t)
    results = {}
    for i, cfg_maps in enumerate(resolved):
        tb, ts = t_bare[i], t_sk[i]
        ratios = [s / b for s, b in zip(ts, tb)]  # per rep: each sketch run against its own bare run
        # the same rep with that rep's fingerprint time added to the sketch arm's wall time
        ratios_fp = [ns / (ns / s + f) / b for s, b, f in zip(ts, tb, fp_times[1:])]
        res = {
            "bare_tokens_per_s": statistics.median(tb),
            "sketch_tokens_per_s": statistics.median(ts),
            "ratio": statistics.median(ratios),
            "bare_all": tb,
            "sketch_all": ts,
            "ratio_all": ratios,
            "fingerprint_s": statistics.median(fp_times[1:]),
            "fingerprint_all": fp_times,
            "ratio_with_fingerprint": statistics.median(ratios_fp),
            "ratio_with_fingerprint_all": ratios_fp,
            "maps": [cfg_maps.act_map, cfg_maps.error_map],
            "tokens_bare": nb,
            "tokens_sketch": ns,
        }
        results["/".join(res["maps"])] = res
        # printed from `res` only, so the line shows exactly what the JSON records: medians over the
        # reps, the ratio as the median of per-rep ratios (not the ratio of the medians), min-max spread
        print(
            f"median of {args.reps} reps [min-max]: bare forward {res['bare_tokens_per_s']:.0f} tok/s "
            f"[{min(res['bare_all']):.0f}-{max(res['bare_all']):.0f}], forward+capture+sketch "
            f"{res['sketch_tokens_per_s']:.0f} tok/s [{min(res['sketch_all']):.0f}-{max(res['sketch_all']):.0f}], "
            f"ratio {res['ratio']:.3f} [{min(res['ratio_all']):.3f}-{max(res['ratio_all']):.3f}]; fingerprint "
            f"{res['fingerprint_s']:.2f} s per call, ratio with it {res['ratio_with_fingerprint']:.3f} "
            f"(maps {'/'.join(res['maps'])})",
            flush=True,
        )
    first = results[next(iter(results))]
    res = {**first, "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    if len(results) > 1:
        res["arms"] = results
    write_json_atomic(
        {
            "name": "speed_vs_forward",
            "config": {k: v for k, v in portable_config(args).items() if k != "table"},
            "result": res,
            "env": env_info(),
            "command": portable_command("benchmarks/speed_vs_forward.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
