"""The fitted decision: a conditional logit over the categories of a run.

Each category ``c`` of a run gets a score ``w . x[c]`` (``x`` from
:func:`trainaudit.diagnosis.features.matrix`); the probabilities are the softmax of the scores.
One weight per named feature, shared by every category, so the model is small (a few dozen
numbers) and each weight can be read: "a story of the rules with high confidence", "a short log",
"no training loss at all". It is fitted by Newton's method on the L2-penalised log-likelihood
(convex, so the fit is unique and does not depend on a starting point or a random seed), and
shipped as plain JSON data (``model.json``) that numpy evaluates.

The multinomial logit is the textbook one (McFadden's conditional logit; Newton / IRLS as in
Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, section 4.4.1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from trainaudit.diagnosis.features import CLASSES, FEATURES

MODEL_FILE = "model.json"


@dataclass(frozen=True)
class Model:
    features: tuple[str, ...]
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def scores(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x @ self.weights, dtype=np.float64)

    def probabilities(self, x: np.ndarray) -> np.ndarray:
        s = self.scores(x)
        e = np.exp(s - s.max())
        return np.asarray(e / e.sum())

    def reasons(self, x: np.ndarray, chosen: int, other: int, top: int = 3) -> list[tuple[str, float]]:
        """The features that moved the score of ``chosen`` above ``other`` most: (name, log-odds)."""
        contrib = self.weights * (x[chosen] - x[other])
        order = np.argsort(-contrib, kind="stable")
        return [(self.features[i], float(contrib[i])) for i in order[:top] if contrib[i] > 0.05]

    def to_json(self) -> str:
        return json.dumps({"features": list(self.features),
                           "weights": {f: round(float(w), 6) for f, w in zip(self.features, self.weights)},
                           "fitted": self.info}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Model:
        data = json.loads(text)
        w = data["weights"]
        # a feature the shipped weights do not know weighs nothing (an older model file)
        return cls(FEATURES, np.array([float(w.get(f, 0.0)) for f in FEATURES]), data.get("fitted", {}))


@cache
def shipped() -> Model:
    text = resources.files("trainaudit.diagnosis").joinpath(MODEL_FILE).read_text(encoding="utf-8")
    return Model.from_json(text)


def fit(xs: list[np.ndarray], ys: list[int], *, l2: float = 1.0, weights: list[float] | None = None,
        max_iter: int = 100) -> np.ndarray:
    """Weights maximising sum_i a_i log p(ys[i] | xs[i]) - l2/2 |w|^2, by Newton's method with
    step halving (the objective is strictly concave: one maximum, found from any start).

    ``xs[i]``: (len(CLASSES), len(FEATURES)); ``ys[i]``: the index of the right category;
    ``weights``: a_i (1 each by default)."""
    n_f = len(FEATURES)
    sw = weights or [1.0] * len(xs)

    def objective(w: np.ndarray) -> float:
        total = -0.5 * l2 * float(w @ w)
        for x, y, a in zip(xs, ys, sw):
            s = x @ w
            total += a * float(s[y] - s.max() - np.log(np.exp(s - s.max()).sum()))
        return total

    w = np.zeros(n_f)
    current = objective(w)
    for _ in range(max_iter):
        grad = -l2 * w
        hess = -l2 * np.eye(n_f)
        for x, y, a in zip(xs, ys, sw):
            s = x @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            mean = p @ x
            grad += a * (x[y] - mean)
            xc = x - mean
            hess -= a * (xc.T * p) @ xc
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-6:
            new = w - t * step
            value = objective(new)
            if value >= current:
                break
            t /= 2
        w, current = new, value
        if float(np.max(np.abs(t * step))) < 1e-8:
            break
    return w


def class_index(category: str) -> int:
    return CLASSES.index(category)
