"""Rank candidate sources for a target by estimated Fisher alignment, and say why.

Regime diagnosis (across the candidate set, not per pair):
- ``activation-dark``: activation similarity Scov(M_a) is flat across candidates (its
  spread is within noise or < FLAT_SPREAD) while error similarity Scov(Γ_e) varies — the
  representations cannot tell the sources apart; the error geometry carries the signal
  (the paper's Thm 3.2 setting: identical activations, different label sets).
- ``error-dark``: the converse — the sources share error geometry, activations decide.
- ``coupled``: the product of the marginals, Scov(M_a)·Scov(Γ_e), would pick a different
  best source than A_F: activations and errors are dependent (ρ ≠ 1) enough to change the
  decision, so only the joint score ranks correctly.
- ``separable``: both marginals vary and A_F ≈ Scov(M_a)·Scov(Γ_e).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Ranking:
    target: str
    rows: tuple[RankRow, ...]
    regime: str
    explanation: str
    spreads: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "regime": self.regime, "explanation": self.explanation,
                "spreads": self.spreads, "rows": [r.as_dict() for r in self.rows]}


def _spread(values: list[float]) -> float:
    v = [x for x in values if math.isfinite(x)]
    return max(v) - min(v) if len(v) >= 2 else float("nan")


def _is_flat(values: list[float], ses: list[float]) -> bool:
    spread = _spread(values)
    if not math.isfinite(spread):
        return False
    noise = 2.0 * max((s for s in ses if math.isfinite(s)), default=0.0)
    return spread < max(FLAT_SPREAD, noise)


def diagnose(aligns: Mapping[str, Alignment]) -> tuple[str, str, dict[str, float]]:
    """(regime, explanation, spreads) for a set of source alignments to one target."""
    acts = [a.activation for a in aligns.values()]
    errs = [a.error for a in aligns.values()]
    spreads = {"activation": _spread(acts), "error": _spread(errs),
               "fisher": _spread([a.fisher for a in aligns.values()])}
    if len(aligns) < 2:
        return "single", "only one candidate: nothing to compare", spreads
    act_flat = _is_flat(acts, [a.activation_se for a in aligns.values()])
    err_flat = _is_flat(errs, [a.error_se for a in aligns.values()])
    fin = {n: a for n, a in aligns.items() if math.isfinite(a.fisher)}
    prod = {n: a.activation * a.error for n, a in fin.items() if math.isfinite(a.activation * a.error)}
    coupled = bool(fin) and bool(prod) and max(fin, key=lambda n: fin[n].fisher) != max(prod, key=prod.get)
    if act_flat and not err_flat:
        return ("activation-dark",
                "activation similarity is flat across candidates (spread "
                f"{spreads['activation']:.3f}); error geometry carries the signal — representation "
                "metrics such as CKA cannot rank these sources", spreads)
    if err_flat and not act_flat:
        return ("error-dark", "error similarity is flat across candidates (spread "
                f"{spreads['error']:.3f}); activation geometry decides", spreads)
    if act_flat and err_flat:
        return ("flat", "neither marginal varies beyond noise; candidates look alike to the head", spreads)
    if coupled:
        return ("coupled", "activation × error would pick a different best source than the joint "
                "Fisher alignment: activations and errors are dependent, only the joint score ranks "
                "correctly", spreads)
    return ("separable", "both marginals vary and fisher ≈ activation × error", spreads)


def _row_note(a: Alignment) -> str:
    notes = []
    if math.isfinite(a.coupling) and abs(a.coupling - 1) > COUPLING_TOL:
        notes.append(f"coupled (ρ={a.coupling:.2f})")
    if math.isfinite(a.activation) and math.isfinite(a.error):
        lead = "error" if a.error < a.activation else "activation"
        notes.append(f"{lead} geometry limits it")
    if not a.trusted:
        notes.append("untrusted: " + "; ".join(a.warnings))
    return ", ".join(notes)


def rank_sources(target: Signature, sources: Mapping[str, Signature], *, target_name: str = "target"
                 ) -> Ranking:
    """Rows sorted by estimated fisher (undefined values last), with a regime diagnosis."""
    if not sources:
        raise InputError("rank_sources needs at least one source signature")
    aligns = {name: alignment(sig, target) for name, sig in sources.items()}
    rows = [RankRow(name, a.fisher, a.activation, a.error, a.coupling, a.fisher_se, a.activation_se,
                    a.error_se, a.coupling_se, a.n_source, a.trusted, _row_note(a))
            for name, a in aligns.items()]
    rows.sort(key=lambda r: (not math.isfinite(r.fisher), -r.fisher if math.isfinite(r.fisher) else 0.0))
    regime, explanation, spreads = diagnose(aligns)
    return Ranking(target_name, tuple(rows), regime, explanation, spreads)
