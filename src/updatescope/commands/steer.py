"""``updatescope steer build|apply``: make a CAA steering vector, and generate with one.

    steer build --model M --pairs FILE --layer L [L ...] [--position last|all] --out V.safetensors
    steer apply --model M --vector V --scale S (--prompt TEXT | --data FILE) [--positions P]
                [--max-new-tokens N] [--json]

Every flag and file is checked before the model loads; ``apply`` refuses a vector made for
another model (fingerprint) and prints the unsteered and the steered greedy continuation.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

_MAX_PROMPTS = 1000


def _read_prompts(path: str) -> list[str]:
    """Plain text (one prompt per line) or JSONL with a "prompt" or "text" field."""
    from updatescope.data.textfiles import check_string, parse_json, read_input_bytes
    from updatescope.errors import InputError

    p = Path(path)
    try:
        lines = [ln for ln in read_input_bytes(p).decode("utf-8").splitlines() if ln.strip()]
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: cannot read prompts ({type(err).__name__})") from None
    if not lines:
        raise InputError(f"{path}: no prompts in the file")
    if p.suffix == ".jsonl":
        out = []
        for no, ln in enumerate(lines, 1):
            row = parse_json(ln, f"{path}:{no}")
            text = row.get("prompt", row.get("text")) if isinstance(row, dict) else None
            if not isinstance(text, str) or not text:
                raise InputError(f"{path}:{no}: needs a non-empty 'prompt' or 'text' string")
            out.append(check_string(text, f"{path}:{no}"))
        lines = out
    if len(lines) > _MAX_PROMPTS:
        raise InputError(f"{path}: {len(lines)} prompts; at most {_MAX_PROMPTS} per call")
    return lines


def _check_prompt(text: str) -> None:
    """InputError unless ``--prompt`` is valid Unicode text.  Bytes of the command line that
    are not UTF-8 reach Python as lone surrogates U+DC80..U+DCFF (surrogateescape)."""
    from updatescope.data.textfiles import check_string
    from updatescope.errors import InputError

    bad = next((i for i, ch in enumerate(text) if 0xDC80 <= ord(ch) <= 0xDCFF), None)
    if bad is not None:
        raise InputError(f"--prompt is not valid UTF-8 text (byte 0x{ord(text[bad]) - 0xDC00:02x} at character {bad})")
    check_string(text, "--prompt")


def cmd_build(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file
    from updatescope.data.textfiles import check_inputs
    from updatescope.errors import InputError
    from updatescope.steering.pairs import load_pairs

    check_inputs([args.pairs])  # a regular, readable, size-capped file (a FIFO would hang the reader)
    pairs = load_pairs(args.pairs)
    if args.position not in ("last", "all"):
        raise InputError(f"--position must be last or all, got {args.position!r}")
    out = check_out_file(args.out, inputs=[args.pairs])
    if out.suffix != ".safetensors":
        raise InputError(f"--out must end in .safetensors, got {args.out}")

    from updatescope.models.hf import load_causal_lm
    from updatescope.steering import caa_vector, save_vector
    from updatescope.steering.positions import resolve_layers

    model, tok = load_causal_lm(args.model)
    layers = resolve_layers(model, args.layer)
    vec = caa_vector(model, tok, pairs, layers=layers, position=args.position)
    save_vector(vec, out)
    norms = vec.vectors.double().norm(dim=1).tolist()
    print(
        f"wrote {out}: CAA from {len(pairs.positives)} positive / {len(pairs.negatives)} negative prompts, "
        + ", ".join(f"layer {x} norm {n:.4g}" for x, n in zip(vec.layers, norms))
    )
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from updatescope.errors import InputError
    from updatescope.steering import INJECT_POSITIONS, load_vector

    if not math.isfinite(args.scale):
        raise InputError(f"--scale must be a finite number, got {args.scale}")
    if args.max_new_tokens < 1 or args.max_new_tokens > 4096:
        raise InputError(f"--max-new-tokens must be in [1, 4096], got {args.max_new_tokens}")
    if args.positions not in INJECT_POSITIONS:
        raise InputError(f"--positions must be one of {', '.join(INJECT_POSITIONS)}, got {args.positions!r}")
    if args.prompt is not None and not args.prompt.strip():
        raise InputError("--prompt is empty")
    if args.prompt is not None:
        _check_prompt(args.prompt)
    prompts = [args.prompt] if args.prompt is not None else _read_prompts(args.data)
    vec = load_vector(args.vector)  # format checked now; the model check comes after loading

    import torch

    from updatescope.models.hf import load_causal_lm
    from updatescope.steering import model_fingerprint, steer

    model, tok = load_causal_lm(args.model)
    if vec.model_fingerprint is not None and vec.model_fingerprint != model_fingerprint(model):
        raise InputError(
            f"{args.vector}: vector was made for model {vec.model_fingerprint}, not {args.model} "
            f"({model_fingerprint(model)})"
        )
    if vec.dim != getattr(model.config, "hidden_size", vec.dim):
        raise InputError(f"{args.vector}: vector width {vec.dim} != model hidden size {model.config.hidden_size}")
    pad = getattr(tok, "pad_token_id", None)
    pad = getattr(tok, "eos_token_id", None) if pad is None else pad

    def generate(text: str) -> str:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(
                input_ids=enc["input_ids"],
                attention_mask=enc.get("attention_mask"),
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                pad_token_id=pad,
            )
        return tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    rows: list[dict[str, Any]] = []
    for text in prompts:
        base = generate(text)
        with steer(model, vec, scale=args.scale, positions=args.positions, check_finite=True):
            steered = generate(text)
        rows.append({"prompt": text, "base": base, "steered": steered})
    if args.json:
        from updatescope.records import to_json

        print(
            to_json(
                {
                    "vector": str(args.vector),
                    "layers": list(vec.layers),
                    "scale": args.scale,
                    "positions": args.positions,
                    "results": rows,
                },
                strict=True,
            )
        )
    else:
        from updatescope.report.console import print_rows

        print_rows(
            f"steering with {Path(args.vector).name}, layers {list(vec.layers)}, scale {args.scale:g}",
            ["prompt", "base", "steered"],
            [[r["prompt"], r["base"], r["steered"]] for r in rows],
        )
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("steer", help="build a CAA steering vector, or generate with one")
    sub = p.add_subparsers(dest="steer_cmd", required=True)
    b = sub.add_parser("build", help="CAA vector from contrast pairs (JSONL) at chosen decoder layers")
    b.add_argument("--model", required=True, help="smollm2 or a local model folder")
    b.add_argument(
        "--pairs",
        required=True,
        help='JSONL: {"positive": ..., "negative": ...} or {"prompt": ..., "label": 0|1} per line',
    )
    b.add_argument("--layer", required=True, type=int, nargs="+", help="decoder layer index (negative from the end)")
    b.add_argument("--position", default="last", help="token whose residual is read: last (default) or all")
    b.add_argument("--out", required=True, help="output .safetensors file")
    b.set_defaults(func=cmd_build)
    a = sub.add_parser("apply", help="greedy generation with and without a steering vector")
    a.add_argument("--model", required=True)
    a.add_argument("--vector", required=True, help="a file written by `steer build`")
    a.add_argument("--scale", required=True, type=float, help="multiplier of the vector")
    src = a.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="one prompt")
    src.add_argument("--data", help="prompts: text (one per line) or JSONL with 'prompt' or 'text'")
    a.add_argument("--positions", default="all", help="where to add it: all, prompt, generated or last")
    a.add_argument("--max-new-tokens", type=int, default=20)
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_apply)
