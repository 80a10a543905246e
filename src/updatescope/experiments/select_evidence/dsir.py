"""DSIR (hashed n-gram importance resampling) through its authors' package ``data-selection``.

The package reads JSONL files: the pool and the target documents are written to a temporary
directory, :class:`data_selection.HashedNgramDSIR` fits the target's and the pool's hashed
n-gram distributions there (``fit_importance_estimator`` over all tokens), and each pool
document's log importance weight is the package's ``importance_estimator`` of its
``featurizer`` features.  The package drops documents shorter than ``min_example_length``
words from its resampling (``perexample_metadata_filter``); here they keep a NaN score, so
they go last in a top-k, and are counted."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from updatescope.errors import MissingExtraError

__all__ = ["dsir_scores"]


def _package() -> Any:
    try:
        from data_selection import HashedNgramDSIR
    except ImportError as exc:
        raise MissingExtraError("data-selection", "dsir") from exc
    return HashedNgramDSIR


def _write_jsonl(path: Path, texts: Sequence[str]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for t in texts:
            fh.write(json.dumps({"text": t}) + "\n")


def dsir_scores(
    pool: Sequence[str], target: Sequence[str], *, ngrams: int = 2, num_buckets: int = 10000, min_length: int = 1
) -> tuple[np.ndarray, int]:
    """Log importance weight of each pool document for the target -> (scores (N,) float64,
    number of documents below ``min_length`` words, whose score is NaN)."""
    dsir_cls = _package()
    with tempfile.TemporaryDirectory(prefix="updatescope-dsir-") as tmp:
        d = Path(tmp)
        _write_jsonl(d / "pool.jsonl", pool)
        _write_jsonl(d / "target.jsonl", target)
        dsir = dsir_cls(
            [str(d / "pool.jsonl")],
            [str(d / "target.jsonl")],
            str(d / "cache"),
            num_proc=1,
            ngrams=ngrams,
            num_buckets=num_buckets,
            tokenizer="wordpunct",
            min_example_length=min_length,
        )
        dsir.fit_importance_estimator(num_tokens_to_fit="all")
        scores = np.empty(len(pool), dtype=np.float64)
        lengths = np.empty(len(pool), dtype=np.float64)
        for i, text in enumerate(pool):
            feats = dsir.featurizer(text)
            scores[i] = float(dsir.importance_estimator(feats))
            lengths[i] = float(dsir.get_perexample_metadata({"text": text}, feats))
        keep = np.asarray(dsir.perexample_metadata_filter(lengths), dtype=bool)
    scores[~keep] = np.nan
    return scores, int((~keep).sum())
