"""PNG plots for a report: one per metric with a finding, the first bad step marked, the gated
window shaded, the golden band filled.

What each plot does so that the cause stays visible (the same choices the HTML report's charts make,
from the same functions of :mod:`trainaudit.answer.charts`):

- a run that turns NaN/Inf to its end shows that stretch as a shaded red band with a label; the
  x-axis ends shortly after it starts, so most of its width is the run before the failure;
  scattered non-finite points are red markers on the top edge (never a silent gap);
- a value that explodes after the first bad step does not flatten what came before
  (:func:`~trainaudit.answer.charts.y_axis`: the pre-failure range with the peak marked, or a log /
  symlog axis when the run stays up there); spikes in the warm-up do not set the scale either;
- the learning rate, when logged, is drawn on a second y-axis at the right; train and validation
  loss share one axis; long curves are drawn faint with their TensorBoard-style smoothed line on top;
- a golden chart has a second panel under it: the relative difference with the tolerance band.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import replace
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from trainaudit.answer.charts import (PlotSpec, YAxis, nonfinite_tail, off_scale, right_scale, smoothed,
                                      smoothing_label, y_axis)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOTS_EXTRA = "plots"  # the extra that installs matplotlib (pyproject.toml)


def png_available() -> bool:
    """matplotlib is an extra (about 100 MB with its dependencies, docs/benchmarks.md): without it a
    report has no PNGs."""
    return importlib.util.find_spec("matplotlib") is not None


# Finite values beyond this are drawn at it: matplotlib's axis transform inverts a matrix built
# from the data span, which is infinite (singular) for a curve holding both 1e308 and -1e308.
DRAWABLE = 1e300
# Names come from input: '$' must not start matplotlib's mathtext, whose parser raises on text
# such as 'loss$^{x$' (https://matplotlib.org/stable/users/explain/text/mathtext.html).
RC: dict[Any, Any] = {"text.parse_math": False, "text.usetex": False}
NAN_TAIL_SHARE = 0.2  # the share of the x-axis a non-finite tail gets at most
MARKER_GROUP_SHARE = 0.03  # rule markers closer than this share of the x-axis share one label
RAW_ALPHA = 0.3  # a smoothed curve's raw values, drawn faint under it (TensorBoard draws them so)


def _drawable(values: Sequence[float] | np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.where(np.isfinite(v), np.clip(v, -DRAWABLE, DRAWABLE), v)


def drawable(spec: PlotSpec) -> PlotSpec:
    """``spec`` with every finite value within what matplotlib can draw (non-finite ones kept, for
    the NaN/Inf markers)."""
    band = spec.band and replace(spec.band, low=_drawable(spec.band.low), high=_drawable(spec.band.high))
    return replace(spec, curves=[replace(c, values=_drawable(c.values)) for c in spec.curves], band=band,
                   right=[replace(c, values=_drawable(c.values)) for c in spec.right],
                   panel=drawable(spec.panel) if spec.panel is not None else None)


def tick(v: float, _pos: object = None) -> str:
    """A tick label as plain text ("1e18", "0.25"): matplotlib's log formatter writes mathtext,
    which shows as "$\\mathdefault{10^{18}}$" once mathtext is off (it must be, see ``RC``)."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        m, e = f"{v:.2e}".split("e")
        return f"{m.rstrip('0').rstrip('.')}e{int(e)}"
    return f"{v:.5g}"


def render(spec: PlotSpec, dest: IO[bytes]) -> None:
    import matplotlib.pyplot as plt

    fig = figure(spec)
    try:
        with plt.rc_context(RC):
            # Lay out once, then draw once: with a layout engine set, savefig draws the figure a
            # first time (rendering disabled) only to run the layout, which doubles its cost.
            engine = fig.get_layout_engine()
            if engine is not None:
                engine.execute(fig)
                fig.set_layout_engine(None)  # None (not "none", a placeholder that still counts as an engine)
            fig.savefig(dest, format="png")
    finally:
        plt.close(fig)


def figure(spec: PlotSpec) -> Figure:
    """The plot as a matplotlib Figure (the caller closes it): the main axes first, then the
    learning-rate axes when there is one, then the panel under it."""
    spec = drawable(spec)
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    with plt.rc_context(RC):
        if spec.panel is not None:
            fig, (ax, low) = plt.subplots(2, 1, figsize=(9.5, 5.6), dpi=100, sharex=True, layout="constrained",
                                          gridspec_kw={"height_ratios": [3, 2]})
        else:
            fig, ax = plt.subplots(figsize=(9.5, 3.6), dpi=100, layout="constrained")
            low = None
        try:
            _draw(fig, ax, spec)
            if low is not None and spec.panel is not None:
                _draw(fig, low, spec.panel, narrow=False)
                ax.set_xlabel("")  # the panel under it shares the x-axis and names it
                low.axhline(0.0, color="black", linewidth=0.6)
        except BaseException:
            plt.close(fig)
            raise
    return fig


