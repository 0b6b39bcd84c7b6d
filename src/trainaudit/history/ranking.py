"""The commit ranking: a conditional-logit model fitted on labelled golden-value failures.

Each commit of a range is described by a few numbers in [0, 1] (:data:`FEATURES`, computed by
:mod:`trainaudit.history.classify`: what it touched relative to the failing test, how far it is
from the bad revision, whether it moved the environment in the bad commit itself...). Its score is
``w_shared . x + w_group . x``, where ``group`` is the kind of explanation the failure points to
(:data:`GROUP_OF`): exact-only differences, a training change beyond the tolerances, a wall-clock
change, a fault of the gate or golden, anything else. The probability that a commit is the culprit is the softmax of the scores over the commits
of the range (McFadden's conditional logit, a listwise learning-to-rank model), so the first
commit's probability against the second's says how sure the ranking is.

The weights are plain data (``ranking.json`` beside this module), fitted by :func:`fit` (Newton's
method on the L2-penalised log-likelihood: deterministic, numpy only) from the labelled cases of
``tests/corpus/megatron`` by ``tools/fit_ranking.py``; the file records how.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

# the components of a commit's evidence (trainaudit.history.classify.Evidence.parts) and the
# features derived from its place in the range
PARTS: tuple[str, ...] = ("golden", "own_golden", "regen", "own_config", "recipe", "comparator", "launcher", "env",
                          "ci", "code", "named")
EXTRAS: tuple[str, ...] = ("fits", "recency", "env_in_bad", "env_other_track", "reverted", "regen_with_change")
FEATURES: tuple[str, ...] = PARTS + EXTRAS
GROUPS: tuple[str, ...] = ("drift", "training", "wall_clock", "gate", "other")
# explanation (trainaudit.compare.verdict.Cause.explanation) -> group
GROUP_OF: dict[str | None, str] = {"drift": "drift", "training": "training", "memory": "training",
                                   "reported_metric": "drift", "wall_clock": "wall_clock", "golden": "gate",
                                   "stale_golden": "gate", "test_redefined": "gate", "crash": "other",
                                   "infra": "other", None: "other"}
MODEL_FILE = Path(__file__).with_name("ranking.json")


def group_of(explanation: str | None) -> str:
    return GROUP_OF.get(explanation, "other")


def design(x: dict[str, float], group: str) -> np.ndarray:
    """The model's input row: the features once shared, once for their group (zeros elsewhere)."""
    base = np.array([float(x.get(f, 0.0)) for f in FEATURES])
    row = np.zeros(len(FEATURES) * (1 + len(GROUPS)))
    row[:len(FEATURES)] = base
    g = GROUPS.index(group) if group in GROUPS else GROUPS.index("other")
    start = len(FEATURES) * (1 + g)
    row[start:start + len(FEATURES)] = base
    return row


@dataclass(frozen=True)
class Model:
    weights: np.ndarray  # len(FEATURES) * (1 + len(GROUPS))
    meta: dict[str, object] = field(default_factory=dict)

    def contributions(self, x: dict[str, float], group: str) -> dict[str, float]:
        """Each feature's share of the score (shared and group weight together)."""
        n = len(FEATURES)
        g = GROUPS.index(group) if group in GROUPS else GROUPS.index("other")
        return {f: float(x.get(f, 0.0)) * float(self.weights[i] + self.weights[n * (1 + g) + i])
                for i, f in enumerate(FEATURES)}

    def scores(self, xs: list[dict[str, float]], group: str) -> np.ndarray:
        if not xs:
            return np.zeros(0)
        return np.stack([design(x, group) for x in xs]) @ self.weights

    def to_json(self) -> dict[str, object]:
        n = len(FEATURES)
        w = {"shared": {f: round(float(self.weights[i]), 6) for i, f in enumerate(FEATURES)}}
        for g_i, g in enumerate(GROUPS):
            w[g] = {f: round(float(self.weights[n * (1 + g_i) + i]), 6) for i, f in enumerate(FEATURES)}
        return {"model": "conditional logit over the commits of a range", "features": list(FEATURES),
                "groups": {g: sorted(k for k, v in GROUP_OF.items() if v == g and k) for g in GROUPS},
                "weights": w, "fitted": self.meta}

    @staticmethod
    def from_json(data: dict[str, object]) -> Model:
        n = len(FEATURES)
        w = np.zeros(n * (1 + len(GROUPS)))
        weights = data.get("weights")
        if isinstance(weights, dict):
            for block, name in enumerate(("shared", *GROUPS)):
                vals = weights.get(name) or {}
                for i, f in enumerate(FEATURES):
                    w[n * block + i] = float(vals.get(f, 0.0))
        meta = data.get("fitted")
        return Model(w, dict(meta) if isinstance(meta, dict) else {})


@lru_cache(maxsize=1)
def packaged() -> Model:
    """The model shipped with the package."""
    return Model.from_json(json.loads(MODEL_FILE.read_text(encoding="utf-8")))


def softmax(s: np.ndarray) -> np.ndarray:
    if s.size == 0:
        return s
    e = np.exp(s - s.max())
    return e / e.sum()


@dataclass
class Sample:
    """One labelled failure: its commits' features, its group, and the culprit's index."""

    xs: list[dict[str, float]]
    group: str
    culprit: int
    key: str = ""  # a case id, for grouping


def fit(samples: list[Sample], l2: float = 1.0, iterations: int = 100) -> np.ndarray:
    """Weights maximising sum(log softmax(X w)[culprit]) - l2/2 |w|^2, by Newton's method with a
    halving line search (the objective is concave and the penalty makes it strictly so: the answer
    is unique and the same on every machine up to rounding)."""
    dim = len(FEATURES) * (1 + len(GROUPS))
    mats = [(np.stack([design(x, s.group) for x in s.xs]), s.culprit) for s in samples if s.xs]

    def objective(w: np.ndarray) -> float:
        total = -0.5 * l2 * float(w @ w)
        for x, y in mats:
            sc = x @ w
            top = float(sc.max())
            total += float(sc[y]) - top - math.log(float(np.exp(sc - top).sum()))
        return total

    w = np.zeros(dim)
    value = objective(w)
    for _ in range(iterations):
        grad = -l2 * w
        hess = -l2 * np.eye(dim)
        for x, y in mats:
            p = softmax(x @ w)
            mean = p @ x
            grad += x[y] - mean
            hess -= (x * p[:, None]).T @ x - np.outer(mean, mean)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-6:
            trial = w - t * step
            new = objective(trial)
            if new >= value:
                break
            t /= 2
        else:
            break
        gain, w, value = new - value, trial, new
        if gain < 1e-10:
            break
    return w


def log_likelihood(w: np.ndarray, samples: list[Sample]) -> float:
    total = 0.0
    for s in samples:
        if not s.xs:
            continue
        sc = np.stack([design(x, s.group) for x in s.xs]) @ w
        total += float(sc[s.culprit] - (sc.max() + math.log(float(np.exp(sc - sc.max()).sum()))))
    return total
