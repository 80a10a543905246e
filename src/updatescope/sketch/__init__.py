"""The FisherSketch engine: pure maps and estimators, and the streaming sketch."""

from updatescope.sketch.align import Alignment, alignment, alignment_matrix, exact_alignment, exact_alignment_matrix
from updatescope.sketch.config import SketchConfig
from updatescope.sketch.fishersketch import FisherSketch
from updatescope.sketch.inputs import error_vectors
from updatescope.sketch.signature import Signature

__all__ = [
    "Alignment",
    "FisherSketch",
    "Signature",
    "SketchConfig",
    "alignment",
    "alignment_matrix",
    "error_vectors",
    "exact_alignment",
    "exact_alignment_matrix",
]
