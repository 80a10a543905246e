"""The reading of a verbalizer record for docs/results.md: what its regime checks and its
ground truth say, every figure read from the record and every claim decided by the rule
written next to it.  Registered in docs/results_table.py as the record kinds
``verbactivations`` and ``verbtruth``."""

from __future__ import annotations

#: activations count as identical across answer-word sets when max |Δa| is at most this
#: fraction of max |a| (float round-off of differently padded batches is ~1e-6 relative)
IDENTICAL_REL = 1e-5


def _fmt(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def activation_lines(rec: dict) -> list[str]:
    """Regime check: the answer-word sets share their prefix, so the activations at the
    answer position must be identical across sets (else activation-only methods could see
    the set)."""
    m = rec["metrics"]
    ai = m["activation_identity"]
    n = {v["n"] for v in ai["per_set"].values()}
    diff, top = ai["max_abs_diff"], ai["max_abs_activation"]
    same = diff <= IDENTICAL_REL * top
    word = "verified" if same else "NOT verified"
    tail = (
        "All activation-only methods therefore give a constant score across sources (spread 0) and pick at chance."
        if same
        else "Activation-only methods can see the set here, so their scores are not activation-dark."
    )
    return [
        f"**Same prefix → same activations: {word}** (rule: max |Δa| ≤ {IDENTICAL_REL:g} · max |a|). Each set was "
        f"captured separately ({'/'.join(str(x) for x in sorted(n))} prompts for each of the "
        f"{len(ai['per_set'])} other sets); max |Δa| = {diff:.3g} against max |a| = {top:.3g}. {tail}"
    ]


def _family(name: str) -> str:
    return name.lower()


def truth_lines(rec: dict) -> list[str]:
    """The ground truth's shape: own-set gains, the sign and range of cross-set transfers, and
    how often the least harmful source is the same words in the other case."""
    gt = rec["metrics"]["ground_truth"]
    tr = gt["transfer"]
    sets = list(tr)
    own_loss = [gt["loss"][t][t] - gt["base_loss"][t] for t in sets]
    cross = [tr[t][s] for t in sets for s in sets if s != t]
    neg = sum(x < 0 for x in cross)
    fam_best, fam_n = 0, 0
    for t in sets:
        partners = [s for s in sets if s != t and _family(s) == _family(t)]
        if not partners:
            continue
        fam_n += 1
        best = max((s for s in sets if s != t), key=lambda s: tr[t][s])
        fam_best += best in partners
    learn = sum(x < 0 for x in own_loss)
    head = (
        "Every set learns its own words" if learn == len(sets) else f"{learn} of {len(sets)} sets learn their own words"
    )
    return [
        f"{head} (rule: its own eval loss falls; it changes by {_fmt(min(own_loss))} to "
        f"{_fmt(max(own_loss))} nats); "
        f"{neg} of {len(cross)} cross-set transfers are negative (from {_fmt(min(cross))} to {_fmt(max(cross))} "
        f"nats). The least harmful other source is the same words in the other case for {fam_best} of the "
        f"{fam_n} targets that have such a set."
    ]