def _draw(fig: Figure, ax: Any, spec: PlotSpec, narrow: bool = True) -> None:
    """``narrow``: the main plot (the panel under it shares its x-axis, and labels its first bad
    step at the bottom, away from a relative difference that leaves the band upwards)."""
    if spec.window is not None:
        ax.axvspan(spec.window[0], spec.window[1], color="gold", alpha=0.18, linewidth=0,
                   label=f"gated window {spec.window[0]}-{spec.window[1]}")
    if spec.band is not None:
        b = spec.band
        ax.fill_between(np.asarray(b.steps), np.asarray(b.low, float), np.asarray(b.high, float),
                        color="tab:green", alpha=0.18, label=b.label, linewidth=0)
    for i, c in enumerate(spec.curves):
        s = np.asarray(c.steps)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        ok = np.isfinite(v)
        color = f"C{i}"
        smooth = smoothed(spec, c)
        if c.style == "points":
            ax.plot(s[ok], v[ok], ".", color=color, label=c.label, markersize=3)
        elif smooth is not None:
            ax.plot(s[ok], v[ok], "-", color=color, alpha=RAW_ALPHA, linewidth=1.0, label=f"{c.label} (raw)")
            ax.plot(s[ok], smooth[ok], "--" if c.style == "dashed" else "-", color=color, linewidth=1.6,
                    label=f"{c.label}, {smoothing_label(spec.smoothing)}")
        else:
            ax.plot(s[ok], v[ok], "--" if c.style == "dashed" else "-", color=color, label=c.label, linewidth=1.2)
        bad = ~ok
        if bad.any():
            # x in data units, y in axes units: markers sit on the top edge whatever the scale
            ax.plot(s[bad], np.full(int(bad.sum()), 0.98), "v", color="red", markersize=6,
                    transform=ax.get_xaxis_transform(), clip_on=True,
                    label=f"{c.label}: NaN/Inf ({int(bad.sum())})")
    tail = nonfinite_tail(spec)
    if narrow:
        _narrow(ax, spec, tail)
    if tail is not None:
        lo, hi = ax.get_xlim()
        ax.axvspan(tail[0], max(hi, tail[1]), color="red", alpha=0.12, linewidth=0)
        ax.set_xlim(lo, hi)
        # at the band's right end: the rule markers' labels sit at its left edge
        ax.annotate(f"NaN/Inf ({tail[2]} steps)\nfrom step {tail[0]}\nto step {tail[1]}", xy=(1.0, 0.5),
                    xycoords="axes fraction", xytext=(-4, 0), textcoords="offset points",
                    color="darkred", fontsize=8, va="center", ha="right")
    if spec.first_bad_step is not None:
        ax.axvline(spec.first_bad_step, color="red", linestyle=":", linewidth=1.5)
        lo, hi = ax.get_xlim()
        left = hi > lo and (spec.first_bad_step - lo) / (hi - lo) > 0.6  # far right: text on its left
        ax.annotate(f"first bad step {spec.first_bad_step}", xy=(spec.first_bad_step, 0.92 if narrow else 0.06),
                    xycoords=("data", "axes fraction"), xytext=(-4 if left else 4, 0), textcoords="offset points",
                    color="red", fontsize=8, ha="right" if left else "left")
    _markers(ax, spec)
    y = y_axis(spec)
    _apply_y(ax, spec, y)
    handles, labels = ax.get_legend_handles_labels()
    if spec.right:
        h2, l2 = _right_axis(ax, spec)
        handles, labels = handles + h2, labels + l2
    ax.set_title(spec.title, fontsize=10)
    ax.set_xlabel(spec.xlabel)
    ax.set_ylabel(spec.ylabel or spec.metric)
    ax.grid(True, alpha=0.3)
    # beside the axes (and beside a right axis's labels), never over the data: constrained layout
    # keeps room for a figure legend placed "outside"
    # (https://matplotlib.org/stable/users/explain/axes/legend_guide.html#figure-legends)
    legends = list(fig.legends)
    if legends:  # the panel's entries join the main plot's legend
        old = legends[0]
        handles = old.legend_handles + handles
        labels = [t.get_text() for t in old.get_texts()] + labels
        old.remove()
    entries: dict[str, Any] = {}  # one entry per label (the panel repeats the gated window)
    for h, lab in zip(handles, labels):
        entries.setdefault(lab, h)
    fig.legend(list(entries.values()), list(entries), fontsize=7, loc="outside right upper", frameon=False)


