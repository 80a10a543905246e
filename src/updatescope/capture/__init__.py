"""Capture (head input, head output, label) streams from models, forward only."""

from updatescope.capture.causal_lm import CaptureBatch, capture_causal_lm, count_tokens
from updatescope.capture.classifier import capture_classifier
from updatescope.capture.hook import LinearCapture, find_output_linear

__all__ = [
    "CaptureBatch",
    "capture_causal_lm",
    "capture_classifier",
    "count_tokens",
    "LinearCapture",
    "find_output_linear",
]
