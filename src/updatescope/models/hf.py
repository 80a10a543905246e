"""Load Hugging Face causal LMs offline and fingerprint their weights.

``load_causal_lm("smollm2")`` gives the packaged SmolLM2-135M-Instruct; any other spec is a
local folder (``config.json`` + weights) or a local ``.gguf`` file. Hub ids are refused with a
one-line error: nothing here ever downloads.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from updatescope.capture.hook import find_output_linear
from updatescope.constants import torch_dtype
from updatescope.errors import InputError, MissingExtraError

__all__ = ["load_causal_lm", "head_fingerprint", "quiet_transformers", "FINGERPRINT_HEX"]

FINGERPRINT_HEX = 16  # 64-bit prefix of the sha256: collisions are not a practical concern


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Within the block, transformers prints no progress bar ("Loading weights") and logs
    errors only; its previous verbosity and progress-bar setting are restored on exit.
    Every model load goes through it, so ``--quiet`` leaves stderr to the result and error
    lines, and an error found after loading is one line, not a bar and a line."""
    try:
        tlog = importlib.import_module("transformers.utils.logging")
    except ImportError:  # pragma: no cover - the loaders raise MissingExtraError themselves
        yield
        return
    verbosity, bars = tlog.get_verbosity(), tlog.is_progress_bar_enabled()
    tlog.set_verbosity_error()
    tlog.disable_progress_bar()
    try:
        yield
    finally:
        tlog.set_verbosity(verbosity)
        if bars:
            tlog.enable_progress_bar()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def load_causal_lm(spec: str | Path, dtype: torch.dtype | str = torch.float32) -> tuple[nn.Module, Any]:
    """Return ``(model, tokenizer)`` in eval mode, loaded without network access.

    ``spec``: "smollm2" (the packaged model, see ``models.smollm2``), a local HF model folder,
    or a local ``.gguf`` file. Raises InputError (one line) when the path is missing, is not a
    model, or the model has no linear output head.
    """
    dtype = torch_dtype(dtype)
    if str(spec).lower() in {"smollm2", "smollm2-135m", "smollm2-135m-instruct"}:
        from updatescope.models.smollm2 import load_smollm2

        model, tokenizer = load_smollm2(dtype=dtype)
        find_output_linear(model)
        return model, tokenizer
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover
        raise MissingExtraError("transformers", "hf") from exc

    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError(
            f"model not found: {spec} (give 'smollm2' or a local model folder; hub downloads are disabled)"
        )
    kwargs: dict[str, Any] = {"local_files_only": True}
    if path.is_file():
        if path.suffix != ".gguf":
            raise InputError(f"not a model: {spec} (expected a folder with config.json or a .gguf file)")
        root, kwargs["gguf_file"] = str(path.parent), path.name
    else:
        if not (path / "config.json").is_file():
            raise InputError(f"not a model folder: {spec} (no config.json)")
        root = str(path)
    # transformers logs a loading report of a line per parameter when weights do not fit; the
    # one-line error below says what matters, so its logger is quieted for this call only
    try:
        with quiet_transformers():
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                root, dtype=dtype, output_loading_info=True, **kwargs
            )
    except Exception as exc:  # transformers raises many types; the user needs one line
        raise InputError(f"cannot load a causal LM from {spec}: {_first_line(exc)}") from exc
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        # randomly initialised parameters: the folder's weights do not fit its config (another
        # architecture, a truncated checkpoint); every number computed from it would be noise
        raise InputError(
            f"the weights in {spec} do not cover the model its config.json describes: {len(missing)} "
            f"parameter(s) missing, e.g. {missing[0]}"
        )
    try:
        with quiet_transformers():
            tokenizer = transformers.AutoTokenizer.from_pretrained(root, **kwargs)
    except Exception as exc:
        raise InputError(f"cannot load the tokenizer from {spec}: {_first_line(exc)}") from exc
    find_output_linear(model)
    model.eval()
    return model, tokenizer


_HASH_CHUNK = 1 << 24  # elements per hashed slice: bounds the bfloat16 copy to 32 MB per step


def _hash_tensor(h: Any, tensor: torch.Tensor) -> None:
    """Feed ``tensor``, rounded to bfloat16, into the hash ``h`` in bounded slices."""
    flat = tensor.detach().reshape(-1)
    for i in range(0, flat.numel(), _HASH_CHUNK):
        t = flat[i : i + _HASH_CHUNK].to(device="cpu", dtype=torch.bfloat16).contiguous()
        h.update(t.view(torch.int16).numpy())  # the buffer itself: no bytes copy


def head_fingerprint(model: nn.Module, tokenizer: Any = None, head: nn.Linear | None = None) -> str:
    """Short hex id of the model's weights, its head first, plus the tokenizer vocabulary.

    Signatures are only comparable under one model and one output vocabulary: the head
    defines the error geometry and every other weight the activations it reads.  So this id
    covers the head weight (and bias), every other parameter of the model (by name and
    shape, in registration order) and the vocabulary; it is stored with every signature and
    compared before any alignment.  Weights are hashed after rounding to bfloat16, so one
    model loaded in float32 or bfloat16 gets the same id, while any real change (fine-tuning
    of the body or the head, another checkpoint) changes it.  Cost: one read of the weights
    (a fraction of a second for SmolLM2-135M).  Classifiers pass ``tokenizer=None``; the
    vocabulary part is then the output size only.
    """
    head = head if head is not None else find_output_linear(model)
    h = hashlib.sha256()
    h.update(f"head:{tuple(head.weight.shape)}".encode())
    own = {id(head.weight)} | ({id(head.bias)} if head.bias is not None else set())
    for tensor in (head.weight, head.bias):
        if tensor is not None:
            _hash_tensor(h, tensor)
    for name, p in model.named_parameters():  # shared (tied) parameters appear once
        if id(p) in own:
            continue
        h.update(f"\0{name}:{tuple(p.shape)}".encode())
        _hash_tensor(h, p)
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        h.update(f"vocab:{len(vocab)}".encode())
        h.update(
            "".join(f"{idx}\t{token}\n" for token, idx in sorted(vocab.items(), key=lambda kv: kv[1])).encode(
                "utf-8", "surrogatepass"
            )
        )  # the same bytes as one update per entry
    return h.hexdigest()[:FINGERPRINT_HEX]
