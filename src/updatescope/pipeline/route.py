"""Route requests among fine-tuned adapters by their predicted update compatibility.

    router = Router(model, tok, {"law": law_sig, "code": code_sig}, top_k=1)
    scores = router.score(["def f(x):", "The court held that"])    # one forward pass per batch
    for choice in scores.choose(router.top_k):
        router.apply(peft_model, choice)                              # set_adapter / weighted mix

Each adapter is represented by the signature of the data it was trained on.  A request is
scored against all of them from one forward pass of the base model: its per-token features
times the bank of adapter directions (the score, its errors, the choice and the ambiguity rule
are in :mod:`updatescope.select.route`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from updatescope.errors import IncompatibleSignatureError, InputError
from updatescope.pipeline.corpus import Corpus, Tokens
from updatescope.pipeline.score import _tokens, head_basis
from updatescope.select.documents import MIN_TOKENS
from updatescope.select.route import (
    CANDIDATES,
    PAIRED_LIMIT,
    CandidateAccumulator,
    RouteAccumulator,
    RouteChoice,
    RouteScores,
    check_candidates,
    direction_bank,
    joint_ranking_bank,
)
from updatescope.sketch.signature import Signature

#: Error floats per chunk of a captured batch (rows × vocabulary): few enough that a chunk's
#: error softmax is still in cache when the error map reads it, which makes the router's
#: features faster than at the sketch's larger accumulation step (benchmarks/README.md,
#: "Routing among adapters").  The features are the same whatever it is; ``score_documents``
#: keeps the larger step, so that the stored scores of its evidence stay valid.
ROUTE_ELEMS = 3 << 19  # 32 rows at a 49,152-token vocabulary

__all__ = ["Router"]


class Router:
    """A bank of adapter signatures on one base model, scoring requests against all at once.

    adapters: name -> the signature of that adapter's training data (or of a sample of it).
    Every signature must share one config and match the model (head shape, fingerprint):
    a one-line ``InputError`` naming the adapter and the field otherwise, before any pass.
    top_k: adapters per request (weighted when > 1); min_tokens: requests with fewer counted
    tokens are flagged ``short``; token_budget, dtype: batching and forward precision.
    A bank of more than ``paired_limit`` adapters is scored through
    :class:`~updatescope.select.route.CandidateAccumulator` (errors for each request's
    ``candidates`` best adapters only; see :mod:`updatescope.select.route`).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        adapters: Mapping[str, Signature],
        *,
        top_k: int = 1,
        min_tokens: int = MIN_TOKENS,
        token_budget: int = 1024,
        dtype: Any = None,
        fingerprint: str | None = None,
        paired_limit: int = PAIRED_LIMIT,
        candidates: int = CANDIDATES,
    ) -> None:
        if not isinstance(adapters, Mapping) or not adapters:
            raise InputError("adapters must be a non-empty mapping of name -> Signature")
        names = list(adapters)
        for name in names:
            if not isinstance(name, str) or not name:
                raise InputError(f"adapter names must be non-empty strings, got {name!r}")
            if not isinstance(adapters[name], Signature):
                raise InputError(f"adapter {name}: expected a Signature, got {type(adapters[name]).__name__}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= len(names):
            raise InputError(f"top_k must be an integer from 1 to the number of adapters ({len(names)}), got {top_k!r}")
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 1:
            raise InputError(f"min_tokens must be a positive integer, got {min_tokens!r}")
        first = adapters[names[0]].config
        for name in names[1:]:
            try:
                first.check_compatible(adapters[name].config)
            except IncompatibleSignatureError as exc:
                raise InputError(f"adapter {name}'s signature does not match {names[0]}'s: {exc}") from None
        self.model, self.tokenizer = model, tokenizer
        try:
            self.head, self.config = head_basis(model, tokenizer, first, fingerprint)
        except IncompatibleSignatureError as exc:
            raise InputError(f"the adapter signatures were not made with this model: {exc}") from None
        self.names = tuple(names)
        # (A, 3, m) float64, a view of kind-major storage: each kind's directions are contiguous
        self.bank = direction_bank([adapters[n] for n in names]).transpose(0, 1).contiguous().transpose(0, 1)
        self.top_k, self.min_tokens = top_k, min_tokens
        self.token_budget, self.dtype = token_budget, dtype
        self.paired_limit, self.candidates = paired_limit, check_candidates(candidates)
        self._joint: torch.Tensor | None = None  # a large bank's float32 ranking copy, made on first use
        self._joint64: torch.Tensor | None = None  # a small bank's joint directions on the features' device
        self._kinds32: torch.Tensor | None = None  # and its activation and error directions, float32
        self._mixes: dict[tuple[tuple[str, ...], tuple[float, ...]], str] = {}
        #: rows of a captured batch whose errors and features are made at a time (``ROUTE_ELEMS``)
        self.chunk_rows = max(1, ROUTE_ELEMS // self.config.out_dim)

    def __len__(self) -> int:
        return len(self.names)

    def score(
        self,
        requests: Corpus | Tokens | Sequence[Any],
        *,
        progress: bool = False,
        positions: Sequence[Any] | None = None,
    ) -> RouteScores:
        """Scores of every request against every adapter (D, A), with standard errors.

        requests: a :class:`Corpus`, its ``tokenise(keep_empty=True)``, or strings / token-id
        lists (``positions`` as in ``score_documents``).  One forward pass per batch; a
        request with no counted token gets undefined (NaN) scores."""
        tokens = _tokens(requests, self.tokenizer, positions)
        counted = tokens.counted()
        keep = [i for i, c in enumerate(counted) if c > 0]
        large = len(self.names) > self.paired_limit
        acc: CandidateAccumulator | RouteAccumulator
        if large:
            if self._joint is None:
                self._joint = joint_ranking_bank(self.bank)  # one float32 copy, kept for every call
            opts = dict(min_tokens=self.min_tokens, candidates=self.candidates, joint=self._joint)
            acc = CandidateAccumulator(self.names, counted, self.bank, **opts)
        else:
            acc = RouteAccumulator(self.names, counted, min_tokens=self.min_tokens)
        for feats in self._features(tokens, keep, progress):
            if large:
                acc.update(feats)
                continue
            acc.update(self.terms(feats))
        return acc.compute()

    def _features(self, tokens: Tokens, keep: list[int], progress: bool) -> Iterator[torch.Tensor]:
        """The counted tokens' features ``(n, 3, m)`` in stream order, as ``token_features``
        makes them from the same forward passes, ``chunk_rows`` rows at a time (each tensor is
        overwritten by the next)."""
        from updatescope.capture.causal_lm import capture_causal_lm

        with torch.inference_mode():
            batches = capture_causal_lm(
                self.model,
                [tokens.ids[i] for i in keep],
                self.tokenizer,
                positions=[tokens.masks[i] for i in keep],
                token_budget=self.token_budget,
                dtype=self.dtype,
                progress=progress,
                desc="route",
                head=self.head,
                compact=False,
            )
            for acts, logits, labels in batches:
                yield from self.chunk_features(acts, logits, labels)

    def chunk_features(self, acts: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> Iterator[torch.Tensor]:
        """Features ``(n, 3, m)`` of one captured batch's counted rows, ``chunk_rows`` rows at a
        time, in row order (each tensor is overwritten by the next)."""
        from updatescope.constants import IGNORE_INDEX
        from updatescope.sketch.fishersketch import error_chunks, features

        kept = (labels != IGNORE_INDEX).nonzero().squeeze(1)
        # error_chunks reads a piece as one chunk, or one per run of its kept rows
        for piece in kept.split(self.chunk_rows):
            for a, errors in error_chunks(acts, logits, labels, piece, logits.device):
                yield features(self.config, a.to(errors.dtype), errors, tag="route_features")

    def terms(self, feats: torch.Tensor) -> torch.Tensor:
        """Per-token terms (n, A, 3) of a small bank, one (n, m) × (m, A) product per kind: the
        joint kind in float64 (exact: the score, its error and the paired sums), the activation
        and error kinds in float32, the precision of the features themselves (a diagnostic
        score each, read as means), then widened."""
        dev = feats.device
        if self._kinds32 is None or self._kinds32.device != dev:
            self._kinds32 = self.bank[:, 1:].to(dev, torch.float32).transpose(0, 1).contiguous()  # (2, A, m)
        if self._joint64 is None or self._joint64.device != dev:
            self._joint64 = self.bank[:, 0].to(dev)
        out = torch.empty(feats.shape[0], len(self.names), 3, dtype=torch.float64, device=dev)
        out[..., 0] = feats[:, 0].to(torch.float64) @ self._joint64.T
        for k in (1, 2):
            out[..., k] = feats[:, k] @ self._kinds32[k - 1].T
        return out

    def choose(self, scores: RouteScores, top_k: int | None = None, z: float = 2.0) -> list[RouteChoice]:
        """``scores.choose`` with this router's ``top_k`` unless given."""
        return scores.choose(self.top_k if top_k is None else top_k, z)

    def route(self, requests: Corpus | Tokens | Sequence[Any], **kw: Any) -> list[RouteChoice]:
        """Score and choose in one call."""
        return self.choose(self.score(requests, **kw))

    def apply(self, peft_model: Any, choice: RouteChoice | str | Sequence[str]) -> str:
        """Make ``choice`` the active adapter of ``peft_model`` (a ``peft.PeftModel`` holding
        the router's adapters under the same names); returns the active adapter's name.

        One adapter: ``set_adapter``.  A weighted top-k: ``add_weighted_adapter`` with
        ``combination_type="cat"`` (exactly Σ w_a ΔW_a for LoRA), made once per weight vector
        (weights rounded to 4 decimals) and cached under a name derived from it."""
        if isinstance(choice, str):
            names, weights = (choice,), (1.0,)
        elif isinstance(choice, RouteChoice):
            names, weights = choice.adapters, choice.weights
        else:
            names = tuple(choice)
            weights = tuple(1.0 / len(names) for _ in names) if names else ()
        if not names:
            raise InputError("no adapter to apply")
        present = set(getattr(peft_model, "peft_config", {}) or {})
        missing = [n for n in names if n not in present]
        if missing:
            raise InputError(
                f"the model has no adapter named {', '.join(map(repr, missing))} (it has {', '.join(sorted(present))})"
            )
        active = [(n, w) for n, w in zip(names, weights) if w > 0] or [(names[0], 1.0)]
        if len(active) == 1:
            peft_model.set_adapter(active[0][0])
            return active[0][0]
        key = (tuple(n for n, _ in active), tuple(round(float(w), 4) for _, w in active))
        name = self._mixes.get(key)
        if name is None or name not in peft_model.peft_config:
            name = "routed_" + hashlib.sha256(repr(key).encode()).hexdigest()[:12]
            if name not in peft_model.peft_config:
                peft_model.add_weighted_adapter(list(key[0]), list(key[1]), name, combination_type="cat")
            self._mixes[key] = name
        peft_model.set_adapter(name)
        return name
