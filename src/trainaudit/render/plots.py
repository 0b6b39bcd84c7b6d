"""PNG plots for a report: one per metric with a finding, the first bad step marked, the gated
window shaded, the golden band filled.

Non-finite points are drawn as red markers on the top edge of the axes, so a NaN step is visible
instead of being a silent gap in the line; a run that stays non-finite to its end gets an x-axis
that ends shortly after its last finite value (the steps before are where the cause is). The y range is the one :func:`focus_range` picks (a
warm-up spike does not set the scale); points beyond it are grey markers on the edge they pass.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import replace
from typing import IO, Any

import numpy as np

from trainaudit.answer.charts import PlotSpec, focus_range, off_scale

PLOTS_EXTRA = "plots"  # the extra that installs matplotlib (pyproject.toml)


def png_available() -> bool:
    """matplotlib is an extra (about 100 MB with its dependencies, docs/benchmarks.md): without it a
    report has no PNGs."""
    return importlib.util.find_spec("matplotlib") is not None


# Finite values beyond this are drawn at it: matplotlib's axis transform inverts a matrix built
# from the data span, which is infinite (singular) for a curve holding both 1e308 and -1e308.
DRAWABLE = 1e300


def _drawable(values: Sequence[float] | np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    return np.where(np.isfinite(v), np.clip(v, -DRAWABLE, DRAWABLE), v)


def drawable(spec: PlotSpec) -> PlotSpec:
    """``spec`` with every finite value within what matplotlib can draw (non-finite ones kept, for
    the NaN/Inf markers)."""
    band = spec.band and replace(spec.band, low=_drawable(spec.band.low), high=_drawable(spec.band.high))
    return replace(spec, curves=[replace(c, values=_drawable(c.values)) for c in spec.curves], band=band)


def render(spec: PlotSpec, dest: IO[bytes]) -> None:
    spec = drawable(spec)
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    # Names come from input: '$' must not start matplotlib's mathtext, whose parser raises on text
    # such as 'loss$^{x$' (https://matplotlib.org/stable/users/explain/text/mathtext.html).
    with plt.rc_context({"text.parse_math": False, "text.usetex": False}):
        fig, ax = plt.subplots(figsize=(9.5, 3.6), dpi=100)
        try:
            finite_max: list[float] = []
            finite_min: list[float] = []
            if spec.window is not None:
                ax.axvspan(spec.window[0], spec.window[1], color="gold", alpha=0.18, linewidth=0,
                           label=f"gated window {spec.window[0]}-{spec.window[1]}")
            if spec.band is not None:
                b = spec.band
                ax.fill_between(np.asarray(b.steps), np.asarray(b.low, float), np.asarray(b.high, float),
                                color="tab:green", alpha=0.18, label=b.label, linewidth=0)
            for i, c in enumerate(spec.curves):
                s = np.asarray(c.steps)
                v = np.asarray(c.values, dtype=float)
                ok = np.isfinite(v)
                color = f"C{i}"
                if c.style == "points":
                    ax.plot(s[ok], v[ok], ".", color=color, label=c.label, markersize=3)
                else:
                    ax.plot(s[ok], v[ok], "--" if c.style == "dashed" else "-", color=color, label=c.label, linewidth=1.2)
                if ok.any():
                    finite_max.append(float(np.max(v[ok])))
                    finite_min.append(float(np.min(v[ok])))
                bad = ~ok
                if bad.any():
                    # x in data units, y in axes units: markers sit on the top edge whatever the scale
                    ax.plot(s[bad], np.full(int(bad.sum()), 0.98), "v", color="red", markersize=6,
                            transform=ax.get_xaxis_transform(), clip_on=True,
                            label=f"{c.label}: NaN/Inf ({int(bad.sum())})")
            _narrow_nan_tail(ax, spec)
            if spec.first_bad_step is not None:
                ax.axvline(spec.first_bad_step, color="red", linestyle=":", linewidth=1.5)
                lo, hi = ax.get_xlim()
                left = hi > lo and (spec.first_bad_step - lo) / (hi - lo) > 0.75  # near the right edge: text on its left
                ax.annotate(f"first bad step {spec.first_bad_step}", xy=(spec.first_bad_step, 0.92),
                            xycoords=("data", "axes fraction"), xytext=(-4 if left else 4, 0), textcoords="offset points",
                            color="red", fontsize=8, ha="right" if left else "left")
            for step, label in spec.markers:
                ax.axvline(step, color="grey", linestyle="--", linewidth=0.8)
                ax.annotate(label, xy=(step, 0.04), xycoords=("data", "axes fraction"), xytext=(3, 0),
                            textcoords="offset points", color="grey", fontsize=7, rotation=90)
            if spec.logy and finite_min and min(finite_min) > 0:
                ax.set_yscale("log")
            y = focus_range(spec)
            if y is not None:
                ax.set_ylim(*y)
                above = [off_scale(c.steps, c.values, y) for c in spec.curves]
                up = np.concatenate([a for a, _ in above]) if above else np.array([])
                down = np.concatenate([b for _, b in above]) if above else np.array([])
                for steps, edge, mark in ((up, 0.98, "^"), (down, 0.02, "v")):
                    if steps.size:
                        ax.plot(steps, np.full(steps.size, edge), mark, color="dimgrey", markersize=5,
                                transform=ax.get_xaxis_transform(), clip_on=True,
                                label=f"off scale ({steps.size})" if mark == "^" else None)
            ax.set_title(spec.title, fontsize=10)
            ax.set_xlabel(spec.xlabel)
            ax.set_ylabel(spec.metric)
            ax.grid(True, alpha=0.3)
            # beside the axes, never over the data
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
            fig.tight_layout()
            fig.savefig(dest, format="png")
        finally:
            plt.close(fig)


NAN_TAIL_SHARE = 0.2  # a non-finite tail wider than this share of the x-axis is cut short


def _narrow_nan_tail(ax: Any, spec: PlotSpec) -> None:
    """When the run is non-finite to its end, the steps after the last finite value would take most
    of the x-axis and squeeze the part that shows the cause: the axis ends a little after the last
    finite value, and a note at the right edge says to which step the NaN/Inf continue."""
    first, last_finite, last = None, None, None
    for c in spec.curves:
        s = np.asarray(c.steps, dtype=float)
        v = np.asarray(c.values, dtype=float)
        if not s.size:
            continue
        ok = np.isfinite(v)
        first = float(s.min()) if first is None else min(first, float(s.min()))
        last = float(s.max()) if last is None else max(last, float(s.max()))
        if ok.any():
            lf = float(s[ok].max())
            last_finite = lf if last_finite is None else max(last_finite, lf)
    if first is None or last_finite is None or last is None or last <= first:
        return
    if (last - last_finite) / (last - first) <= NAN_TAIL_SHARE:
        return
    right = last_finite + max(3.0, 0.08 * (last_finite - first))
    if spec.first_bad_step is not None:
        right = max(right, spec.first_bad_step + max(3.0, 0.08 * (last_finite - first)))
    ax.set_xlim(first - 0.02 * (right - first), right)
    ax.annotate(f"NaN/Inf continue to step {last:g} \u2192", xy=(0.99, 0.8), xycoords="axes fraction",
                ha="right", color="red", fontsize=8)
