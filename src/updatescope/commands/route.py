"""``updatescope route``: choose, for every request, the adapter(s) of a LoRA library that fit it.

Each ``--adapters`` folder is a PEFT LoRA folder (``adapter_config.json`` plus
``adapter_model.safetensors`` or ``.bin``).  Its signature — of the data the adapter was
trained on, or of a sample of it — is ``DIR/signature.safetensors`` unless ``--signatures``
(one file per adapter, in order) or ``--sig-dir`` (``SIG_DIR/<adapter name>.safetensors``,
the name being the folder's name) says otherwise.  Scores, errors, weights and the ambiguity
rule are defined in ``updatescope.select.route``.

Writes ``--out``: one JSON line per request (its file and 0-based row, the chosen adapters and
weights, every adapter's score with its standard error, the gap to the runner-up and the
``ambiguous`` flag).  With ``--apply`` each request is also run with its chosen adapter(s)
(PEFT on the base model) and its per-token loss is reported beside the base model's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

from updatescope.constants import DTYPE_CHOICES
from updatescope.errors import InputError, UpdatescopeError

SIGNATURE_FILE = "signature.safetensors"
_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
_SMOLLM2 = {"smollm2", "smollm2-135m", "smollm2-135m-instruct", "huggingfacetb/smollm2-135m-instruct"}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _adapter_name(folder: Path) -> str:
    """A PEFT adapter name from the folder's name (module keys take no dots)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", folder.resolve().name) or "adapter"


