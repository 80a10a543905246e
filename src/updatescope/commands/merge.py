"""``updatescope merge SIG... --out SIG``: exact merge of shard signatures.

The state is a sum, so the merge of shard signatures equals sketching the concatenated
shards in the order given (the stream halves are carried by ``FisherSketch.merge``): each
shard weighs by its own token count, and nothing else can be weighed in without breaking
that equality.  Every input must share the compatibility key (seed, sketch_dim, act_dim,
out_dim, maps, model/head fingerprint); a mismatch names the field and both values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

# metadata the merge recomputes instead of copying from the inputs
_RECOMPUTED = ("name", "tokens", "data", "merged_from")


def merged_meta(paths: list[str], sigs: list[Any], name: str) -> dict[str, str]:
    """Metadata of the merged signature: keys on which all inputs agree, plus the data
    descriptions joined in order, the total token count and the input file names."""
    common = dict(sigs[0].meta)
    for sig in sigs[1:]:
        common = {k: v for k, v in common.items() if sig.meta.get(k) == v}
    for k in _RECOMPUTED:
        common.pop(k, None)
    datas = [str(s.meta.get("data") or Path(p).name) for p, s in zip(paths, sigs)]
    count = sum(s.count for s in sigs)
    return {
        **common,
        "name": name,
        "tokens": str(count),
        "data": ",".join(datas),
        "merged_from": ",".join(Path(p).name for p in paths),
    }


def cmd_merge(args: argparse.Namespace) -> int:
    from updatescope.commands._checks import check_out_file, same_path
    from updatescope.errors import IncompatibleSignatureError, InputError

    if len(args.signatures) < 2:
        raise InputError(f"merge needs at least two signatures, got {len(args.signatures)}")
    for i, p in enumerate(args.signatures):  # by path, symlink or hard link (device and inode)
        for q in args.signatures[:i]:
            if same_path(Path(p), Path(q)):
                raise InputError(f"{p} is given twice (as {q}): its tokens would be counted twice")
    out = check_out_file(args.out, inputs=args.signatures)

    from updatescope.signatures.io import load_signature, save_signature
    from updatescope.sketch.fishersketch import FisherSketch

    sigs = [load_signature(p) for p in args.signatures]  # every file is validated before merging
    acc = FisherSketch.from_signature(sigs[0])
    for p, sig in zip(args.signatures[1:], sigs[1:]):
        try:
            acc = acc.merge(FisherSketch.from_signature(sig))
        except IncompatibleSignatureError as exc:  # it names the field; add the files
            raise InputError(f"{p} cannot be merged with {args.signatures[0]}: {exc}") from None
        if sig.same_state(sigs[0]):
            print(
                f"updatescope: warning: {p} holds the same state as {args.signatures[0]}; its tokens are counted twice",
                file=sys.stderr,
            )
    name = args.name or out.name.split(".")[0]
    acc.meta = {}
    merged = acc.signature(**merged_meta(args.signatures, sigs, name))
    save_signature(merged, out)
    if args.json:
        from updatescope.commands._checks import print_json

        print_json({"out": str(out), "inputs": list(args.signatures), **merged.describe()})
    else:
        print(f"wrote {out}: {merged.count} tokens from {len(sigs)} signatures, sketch_dim {merged.config.sketch_dim}")
    return 0


def register(subparsers: Any) -> None:
    m = subparsers.add_parser(
        "merge",
        help="merge shard signatures exactly (token-count weighted)",
        description="Merge signatures of shards of one corpus into the signature of the "
        "whole, exactly as if the shards had been sketched in the order given.",
    )
    m.add_argument("signatures", nargs="+", metavar="SIG")
    m.add_argument("--out", required=True, help="output signature (.safetensors); must not be an input")
    m.add_argument("--name", default=None, help="name shown in rankings (default: file stem)")
    m.add_argument("--json", action="store_true", help="describe the merged signature as JSON")
    m.set_defaults(func=cmd_merge)
