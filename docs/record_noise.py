"""Re-derive the evaluation-sample noise of every committed record from its own data.

A record whose ground truth keeps per-sequence eval losses (``ground_truth.eval_sequences``)
determines its ``truth_noise.eval`` completely (:func:`updatescope.experiments.scoring.eval_noise`
with the record's seed).  ``--check`` recomputes it and fails when a committed value differs;
``--write`` adds the statistics a record predates (e.g. the SE of the best - second-best
difference) and never changes a value that is already there.

    python docs/record_noise.py --check
    python docs/record_noise.py --write
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from updatescope.experiments import scoring

RESULTS = Path(__file__).resolve().parent / "results"


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return all(k in b and _same(v, b[k]) for k, v in a.items())
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def _merged(old: dict, new: dict) -> dict:
    """``old`` with the keys only ``new`` has added (recursively)."""
    out = dict(old)
    for k, v in new.items():
        out[k] = _merged(old[k], v) if isinstance(v, dict) and isinstance(old.get(k), dict) else old.get(k, v)
    return out


def records(results: Path = RESULTS) -> list[Path]:
    """Committed records whose ground truth keeps per-sequence eval losses."""
    out = []
    for p in sorted(results.glob("*.json")):
        gt = json.loads(p.read_text()).get("metrics", {}).get("ground_truth") or {}
        if "eval_sequences" in gt:
            out.append(p)
    return out


def recompute(rec: dict) -> dict:
    gt = rec["metrics"]["ground_truth"]
    return scoring.eval_noise(gt["eval_sequences"], seed=rec["config"].get("seed", 0))


def main(argv: list[str]) -> int:
    if argv not in (["--check"], ["--write"]):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    bad = 0
    for p in records():
        rec = json.loads(p.read_text())
        old = rec["metrics"].get("truth_noise", {}).get("eval")
        new = recompute(rec)
        if old is not None and not _same(old, new):
            print(f"{p.name}: truth_noise.eval differs from its recomputation", file=sys.stderr)
            bad += 1
            continue
        if argv == ["--write"]:
            merged = new if old is None else _merged(old, new)
            if merged != old:
                rec["metrics"].setdefault("truth_noise", {})["eval"] = merged
                p.write_text(json.dumps(rec, indent=2) + "\n")
                print(f"{p.name}: added what the record predates")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
