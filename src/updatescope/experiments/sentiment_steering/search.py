"""Search-derived steering vectors for ``sentiment-steering``: Best-of-N weight perturbations
pushed forward.

Per direction and search seed, ``locallinear.search.best_of_n`` (the library's one Best-of-N
rule) draws N Gaussian weight perturbations σ z_i over every trainable parameter, with
σ = ρ‖δθ‖/√D so that ‖σ z‖ ≈ ρ times the norm of the one gradient step δθ on the class's
step sentences, for each ρ in ``search_norms``.  A candidate's loss is the mean next-token
loss of held-out sentences of the class: the first half of them chooses the candidate and the
norm, the second half reports its held-out gain.  The chosen perturbation is pushed forward
exactly (forward AD) through the pushforward sentences, as the one-step shift is, averaged over
tokens, then sentences; the search-derived vector of a direction is the mean of those shifts
over the seeds.  The scored sentences are disjoint from the step's, so the search is scored on
text the step never saw.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from updatescope.experiments.sentiment_steering.config import SentimentSteeringConfig

__all__ = ["search_shifts"]


def search_shifts(
    model: Any,
    tok: Any,
    config: SentimentSteeringConfig,
    sentences: list[str],
    step: tuple[dict[str, Tensor], Tensor, Tensor],
    v_ref: Tensor,
    seed_base: int,
) -> tuple[Tensor, list[dict[str, Any]]]:
    """One direction's search (module docstring).  ``sentences``: the class's polarity sentences
    (the first ``step_sentences`` made the step); ``step``: that step's (δθ, ids, mask), as
    ``sentiment_texts.class_step`` gives it; ``v_ref`` (Lyr, d): the signed CAA the shifts'
    cosines are recorded against.  -> (the mean shift over seeds (Lyr, d) float64, a record per seed)."""
    from updatescope.errors import InputError
    from updatescope.experiments.sentiment_texts import sentence_nll
    from updatescope.locallinear.search import best_over_norms
    from updatescope.steering import direction_norm, displaced, encode_prompts, pushforward

    bs = config.batch_size
    scored = sentences[config.step_sentences : config.step_sentences + 2 * config.search_sentences]
    if len(scored) < 2 * config.search_sentences:
        raise InputError(
            f"the search needs {config.step_sentences} + 2 x {config.search_sentences} sentences per class,"
            f" the data has {len(sentences)}"
        )
    delta, s_ids, s_mask = step
    step_norm = direction_norm(delta)
    half = config.search_sentences
    sel_ids, sel_mask = encode_prompts(tok, scored[:half], side="right")
    held_ids, held_mask = encode_prompts(tok, scored[half:], side="right")
    names = list(delta)
    numels = [delta[k].numel() for k in names]
    origin = torch.zeros(sum(numels))
    params = dict(model.named_parameters())
    saved = {k: params[k].detach().clone() for k in names}

    def loss(ids: Tensor, mask: Tensor):
        def mean() -> float:  # over every target token of the sentences
            sums, counts = sentence_nll(model, ids, mask, bs)
            return float(sums.sum() / counts.sum())

        def f(u: Tensor) -> float:
            if u is origin:
                return mean()
            with displaced(model, names, u, saved):
                return mean()

        return f

    p_ids, p_mask = s_ids[: config.pushforward_sentences], s_mask[: config.pushforward_sentences]
    shifts, records = [], []
    for k in range(config.search_seeds):
        seed_k = seed_base + k
        j, runs, u = best_over_norms(
            origin, loss(sel_ids, sel_mask), loss(held_ids, held_mask), config.search_norms, step_norm,
            config.search_n, seed_k, numels,
        )  # fmt: skip
        res = runs[j]
        kept = {n: part.view_as(delta[n]).to(delta[n].dtype) for n, part in zip(names, torch.split(u, numels))}
        shift = pushforward(model, kept, p_ids, p_mask, position="all", batch_size=bs).double().mean(1)
        shifts.append(shift)
        records.append(
            {
                **res.as_dict(),
                "norm": config.search_norms[j],
                "direction_norm": direction_norm(kept),
                "step_norm": step_norm,
                "gain_select_per_norm": [r.gain_select for r in runs],
                "cosine_caa": torch.nn.functional.cosine_similarity(shift, v_ref.double(), dim=1).tolist(),
            }
        )
    saved.clear()
    return torch.stack(shifts).mean(0), records
