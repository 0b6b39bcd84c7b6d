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
    # curves on a second y-axis at the right (the learning rate beside a loss): their own scale
    right: list[Curve] = field(default_factory=list)
    right_label: str = ""
    # TensorBoard-style smoothing weight (0 = none): each curve long enough is drawn faint with its
    # exponential moving average on top (:func:`ema`)
    smoothing: float = 0.0
    # a panel drawn under this one on the same steps (a golden chart's relative difference)
    panel: PlotSpec | None = None
    ylabel: str | None = None  # default: the metric

    def filename(self) -> str:
        base = self.stem or self.metric
        return file_name(base) + ".png"


SMOOTHING = 0.6  # TensorBoard's default smoothing weight (its scalar dashboard's slider starts there)
SMOOTH_MIN_POINTS = 30  # a curve with fewer finite points is drawn as it is
EXPLOSION_RATIO = 10.0  # values this many times beyond the pre-failure range are an explosion
EXPLOSION_SHARE = 0.25  # at most this share of the points beyond it: clip to the range, else a log axis


def ema(values: Sequence[float] | np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's scalar smoothing: an exponential moving average debiased at the start (so the
    first values are not pulled towards 0), non-finite values kept as they are and left out of the
    average. W&B's default smoothing is the same formula.
    https://github.com/tensorflow/tensorboard/blob/34877f15153e1a2087316b9952c931807a122aa7/tensorboard/components/vz_line_chart2/line-chart.ts#L699
    https://docs.wandb.ai/guides/app/features/panels/line-plot/smoothing/"""
    v = np.asarray(values, dtype=float)
    out = v.copy()
    last = 0.0
    # Python floats over the finite values' indices: the same arithmetic, a quarter of the time
    for n, i in enumerate(np.flatnonzero(np.isfinite(v)).tolist(), 1):
        last = last * weight + (1.0 - weight) * float(v[i])
        out[i] = last / (1.0 - weight ** n)
    return out


def smoothed(spec: PlotSpec, curve: Curve) -> np.ndarray | None:
    """The curve's smoothed values when the plot smooths and the curve is long enough, else None."""
    if spec.smoothing <= 0 or curve.style == "points":
        return None
    v = np.asarray(curve.values, dtype=float)
    if int(np.isfinite(v).sum()) < SMOOTH_MIN_POINTS:
        return None
    return ema(v, spec.smoothing)


def smoothing_label(weight: float) -> str:
    return f"smoothed (EMA {weight:g})"


@dataclass(frozen=True)
class YAxis:
    """How a plot's y-axis is drawn: its scale, its range (None: fit every value), and, when the
    range is the run before an explosion, the largest value left above it."""

    scale: str = "linear"  # "linear" | "log" | "symlog"
    limits: tuple[float, float] | None = None
    linthresh: float | None = None  # symlog: linear within +-this
    explosion: tuple[int, float] | None = None  # (step, value) of the peak beyond the range


def _finite_points(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray]:
    steps, values = [], []
    for c in curves:
        s = np.asarray(c.steps, dtype=float)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        ok = np.isfinite(v)
        steps.append(s[ok])
        values.append(v[ok])
    if not steps:
        return np.array([]), np.array([])
    return np.concatenate(steps), np.concatenate(values)


def y_axis(spec: PlotSpec) -> YAxis:
    """The y-axis a reader needs to see the run before its failure.

    A value that grows by orders of magnitude after the first bad step (a loss 500x its earlier
    range) would flatten everything before it on a linear axis. When only a short stretch is beyond
    (EXPLOSION_SHARE of the points at most) the axis keeps the range of the run before the failure
    and marks the peak (TensorBoard's "ignore outliers in chart scaling" does the same); when the
    run stays up there, a log axis (symlog when values cross zero) shows both. Otherwise a log
    axis when the builder asks for one, else a linear range (:func:`focus_range`). A plot with a
    tolerance band keeps every value in range."""
    steps, values = _finite_points(spec.curves)
    # a tolerance band sets the scale itself: what leaves it is the finding, not an outlier
    if spec.first_bad_step is not None and values.size and spec.band is None:
        before = steps < spec.first_bad_step
        pre, post = values[before], values[~before]
        if pre.size >= 5 and post.size:
            lo, hi = float(pre.min()), float(pre.max())
            ref = max(abs(lo), abs(hi), hi - lo, 1e-300)
            peak_i = int(np.argmax(np.abs(post)))
            if abs(float(post[peak_i])) > EXPLOSION_RATIO * ref:
                span = (hi - lo) or 0.05 * abs(hi) or 1.0
                limits = (lo - 0.08 * span, hi + 0.35 * span)
                beyond = int(((values > limits[1]) | (values < limits[0])).sum())
                peak = (int(steps[~before][peak_i]), float(post[peak_i]))
                if beyond <= EXPLOSION_SHARE * values.size:
                    return YAxis("linear", limits, explosion=peak)
                if values.min() > 0:
                    return YAxis("log")
                return YAxis("symlog", linthresh=ref)
    if spec.logy and values.size and values.min() > 0:
        return YAxis("log")
    return YAxis("linear", focus_range(spec))


