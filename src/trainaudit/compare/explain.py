"""The shape of a deviation between two aligned curves: sign, first differing step, systematic
shift from step k, drift growing over steps, isolated outliers.

Works on relative errors ``d = (a - g) / |g|`` of the steps where both values are finite; steps
with a missing/"nan" value are reported separately (they are not a deviation, they are a gap).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# Relative differences at or below this sit in the 4th-5th significant digit (bf16/kernel drift);
# the update-golden-values triage treats |avg_rel_diff| <~ 1e-4 as noise and >= ~1e-3 as a change.
DRIFT_REL = 1e-3


@dataclass(slots=True)
class Deviation:
    pattern: str  # identical | drift | systematic_shift | drift_growing | isolated_outliers | mixed | gaps
    sign: str  # none | positive | negative | mixed
    n_compared: int
    n_different: int
    first_diff_step: int | None = None
    shift_from_step: int | None = None
    max_rel_err: float | None = None
    median_rel_err: float | None = None
    mean_signed_rel_err: float | None = None
    outlier_steps: list[int] = field(default_factory=list)
    gap_steps: list[int] = field(default_factory=list)
    trend_slope_per_100_steps: float | None = None
    frac_steps_changed: float = 0.0
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["outlier_steps"] = self.outlier_steps[:20]
        out["gap_steps"] = self.gap_steps[:20]
        return out


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _g(x: float | None) -> str:
    """A relative error for a summary; one over a golden value of 0 is infinite and is kept out
    of the numeric fields (None), so it is written out here instead of formatted."""
    return "inf (golden value 0)" if x is None else f"{x:.3g}"


def describe(steps: list[int], golden: list[float], actual: list[float], tol: float = DRIFT_REL) -> Deviation:
    s = np.asarray(steps, dtype=np.int64)
    g = np.asarray(golden, dtype=float)
    a = np.asarray(actual, dtype=float)
    both = np.isfinite(g) & np.isfinite(a)
    gaps = [int(x) for x in s[~both & ~(np.isinf(g) & np.isinf(a))]]
    s, g, a = s[both], g[both], a[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(a == g, 0.0, (a - g) / np.abs(g))
    diff = d != 0
    dev = Deviation("identical", "none", int(s.size), int(diff.sum()), gap_steps=gaps)
    if s.size == 0:
        dev.pattern = "gaps" if gaps else "identical"
        dev.summary = "no step has a finite value on both sides" if gaps else "nothing to compare"
        return dev
    absd = np.abs(d)
    dev.frac_steps_changed = float(diff.mean())
    if diff.any():
        dev.first_diff_step = int(s[np.argmax(diff)])
        dev.max_rel_err = _finite(float(absd.max()))
        dev.median_rel_err = _finite(float(np.median(absd)))
        dev.mean_signed_rel_err = _finite(float(d[np.isfinite(d)].mean())) if np.isfinite(d).any() else None
        pos, neg = int((d > 0).sum()), int((d < 0).sum())
        dev.sign = "positive" if neg == 0 or pos >= 0.9 * (pos + neg) else \
            "negative" if pos == 0 or neg >= 0.9 * (pos + neg) else "mixed"
    else:
        dev.summary = "identical on every compared step"
        if gaps:
            dev.pattern, dev.summary = "gaps", f"identical where both have values; missing at steps {gaps[:10]}"
        return dev
    # Isolated outliers: few steps that differ clearly more than the rest.
    typical = float(np.median(absd))
    big = absd > max(10 * typical, tol)
    n_big = int(big.sum())
    if 0 < n_big <= max(3, int(0.05 * s.size)):
        dev.outlier_steps = [int(x) for x in s[big]]
    # Systematic shift: from some step on, (nearly) every step differs with one sign.
    first = int(np.argmax(diff))
    tail = d[first:]
    if tail.size >= 3:
        same = max((tail > 0).mean(), (tail < 0).mean())
        if (tail != 0).mean() >= 0.9 and same >= 0.9:
            dev.shift_from_step = int(s[first])
    # Trend of |d| over steps (robust enough: least squares on the tail).
    if tail.size >= 5 and np.isfinite(absd[first:]).all():
        slope = float(np.polyfit(s[first:].astype(float), absd[first:], 1)[0])
        dev.trend_slope_per_100_steps = slope * 100
    growing = (dev.trend_slope_per_100_steps is not None and tail.size >= 8
               and float(np.median(absd[-max(2, tail.size // 4):])) > 2 * float(np.median(absd[first:first + max(2, tail.size // 4)])) + 1e-12
               and dev.trend_slope_per_100_steps > 0)
    maxrel = dev.max_rel_err if dev.max_rel_err is not None else math.inf
    if dev.outlier_steps and dev.n_different <= len(dev.outlier_steps):
        dev.pattern = "isolated_outliers"
        dev.summary = f"{len(dev.outlier_steps)} isolated step(s) differ ({dev.outlier_steps[:5]}); all others identical"
    elif maxrel <= tol:
        dev.pattern = "drift"
        dev.summary = (f"{dev.n_different}/{dev.n_compared} steps differ, all by <= {maxrel:.2g} relative "
                       f"(4th-5th significant digit), sign {dev.sign}")
    elif growing:
        dev.pattern = "drift_growing"
        dev.summary = (f"deviation grows over steps from step {dev.first_diff_step} "
                       f"(|rel err| slope {dev.trend_slope_per_100_steps:.2g} per 100 steps, max {_g(dev.max_rel_err)})")
    elif dev.shift_from_step is not None:
        dev.pattern = "systematic_shift"
        dev.summary = (f"systematic {dev.sign} shift from step {dev.shift_from_step} "
                       f"(median {_g(dev.median_rel_err)}, max {_g(dev.max_rel_err)} relative)")
    else:
        dev.pattern = "mixed"
        dev.summary = (f"{dev.n_different}/{dev.n_compared} steps differ from step {dev.first_diff_step}, "
                       f"sign {dev.sign}, median {_g(dev.median_rel_err)}, max {_g(dev.max_rel_err)} relative")
    if gaps:
        dev.summary += f"; missing at steps {gaps[:10]}"
    return dev
