"""A tiny random Llama model and a word-level tokenizer for experiment-runner tests."""
from __future__ import annotations

import re

import torch


class WordTokenizer:
    """Whitespace/newline tokenizer; each new word gets the next id (mod vocab), BOS = 1."""

    pad_token_id = 0

    def __init__(self, vocab_size: int = 256) -> None:
        self.vocab_size = vocab_size
        self.ids: dict[str, int] = {}

    def _id(self, word: str) -> int:
        if word not in self.ids:
            self.ids[word] = 2 + len(self.ids) % (self.vocab_size - 2)
        return self.ids[word]

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [self._id(w) for w in re.findall(r"\S+|\n", text)]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}

    def get_vocab(self) -> dict[str, int]:
        return {f"tok{i}": i for i in range(self.vocab_size)}


def tiny_llama(vocab_size: int = 256, hidden: int = 16, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def loader(vocab_size: int = 256, hidden: int = 16):
    model, tok = tiny_llama(vocab_size, hidden), WordTokenizer(vocab_size)
    return lambda spec="smollm2": (model, tok)


def reproduce(name, out_dir, settings=None, *, quick=True, seed=0):
    """Run experiment ``name`` through the registry, as ``updatescope reproduce`` does;
    -> the record written to ``out_dir/<name>.json``."""
    from updatescope.experiments import configure, run_experiment

    return run_experiment(configure(name, quick=quick, seed=seed, settings=settings), out_dir / f"{name}.json")
