"""Chart data for the HTML report: PlotSpecs as JSON (the ``charts.json`` sidecar beside answer.json),
or, when no sidecar exists, charts rebuilt from the series excerpts quoted as facts in answer.json.

JSON has no NaN, so a non-finite value is written as the string "nan", "inf" or "-inf" (the same
spelling answer.json uses for facts); the browser draws those as markers, not as gaps.
Long curves are thinned with a min/max-per-bucket pass: every spike and every non-finite point
survives, so the chart shows what the full series shows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainaudit.answer.charts import (Curve, PlotSpec, nonfinite_tail, right_scale, smoothed, smoothing_label,
                                      y_axis)
from trainaudit.answer.schema import Answer
from trainaudit.errors import InputError
from trainaudit.safeio import load_json, read_text
from trainaudit.redact import json_text

CHARTS_SCHEMA = "trainaudit-charts/1"
CHARTS_NAME = "charts.json"  # the sidecar's name beside answer.json
MAX_POINTS = 4000


def _thin(steps: np.ndarray, values: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to keep: first, last, min and max of each bucket (the first of equal ones), and every
    non-finite point. One pass of numpy per array (``reduceat``), not a loop over the buckets."""
    n = len(steps)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    width = np.diff(edges)
    starts = edges[:-1][width > 0]  # empty buckets hold nothing; the others tile 0..n
    which = np.repeat(np.arange(starts.size), width[width > 0])
    keep = [np.array([0, n - 1]), np.flatnonzero(~ok)]
    for pick, fill in ((np.minimum, np.inf), (np.maximum, -np.inf)):
        x = np.where(ok, v, fill)
        best = pick.reduceat(x, starts)
        hit = np.flatnonzero((x == best[which]) & ok)  # a bucket without a finite value has no hit
        first = np.unique(which[hit], return_index=True)[1]
        keep.append(hit[first])
    return np.unique(np.concatenate(keep))


def _num(v: float) -> float | str:
    if math.isfinite(v):
        return float(f"{v:.9g}")  # 9 significant digits: exact enough to hover, half the bytes
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _nums(values: np.ndarray) -> list[float | str]:
    """``_num`` of every value: the finite ones formatted one by one, the non-finite ones (a NaN tail
    keeps them all) spelled at once."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    if ok.all():
        return [float(f"{x:.9g}") for x in v.tolist()]
    out = np.where(np.isnan(v), "nan", np.where(v > 0, "inf", "-inf")).astype(object)
    out[ok] = [float(f"{x:.9g}") for x in v[ok].tolist()]
    return out.tolist()


def _series(steps: Sequence[int] | np.ndarray, values: Sequence[Any] | np.ndarray,
            max_points: int) -> tuple[list[int], list[float | str]]:
    s = np.asarray(steps, dtype=np.int64)
    v = np.asarray([_as_float(x) for x in values] if not isinstance(values, np.ndarray) else values, dtype=float)
    n = min(len(s), len(v))
    s, v = s[:n], v[:n]
    idx = _thin(s, v, max_points)
    return s[idx].tolist(), _nums(v[idx])


def _as_float(x: Any) -> float:
    if x is None:
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _curve(c: Curve, max_points: int, smooth: np.ndarray | None = None) -> dict[str, Any]:
    s = np.asarray(c.steps, dtype=np.int64)
    v = np.asarray(c.values, dtype=float)
    n = min(len(s), len(v))
    s, v = s[:n], v[:n]
    idx = _thin(s, v, max_points)
    out: dict[str, Any] = {"label": c.label, "style": c.style, "steps": s[idx].tolist(), "values": _nums(v[idx])}
    if smooth is not None:
        out["smoothed"] = _nums(smooth[:n][idx])
    return out


def spec_to_dict(spec: PlotSpec, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The chart as the page draws it: the same y-axis, smoothing, NaN/Inf tail and panel the PNG
    uses (:mod:`trainaudit.answer.charts`), so both show the same thing."""
    curves = [_curve(c, max_points, smoothed(spec, c)) for c in spec.curves]
    band = None
    if spec.band is not None:
        b = spec.band
        s = np.asarray(b.steps, dtype=np.int64)
        lo = np.asarray(b.low, dtype=float)
        hi = np.asarray(b.high, dtype=float)
        n = min(len(s), len(lo), len(hi))
        idx = _thin(s[:n], hi[:n], max_points)
        band = {"label": b.label, "steps": s[idx].tolist(), "low": _nums(lo[idx]), "high": _nums(hi[idx])}
    y = y_axis(spec)
    tail = nonfinite_tail(spec)
    return {"metric": spec.metric, "title": spec.title, "xlabel": spec.xlabel, "ylabel": spec.ylabel or spec.metric,
            "logy": y.scale == "log", "yscale": y.scale, "linthresh": y.linthresh,
            "first_bad_step": spec.first_bad_step, "markers": [[int(s), str(lab)] for s, lab in spec.markers],
            "curves": curves, "band": band, "window": list(spec.window) if spec.window else None,
            "yrange": [_num(y.limits[0]), _num(y.limits[1])] if y.limits else None,
            "explosion": [y.explosion[0], _num(y.explosion[1])] if y.explosion else None,
            "nonfinite_tail": list(tail) if tail else None,
            "smoothing": spec.smoothing or None,
            "smoothing_label": smoothing_label(spec.smoothing) if spec.smoothing else None,
            "right": [_curve(c, max_points) for c in spec.right], "right_label": spec.right_label or None,
            "right_scale": right_scale(spec) if spec.right else None,
            "panel": spec_to_dict(spec.panel, max_points) if spec.panel is not None else None}


