"""The two sentiment judges of ``sentiment-steering``.

1. VADER (Hutto & Gilbert), a rule-based lexicon that ships with the ``vadersentiment``
   package: its compound score in [-1, 1].  Independent of the steered model.  It lives in
   :mod:`updatescope.experiments.sentiment_texts` (``steering-shadow`` uses it too).
2. A trained judge: L2-regularised logistic regression on a text's mean residual stream at
   one layer of the *unsteered* base model, fitted on the labelled polarity sentences.  It
   reads the text afresh, so a steering vector can move it only through the words it makes
   the model write; it shares the base model's representation with CAA, which is why VADER is
   the primary judge.  Its held-out accuracy comes from k-fold cross-validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from updatescope.errors import InputError

__all__ = ["LinearJudge", "fit_logistic", "cross_validate"]


@dataclass(frozen=True)
class LinearJudge:
    """P(positive | x) = sigmoid((x - mean) / std · w + b).  mean, std, w (d,)."""

    mean: np.ndarray
    std: np.ndarray
    w: np.ndarray
    b: float

    def logits(self, x: np.ndarray) -> np.ndarray:
        """(n, d) features -> (n,) logits."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.w.shape[0]:
            raise InputError(f"judge features must be (n, {self.w.shape[0]}), got {tuple(x.shape)}")
        return ((x - self.mean) / self.std) @ self.w + self.b

    def prob(self, x: np.ndarray) -> np.ndarray:
        """(n, d) -> (n,) probability of positive sentiment."""
        return 1.0 / (1.0 + np.exp(-self.logits(x)))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float, iters: int = 50) -> LinearJudge:
    """Minimise mean log-loss + l2/2 |w|² on standardised features by Newton's method (the
    objective is strictly convex, so the minimiser is unique and Newton converges fast).
    x (n, d), y (n,) in {0, 1}."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],) or x.shape[0] < 2:
        raise InputError(f"need features (n, d) and labels (n,) with n >= 2, got {x.shape} and {y.shape}")
    if not set(np.unique(y).tolist()) <= {0.0, 1.0} or len(np.unique(y)) < 2:
        raise InputError("labels must be 0/1 with both classes present")
    mean = x.mean(0)
    std = x.std(0) + 1e-8
    z = np.hstack([(x - mean) / std, np.ones((x.shape[0], 1))])  # last column: the bias
    n, d1 = z.shape
    reg = np.full(d1, l2)
    reg[-1] = 0.0  # the bias is not penalised
    theta = np.zeros(d1)
    # Newton in the dual when d > n would be cheaper; d is the hidden width (hundreds), n a few
    # hundred sentences, so the (d+1)^2 system is small either way
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(z @ theta)))
        grad = z.T @ (p - y) / n + reg * theta
        hess = (z * (p * (1 - p))[:, None]).T @ z / n + np.diag(reg) + 1e-10 * np.eye(d1)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return LinearJudge(mean, std, theta[:-1], float(theta[-1]))


def cross_validate(x: np.ndarray, y: np.ndarray, l2: float, folds: int, seed: int) -> dict[str, object]:
    """k-fold held-out accuracy of :func:`fit_logistic`: each sentence is predicted by a
    judge that never saw it.  Folds are stratified (each class shuffled with ``seed`` and
    dealt round-robin).  -> {"accuracy", "se" (binomial, over sentences), "per_fold", "n"}."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    fold = np.empty(len(y), dtype=int)
    for cls in (0, 1):
        idx = np.flatnonzero(y == cls)
        fold[rng.permutation(idx)] = np.arange(len(idx)) % folds
    correct = np.zeros(len(y), dtype=bool)
    per_fold = []
    for k in range(folds):
        test = fold == k
        judge = fit_logistic(x[~test], y[~test], l2)
        correct[test] = (judge.logits(x[test]) > 0) == (y[test] == 1)
        per_fold.append(float(correct[test].mean()))
    acc = float(correct.mean())
    return {"accuracy": acc, "se": math.sqrt(acc * (1 - acc) / len(y)), "per_fold": per_fold, "n": int(len(y))}
