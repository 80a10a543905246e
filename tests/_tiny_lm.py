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


#: the LoRA settings of the tiny experiment runs: one adapted block, rank 2, a few steps
TINY_LORA = {
    "n_last": 1,
    "r": 2,
    "alpha": 4,
    "targets": ["q_proj", "v_proj"],
    "lr": 1e-2,
    "steps": 3,
    "batch": 2,
    "seq_len": 16,
}


def tiny_llama(vocab_size: int = 256, hidden: int = 16, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg).eval()


def loader(vocab_size: int = 256, hidden: int = 16):
    model, tok = tiny_llama(vocab_size, hidden), WordTokenizer(vocab_size)
    return lambda spec="smollm2": (model, tok)


def reproduce(name, out_dir, settings=None, *, quick=True, seed=0):
    """Run experiment ``name`` through the registry, as ``updatescope reproduce`` does;
    -> the record written to ``out_dir/<name>.json``."""
    from updatescope.experiments import configure, run_experiment

    return run_experiment(configure(name, quick=quick, seed=seed, settings=settings), out_dir / f"{name}.json")


def check_budget_run(name, out_dir, cfg, probe_domains):
    """Run ``name`` with ``cfg``'s budget grid, then its probe alone (``budget_only``), and
    check the choice: made on the sketch split of ``probe_domains``, the grid's best median
    SNR (the smaller budget on a tie), used for the truth, and the same when the probe runs
    alone (its fine-tunings are cached), which measures no truth.  -> the full record."""
    res = reproduce(name, out_dir / "out", cfg)
    b = res["metrics"]["budget"]
    assert b["domains"] == probe_domains and b["validation_split"] == "sketch"
    assert [r["steps"] for r in b["grid"]] == list(cfg["budget_grid"])
    best = max(b["grid"], key=lambda r: (r["median_snr"], -r["steps"]))
    assert b["chosen"] == best["steps"] and res["config"]["lora_steps_used"] == b["chosen"]
    assert res["metrics"]["ground_truth"]["transfer"]
    only = reproduce(name, out_dir / "only", {**cfg, "budget_only": True})
    assert only["metrics"]["budget"] == b and "ground_truth" not in only["metrics"]
    assert only["config"]["lora_steps_chosen"] == b["chosen"] and "lora_steps_used" not in only["config"]
    return res
