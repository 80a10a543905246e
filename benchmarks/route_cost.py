"""Cost of routing requests among adapters (issue 37's targets).

(i) Latency per request beside the forward pass it needs, on the packaged SmolLM2-135M with
    16 adapter signatures (sketched, before timing, from ``--sig-tokens`` tokens of 16
    built-in domains): the bare forward pass of one request (logits) against
    ``Router.score`` of the same request (forward + capture + features + the bank product +
    the per-request sums), paired request by request, the first arm alternating, ``--reps`` rounds over
    ``--requests`` requests of ``--req-len`` tokens.  Figure: median over requests and rounds
    of (routed − bare) / bare.  Also timed alone on the same captured rows, chunk by chunk as
    the router makes them (``Router.chunk_features``: ``Router.chunk_rows`` rows at a time, the error
    softmax into the reused buffer, then ``features`` in the workspace): the features and the
    bank product (``Router.terms``, 16 adapters).  Target: extra ≤ 5 % of the forward pass.
    The same on a random-weight model of Llama-3.2-1B's shape (``LARGE_SHAPE``, built from its
    config, read with SmolLM2's tokenizer), ``--large-reps`` rounds: the per-token sketch work
    grows with the vocabulary while the forward pass grows with the whole model, so the
    fraction depends on the model's size.
(ii) Scoring at scale: 32 requests of ``--req-len`` tokens against 10,000 synthetic adapter
    directions at m = 4096, through the library's large-bank path
    (``select.route.CandidateAccumulator``, what ``Router`` uses beyond ``PAIRED_LIMIT``
    adapters): the per-token accumulation of the features (independent of the number of
    adapters) timed apart from ``compute()``, which ranks every adapter (one float32 product
    of the requests' mean joint features with the bank's float32 joint copy, made once per
    bank), picks each request's candidates, scores them again in float64 and computes their
    per-token joint terms (float32), standard errors and paired co-moments.  Beside it, the
    bare joint product in float64 and float32, and all three kinds per token in float64 for
    one request against every adapter (``bank_terms``).  Median of ``--reps``.  ``bank_choice`` (every
    adapter's ranking score and the candidates) is also timed alone.
    Target: < 50 ms per batch of 32.
(iii) Memory: the direction bank (3 × m float64 per adapter) beside the adapters' own
    weights (LoRA r = ``--lora-r`` on q_proj and v_proj of SmolLM2, float32, counted from a
    ``peft.get_peft_model``), for 16 and 10,000 adapters.

(iv) The host's balance (``host_probe``): copy bandwidth and float32 matrix-product rate, measured
    in the same run, since (i)'s feature work is bound by memory and the forward by arithmetic.

    python benchmarks/route_cost.py [--threads 2] [--reps 5]
    python benchmarks/route_cost.py --table benchmarks/results/route_cost.json   # README table
    (several records joined by ``+``: one table each, then how many meet (i))
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


def _median_spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def host_probe(reps: int = 7) -> dict:
    """The host's balance, measured in this run: the feature work of (i) streams the logits
    through memory, while the forward pass is mostly matrix products, so the ratio (i)
    measures follows the host's copy bandwidth over its float32 matrix-product rate.
    Median of ``reps``: a 256 MiB float32 copy (bytes read + written per second) and a
    2048 × 2048 float32 product (FLOP per second)."""
    src = torch.ones(1 << 26)
    dst = torch.empty_like(src)
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    copy, mm = [], []
    dst.copy_(src), a @ b  # warm-up
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        copy.append(time.perf_counter() - t)
        t = time.perf_counter()
        a @ b
        mm.append(time.perf_counter() - t)
    bw = 2 * src.numel() * 4 / statistics.median(copy)
    flops = 2 * 2048**3 / statistics.median(mm)
    return {"copy_bytes_per_s": bw, "matmul_flop_per_s": flops, "bytes_per_flop": bw / flops}


def _signatures(model, tok, n: int, tokens: int, m: int) -> dict:
    from updatescope.data.domains import list_domains, load_domain
    from updatescope.models.hf import head_fingerprint
    from updatescope.pipeline import Corpus, SketchOptions, sketch_corpus

    names = [d.name for d in list_domains() if d.family in ("code", "wiki", "prose")][:n]
    opts = SketchOptions(sketch_dim=m, max_tokens=tokens)

    def head_text(name: str) -> str:  # the domain's first tokens + 1, so the sketch's one forward pass is short
        ids = tok(" ".join(load_domain(name, "train")[:8]), add_special_tokens=False)["input_ids"]
        return tok.decode(ids[: tokens + 1])

    fp = head_fingerprint(model, tok)  # once: it reads every weight
    return {
        name: sketch_corpus(model, tok, Corpus.from_texts([head_text(name)]), opts, progress=False, fingerprint=fp)
        for name in names
    }


#: Llama-3.2-1B's shape (random weights, no download): the (i) measure at a size where the
#: forward pass outgrows the per-token sketch work, which scales with the vocabulary
LARGE_SHAPE = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "max_position_embeddings": 2048,
}


def _large_model():
    """A random-weight model of ``LARGE_SHAPE`` (float32, built from its config)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**LARGE_SHAPE)).eval()


