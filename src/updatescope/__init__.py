"""updatescope: the geometry of parameter updates.

FisherSketch signatures of head-gradient (Fisher) geometry for source selection, and a
local-linear lab for adaptation.  See the README for the two-command quickstart.
"""
from updatescope._version import __version__
from updatescope.errors import IncompatibleSignatureError, InputError, SignatureFileError, UpdatescopeError
from updatescope.select.rank import Ranking, RankRow, rank_sources
from updatescope.signatures.io import load_signature, save_signature
from updatescope.sketch import (Alignment, FisherSketch, Signature, SketchConfig, alignment, alignment_matrix,
                                error_vectors, exact_alignment, exact_alignment_matrix)

__all__ = [
    "Alignment", "FisherSketch", "IncompatibleSignatureError", "InputError", "RankRow", "Ranking",
    "Signature", "SignatureFileError", "SketchConfig", "UpdatescopeError", "__version__", "alignment",
    "alignment_matrix", "error_vectors", "exact_alignment", "exact_alignment_matrix", "load_signature", "rank_sources", "save_signature",
]