def charts_json(plots: Sequence[PlotSpec], max_points: int = MAX_POINTS) -> str:
    payload = {"schema": CHARTS_SCHEMA, "charts": [spec_to_dict(p, max_points) for p in plots]}
    return json_text(payload, separators=(",", ":")) + "\n"


def load_charts(path: Path) -> list[dict[str, Any]]:
    """Charts from a sidecar; a file that is not one is an error the caller reports."""
    # Non-finite numbers as the writer spells them (``_num``): the page's JSON holds no NaN.
    try:
        data = load_json(read_text(path), str(path), nonfinite=_num)
    except InputError as exc:
        raise ValueError(str(exc).removeprefix(f"{path}: ")) from None
    if not isinstance(data, dict) or data.get("schema") != CHARTS_SCHEMA or not isinstance(data.get("charts"), list):
        raise ValueError(f"not a {CHARTS_SCHEMA} file")
    return [c for c in data["charts"] if isinstance(c, dict) and isinstance(c.get("curves"), list)]


def charts_from_answer(answer: Answer, max_points: int = MAX_POINTS) -> list[dict[str, Any]]:
    """Charts from the facts that quote a whole series excerpt, one chart per metric (all excerpts
    of a metric overlaid), the first bad step from the findings, and a tolerance band around a
    golden curve when a comparison of that metric gives rtol/atol."""
    by_metric: dict[str, list[Any]] = {}
    for f in answer.extracted_facts:
        if f.steps and f.values and f.metric:
            by_metric.setdefault(f.metric, []).append(f)
    src = {s.id: s.path for s in answer.source_refs}
    charts = []
    for metric, facts in by_metric.items():
        # the step the headline gives, as the charts written beside the answer mark it
        first_bad = answer.final_answer.first_bad_step
        if first_bad is None:
            first_bad = next((d.first_bad_step for d in answer.findings if d.metric == metric
                              and d.first_bad_step is not None), None)
        comp = next((c for c in answer.comparisons if c.metric == metric), None)
        if first_bad is None and comp is not None:
            first_bad = comp.first_failing_step
        curves, band = [], None
        for f in facts:
            steps, values = _series(f.steps, f.values, max_points)
            label = f"{f.id}: {f.statement}"[:80]
            curves.append({"label": label, "style": "line", "steps": steps, "values": values,
                           "source": src.get(f.source_ref, f.source_ref)})
            if band is None and comp is not None and "golden" in f.statement.lower():
                g = np.asarray([_as_float(v) for v in values])
                tol = comp.atol + comp.rtol * np.abs(g)
                band = {"label": f"golden ±{comp.rtol:g}", "steps": steps,
                        "low": [_num(float(x)) for x in g - tol], "high": [_num(float(x)) for x in g + tol]}
        charts.append({"metric": metric, "title": f"{metric} (series quoted in answer.json)", "xlabel": "step",
                       "logy": False, "first_bad_step": first_bad, "markers": [], "curves": curves, "band": band,
                       "window": comp.window if comp is not None and comp.window else None, "yrange": None})
    return charts