def latency(args: argparse.Namespace, model=None, reps: int | None = None) -> dict:
    """(i) on the packaged SmolLM2, or on ``model`` (read with SmolLM2's tokenizer, whose ids
    all lie inside a larger vocabulary)."""
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.data.domains import load_domain
    from updatescope.models.smollm2 import load_smollm2
    from updatescope.pipeline import Router

    smol, tok = load_smollm2()
    name = "SmolLM2-135M" if model is None else "random Llama-3.2-1B shape"
    model = smol if model is None else model
    model.eval()
    reps = args.reps if reps is None else reps
    t = time.perf_counter()
    sigs = _signatures(model, tok, args.adapters, args.sig_tokens, args.m)
    sig_s = time.perf_counter() - t
    router = Router(model, tok, sigs)
    text = " ".join(load_domain("code_http", "eval")[:4])
    ids = tok(text, add_special_tokens=False)["input_ids"]
    reqs = [ids[i * args.req_len : (i + 1) * args.req_len] for i in range(args.requests)]
    assert all(len(r) == args.req_len for r in reqs), "not enough request text"

    def bare(r: list[int]) -> None:
        with torch.inference_mode():
            x = torch.tensor([r])
            model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)

    def routed(r: list[int]) -> None:
        router.choose(router.score([r]))

    for r in reqs[:2]:  # warm-up
        bare(r), routed(r)
    load_before = os.getloadavg()
    t_bare, t_route, extra = [], [], []
    for k in range(reps):
        for j, r in enumerate(reqs):
            # the arm that runs first alternates, so neither is always the one after the other
            # (caches, clock) and the paired ratio carries no order effect
            arms = (bare, routed) if (k + j) % 2 == 0 else (routed, bare)
            took = {}
            for arm in arms:
                t = time.perf_counter()
                arm(r)
                took[arm] = time.perf_counter() - t
            b, s = took[bare], took[routed]
            t_bare.append(b)
            t_route.append(s)
            extra.append((s - b) / b)
    # the parts of the extra, alone, on the captured rows of one request, as the router makes
    # them: the errors a cache-sized chunk at a time in the reused buffer, then the features
    acts, logits, labels = next(iter(capture_causal_lm(model, [reqs[0]], tok, progress=False)))
    t_feat, t_bank = [], []
    with torch.inference_mode():
        for _ in range(reps * 2):
            feat = bank_s = 0.0
            t = time.perf_counter()
            for f in router.chunk_features(acts, logits, labels):  # as Router.score makes them
                t1 = time.perf_counter()
                feat += t1 - t
                router.terms(f)
                t = time.perf_counter()
                bank_s += t - t1
            t_feat.append(feat)
            t_bank.append(bank_s)
    b_med = statistics.median(t_bare)
    return {
        "model": name,
        "params": sum(p.numel() for p in model.parameters()),
        "vocab": int(logits.shape[-1]),
        "rounds": reps,
        "adapters": len(sigs),
        "adapter_domains": list(sigs),
        "request_tokens": args.req_len,
        "requests": args.requests,
        "chunk_rows": router.chunk_rows,
        "bare_forward_s": _median_spread(t_bare),
        "routed_s": _median_spread(t_route),
        "extra_over_forward": _median_spread(extra),
        "extra_over_forward_all": extra,  # every paired ratio, round by round, for the interval below
        "features_s": _median_spread(t_feat),
        "bank_product_s": _median_spread(t_bank),
        "extra_of_fastest": min(t_route) / min(t_bare) - 1,  # the runs least disturbed by other jobs
        "features_over_forward": statistics.median(t_feat) / b_med,
        "bank_product_over_forward": statistics.median(t_bank) / b_med,
        "sketch_signatures_s": sig_s,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


def bank_scale(args: argparse.Namespace) -> dict:
    from updatescope.select.route import (
        CANDIDATES,
        PAIRED_LIMIT,
        RANK_ROWS,
        CandidateAccumulator,
        bank_choice,
        bank_terms,
        joint_ranking_bank,
    )

    g = torch.Generator().manual_seed(0)
    bank = torch.randn(args.bank_size, 3, args.m, generator=g, dtype=torch.float64) / args.m**0.5
    names = [f"a{i}" for i in range(args.bank_size)]
    counts = [args.req_len] * args.batch
    feats = torch.randn(sum(counts), 3, args.m, generator=g, dtype=torch.float32)
    bank = bank.transpose(0, 1).contiguous().transpose(0, 1)  # kind-major, as the Router keeps it
    joint64 = bank[:, 0]
    joint32 = joint_ranking_bank(bank)  # the float32 ranking copy, made once per bank (as the Router keeps it)
    # the same-run baseline: the BLAS kernel's ranking copy (the library's path before oneDNN)
    blas32 = joint_ranking_bank(bank, "blas") if joint32.kernel != "blas" else None
    plain32 = bank[:, 0].to(torch.float32).contiguous()  # for the bare float32 product
    f64 = feats[: args.batch, 0].to(torch.float64)
    f32 = feats[: args.batch, 0].contiguous()

    def library(joint=joint32) -> tuple[float, float]:
        acc = CandidateAccumulator(names, counts, bank, group_tokens=sum(counts) + 1, joint=joint)
        t = time.perf_counter()
        for s in range(0, feats.shape[0], 1024):  # captured batches of 1024 tokens
            acc.update(feats[s : s + 1024])
        t_upd = time.perf_counter() - t
        t = time.perf_counter()
        acc.compute()
        return t_upd, time.perf_counter() - t

    means = feats.view(args.batch, args.req_len, 3, args.m).to(torch.float64).mean(1)[:, 0].contiguous()
    library(), f64 @ joint64.T, f32 @ plain32.T, bank_choice(means, joint32, CANDIDATES)  # warm-up
    if blas32 is not None:
        library(blas32), bank_choice(means, blas32, CANDIDATES)
    upd, comp, choice, t64, t32, per_token, comp_blas, choice_blas = [], [], [], [], [], [], [], []
    for _ in range(args.reps):
        u, c = library()
        upd.append(u)
        comp.append(c)
        t = time.perf_counter()
        bank_choice(means, joint32, CANDIDATES)
        choice.append(time.perf_counter() - t)
        if blas32 is not None:  # paired with the round's kernel, same requests and bank
            comp_blas.append(library(blas32)[1])
            t = time.perf_counter()
            bank_choice(means, blas32, CANDIDATES)
            choice_blas.append(time.perf_counter() - t)
        t = time.perf_counter()
        f64 @ joint64.T
        t64.append(time.perf_counter() - t)
        t = time.perf_counter()
        f32 @ plain32.T
        t32.append(time.perf_counter() - t)
        t = time.perf_counter()
        bank_terms(feats[: args.req_len], bank)
        per_token.append(time.perf_counter() - t)
    return {
        "adapters": args.bank_size,
        "m": args.m,
        "batch": args.batch,
        "request_tokens": args.req_len,
        "candidates": CANDIDATES,
        "paired_limit": PAIRED_LIMIT,
        "rank_rows": RANK_ROWS,  # bank rows per product of the coarse ranking (BLAS kernel)
        "rank_kernel": joint32.kernel,  # the float32 ranking kernel the library chose
        "library_compute_s": _median_spread(comp),
        "library_choice_s": _median_spread(choice),
        "library_accumulate_s": _median_spread(upd),
        "joint_float64_s": _median_spread(t64),
        "joint_float32_s": _median_spread(t32),
        "all_kinds_per_token_one_request_s": _median_spread(per_token),
        **(
            {
                "blas_compute_s": _median_spread(comp_blas),
                "blas_choice_s": _median_spread(choice_blas),
                "compute_over_blas": _median_spread([a / b for a, b in zip(comp, comp_blas)]),
            }
            if comp_blas
            else {}
        ),
        "bank_bytes_float64": bank.numel() * 8,
        "joint_bank_bytes_float32": plain32.numel() * 4,
    }


def memory(args: argparse.Namespace) -> dict:
    import peft

    from updatescope.models.smollm2 import load_smollm2

    model, _ = load_smollm2()
    cfg = peft.LoraConfig(r=args.lora_r, target_modules=["q_proj", "v_proj"])
    pm = peft.get_peft_model(model, cfg)
    lora = sum(p.numel() for n, p in pm.named_parameters() if "lora_" in n)
    per_dir = 3 * args.m * 8
    return {
        "lora_r": args.lora_r,
        "lora_targets": ["q_proj", "v_proj"],
        "adapter_bytes_float32": lora * 4,
        "bank_bytes_per_adapter": per_dir,
        "bank_over_adapter": per_dir / (lora * 4),
        "bank_bytes_16": 16 * per_dir,
        "bank_bytes_10000": 10_000 * per_dir,
        "adapters_bytes_16": 16 * lora * 4,
    }


#: resamples of the paired ratios behind the 95 % interval of their median
BOOT = 4000


def extra_interval(ratios: list[float], boot: int = BOOT) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the median of the paired (routed − bare) / bare
    ratios (pairs resampled with replacement, seed 0)."""
    x = torch.tensor(ratios, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(ratios), (boot, len(ratios)), generator=g)
    med = x[idx].median(dim=1).values
    return float(med.quantile(0.025)), float(med.quantile(0.975))


def latency_verdict(lat: dict, target: float = 0.05) -> tuple[str, str]:
    """(verdict, interval text) for (i): met when the median's 95 % interval lies at or below the
    target, not met when it lies above it, undecided when it spans it; a record without its
    paired ratios is judged on the median alone."""
    ratios = lat.get("extra_over_forward_all")
    if not ratios:
        med = lat["extra_over_forward"]["median"]
        return ("met" if med <= target else "**not met**"), "median only: the record keeps no paired ratios"
    lo, hi = extra_interval(ratios)
    text = f"95 % interval of the median {lo:.1%} to {hi:.1%}"
    if hi <= target:
        return "met", text
    if lo > target:
        return "**not met**", text
    return "undecided (the interval spans the target)", text


def _latency_row(lat: dict) -> str:
    e = lat["extra_over_forward"]
    verdict, interval = latency_verdict(lat)
    model = lat.get("model", "SmolLM2-135M")
    size = f", {lat['params'] / 1e9:.2f} B parameters, vocabulary {lat['vocab']:,}" if "params" in lat else ""
    return (
        f"| (i) routing per request, {lat['adapters']} adapters, {lat['request_tokens']} tokens, {model}{size} "
        f"| forward {lat['bare_forward_s']['median'] * 1e3:.0f} ms, "
        f"routed {lat['routed_s']['median'] * 1e3:.0f} ms: "
        f"extra **{e['median']:.1%}** of the forward ({interval}; per request {e['min']:.0%}–{e['max']:.0%}; "
        f"fastest routed over fastest "
        f"forward {lat['extra_of_fastest']:+.0%}); features alone "
        f"{lat['features_over_forward']:.1%}, bank product alone {lat['bank_product_over_forward']:.2%} "
        f"| ≤ 5 %: {verdict} |"
    )


def _verdict(seconds: float) -> str:
    return "met" if seconds < 0.05 else "**not met**"


#: The records issue 37's targets are read from, each specified before it ran (in the commit
#: that set its command): target -> record file name.
DECIDING = {"(i)": "route_cost_decide.json", "(ii)": "route_cost_onednn.json"}


def _deciding_line(recs: dict[str, dict]) -> str:
    """The targets' verdicts from the records specified to decide them (those among ``recs``,
    file name -> record), or "" when none is."""
    parts = []
    if DECIDING["(i)"] in recs:
        lat = recs[DECIDING["(i)"]]["results"]["latency"]
        verdict = latency_verdict(lat)[0].strip("*")
        parts.append(f"(i) on {lat.get('model', 'SmolLM2-135M')}, from `{DECIDING['(i)']}`: {verdict}")
    if DECIDING["(ii)"] in recs:
        big = recs[DECIDING["(ii)"]]["results"]["bank"]
        parts.append(
            f"(ii), from `{DECIDING['(ii)']}`: scores and choice {_verdict(big['library_choice_s']['median'])}, "
            f"with errors {_verdict(big['library_compute_s']['median'])}".replace("*", "")
        )
    if not parts:
        return ""
    return "\nRead from the records specified before they ran: " + "; ".join(parts) + "."


def table(paths: list[str]) -> str:
    lines: list[str] = []
    met_small = []
    recs: dict[str, dict] = {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        recs[Path(path).name] = rec
        res = rec["results"]
        if lines:
            lines.append("")
        lines += ["| measure | result | target |", "|---|---|---|"]
        met_small.append(latency_verdict(res["latency"])[0])
        lat, big, mem = res["latency"], res["bank"], res["memory"]
        lines += [_latency_row(x) for x in (lat, res.get("latency_large")) if x is not None]
        lines += [
            f"| (ii) {big['batch']} requests of {big['request_tokens']} tokens × {big['adapters']:,} adapters, "
            f"m = {big['m']}, `Router`'s large-bank path "
            f"| every adapter's float32 ranking score and each request's {big['candidates']} candidates "
            f"(`bank_choice`, the part that grows with the bank) **{big['library_choice_s']['median'] * 1e3:.0f} ms** "
            f"({big['library_choice_s']['min'] * 1e3:.0f}–{big['library_choice_s']['max'] * 1e3:.0f}); "
            f"with the candidates' exact scores, standard errors and paired co-moments (`compute()`) "
            f"**{big['library_compute_s']['median'] * 1e3:.0f} ms**"
            + (
                f" (ranking kernel {big['rank_kernel']}; the BLAS ranking kernel in the same rounds: "
                f"{big['blas_choice_s']['median'] * 1e3:.0f} ms and "
                f"{big['blas_compute_s']['median'] * 1e3:.0f} ms, `compute()` time ratio "
                f"{big['compute_over_blas']['median']:.2f} median, "
                f"{big['compute_over_blas']['min']:.2f}–{big['compute_over_blas']['max']:.2f})"
                if "blas_compute_s" in big
                else ""
            )
            + "; the bare joint product "
            f"{big['joint_float64_s']['median'] * 1e3:.0f} ms in float64, "
            f"{big['joint_float32_s']['median'] * 1e3:.0f} ms in float32; accumulating the "
            f"{big['batch'] * big['request_tokens']:,} tokens' features (any bank size) "
            f"{big['library_accumulate_s']['median'] * 1e3:.0f} ms; every adapter's per-token terms "
            f"(all three kinds in float64, `bank_terms`) "
            f"for one request {big['all_kinds_per_token_one_request_s']['median'] * 1e3:.0f} ms "
            f"| < 50 ms: scores and choice {_verdict(big['library_choice_s']['median'])}, "
            f"with errors {_verdict(big['library_compute_s']['median'])} |",
            f"| (iii) memory per adapter | bank {mem['bank_bytes_per_adapter'] / 1024:.0f} KiB (3 × m float64) "
            f"beside a LoRA r = {mem['lora_r']} adapter's {mem['adapter_bytes_float32'] / 2**20:.2f} MiB "
            f"({mem['bank_over_adapter']:.1%}); 10,000 adapters: {mem['bank_bytes_10000'] / 2**30:.2f} GiB "
            f"and the float32 ranking copy a bank beyond {big.get('paired_limit', 256)} adapters adds, "
            f"{big['joint_bank_bytes_float32'] / 2**20:.0f} MiB | — |",
        ]
        env = rec["env"]
        host = res.get("host")
        probe = (
            f"host: copy {host['copy_bytes_per_s'] / 1e9:.1f} GB/s, float32 matrix product "
            f"{host['matmul_flop_per_s'] / 1e9:.0f} GFLOP/s; "
            if host
            else "host not probed (record made before the probe); "
        )
        lines.append(
            f"\n- {probe}threads {rec['config']['threads']}, torch {env.get('torch', '?')}, "
            f"{rec['config']['reps']} rounds over {lat['requests']} requests"
            + (f" ({res['latency_large']['rounds']} on the larger model)" if "latency_large" in res else "")
            + (
                f", the router's features {lat['chunk_rows']} rows at a time"
                if "chunk_rows" in lat
                else ", the router's features at the sketch's step (before `Router.chunk_rows`)"
            )
            + (
                ", the coarse ranking by oneDNN's packed float32 kernel"
                if res["bank"].get("rank_kernel") == "onednn"
                else f", the coarse ranking {res['bank']['rank_rows']} bank rows at a time"
                if "rank_rows" in res["bank"]
                else ", the coarse ranking in one product (before `RANK_ROWS`)"
            )
            + ", load average "
            f"{lat['loadavg_before'][0]:.1f} → {lat['loadavg_after'][0]:.1f}; "
            f"commit {str(env.get('git_commit', '?'))[:7]}"
        )
    if len(paths) > 1:
        counts = {v: met_small.count(v) for v in dict.fromkeys(met_small)}
        lines.append(
            f"\n(i) on {res['latency'].get('model', 'SmolLM2-135M')}, over {len(met_small)} records: "
            + ", ".join(f"{v.strip('*')} in {c}" for v, c in counts.items())
            + "."
        )
    deciding = _deciding_line(recs)
    if deciding:
        lines.append(deciding)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--adapters", type=int, default=16)
    ap.add_argument("--sig-tokens", type=int, default=64, help="tokens sketched per adapter signature")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--req-len", type=int, default=128)
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--bank-size", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--large-reps", type=int, default=5, help="rounds of (i) on a random Llama-3.2-1B-shaped model (0: skip)"
    )
    ap.add_argument("--out", default=str(HERE / "results" / "route_cost.json"))
    ap.add_argument("--table", default=None, metavar="JSON[+JSON]", help="print the README table of these records")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table.split("+")))
        return 0
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    results = {"host": host_probe(), "latency": latency(args), "bank": bank_scale(args), "memory": memory(args)}
    if args.large_reps:
        results["latency_large"] = latency(args, _large_model(), args.large_reps)
    results["wall_s"] = time.perf_counter() - t0
    lat, big = results["latency"], results["bank"]
    print(
        f"(i) extra {lat['extra_over_forward']['median']:.1%} of the forward "
        f"({lat['bare_forward_s']['median'] * 1e3:.0f} ms -> {lat['routed_s']['median'] * 1e3:.0f} ms); "
        f"(ii) {big['library_choice_s']['median'] * 1e3:.0f} ms scores and choice, "
        f"{big['library_compute_s']['median'] * 1e3:.0f} ms with errors, "
        f"{big['joint_float64_s']['median'] * 1e3:.0f} ms bare joint float64; wall {results['wall_s']:.0f} s"
    )
    write_json_atomic(
        {
            "name": "route_cost",
            "command": portable_command("benchmarks/route_cost.py", argv),
            "config": portable_config(args),
            "results": results,
            "env": env_info(),
            "goal": "routing extra <= 5% of the forward with 16 adapters; 32 requests x 10,000 adapters < 50 ms",
        },
        args.out,
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