def _apply_y(ax: Any, spec: PlotSpec, y: YAxis) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if y.scale == "log":
        ax.set_yscale("log")
    elif y.scale == "symlog":
        ax.set_yscale("symlog", linthresh=y.linthresh or 1.0)
    if y.scale != "linear":
        ax.yaxis.set_major_formatter(FuncFormatter(tick))
        ax.yaxis.set_minor_formatter(NullFormatter())
    if y.limits is None:
        return
    ax.set_ylim(*y.limits)
    above = [off_scale(c.steps, c.values, y.limits) for c in spec.curves]
    up = np.concatenate([a for a, _ in above]) if above else np.array([])
    down = np.concatenate([b for _, b in above]) if above else np.array([])
    for steps, edge, mark in ((up, 0.98, "^"), (down, 0.02, "v")):
        if steps.size:
            ax.plot(steps, np.full(steps.size, edge), mark, color="dimgrey", markersize=5,
                    transform=ax.get_xaxis_transform(), clip_on=True,
                    label=f"off scale ({steps.size})" if mark == "^" else None)
    if y.explosion is not None:
        step, value = y.explosion
        x = min(step, spec.first_bad_step) if spec.first_bad_step is not None else step  # left of the red line
        ax.annotate(f"{'↑' if value > 0 else '↓'} {tick(value)} at step {step} (off scale)",
                    xy=(x, 0.8 if value > 0 else 0.1), xycoords=("data", "axes fraction"), xytext=(-6, 0),
                    textcoords="offset points",
                    color="dimgrey", fontsize=8, ha="right")


def _right_axis(ax: Any, spec: PlotSpec) -> tuple[list[Any], list[str]]:
    """The learning rate (or any ``spec.right`` curve) on its own scale at the right."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax2 = ax.twinx()
    color = "tab:purple"
    values: list[np.ndarray] = []
    for c in spec.right:
        s = np.asarray(c.steps)
        v = np.asarray(c.values, dtype=float)[: s.size]
        s = s[: v.size]
        ok = np.isfinite(v)
        ax2.plot(s[ok], v[ok], "-", color=color, linewidth=1.0, alpha=0.75, label=f"{c.label} (right axis)")
        values.append(v[ok])
    fin = np.concatenate(values) if values else np.array([])
    if right_scale(spec) == "log":
        ax2.set_yscale("log")
        ax2.yaxis.set_minor_formatter(NullFormatter())
    elif fin.size and fin.min() >= 0:
        ax2.set_ylim(0, float(fin.max()) * 1.08 or 1.0)
    ax2.yaxis.set_major_formatter(FuncFormatter(tick))
    ax2.set_ylabel(spec.right_label or spec.right[0].label, color=color)
    ax2.tick_params(axis="y", colors=color, labelsize=8)
    return ax2.get_legend_handles_labels()


def _markers(ax: Any, spec: PlotSpec) -> None:
    """Rule markers: a grey line each; markers a few pixels apart share one label, so labels never
    overprint each other."""
    if not spec.markers:
        return
    lo, hi = ax.get_xlim()
    gap = MARKER_GROUP_SHARE * (hi - lo)
    groups: list[list[tuple[int, str]]] = []
    for step, label in sorted(spec.markers):
        if groups and step - groups[-1][0][0] <= gap:
            groups[-1].append((step, label))
        else:
            groups.append([(step, label)])
    for group in groups:
        for step, _ in group:
            ax.axvline(step, color="grey", linestyle="--", linewidth=0.8)
        text = ", ".join(label if str(step) in label else f"{label} ({step})" for step, label in group)
        ax.annotate(text, xy=(group[-1][0], 0.04), xycoords=("data", "axes fraction"), xytext=(3, 0),
                    textcoords="offset points", color="dimgrey", fontsize=7, rotation=90)


def _narrow(ax: Any, spec: PlotSpec, tail: tuple[int, int, int] | None) -> None:
    """When the run is non-finite to its end, the steps after the last finite value would take most
    of the x-axis and squeeze the part that shows the cause: the axis ends a little after the tail
    starts (the band's label says to which step it goes)."""
    if tail is None:
        return
    steps = [float(np.min(c.steps)) for c in spec.curves if len(c.steps)]
    if not steps:
        return
    first = min(steps)
    start, last = float(tail[0]), float(tail[1])
    if last <= first or (last - start) / (last - first) <= NAN_TAIL_SHARE:
        return
    before = start - first
    right = start + max(3.0, NAN_TAIL_SHARE / (1 - NAN_TAIL_SHARE) * before)
    if spec.first_bad_step is not None:
        right = max(right, spec.first_bad_step + 3.0)
    ax.set_xlim(first - 0.02 * (right - first), min(right, last))
