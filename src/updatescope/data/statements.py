"""True/false statements built offline, one fixed yes/no prompt, and answer-logit scoring.

Facts come from gensim's test data: the analogy lists (capital -> country, country ->
currency, US city -> state) and the Pang-Lee polarity sentences (sentence -> sentiment).
Every subject gives one true statement and one false one (the same subject with a wrong
object picked by a hash), so the two classes are balanced and paired.  Splits are decided
by a hash of the subject, so they are disjoint, deterministic and stable when a task grows.

The model answers with one token after ``PROMPT``; its answer is the sign of the margin
logit(true-answer token) - logit(false-answer token) at the last prompt token.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError

__all__ = [
    "Statement",
    "TASKS",
    "SPLITS",
    "ANSWERS",
    "PROMPT",
    "load_statements",
    "prompt_of",
    "answer_ids",
    "answer_margins",
    "base_accuracy",
    "margin_summary",
]

TASKS = ("capitals", "currencies", "cities", "sentiment")
SPLITS = ("train", "select", "test")
#: cumulative split boundaries on the subject hash in [0, 1): 50% train, 20% select, 30% test
_BOUNDS = (0.5, 0.7, 1.0)
PROMPT = "Statement: {statement} Is this statement true? Answer:"
#: answer sets: (token meaning "true", token meaning "false"), each one token with its space
ANSWERS = {"yes_no": (" Yes", " No"), "true_false": (" True", " False")}
_MAX_REVIEW_WORDS = 24  # long reviews make slow prompts and add little


@dataclass(frozen=True)
class Statement:
    text: str  # the statement itself, e.g. "Athens is the capital of Greece."
    label: int  # 1 true, 0 false
    subject: str  # what the split hash is taken of; a true/false pair shares it
    task: str
    split: str


def _unit_hash(*parts: str) -> float:
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _split_of(task: str, subject: str) -> str:
    u = _unit_hash("split", task, subject)
    return next(name for name, b in zip(SPLITS, _BOUNDS) if u < b)


def _analogy_pairs(section_names: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) relation pairs of the named sections of questions-words.txt, each line giving
    two; a subject with two different objects is dropped as ambiguous."""
    from ._sources import gensim_file

    seen: dict[str, set[str]] = {}
    section = ""
    for line in gensim_file("questions-words.txt").read_text(encoding="utf-8").split("\n"):
        if line.startswith(":"):
            section = line[1:].strip()
            continue
        words = line.split()
        if section in section_names and len(words) == 4:
            for a, b in ((words[0], words[1]), (words[2], words[3])):
                seen.setdefault(a, set()).add(b)
    return sorted((a, next(iter(bs))) for a, bs in seen.items() if len(bs) == 1)


def _sentiment_pairs() -> list[tuple[str, str]]:
    from ._sources import gensim_file

    out = []
    for ln in gensim_file("pang_lee_polarity.cor").read_text(encoding="cp1252", errors="replace").split("\n"):
        m = re.match(r"^__label__(pos|neg)\s+(.*\S)", ln.strip())
        if m and len(m.group(2).split()) <= _MAX_REVIEW_WORDS and '"' not in m.group(2):
            out.append((m.group(2), "positive" if m.group(1) == "pos" else "negative"))
    return sorted(set(out))


_TEMPLATES = {
    "capitals": "{a} is the capital of {b}.",
    "currencies": "The currency of {a} is the {b}.",
    "cities": "{a} is a city in {b}.",
    "sentiment": 'The movie review "{a}" is {b}.',
}


def _facts(task: str) -> list[tuple[str, str]]:
    if task == "capitals":
        return _analogy_pairs(("capital-common-countries", "capital-world"))
    if task == "currencies":
        return _analogy_pairs(("currency",))
    if task == "cities":
        return _analogy_pairs(("city-in-state",))
    return _sentiment_pairs()


def load_statements(task: str, split: str | None = None) -> list[Statement]:
    """True and false statements of ``task`` (one pair per subject), in a fixed order,
    optionally only those of one split.  Raises FileNotFoundError without gensim's data."""
    if task not in TASKS:
        raise InputError(f"unknown statement task {task!r}; choose from {', '.join(TASKS)}")
    if split is not None and split not in SPLITS:
        raise InputError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    facts = _facts(task)
    objects = sorted({b for _, b in facts})
    out: list[Statement] = []
    for a, b in facts:
        where = _split_of(task, a)
        if split is not None and where != split:
            continue
        others = [o for o in objects if o != b]
        wrong = others[int(_unit_hash("wrong", task, a) * len(others))]
        template = _TEMPLATES[task]
        out.append(Statement(template.format(a=a, b=b), 1, a, task, where))
        out.append(Statement(template.format(a=a, b=wrong), 0, a, task, where))
    return out


def prompt_of(statement: Statement | str) -> str:
    return PROMPT.format(statement=statement.text if isinstance(statement, Statement) else statement)


