"""Cost of a layer (network) sketch on the packaged SmolLM2-135M, per batch, against what a
user would run anyway: the bare forward pass, a forward + backward pass (what any
gradient-based method needs), and the head sketch (forward only).  Arms alternate within
each repetition so a loaded machine slows them alike; the figures are ratios.

    python benchmarks/layer_sketch_cost.py [--threads 2] [--seqs 4 --seq-len 256 --reps 5]

Arms: ``forward`` (logits only), ``forward_backward`` (summed cross-entropy, backward to
every weight), ``head_sketch`` (``pipeline.sketch_corpus``'s work: capture + ``update_logits``),
``layers_last_block`` (the last decoder block's 7 linear layers + the head, per token),
``layers_lora_targets`` (q_proj and v_proj of the last 2 blocks + the head, per token) and
``layers_all`` (every linear layer + the head, per sequence).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from updatescope.records import env_info, portable_command, portable_config, write_json_atomic

HERE = Path(__file__).resolve().parent
TEXT = (
    "The committee reviewed the proposal in detail and asked for a revised budget, "
    "a clearer schedule, and an independent assessment of the risks involved. "
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seqs", type=int, default=4, help="sequences per batch")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--sketch-dim", type=int, default=4096)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results" / "layer_sketch_cost.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from updatescope.capture.causal_lm import capture_causal_lm
    from updatescope.capture.hook import find_output_linear
    from updatescope.constants import IGNORE_INDEX
    from updatescope.models.smollm2 import load_smollm2
    from updatescope.network.api import network_config, sketch_layers
    from updatescope.network.sketch import NetworkSketch
    from updatescope.sketch.fishersketch import FisherSketch

    model, tok = load_smollm2()
    model.eval()
    ids = tok(TEXT * (args.seqs * args.seq_len // 20 + 1), add_special_tokens=False)["input_ids"]
    x = torch.tensor(ids[: args.seqs * args.seq_len]).view(args.seqs, args.seq_len)
    labels = torch.cat((x[:, 1:], torch.full((args.seqs, 1), IGNORE_INDEX)), 1)
    head = find_output_linear(model)
    n_layers = model.config.num_hidden_layers
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    head_name = next(n for n, m in model.named_modules() if m is head)
    last = [n for n in names if n.startswith(f"model.layers.{n_layers - 1}.")] + [head_name]
    lora = [
        n
        for n in names
        if any(n.startswith(f"model.layers.{i}.") for i in (n_layers - 2, n_layers - 1))
        and n.rsplit(".", 1)[-1] in ("q_proj", "v_proj")
    ] + [head_name]

    def forward() -> None:
        with torch.inference_mode():
            _ = model(input_ids=x, use_cache=False).logits

    def forward_backward() -> None:
        z = model(input_ids=x, use_cache=False).logits
        nn.functional.cross_entropy(
            z.reshape(-1, z.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
        ).backward()
        model.zero_grad(set_to_none=True)

    k, d = head.weight.shape
    fs = FisherSketch(d, k, args.sketch_dim, 0)

    def head_sketch() -> None:
        with torch.inference_mode():
            for a, z, y in capture_causal_lm(
                model,
                [row.tolist() for row in x],
                tok,
                token_budget=x.numel(),
                progress=False,
                compact=False,
                head=head,
            ):
                fs.update_logits(a, z, y)

    arms: dict[str, Callable[[], Any]] = {
        "forward": forward,
        "forward_backward": forward_backward,
        "head_sketch": head_sketch,
    }
    batch = [({"input_ids": x}, labels)]
    for arm, layers, mode in (
        ("layers_last_block", last, "token"),
        ("layers_lora_targets", lora, "token"),
        ("layers_all", names, "sequence"),
    ):
        sk = NetworkSketch(network_config(model, layers, sketch_dim=args.sketch_dim, seed=0, mode=mode))
        arms[arm] = lambda sk=sk: sketch_layers(model, sk.config, batch, sketch=sk)
    for fn in arms.values():  # warm-up: random bases, workspaces, allocator
        fn()
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(args.reps):
        for a, fn in arms.items():
            t0 = time.perf_counter()
            fn()
            times[a].append(time.perf_counter() - t0)
    med = {a: statistics.median(v) for a, v in times.items()}
    # per repetition, each arm against the baselines of the same repetition; median of those
    ratio = {
        a: {
            base: statistics.median(t / b for t, b in zip(times[a], times[base]))
            for base in ("forward", "forward_backward", "head_sketch")
        }
        for a in arms
    }
    res = {
        "median_s": med,
        "all_s": times,
        "ratios": ratio,
        "tokens_per_batch": int(x.numel()),
        "layers": {"layers_last_block": len(last), "layers_lora_targets": len(lora), "layers_all": len(names)},
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    print(f"median of {args.reps} reps, {x.numel()} tokens per batch (ratio = median of per-rep ratios):")
    for a in arms:
        r = ratio[a]
        print(
            f"  {a:22s} {med[a]:7.3f} s   × forward {r['forward']:5.2f}   × fwd+bwd {r['forward_backward']:5.2f}   "
            f"× head sketch {r['head_sketch']:5.2f}",
            flush=True,
        )
    write_json_atomic(
        {
            "name": "layer_sketch_cost",
            "config": portable_config(args),
            "result": res,
            "env": env_info(),
            "command": portable_command("benchmarks/layer_sketch_cost.py", argv),
        },
        Path(args.out),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
