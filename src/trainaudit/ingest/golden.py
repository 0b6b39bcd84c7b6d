"""Megatron-LM golden-values JSON: ``{metric: {start_step, end_step, step_interval, values}}``.

Variants accepted (research notes, megatron_golden.md §1.2): pretty or single-line JSON; values as
a ``{"step": value}`` mapping whose values may be the legacy string ``"nan"``; ``iteration-time``
starting at step 2; very old files with ``values`` as a list and ``start_step`` 0 (the current
comparator cannot read these, so they are flagged ``legacy_list``); a per-metric
``value_precision: "full"`` marker (exact checks then mean raw, unrounded values).

Values are kept exactly as the JSON gives them (float, int or the string); Megatron's own mapping
of any string to ``inf`` happens in the comparator, not here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from trainaudit.errors import InputError
from trainaudit.safeio import load_json, read_text

Raw = float | int | str
_STEP_KEY = re.compile(r'"(-?\d+)"\s*:')


@dataclass(slots=True)
class GoldenMetric:
    name: str
    start_step: int
    end_step: int
    step_interval: int
    steps: list[int]  # in file order (the order the comparator iterates)
    raw: list[Raw]
    lines: list[int]  # 1-based line of each value in the JSON file (0 = unknown)
    full_precision: bool = False
    legacy_list: bool = False

    def as_dict(self) -> dict[int, Raw]:
        return dict(zip(self.steps, self.raw))

    def floats(self, string_as: float = math.inf) -> list[float]:
        """Numbers for maths; Megatron maps any string ("nan") to inf before ``isclose``."""
        return [string_as if isinstance(v, str) else float(v) for v in self.raw]

    def line_of(self, step: int) -> int:
        try:
            return self.lines[self.steps.index(step)]
        except ValueError:
            return 0


@dataclass(slots=True)
class GoldenFile:
    path: str  # as the user gave it
    metrics: dict[str, GoldenMetric]
    single_line: bool = False
    extras: dict[str, object] = field(default_factory=dict)  # e.g. old "iteration_timing_avg"

    @property
    def legacy_list(self) -> bool:
        return any(m.legacy_list for m in self.metrics.values())


def looks_like_golden(text: str) -> bool:
    """Cheap content test used by the reader and by ``compare``: a JSON object whose values carry
    ``start_step`` and ``values``."""
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"start_step"' in head and '"values"' in head


def load_golden(path: str, text: str | None = None) -> GoldenFile:
    """Parse a golden/actual-values file; ``path`` is the display path used in error messages."""
    if text is None:
        text = read_text(path)
    data = load_json(text, path)
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: not a golden-values file (expected a JSON object of metrics)")
    metrics: dict[str, GoldenMetric] = {}
    extras: dict[str, object] = {}
    for name, body in data.items():
        if not isinstance(body, dict):
            extras[name] = body  # e.g. "iteration_timing_avg": 0.7 in 2024 files
            continue
        metrics[name] = _metric(path, name, body)
    if not metrics:
        raise InputError(f"{path}: not a golden-values file (no metric has start_step/values)")
    _attach_lines(text, metrics)
    return GoldenFile(path, metrics, single_line=text.strip().count("\n") == 0, extras=extras)


def _metric(path: str, name: str, body: dict) -> GoldenMetric:
    missing = [k for k in ("start_step", "end_step", "step_interval", "values") if k not in body]
    if missing:
        raise InputError(f"{path}: metric {name!r} lacks {', '.join(missing)}")
    try:
        start, end, interval = int(body["start_step"]), int(body["end_step"]), int(body["step_interval"])
    except (TypeError, ValueError):
        raise InputError(f"{path}: metric {name!r} has a non-integer start_step/end_step/step_interval") from None
    values = body["values"]
    full = str(body.get("value_precision", "")).lower() == "full"
    if isinstance(values, list):
        # 2024 layout: positional values from start_step every step_interval.
        steps = [start + i * max(interval, 1) for i in range(len(values))]
        raw = [_value(path, name, s, v) for s, v in zip(steps, values)]
        return GoldenMetric(name, start, end, interval, steps, raw, [0] * len(raw), full, legacy_list=True)
    if not isinstance(values, dict):
        raise InputError(f"{path}: metric {name!r}: values is neither an object nor a list")
    steps, raw = [], []
    for key, v in values.items():
        try:
            step = int(key)
        except ValueError:
            raise InputError(f"{path}: metric {name!r}: step key {key!r} is not an integer") from None
        steps.append(step)
        raw.append(_value(path, name, step, v))
    return GoldenMetric(name, start, end, interval, steps, raw, [0] * len(raw), full)


def _value(path: str, name: str, step: int, v: object) -> Raw:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise InputError(f"{path}: metric {name!r} step {step}: value {v!r} is not a number or string")
    return v


def _attach_lines(text: str, metrics: dict[str, GoldenMetric]) -> None:
    """Line numbers of values (cheap: one regex pass per metric block). Best effort; 0 if unknown."""
    starts: list[tuple[int, str]] = []
    pos = 0
    for name in metrics:
        m = re.compile(re.escape(json.dumps(name)) + r"\s*:\s*\{").search(text, pos)
        if m is None:
            return
        starts.append((m.end(), name))
        pos = m.end()
    bounds = [s for s, _ in starts] + [len(text)]
    for (begin, name), end in zip(starts, bounds[1:]):
        metric = metrics[name]
        if metric.legacy_list:
            continue
        vpos = text.find('"values"', begin, end)
        if vpos < 0:
            continue
        line = text.count("\n", 0, vpos) + 1
        cursor = vpos
        found: dict[int, int] = {}
        for km in _STEP_KEY.finditer(text, vpos, end):
            line += text.count("\n", cursor, km.start())
            cursor = km.start()
            found.setdefault(int(km.group(1)), line)
        metric.lines = [found.get(s, 0) for s in metric.steps]