def answer_ids(tokenizer: Any, answers: str = "yes_no") -> tuple[int, int]:
    """Token ids of (true answer, false answer); InputError unless each is one token."""
    if answers not in ANSWERS:
        raise InputError(f"unknown answer set {answers!r}; choose from {', '.join(ANSWERS)}")
    ids = []
    for word in ANSWERS[answers]:
        toks = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(toks) != 1:
            raise InputError(f"answer {word!r} is {len(toks)} tokens for this tokenizer; need exactly one")
        ids.append(int(toks[0]))
    return ids[0], ids[1]


def _body_and_head(model: Any, yes: int, no: int) -> tuple[Any, Tensor, float]:
    """The transformer body (final hidden states after the last norm) and the head's row
    difference W[yes] - W[no] (d,) float64 with its bias difference."""
    body = getattr(model, "base_model", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if body is None or body is model or head is None:
        raise InputError(f"{type(model).__name__}: need a causal LM with a base model and an output head")
    w = head.weight.detach().double()
    b = getattr(head, "bias", None)
    b_diff = 0.0 if b is None else float(b[yes].double() - b[no].double())
    return body, w[yes] - w[no], b_diff


def right_padded(tokenizer: Any, prompts: Sequence[str], batch_size: int) -> list[tuple[Tensor, Tensor]]:
    """Token batches of ``prompts``, right-padded: [(ids (b, S) int64, mask (b, S) int64), ...],
    so each row's last real token sits at its own length − 1 whatever the batch."""
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = 0 if pad is None else int(pad)
    seqs = [list(tokenizer(p)["input_ids"]) for p in prompts]
    out = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start : start + batch_size]
        width = max(len(x) for x in chunk)
        tokens = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, x in enumerate(chunk):
            tokens[i, : len(x)] = torch.as_tensor(x)
            mask[i, : len(x)] = 1
        out.append((tokens, mask))
    return out


@torch.no_grad()
def answer_margins(
    model: Any, tokenizer: Any, prompts: Sequence[str], ids: tuple[int, int], batch_size: int = 16
) -> Tensor:
    """logit(ids[0]) - logit(ids[1]) at each prompt's last token.  n prompts -> (n,) float64.

    Right padding, so each row's last real token is at its own length - 1 and positions of
    real tokens do not depend on the batch; any steering hooks on the model apply.
    """
    if not prompts:
        raise InputError("no prompts to score")
    yes, no = int(ids[0]), int(ids[1])
    device = next(model.parameters()).device
    body, w_diff, b_diff = _body_and_head(model, yes, no)
    out = []
    for tokens, mask in right_padded(tokenizer, prompts, batch_size):
        # Only two head rows matter: h_last . (W_yes - W_no) skips the (B, L, K) logits.
        hidden = body(input_ids=tokens.to(device), attention_mask=mask.to(device), use_cache=False)[0]
        last = hidden[torch.arange(tokens.shape[0], device=device), mask.sum(1).to(device) - 1].double()
        out.append((last @ w_diff + b_diff).cpu())
    return torch.cat(out)


def base_accuracy(
    model: Any, tokenizer: Any, statements: Sequence[Statement], answers: str = "yes_no", batch_size: int = 16
) -> dict[str, float]:
    """The model's accuracy on ``statements`` under ``PROMPT``: answer = sign of the margin.

    -> {"n", "accuracy", "accuracy_se", "auc", "signed_margin" (margin toward the right answer,
    mean), "true_rate" (share answered true)}."""
    if not statements:
        raise InputError("no statements to score")
    margins = answer_margins(
        model, tokenizer, [prompt_of(s) for s in statements], answer_ids(tokenizer, answers), batch_size
    )
    return margin_summary(margins, torch.tensor([s.label for s in statements]))


def margin_summary(margins: Tensor, labels: Tensor) -> dict[str, float]:
    """Accuracy (with its binomial SE), mean signed margin and true-answer rate.  (n,), (n,)."""
    sign = labels.double() * 2 - 1
    correct = ((margins > 0).double() * 2 - 1) == sign
    n = int(margins.numel())
    acc = float(correct.double().mean())
    signed = margins.double() * sign
    pos, neg = margins[labels == 1].double(), margins[labels == 0].double()
    # AUC: can the margin tell true from false at all, whatever the yes/no bias?
    auc = (
        float(((pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()).mean())
        if len(pos) and len(neg)
        else float("nan")
    )
    return {
        "n": n,
        "accuracy": acc,
        "auc": auc,
        "accuracy_se": (acc * (1 - acc) / max(n - 1, 1)) ** 0.5,
        "signed_margin": float(signed.mean()),
        "signed_margin_se": float(signed.std() / n**0.5) if n > 1 else 0.0,
        "true_rate": float((margins > 0).double().mean()),
    }
