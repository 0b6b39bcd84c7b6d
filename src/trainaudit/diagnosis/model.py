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

from trainaudit.diagnosis.features import CONFIDENCE_FEATURES, FEATURES

MODEL_FILE = "model.json"


@dataclass(frozen=True)
class Model:
    """``weights``: one per feature of :data:`FEATURES` (which category); ``confidence``: one per
    feature of :data:`CONFIDENCE_FEATURES` (how likely the chosen category is right: a logistic
    model fitted on decisions the category model made on cases it was not fitted on)."""

    features: tuple[str, ...]
    weights: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    confidence: np.ndarray | None = None

    def sureness(self, z: np.ndarray, p_best: float) -> float:
        """P(the chosen category is right) from the decision's features ``z``; the category's own
        probability when no confidence model was fitted."""
        if self.confidence is None:
            return p_best
        return float(1.0 / (1.0 + np.exp(-float(z @ self.confidence))))

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
        data: dict[str, Any] = {"features": list(self.features),
                                "weights": {f: round(float(w), 6) for f, w in zip(self.features, self.weights)}}
        if self.confidence is not None:
            data["confidence_weights"] = {f: round(float(w), 6) for f, w in zip(CONFIDENCE_FEATURES, self.confidence)}
        data["fitted"] = self.info
        return json.dumps(data, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Model:
        data = json.loads(text)
        w = data["weights"]
        # a feature the shipped weights do not know weighs nothing (an older model file)
        c = data.get("confidence_weights")
        return cls(FEATURES, np.array([float(w.get(f, 0.0)) for f in FEATURES]), data.get("fitted", {}),
                   None if c is None else np.array([float(c.get(f, 0.0)) for f in CONFIDENCE_FEATURES]))


@cache
def shipped() -> Model:
    text = resources.files("trainaudit.diagnosis").joinpath(MODEL_FILE).read_text(encoding="utf-8")
    return Model.from_json(text)


def fit(xs: list[np.ndarray], ys: list[int], *, l2: float = 1.0, weights: list[float] | None = None,
        max_iter: int = 100) -> np.ndarray:
    """Weights maximising sum_i a_i log p(ys[i] | xs[i]) - l2/2 |w|^2, by Newton's method with
    step halving (the objective is strictly concave: one maximum, found from any start).

    ``xs[i]``: (categories, features), the same shape for every i; ``ys[i]``: the index of the right
    category; ``weights``: a_i (1 each by default)."""
    x = np.stack(xs)  # (n, k, f)
    y = np.asarray(ys)
    a = np.asarray(weights if weights is not None else [1.0] * len(xs), dtype=np.float64)
    n, _, n_f = x.shape
    rows = np.arange(n)
    x_y = x[rows, y]  # (n, f)

    def objective(w: np.ndarray) -> float:
        s = x @ w
        m = s.max(axis=1)
        return float(a @ (s[rows, y] - m - np.log(np.exp(s - m[:, None]).sum(axis=1)))) - 0.5 * l2 * float(w @ w)

    w = np.zeros(n_f)
    current = objective(w)
    for _ in range(max_iter):
        s = x @ w
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        mean = np.einsum("nk,nkf->nf", p, x)
        grad = a @ (x_y - mean) - l2 * w
        # sum_n a_n (sum_k p_nk x_nk x_nk^T - mean_n mean_n^T), as two matrix products
        xs_ = (x * np.sqrt(a[:, None] * p)[:, :, None]).reshape(-1, n_f)
        ms = mean * np.sqrt(a)[:, None]
        hess = -(xs_.T @ xs_ - ms.T @ ms) - l2 * np.eye(n_f)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while True:
            new = w - t * step
            value = objective(new)
            if value >= current or t < 1e-6:
                break
            t /= 2
        w, current = new, max(value, current)
        if float(np.max(np.abs(t * step))) < 1e-8:
            break
    return w


def fit_binary(zs: list[np.ndarray], right: list[bool], *, l2: float = 1.0) -> np.ndarray:
    """L2-penalised logistic regression of ``right`` on ``zs`` (a two-way :func:`fit`: the second
    row of each case is all zeros)."""
    xs = [np.stack([z, np.zeros_like(z)]) for z in zs]
    return fit(xs, [0 if r else 1 for r in right], l2=l2)
