"""Constants shared by every layer.  Torch-free: importing this module imports nothing heavy.

Each value here is defined once; every other module imports it from here.
"""

from __future__ import annotations

__all__ = [
    "IGNORE_INDEX",
    "MAP_KINDS",
    "MAP_CHOICES",
    "DTYPE_NAMES",
    "DTYPE_CHOICES",
    "SKETCH_DIM_MULTIPLE",
    "MAX_SKETCH_DIM",
    "check_sketch_dim",
    "torch_dtype",
    "DEFAULT_SKETCH_DIM",
    "SEED_LIMIT",
    "EXPERIMENT_SEED_LIMIT",
    "check_seed",
    "DEFAULT_TOKEN_BUDGET",
    "RANK_BY",
]

#: Label that marks a position without a target (padding, prompt tokens): the sketch skips it.
#: -100 is the value Hugging Face models and ``torch.nn.functional.cross_entropy`` use.
IGNORE_INDEX = -100

#: Kinds of random projection for the activation and error sides of a sketch.
MAP_KINDS = ("dense", "srht", "fold", "spread", "stack", "countsketch", "foldspread")
#: What a user may ask for: a kind, or ``auto`` (the library picks per side and size).
MAP_CHOICES = ("auto",) + MAP_KINDS

#: The sketch dimension m is a multiple of this (the block transforms work in blocks of 16)
SKETCH_DIM_MULTIPLE = 16
#: and at most this: beyond it the random bases alone outgrow memory without adding accuracy
#: a comparison of corpora can use (the sketch error falls as 1/sqrt(m))
MAX_SKETCH_DIM = 1 << 16


#: The default sketch dimension m: a 16 KB float32 signature vector.
DEFAULT_SKETCH_DIM = 4096

#: Seeds are integers in [0, SEED_LIMIT): a torch generator's seed range, shared by every
#: command (sketch bases, experiments, fine-tuning ground truth).
SEED_LIMIT = 2**63

#: ``reproduce --seed`` is below this: experiments derive their sub-seeds as
#: ``seed × 1,000,003 + k`` (and similar), which must stay below SEED_LIMIT.
EXPERIMENT_SEED_LIMIT = 2**31

#: Padded tokens per forward pass by default: 1,024 × 49,152 float32 logits are 200 MB.
DEFAULT_TOKEN_BUDGET = 1024


def check_seed(value: object, name: str = "seed", limit: int = SEED_LIMIT) -> None:
    """InputError unless ``value`` is an integer seed in [0, limit) (SEED_LIMIT, or
    EXPERIMENT_SEED_LIMIT for experiments)."""
    from updatescope.errors import InputError

    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise InputError(f"{name} must be an integer in [0, 2^{limit.bit_length() - 1}), got {value!r}")


def check_sketch_dim(value: object) -> None:
    """InputError unless ``value`` is a valid sketch dimension m."""
    from updatescope.errors import InputError

    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 < value <= MAX_SKETCH_DIM
        or value % SKETCH_DIM_MULTIPLE
    ):
        raise InputError(
            f"sketch_dim must be a multiple of {SKETCH_DIM_MULTIPLE} in [{SKETCH_DIM_MULTIPLE}, "
            f"{MAX_SKETCH_DIM}], got {value!r}"
        )


#: Model dtype names accepted by ``--dtype`` and ``load_causal_lm(dtype=...)`` -> torch attribute.
DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
DTYPE_CHOICES = ("float32", "bfloat16", "float16")


def torch_dtype(dtype: object) -> object:
    """A torch dtype from a name in :data:`DTYPE_NAMES` (or a torch dtype, returned as is).

    Imports torch when called; raises ``InputError`` naming the accepted names.
    """
    import torch

    from updatescope.errors import InputError

    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype in DTYPE_NAMES:
        return getattr(torch, DTYPE_NAMES[dtype])
    raise InputError(f"unknown dtype {dtype!r}: use {', '.join(DTYPE_CHOICES)}")


#: the scores ``rank`` can order sources by: the joint Fisher alignment A_F, or one marginal
RANK_BY = ("fisher", "error", "activation")