def right_scale(spec: PlotSpec) -> str:
    """"log" when the right-axis curves jump by x10 or more between two points and span two decades
    (an lr multiplied by 1000 at one step: both levels readable), else "linear" (a warm-up ramp
    stays a straight line)."""
    for c in spec.right:
        v = np.asarray(c.values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size > 1 and v.min() > 0 and v.max() / v.min() >= 100:
            ratio = v[1:] / v[:-1]
            if float(np.max(np.maximum(ratio, 1 / ratio))) >= 10:
                return "log"
    return "linear"


def nonfinite_tail(spec: PlotSpec) -> tuple[int, int, int] | None:
    """(first step, last step, number of steps) of the stretch at the end of the run where every
    curve is NaN/Inf; None when the run ends finite."""
    last_finite, first_bad, last = None, None, None
    count: set[int] = set()
    for c in spec.curves:
        s = np.asarray(c.steps, dtype=np.int64)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        if not s.size:
            continue
        ok = np.isfinite(v)
        last = int(s.max()) if last is None else max(last, int(s.max()))
        if ok.any():
            lf = int(s[ok].max())
            last_finite = lf if last_finite is None else max(last_finite, lf)
    if last is None:
        return None
    for c in spec.curves:
        s = np.asarray(c.steps, dtype=np.int64)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        tail = ~np.isfinite(v) & (s > (last_finite if last_finite is not None else s.min() - 1))
        if tail.any():
            count.update(int(x) for x in s[tail])
            first_bad = int(s[tail].min()) if first_bad is None else min(first_bad, int(s[tail].min()))
    if first_bad is None:
        return None
    return first_bad, last, len(count)


def relative_panel(metric: str, steps: Sequence[int] | np.ndarray, actual: Sequence[float] | np.ndarray,
                   golden: Sequence[float] | np.ndarray, rtol: float, atol: float = 0.0,
                   first_bad_step: int | None = None, *, actual_name: str = "actual",
                   reference: str = "golden") -> PlotSpec:
    """The relative difference actual/golden - 1 per step (candidate/baseline - 1 for two runs) with
    the gate's tolerance drawn as a band
    (|actual - golden| <= atol + rtol * |golden|, i.e. within +-(rtol + atol/|golden|)): a 6 %
    shift that is a hair on an absolute axis is a line outside a +-5 % band here. Steps where
    either value is not finite, or golden is 0, are left out."""
    s = np.asarray(steps, dtype=np.int64)
    a = np.asarray(actual, dtype=float)
    g = np.asarray(golden, dtype=float)
    n = min(s.size, a.size, g.size)
    s, a, g = s[:n], a[:n], g[:n]
    ok = np.isfinite(a) & np.isfinite(g) & (g != 0)
    s, a, g = s[ok], a[ok], g[ok]
    tol = rtol + atol / np.abs(g)
    return PlotSpec(metric=metric, title=f"{metric}: relative difference to {reference}", xlabel="step",
                    curves=[Curve(f"{actual_name} / {reference} - 1", s, a / g - 1.0)], first_bad_step=first_bad_step,
                    band=Band(f"tolerance ±{rtol:.3g}" + (f" (+ atol {atol:.3g})" if atol else ""), s, -tol, tol),
                    ylabel="relative difference")


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
