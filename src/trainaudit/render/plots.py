"""PNG plots for a report: one per metric with a finding, the first bad step marked.

Non-finite points are drawn as red markers on the top edge of the axes, so a NaN step is visible
instead of being a silent gap in the line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainaudit.answer.charts import PlotSpec


def render(spec: PlotSpec, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    try:
        finite_max: list[float] = []
        finite_min: list[float] = []
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
                        transform=ax.get_xaxis_transform(), clip_on=False,
                        label=f"{c.label}: NaN/Inf ({int(bad.sum())})")
        if spec.first_bad_step is not None:
            ax.axvline(spec.first_bad_step, color="red", linestyle=":", linewidth=1.5)
            ax.annotate(f"first bad step {spec.first_bad_step}", xy=(spec.first_bad_step, 0.92),
                        xycoords=("data", "axes fraction"), xytext=(4, 0), textcoords="offset points",
                        color="red", fontsize=8)
        for step, label in spec.markers:
            ax.axvline(step, color="grey", linestyle="--", linewidth=0.8)
            ax.annotate(label, xy=(step, 0.04), xycoords=("data", "axes fraction"), xytext=(3, 0),
                        textcoords="offset points", color="grey", fontsize=7, rotation=90)
        if spec.logy and finite_min and min(finite_min) > 0:
            ax.set_yscale("log")
        ax.set_title(spec.title, fontsize=10)
        ax.set_xlabel(spec.xlabel)
        ax.set_ylabel(spec.metric)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path
