"""Rank candidate sources for a target by estimated Fisher alignment, and say why.

Regime diagnosis (across the candidates whose three values are defined, not per pair),
tested in this order:
- ``undefined``: fewer than two candidates have defined values: nothing to diagnose.
- ``coupled``: the product of the marginals, Scov(M_a)·Scov(Γ_e), would pick a different
  best source than A_F, and the gap in A_F between the two is beyond noise — activations
  and errors are dependent (ρ ≠ 1) enough to change the decision, so only the joint score
  ranks correctly.  Pure coupling is the extreme case: both marginals flat while A_F
  separates the candidates.
- ``flat``: A_F and both marginals are flat: candidates look alike to the head.
- ``activation-dark``: activation similarity Scov(M_a) is flat across candidates (its
  spread is within noise or < FLAT_SPREAD) while error similarity Scov(Γ_e) varies — the
  representations cannot tell the sources apart; the error geometry carries the signal
  (the paper's Thm 3.2 setting: identical activations, different label sets).
- ``error-dark``: the converse — the sources share error geometry, activations decide.
- ``separable``: both marginals vary and their product picks the same best source as A_F.

A value is "flat" when its spread across candidates is below max(FLAT_SPREAD, 2·largest
standard error); "beyond noise" is the converse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from updatescope.constants import RANK_BY
from updatescope.errors import InputError
from updatescope.sketch.align import Alignment, alignment
from updatescope.sketch.signature import Signature

FLAT_SPREAD = 0.02  # max−min of a similarity across candidates below which it is "flat"
COUPLING_TOL = 0.15  # |ρ − 1| above which activations and errors are called coupled


@dataclass(frozen=True)
class RankRow:
    source: str
    fisher: float
    activation: float
    error: float
    coupling: float
    fisher_se: float
    activation_se: float
    error_se: float
    coupling_se: float
    n_source: int
    trusted: bool
    note: str

    def as_dict(self, json_safe: bool = True) -> dict[str, Any]:
        """Fields as a dict; with ``json_safe`` (default) NaN/inf become None (JSON null),
        which strict JSON parsers accept where bare NaN is rejected."""
        return {k: _safe(v, json_safe) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Ranking:
    """Rows best first; ``skipped`` maps a source left out to the reason (e.g. the target itself)."""

    target: str
    rows: tuple[RankRow, ...]
    regime: str
    explanation: str
    spreads: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    by: str = "fisher"

    def as_dict(self, json_safe: bool = True) -> dict[str, Any]:
        """Plain dict for JSON output; with ``json_safe`` (default) every non-finite float
        (an undefined value or standard error) is None, i.e. ``null`` in JSON."""
        return {
            "target": self.target,
            "by": self.by,
            "regime": self.regime,
            "explanation": self.explanation,
            "spreads": {k: _safe(v, json_safe) for k, v in self.spreads.items()},
            "skipped": dict(self.skipped),
            "rows": [r.as_dict(json_safe) for r in self.rows],
        }


def _safe(v: Any, json_safe: bool) -> Any:
    return None if json_safe and isinstance(v, float) and not math.isfinite(v) else v


def _spread(values: list[float]) -> float:
    v = [x for x in values if math.isfinite(x)]
    return max(v) - min(v) if len(v) >= 2 else float("nan")


def _is_flat(values: list[float], ses: list[float]) -> bool:
    spread = _spread(values)
    if not math.isfinite(spread):
        return False
    noise = 2.0 * max((s for s in ses if math.isfinite(s)), default=0.0)
    return spread < max(FLAT_SPREAD, noise)


def _finite(a: Alignment) -> bool:
    return all(math.isfinite(v) for v in (a.fisher, a.activation, a.error))


def _noise(ses: list[float]) -> float:
    return 2.0 * max((s for s in ses if math.isfinite(s)), default=0.0)


def diagnose(aligns: Mapping[str, Alignment]) -> tuple[str, str, dict[str, float]]:
    """(regime, explanation, spreads) for a set of source alignments to one target.

    Only candidates whose fisher, activation and error values are all defined take part:
    an undefined value has no regime.
    """
    defined = {n: a for n, a in aligns.items() if _finite(a)}
    vals = list(defined.values())
    acts, errs, fis = [a.activation for a in vals], [a.error for a in vals], [a.fisher for a in vals]
    spreads = {"activation": _spread(acts), "error": _spread(errs), "fisher": _spread(fis)}
    if len(aligns) < 2:
        return "single", "only one candidate: nothing to compare", spreads
    if len(defined) < 2:
        return (
            "undefined",
            f"only {len(defined)} of {len(aligns)} candidates have defined values: no regime can be diagnosed",
            spreads,
        )
    act_flat = _is_flat(acts, [a.activation_se for a in vals])
    err_flat = _is_flat(errs, [a.error_se for a in vals])
    fis_flat = _is_flat(fis, [a.fisher_se for a in vals])
    best_f = max(defined, key=lambda n: defined[n].fisher)
    best_p = max(defined, key=lambda n: defined[n].activation * defined[n].error)
    gap = defined[best_f].fisher - defined[best_p].fisher
    decision_changes = best_f != best_p and gap > max(
        FLAT_SPREAD, _noise([defined[best_f].fisher_se, defined[best_p].fisher_se])
    )
    if act_flat and err_flat and not fis_flat:
        return (
            "coupled",
            "both marginals are flat across candidates (activation spread "
            f"{spreads['activation']:.3f}, error spread {spreads['error']:.3f}) but the joint Fisher "
            f"alignment separates them (spread {spreads['fisher']:.3f}): pure coupling — only how "
            "activations and errors co-occur tells the sources apart",
            spreads,
        )
    if decision_changes:
        return (
            "coupled",
            f"activation × error would pick {best_p} but the joint Fisher alignment picks "
            f"{best_f} (gap {gap:.3f}, beyond noise): activations and errors are dependent, only the "
            "joint score ranks correctly",
            spreads,
        )
    if act_flat and err_flat:
        return (
            "flat",
            "neither the marginals nor the joint Fisher alignment vary beyond noise; candidates look alike to the head",
            spreads,
        )
    if act_flat:
        return (
            "activation-dark",
            "activation similarity is flat across candidates (spread "
            f"{spreads['activation']:.3f}); error geometry carries the signal — representation "
            "metrics such as CKA cannot rank these sources",
            spreads,
        )
    if err_flat:
        return (
            "error-dark",
            f"error similarity is flat across candidates (spread {spreads['error']:.3f}); activation geometry decides",
            spreads,
        )
    return (
        "separable",
        "both marginals vary and activation × error picks the same best source as the joint Fisher alignment",
        spreads,
    )


def _row_note(a: Alignment) -> str:
    notes = []
    if _finite(a):  # undefined values get no interpretation, only the reason they are undefined
        if math.isfinite(a.coupling) and abs(a.coupling - 1) > COUPLING_TOL:
            notes.append(f"coupled (ρ={a.coupling:.2f})")
        lead = "error" if a.error < a.activation else "activation"
        notes.append(f"{lead} geometry limits it")
        if all(
            math.isfinite(se) and abs(v - 1) <= 2 * se
            for v, se in ((a.fisher, a.fisher_se), (a.activation, a.activation_se), (a.error, a.error_se))
        ):
            notes.insert(0, "indistinguishable from the target")
    if not a.trusted:
        notes.append("untrusted: " + "; ".join(a.warnings))
    return ", ".join(notes)


def check_rank_by(by: str) -> None:
    """One line (InputError) unless ``by`` names a score a ranking can be ordered by (``RANK_BY``)."""
    if by not in RANK_BY:
        raise InputError(f"rank by {by!r}: choose one of {', '.join(RANK_BY)}")


def rank_sources(
    target: Signature, sources: Mapping[str, Signature], *, target_name: str = "target", by: str = "fisher"
) -> Ranking:
    """Rows sorted by the estimated ``by`` score (:data:`RANK_BY`: the joint Fisher alignment
    by default, or the error-only / activation-only marginal; undefined values last, ties in
    the order given), with a regime diagnosis (the same whatever the order).

    A source that is the target itself (the same object or the same accumulated state, e.g.
    ``rank --target t.sig t.sig``) is never ranked: it is listed in ``Ranking.skipped``.  A
    near-duplicate, whose three values are within 2·se of 1, is ranked with the note
    "indistinguishable from the target".
    """
    if not isinstance(target, Signature):
        raise InputError(f"rank_sources needs a target Signature, got {type(target).__name__}")
    if not sources:
        raise InputError("rank_sources needs at least one source signature")
    check_rank_by(by)
    skipped = {
        name: "the target itself (same signature state)"
        for name, sig in sources.items()
        if isinstance(sig, Signature) and target.same_state(sig)
    }
    if len(skipped) == len(sources):
        raise InputError("every source is the target itself: nothing to rank")
    aligns = {name: alignment(sig, target) for name, sig in sources.items() if name not in skipped}
    rows = [
        RankRow(
            name,
            a.fisher,
            a.activation,
            a.error,
            a.coupling,
            a.fisher_se,
            a.activation_se,
            a.error_se,
            a.coupling_se,
            a.n_source,
            a.trusted,
            _row_note(a),
        )
        for name, a in aligns.items()
    ]
    rows.sort(key=lambda r: (not math.isfinite(v := getattr(r, by)), -v if math.isfinite(v) else 0.0))
    regime, explanation, spreads = diagnose(aligns)
    if skipped:
        explanation += f" ({len(skipped)} source(s) skipped: the target itself)"
    return Ranking(target_name, tuple(rows), regime, explanation, spreads, skipped, by)
