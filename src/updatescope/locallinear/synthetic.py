"""A small causal transformer and four digit-sequence tasks chosen by a task token.

Sequence layout (length ``2L + 2``)::

    [TASK, x_1 .. x_L, SEP, y_1 .. y_L]

The model reads ``seq[:-1]`` and is trained to predict ``seq[1:]``; only the ``L`` answer
positions carry loss, so a task is a map ``x -> y`` and "exact match" means all ``L``
answer digits right under greedy teacher-forced argmax (teacher forcing is exact for
argmax decoding whenever every position is right, so it equals autoregressive exact match).

Tasks (digits 0-9):
- ``copy``:     y_i = x_i
- ``reverse``:  y_i = x_{L+1-i}
- ``sort``:     y = sorted(x)
- ``mod-add``:  y_i = (x_i + i) mod 10, i = 1..L (a position-keyed modular shift: the
  neighbour-sum variant (x_i + x_{i+1}) mod 10 stayed at chance after 600 Adam steps,
  too slow for a CPU lab)

Vocabulary: 10 digits, ``SEP`` = 10, task tokens 11..14, so 15 tokens.

Model defaults (paper B's synthetic scale): 4 pre-LayerNorm blocks, width 128, 4 heads
of 32, MLP 4x (GELU), learned positions, untied output head; context ``2L + 1 = 11``
for L = 5 (798k parameters).  Attention is written out (matmul + mask + softmax) rather than fused SDPA so
that double backward -- Hessian-vector products -- works on every backend.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from updatescope.errors import InputError
from updatescope.locallinear.config import _SEP, _TASK0, TASKS, ModelConfig

__all__ = [
    "TASKS",
    "ModelConfig",
    "TinyTransformer",
    "DigitTasks",
]


class _Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, cfg.mlp_mult * d)
        self.out = nn.Linear(cfg.mlp_mult * d, d)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))  # (b, h, t, dh)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class TinyTransformer(nn.Module):
    """Causal transformer: tokens (b, t) -> logits (b, t, vocab)."""

    def __init__(self, cfg: ModelConfig = ModelConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        mask = torch.triu(torch.ones(cfg.context, cfg.context, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, tokens: Tensor) -> Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        mask = self.mask[:t, :t]
        for blk in self.blocks:
            x = blk(x, mask)
        return self.head(self.ln_f(x))


class DigitTasks:
    """Deterministic batches of the four tasks and their losses/accuracies.

    Every batch is a pure function of ``(seed, split, task, index)``, so losses built on it
    are reproducible closures ``(model, index) -> scalar`` -- the form the recovery
    protocol (:mod:`.trajectory`) takes for any model.  Splits ``"train"``, ``"select"``,
    ``"tune"``, ``"heldout"`` and ``"eval"`` use disjoint seed streams (the input space, 10^L, is large enough
    that overlaps are rare; they are not excluded).
    """

    _SPLITS = {"train": 0, "select": 1, "heldout": 2, "eval": 3, "tune": 4}

    def __init__(self, seq_len: int = 5, batch_size: int = 16, seed: int = 0) -> None:
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed

    def _gen(self, split: str, task: str, index: int) -> torch.Generator:
        if split not in self._SPLITS:
            raise InputError(f"unknown split {split!r}; expected one of {sorted(self._SPLITS)}")
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; expected one of {TASKS}")
        key = ((self.seed * 7 + self._SPLITS[split]) * 11 + TASKS.index(task)) * 1_000_003 + index
        return torch.Generator().manual_seed(key % (2**63 - 1))

    def targets(self, task: str, x: Tensor) -> Tensor:
        """Answer digits for inputs ``x`` (n, L) -> (n, L)."""
        if task == "copy":
            return x.clone()
        if task == "reverse":
            return x.flip(1)
        if task == "sort":
            return x.sort(dim=1).values
        if task == "mod-add":
            return (x + torch.arange(1, x.shape[1] + 1)) % 10
        raise InputError(f"unknown task {task!r}; expected one of {TASKS}")

    def batch(self, task: str, index: int, split: str = "train", n: int | None = None) -> Tensor:
        """Token sequences (n, 2L + 2), int64."""
        n = self.batch_size if n is None else n
        x = torch.randint(0, 10, (n, self.seq_len), generator=self._gen(split, task, index))
        y = self.targets(task, x)
        head = torch.full((n, 1), _TASK0 + TASKS.index(task), dtype=torch.long)
        sep = torch.full((n, 1), _SEP, dtype=torch.long)
        return torch.cat([head, x, sep, y], dim=1)

    def answer_logits(self, model: nn.Module, seq: Tensor) -> Tensor:
        """Logits at the L answer positions: (n, 2L + 2) -> (n, L, vocab)."""
        logits = model(seq[:, :-1])
        return logits[:, self.seq_len + 1 :]

    def loss(
        self,
        model: nn.Module,
        task: str,
        index: int,
        split: str = "train",
        shuffle_labels: bool = False,
        n: int | None = None,
    ) -> Tensor:
        """Mean cross-entropy over answer digits.  ``shuffle_labels`` permutes the answers
        across examples (a noise baseline with the same label marginals)."""
        seq = self.batch(task, index, split, n)
        y = seq[:, self.seq_len + 2 :]
        if shuffle_labels:
            g = self._gen(split, task, index + 500_000_000)
            y = y[torch.randperm(y.shape[0], generator=g)]
        logits = self.answer_logits(model, seq)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def mix_loss(self, model: nn.Module, index: int, split: str = "train") -> Tensor:
        """Equal-weight mean of the task losses on batch ``index``."""
        return torch.stack([self.loss(model, t, index, split) for t in TASKS]).mean()

    @torch.no_grad()
    def accuracy(self, model: nn.Module, n: int = 512, split: str = "eval") -> dict[str, float]:
        """Per-task exact-match accuracy on ``n`` fresh examples."""
        out = {}
        was_training = model.training
        model.eval()
        for t in TASKS:
            seq = self.batch(t, 0, split, n)
            pred = self.answer_logits(model, seq).argmax(-1)
            out[t] = float((pred == seq[:, self.seq_len + 2 :]).all(dim=1).float().mean())
        model.train(was_training)
        return out
