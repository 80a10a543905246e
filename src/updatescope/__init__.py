"""updatescope: the geometry of parameter updates.

FisherSketch signatures of head-gradient (Fisher) geometry for source selection, and a
local-linear lab for adaptation.  See the README for the two-command quickstart.

The package namespace is lazy (PEP 562): ``import updatescope`` and ``import
updatescope.cli`` import neither torch nor scipy; the first use of a public name imports
the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from updatescope._version import __version__
from updatescope.errors import IncompatibleSignatureError, InputError, SignatureFileError, UpdatescopeError

#: public name -> module that defines it
_LAZY = {
    "Ranking": "updatescope.select.rank",
    "RankRow": "updatescope.select.rank",
    "rank_sources": "updatescope.select.rank",
    "load_signature": "updatescope.signatures.io",
    "save_signature": "updatescope.signatures.io",
    "Alignment": "updatescope.sketch.align",
    "alignment": "updatescope.sketch.align",
    "alignment_matrix": "updatescope.sketch.align",
    "exact_alignment": "updatescope.sketch.align",
    "exact_alignment_matrix": "updatescope.sketch.align",
    "FisherSketch": "updatescope.sketch.fishersketch",
    "Signature": "updatescope.sketch.signature",
    "SketchConfig": "updatescope.sketch.config",
    "error_vectors": "updatescope.sketch.inputs",
    "Corpus": "updatescope.pipeline",
    "SketchOptions": "updatescope.pipeline",
    "load_model": "updatescope.pipeline",
    "sketch_corpus": "updatescope.pipeline",
    "score_documents": "updatescope.pipeline",
}

__all__ = sorted(
    ["IncompatibleSignatureError", "InputError", "SignatureFileError", "UpdatescopeError", "__version__", *_LAZY]
)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'updatescope' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from updatescope.pipeline import Corpus, SketchOptions, load_model, score_documents, sketch_corpus
    from updatescope.select.rank import Ranking, RankRow, rank_sources
    from updatescope.signatures.io import load_signature, save_signature
    from updatescope.sketch import (
        Alignment,
        FisherSketch,
        Signature,
        SketchConfig,
        alignment,
        alignment_matrix,
        error_vectors,
        exact_alignment,
        exact_alignment_matrix,
    )