def _read_adapter(path: str) -> tuple[Path, dict[str, Any], Path]:
    """(folder, adapter_config, weight file) of a PEFT LoRA folder, or one line saying why not."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"--adapters {path}: not a folder (expected a PEFT adapter folder)")
    cfg_path = folder / "adapter_config.json"
    if not cfg_path.is_file():
        raise InputError(f"--adapters {path}: not a PEFT adapter folder (no adapter_config.json)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"--adapters {path}: adapter_config.json is not readable JSON ({type(exc).__name__})"
        ) from None
    if not isinstance(cfg, dict):
        raise InputError(f"--adapters {path}: adapter_config.json is not a JSON object")
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        raise InputError(f"--adapters {path}: a {cfg.get('peft_type') or 'untyped'} adapter; route takes LoRA adapters")
    weights = next((folder / w for w in _WEIGHT_FILES if (folder / w).is_file()), None)
    if weights is None:
        raise InputError(f"--adapters {path}: no adapter weights ({' or '.join(_WEIGHT_FILES)})")
    return folder, cfg, weights


def _check_empty_jsonl(paths: list[str]) -> None:
    """An empty request in a JSONL file (a record whose text is blank) is refused, not dropped;
    in plain text a blank line separates requests, so there is none to find."""
    for path in paths:
        p = Path(path)
        if p.suffix.lower() != ".jsonl" or not p.is_file():
            continue
        try:
            lines = p.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError):
            continue  # the reader names the problem
        for row, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("text"), str) and not rec["text"].strip():
                raise InputError(f"empty request: {path} row {row}")


def _check_base(path: str, cfg: dict[str, Any], model: str) -> None:
    """Refuse an adapter whose ``base_model_name_or_path`` names another model than --model.

    An adapter without the field passes here; its shapes are checked once the model loads."""
    from updatescope.commands._checks import same_path

    base = cfg.get("base_model_name_or_path")
    if not base:
        return
    base, spec = str(base), str(model)
    if spec.lower() in _SMOLLM2:
        leaf = base.rstrip("/").split("/")[-1].lower()  # a hub id, or the packaged model's cache folder
        ok = base.lower() in _SMOLLM2 or leaf.startswith("smollm2-135m-instruct") or leaf.endswith(".gguf")
    elif Path(base).exists():
        ok = same_path(Path(base), Path(spec))
    else:
        named = ""
        try:
            named = str(json.loads((Path(spec) / "config.json").read_text(encoding="utf-8")).get("_name_or_path", ""))
        except (OSError, ValueError, AttributeError):
            pass
        ok = base in {named, spec} or base.rstrip("/").split("/")[-1] == Path(spec).resolve().name
    if not ok:
        raise InputError(f"--adapters {path}: the adapter was trained on {base!r}, not on --model {model}")


def _check_duplicates(adapters: list[tuple[str, Path, Path]]) -> None:
    """The same adapter twice: one folder spelt twice or through a link, or identical weights and config."""
    from updatescope.commands._checks import file_sha256, same_path

    seen: dict[str, str] = {}
    for i, (arg, folder, weights) in enumerate(adapters):
        for arg2, folder2, _ in adapters[:i]:
            if same_path(folder, folder2):
                raise InputError(f"--adapters {arg} and {arg2} are the same folder")
        d = file_sha256(weights) + file_sha256(folder / "adapter_config.json")
        if d in seen:
            raise InputError(
                f"--adapters {arg} and {seen[d]} hold identical weights and config (the same adapter twice)"
            )
        seen[d] = arg


def _signature_paths(args: argparse.Namespace, folders: list[Path], names: list[str]) -> list[Path]:
    if args.signatures and args.sig_dir:
        raise InputError("give --signatures or --sig-dir, not both")
    if args.signatures:
        if len(args.signatures) != len(folders):
            raise InputError(f"--signatures has {len(args.signatures)} files for {len(folders)} adapters (one each)")
        paths = [Path(p) for p in args.signatures]
    elif args.sig_dir:
        paths = [Path(args.sig_dir) / f"{n}.safetensors" for n in names]
    else:
        paths = [f / SIGNATURE_FILE for f in folders]
    for folder, p in zip(folders, paths):
        if not p.is_file():
            raise InputError(
                f"adapter {folder} has no signature: {p} does not exist (sketch the adapter's training data "
                "with 'updatescope sketch', or give --signatures / --sig-dir)"
            )
    return paths


def _check_shapes(model: Any, name: str, weights: Path) -> None:
    """Every LoRA matrix of the adapter fits a linear layer of the loaded model."""
    import torch

    if weights.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(weights), framework="pt") as fh:
            shapes = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
    else:
        shapes = {k: tuple(v.shape) for k, v in torch.load(weights, map_location="cpu", weights_only=True).items()}
    modules = dict(model.named_modules())
    for key, shape in shapes.items():
        m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key)
        if m is None:
            continue
        mod = modules.get(m.group(1))
        if mod is None or not hasattr(mod, "in_features"):
            raise InputError(f"adapter {name} does not fit --model: it adapts {m.group(1)}, which the model lacks")
        want = mod.in_features if m.group(2) == "A" else mod.out_features
        got = shape[1] if m.group(2) == "A" else shape[0]
        if len(shape) != 2 or got != want:
            raise InputError(
                f"adapter {name} does not fit --model: {key} has shape {list(shape)}, the layer is "
                f"{mod.in_features} -> {mod.out_features}"
            )


def _losses(model: Any, tokenizer: Any, tokens: Any, i: int) -> float:
    """Mean next-token loss of request i over its counted targets."""
    import torch

    from updatescope.capture.causal_lm import capture_causal_lm

    total, n = 0.0, 0
    with torch.inference_mode():
        for _, logits, labels in capture_causal_lm(
            model, [tokens.ids[i]], tokenizer, positions=[tokens.masks[i]], progress=False
        ):
            total += float(torch.nn.functional.cross_entropy(logits.float(), labels, reduction="sum"))
            n += int(labels.shape[0])
    return total / n if n else float("nan")


def cmd_route(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file
    from updatescope.data.formats import Columns
    from updatescope.pipeline import Corpus
    from updatescope.records import write_text_atomic
    from updatescope.signatures.io import load_signature

    # every flag, folder and file is checked before the model loads
    if args.top_k < 1:
        raise InputError(f"--top-k must be a positive integer, got {args.top_k}")
    if args.min_tokens < 1:
        raise InputError(f"--min-tokens must be a positive integer, got {args.min_tokens}")
    if args.token_budget < 2:
        raise InputError(f"--token-budget must be at least 2, got {args.token_budget}")
    read = [_read_adapter(p) for p in args.adapters]
    if args.top_k > len(read):
        raise InputError(f"--top-k {args.top_k} is larger than the library ({len(read)} adapters)")
    for p, (_, cfg, _) in zip(args.adapters, read):
        _check_base(p, cfg, args.model)
    _check_duplicates([(p, f, w) for p, (f, _, w) in zip(args.adapters, read)])
    folders = [f for f, _, _ in read]
    names = [_adapter_name(f) for f in folders]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise InputError(f"two adapters are named {n!r} (folder names); rename one folder")
    sig_paths = _signature_paths(args, folders, names)
    out = check_out_file(
        args.out, inputs=[*args.data, *map(str, sig_paths), *(str(w) for _, _, w in read), *args.adapters]
    )
    columns = Columns(args.text_column, args.prompt_column, args.completion_column, args.messages_column)
    if not (args.text_column or args.prompt_column or args.completion_column or args.messages_column):
        _check_empty_jsonl(args.data)
    corpus = Corpus.from_files(args.data, columns)
    for i in range(len(corpus)):
        if not corpus.text(i).strip():
            src, row = corpus.origin[i]
            raise InputError(f"empty request: {src} row {row}")
    from updatescope.commands._checks import signature_kind

    sigs = {}
    for n, p in zip(names, sig_paths):
        if signature_kind(str(p)) == "network":
            raise InputError(
                f"{p} is a network (layer) signature; route compares head signatures ('sketch' without --layers)"
            )
        sigs[n] = load_signature(p)
    first = sigs[names[0]].config
    for n in names[1:]:
        try:
            first.check_compatible(sigs[n].config)
        except UpdatescopeError as exc:
            raise InputError(f"the signature of adapter {n} does not match {names[0]}'s: {exc}") from None

    from updatescope.pipeline import Router, load_model

    model, tok = load_model(args.model, dtype=args.dtype)
    for n, (_, _, w) in zip(names, read):
        _check_shapes(model, n, w)
    router = Router(model, tok, sigs, top_k=args.top_k, min_tokens=args.min_tokens, token_budget=args.token_budget)
    tokens = corpus.tokenise(tok, keep_empty=True)
    counted = tokens.counted()
    for i, c in enumerate(counted):
        if c == 0:
            src, row = corpus.origin[i]
            raise InputError(f"request {src} row {row} has no token to score (shorter than two tokens)")
    scores = router.score(tokens, progress=not args.quiet)
    choices = router.choose(scores)
    records = []
    for i, ch in enumerate(choices):
        records.append(
            {
                "source": corpus.origin[i][0],
                "index": corpus.origin[i][1],
                "adapters": list(ch.adapters),
                "weights": list(ch.weights),
                "ambiguous": ch.ambiguous,
                "gap": _num(ch.gap),
                "gap_se": _num(ch.gap_se),
                "paired": ch.paired,
                "tokens": int(scores.tokens[i]),
                "short": bool(scores.short[i]),
                "scores": {
                    n: {
                        "score": _num(float(scores.score[i, a])),
                        "se": _num(float(scores.se[i, a])),
                        "activation": _num(float(scores.activation[i, a])),
                        "error": _num(float(scores.error[i, a])),
                    }
                    for a, n in enumerate(names)
                },
            }
        )
    if args.apply:
        from peft import PeftModel

        try:
            peft_model = PeftModel.from_pretrained(model, str(folders[0]), adapter_name=names[0])
            for n, f in zip(names[1:], folders[1:]):
                peft_model.load_adapter(str(f), adapter_name=n)
        except Exception as exc:  # PEFT raises many types; the user needs one line
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise InputError(f"the adapters could not be loaded on --model ({first_line})") from None
        peft_model.eval()
        for i, ch in enumerate(choices):
            with peft_model.disable_adapter():
                base = _losses(peft_model, tok, tokens, i)
            records[i]["applied"] = router.apply(peft_model, ch)
            records[i]["loss"] = _num(_losses(peft_model, tok, tokens, i))
            records[i]["base_loss"] = _num(base)
    write_text_atomic("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), out)
    n_amb = sum(r["ambiguous"] for r in records)
    print(f"wrote {out}: {len(records)} requests routed among {len(names)} adapters ({n_amb} flagged ambiguous)")
    if args.json:
        from updatescope.records import to_json

        print(to_json(records, strict=True))
    else:
        from updatescope.report.console import print_rows

        cols = ("request", "adapters", "weights", "gap", "ambiguous") + (("loss", "base loss") if args.apply else ())
        rows = []
        for r in records[:20]:
            row = [
                f"{Path(r['source']).name}:{r['index']}",
                ", ".join(r["adapters"]),
                ", ".join(f"{w:.2f}" for w in r["weights"]),
                "" if r["gap"] is None else f"{r['gap']:.3g} ± {r['gap_se'] or float('nan'):.2g}",
                "yes" if r["ambiguous"] else "",
            ]
            if args.apply:
                row += [f"{r['loss']:.3f}" if r["loss"] is not None else "", f"{r['base_loss']:.3f}"]
            rows.append(tuple(row))
        print_rows(f"routes of {len(records)} requests", cols, rows)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "route",
        help="choose for each request the LoRA adapter(s) whose training data fits it (one forward pass each)",
    )
    p.add_argument("--model", required=True, help="'smollm2' (packaged) or a local HF model folder: the adapters' base")
    p.add_argument(
        "--adapters",
        required=True,
        nargs="+",
        metavar="DIR",
        help=f"PEFT LoRA folders; each holds its training data's signature as {SIGNATURE_FILE} unless "
        "--signatures or --sig-dir is given",
    )
    p.add_argument(
        "--data",
        required=True,
        nargs="+",
        metavar="REQUESTS",
        help="request files: text (one request per line), JSONL with a 'text' field, or tables with the column options",
    )
    p.add_argument("--out", required=True, metavar="ROUTED.jsonl", help="one JSON line per request")
    p.add_argument("--top-k", type=int, default=1, help="adapters per request; > 1 gives a weighted combination")
    p.add_argument("--signatures", nargs="+", default=None, metavar="SIG", help="one signature per adapter, in order")
    p.add_argument("--sig-dir", default=None, metavar="DIR", help="signatures as DIR/<adapter folder name>.safetensors")
    p.add_argument(
        "--apply",
        action="store_true",
        help="run each request with its adapter(s) and report its loss beside the base's",
    )
    from updatescope.commands._checks import add_column_arguments

    add_column_arguments(p)
    p.add_argument("--min-tokens", type=int, default=16, help="requests with fewer counted tokens are flagged short")
    p.add_argument("--token-budget", type=int, default=1024, help="padded tokens per forward pass")
    p.add_argument("--dtype", default="float32", choices=list(DTYPE_CHOICES), help="forward precision")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_route)
