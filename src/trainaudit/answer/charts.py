"""What a report plots, as data: curves, a tolerance band, the first bad step and markers.

Stages that build an answer (diagnosis, compare, audit) describe their plots with these; the
rendering layer draws them (PNG, the HTML report's charts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from trainaudit.redact import file_name


@dataclass
class Curve:
    label: str
    steps: Sequence[int] | np.ndarray
    values: Sequence[float] | np.ndarray
    style: str = "line"  # "line" | "dashed" | "points"


@dataclass
class Band:
    """A tolerance band (e.g. golden * (1 +- rtol))."""

    label: str
    steps: Sequence[int] | np.ndarray
    low: Sequence[float] | np.ndarray
    high: Sequence[float] | np.ndarray


@dataclass
class PlotSpec:
    metric: str
    title: str
    curves: list[Curve]
    first_bad_step: int | None = None
    markers: list[tuple[int, str]] = field(default_factory=list)  # (step, label), e.g. restarts, lr jump
    band: Band | None = None
    logy: bool = False
    stem: str | None = None
    xlabel: str = "step"
    window: tuple[int, int] | None = None  # the steps a gate compares (e.g. iteration-time's median window)

    def filename(self) -> str:
        base = self.stem or self.metric
        return file_name(base) + ".png"


_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")  # characters not kept in a file name
SPIKE_MADS = 6.0  # a point this many robust deviations from its neighbours' median is a spike
WARMUP_SHARE = 0.1  # the first 10 % of the steps: where warm-up spikes (compilation, caches) sit


def _spikes(values: np.ndarray) -> np.ndarray:
    """Isolated points far from the median of their 4 nearest neighbours (robust: MAD of the
    residuals); mirrored at the ends, so the first point is judged by the ones after it."""
    n = values.size
    if n < 5:
        return np.zeros(n, dtype=bool)
    padded = np.pad(values, 2, mode="reflect")
    local = np.median(np.lib.stride_tricks.sliding_window_view(padded, 5)[:, [0, 1, 3, 4]], axis=1)
    resid = values - local
    mad = float(np.median(np.abs(resid - np.median(resid)))) * 1.4826
    scale = max(mad, 1e-3 * float(np.median(np.abs(values))), 1e-300)
    return np.abs(resid) > SPIKE_MADS * scale


def focus_range(spec: PlotSpec) -> tuple[float, float] | None:
    """The y range a reader needs, or None when every value fits anyway.

    Spikes outside what the plot is about do not set the scale: outside the gated window when
    there is one, else in the warm-up (the first 10 % of the steps) and never from the first bad
    step on. A 9 s warm-up step would otherwise flatten a +14.5 % slowdown in the window into a
    line. Points left out are drawn on the edge as off-scale markers (:func:`off_scale`).
    Linear axes only: a log axis already shows several decades."""
    if spec.logy:
        return None
    kept: list[np.ndarray] = []
    clipped_steps: set[int] = set()
    for c in spec.curves:
        s = np.asarray(c.steps, dtype=np.int64)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        ok = np.isfinite(v)
        s, v = s[ok], v[ok]
        if not v.size:
            continue
        lo_step, hi_step = int(s.min()), int(s.max())
        if spec.window is not None:
            outside = (s < spec.window[0]) | (s > spec.window[1])
        else:
            outside = s < lo_step + WARMUP_SHARE * (hi_step - lo_step)
            if spec.first_bad_step is not None:
                outside &= s < spec.first_bad_step
        clip = _spikes(v) & outside
        clipped_steps.update(int(x) for x in s[clip])
        kept.append(v[~clip])
    if not clipped_steps or not kept:
        return None
    if spec.band is not None:
        bs = np.asarray(spec.band.steps, dtype=np.int64)
        keep = ~np.isin(bs, list(clipped_steps))
        for edge in (spec.band.low, spec.band.high):
            e = np.asarray(edge, dtype=float)[: bs.size][keep[: len(edge)]]
            kept.append(e[np.isfinite(e)])
    values = np.concatenate(kept)
    if not values.size:
        return None
    lo, hi = float(values.min()), float(values.max())
    pad = 0.08 * (hi - lo) or 0.05 * abs(hi) or 1.0
    return lo - pad, hi + pad


def off_scale(steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
              y: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Steps of the finite values above and below the range ``y``."""
    s = np.asarray(steps, dtype=np.int64)
    v = np.asarray(values, dtype=float)[: s.size]
    s = s[: v.size]
    with np.errstate(invalid="ignore"):
        return s[np.isfinite(v) & (v > y[1])], s[np.isfinite(v) & (v < y[0])]
