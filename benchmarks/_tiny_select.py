"""Shared pieces of the ``select`` scale benchmarks: a tiny random causal LM saved as a model
folder (``select --model DIR`` loads it like any local model), a target signature, and pools of
short synthetic documents written to JSONL one row at a time.

The model is tiny (1 layer, width 32, a 512-word vocabulary) on purpose: these benchmarks
measure what ``select`` adds around the forward pass (streaming, chunking, the heap, the
score file, the ranks), and the packaged SmolLM2-135M forwards about 400 tokens/s on 2 cores,
so a million rows through it would take days.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

VOCAB = 512
WORDS = [f"w{i}" for i in range(VOCAB - 2)]


def save_tiny_model(path: Path, seed: int = 0, hidden: int = 32) -> Path:
    """A random Llama (1 layer) with a whitespace word-level tokenizer, saved to ``path``."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
    )
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def doc(rng: random.Random, lo: int, hi: int) -> str:
    """A document of ``lo``..``hi`` words; the word distribution has a skew so scores differ."""
    n = rng.randint(lo, hi)
    return " ".join(WORDS[min(int(rng.expovariate(1 / 60)), len(WORDS) - 1)] for _ in range(n))


def write_pool(path: Path, n: int, lo: int, hi: int, seed: int = 0) -> Path:
    """``n`` JSONL rows ``{"text": ...}``, written as they are drawn (never all in memory)."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(n):
            fh.write(json.dumps({"text": doc(rng, lo, hi)}) + "\n")
    return path


def save_target(model_dir: Path, out: Path, sketch_dim: int, seed: int = 1) -> Path:
    """A target signature of 200 synthetic documents under the tiny model."""
    import updatescope as us
    from updatescope.models.hf import load_causal_lm
    from updatescope.pipeline import SketchOptions, sketch_corpus

    model, tok = load_causal_lm(str(model_dir))
    rng = random.Random(seed)
    docs = [doc(rng, 10, 40) for _ in range(200)]
    us.save_signature(sketch_corpus(model, tok, docs, SketchOptions(sketch_dim=sketch_dim), progress=False), out)
    return out
