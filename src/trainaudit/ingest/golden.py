"""Megatron-LM golden-values JSON: ``{metric: {start_step, end_step, step_interval, values}}``.

Variants accepted (as Megatron-LM's history holds them): pretty or single-line JSON; values as
a ``{"step": value}`` mapping whose values may be the legacy string ``"nan"``; ``iteration-time``
starting at step 2; very old files with ``values`` as a list and ``start_step`` 0 (flagged
``legacy_list``); a per-metric ``value_precision: "full"`` marker (exact checks then mean raw,
unrounded values).

Fields, step keys and values are coerced the way the comparator's pydantic model
(``GoldenValueMetric`` in Megatron-LM tests/functional_tests/python_test_utils/common.py:
``int`` fields, ``values: Dict[int, Union[int, float, str]]``) does in its default lax mode:
``"050"``, ``" 50"`` and ``"50.0"`` are step 50, a later key for the same step replaces the value
but keeps the first position, ``true``/``false`` are 1/0, ``1.0`` is a valid ``start_step`` and
``1.5`` is not. ``strict=True`` (the golden-value gate) also rejects what that model rejects and a
reader may skip: a top-level entry that is not a metric object, and list-valued ``values``.

Values are otherwise kept exactly as the JSON gives them (float, int or the string); Megatron's
own mapping of any string to ``inf`` happens in the comparator, not here.
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
# An integer as pydantic's lax int parser accepts it from a string (surrounding whitespace, a sign,
# underscores between digits, a zero fraction).
# Read with fullmatch; the blank run starts where blanks start, so a search could not retry it either.
_INT_TEXT = re.compile(r"(?<!\s)\s*+([+-]?[0-9](?:_?[0-9])*+)(?:\.0+)?\s*", re.ASCII)
_OPENS_OBJECT = re.compile(r"(?<!\s)\s*+:\s*+\{")  # after a metric's name: its object
REJECTED = "Megatron-LM's comparator rejects the file: pydantic ValidationError"
# What a golden-values file looks like (Megatron-LM's tests/functional_tests golden_values_*.json)
SHAPE = ('a golden-values file maps each metric to {"start_step": 1, "end_step": 100, "step_interval": 5, '
         '"values": {"1": 10.84, "6": 10.83, ...}}')


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


class GoldenRejected(InputError):
    """A golden file that parses as JSON but on which Megatron-LM's comparator breaks: the gate
    fails before it compares anything. ``nulls``: metric -> the steps whose value is JSON ``null``;
    ``raised``: what the comparator raises there (pydantic's ``Union[int, float, str]`` has no None:
    ValidationError when the step -> value mapping is loaded; the 2024 list layout went straight to
    ``np.allclose``, where a None is a TypeError)."""

    def __init__(self, message: str, nulls: dict[str, list[int]], path: str, raised: str, what: str | None = None
                 ) -> None:
        super().__init__(message)
        self.nulls = nulls
        self.path = path  # the file as the caller named it
        self.raised = raised
        # what is wrong with the file, in a few words (the message without its path and its reason)
        self.what = what or message.removeprefix(f"{path}: ").split(" (Megatron-LM's comparator", 1)[0]


def nulls_in_words(nulls: dict[str, list[int]], limit: int = 8) -> str:
    """``lm loss at step 50; num-zeros at steps 3, 7``: the null values where they are."""
    parts = []
    for metric, steps in nulls.items():
        shown = ", ".join(str(s) for s in steps[:limit]) + (f" and {len(steps) - limit} more" if len(steps) > limit else "")
        parts.append(f"{metric} at step{'s' if len(steps) > 1 else ''} {shown}")
    return "; ".join(parts)


def _null_steps(data: dict[str, object]) -> dict[str, list[int]]:
    """Every step whose value is null, per metric (one pass over the parsed JSON)."""
    out: dict[str, list[int]] = {}
    for name, body in data.items():
        if not isinstance(body, dict):
            continue
        values = body.get("values")
        if isinstance(values, dict):
            steps = [s for k, v in values.items() if v is None and (s := _int(k)) is not None]
        elif isinstance(values, list):
            start, interval = _int(body.get("start_step")) or 0, max(_int(body.get("step_interval")) or 1, 1)
            steps = [start + i * interval for i, v in enumerate(values) if v is None]
        else:
            continue
        if steps:
            out[name] = steps
    return out


def strict_check(golden: GoldenFile) -> None:
    """What ``load_golden(strict=True)`` rejects beyond a lenient parse, checked on a file already
    parsed leniently (so the gate need not read it twice)."""
    if golden.extras:
        name, body = next(iter(golden.extras.items()))
        raise GoldenRejected(_not_a_metric(golden.path, name, body), {}, golden.path, "pydantic ValidationError")
    listed = next((m for m in golden.metrics.values() if m.legacy_list), None)
    if listed is not None:
        raise GoldenRejected(_list_values(golden.path, listed.name), {}, golden.path, "pydantic ValidationError")


def _not_a_metric(path: str, name: str, body: object) -> str:
    return f"{path}: {name!r} is {json.dumps(body)[:40]}, not a metric object ({REJECTED}; {SHAPE})"


def _list_values(path: str, name: str) -> str:
    return (f"{path}: metric {name!r}: values is a list (the 2024 layout); the comparator needs "
            f"a step -> value mapping ({REJECTED})")


def looks_like_golden(text: str) -> bool:
    """Cheap content test used by the reader and by ``compare``: a JSON object whose values carry
    ``start_step`` and ``values``."""
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"start_step"' in head and '"values"' in head


def load_golden(path: str, text: str | None = None, *, strict: bool = False) -> GoldenFile:
    """Parse a golden/actual-values file; ``path`` is the display path used in error messages.
    ``strict``: reject everything Megatron-LM's comparator cannot load (see the module doc)."""
    if text is None:
        text = read_text(path)
    data = load_json(text, path, invalid="not valid JSON (JSONDecodeError)")
    if data is None:
        # GoldenValues(**None): "argument after ** must be a mapping, not NoneType".
        raise GoldenRejected(f"{path}: the golden file is JSON null (Megatron-LM's comparator rejects the file: "
                             "TypeError, GoldenValues() argument after ** must be a mapping)", {}, path, "TypeError",
                             "the golden file is JSON null")
    try:
        return _parsed(path, text, data, strict)
    except GoldenRejected:
        raise
    except InputError as exc:
        if not _golden_shaped(data):
            raise  # not a golden at all (another JSON file): an input that cannot be read
        # a golden the comparator cannot load (empty, a metric that is not one, fields missing or of the
        # wrong type): the gate breaks before it compares anything
        raise GoldenRejected(str(exc), {}, path, "pydantic ValidationError") from None


def _golden_shaped(data: object) -> bool:
    """An object of metrics as a golden file holds them, however broken: empty, or a metric with
    ``values`` or ``start_step``."""
    return isinstance(data, dict) and (not data or any(
        isinstance(b, dict) and ("values" in b or "start_step" in b) for b in data.values()))


def _parsed(path: str, text: str, data: object, strict: bool) -> GoldenFile:
    if data == {}:
        raise InputError(f"{path}: the golden file is an empty object, no metric"
                         + (" (Megatron-LM's comparator rejects the file: pydantic ValidationError)" if strict else ""))
    if not isinstance(data, dict):
        # The comparator loads GoldenValues(**data): a TypeError for anything but an object, a
        # ValidationError for an empty one.
        why = "TypeError" if not isinstance(data, dict) else "pydantic ValidationError"
        raise InputError(f"{path}: not a golden-values file (expected a JSON object of metrics)"
                         + (f" (Megatron-LM's comparator rejects the file: {why})" if strict else ""))
    nulls = _null_steps(data)
    listed = all(isinstance(data[m].get("values"), list) for m in nulls)
    if nulls and not (listed and strict):  # today's comparator rejects a list of values before its nulls
        if listed:
            raise GoldenRejected(f"{path}: null values ({nulls_in_words(nulls)}): the comparator of the list layout "
                                 "(test_ci_pipeline.py, 2024) raises TypeError in np.allclose on a None", nulls, path,
                                 "TypeError")
        raise GoldenRejected(f"{path}: null values ({nulls_in_words(nulls)}): {REJECTED} (its values are "
                             "Union[int, float, str], no null)", nulls, path, "pydantic ValidationError")
    metrics: dict[str, GoldenMetric] = {}
    extras: dict[str, object] = {}
    for name, body in data.items():
        if not isinstance(body, dict):
            if strict:
                raise InputError(_not_a_metric(path, name, body))
            extras[name] = body  # e.g. "iteration_timing_avg": 0.7 in 2024 files
            continue
        metrics[name] = _metric(path, name, body, strict)
    if not metrics:
        raise InputError(f"{path}: not a golden-values file (no metric has start_step/values)")
    _attach_lines(text, metrics)
    return GoldenFile(path, metrics, single_line=text.strip().count("\n") == 0, extras=extras)


def _int(v: object) -> int | None:
    """``v`` as pydantic's lax ``int`` reads it, or None when it would be a validation error."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and v.is_integer() else None
    if isinstance(v, str):
        m = _INT_TEXT.fullmatch(v)
        return int(m.group(1)) if m else None
    return None


def _metric(path: str, name: str, body: dict, strict: bool = False) -> GoldenMetric:
    missing = [k for k in ("start_step", "end_step", "step_interval", "values") if k not in body]
    if missing:
        raise InputError(f"{path}: metric {name!r} lacks {', '.join(missing)} ({REJECTED})")
    fields = [_int(body[k]) for k in ("start_step", "end_step", "step_interval")]
    if any(f is None for f in fields):
        raise InputError(f"{path}: metric {name!r} has a start_step/end_step/step_interval that is not an "
                         f"integer ({REJECTED})")
    start, end, interval = (int(f) for f in fields)  # type: ignore[arg-type]
    values = body["values"]
    full = str(body.get("value_precision", "")).lower() == "full"
    if isinstance(values, list):
        if strict:
            raise InputError(_list_values(path, name))
        # 2024 layout: positional values from start_step every step_interval.
        steps = [start + i * max(interval, 1) for i in range(len(values))]
        raw = [_value(path, name, s, v) for s, v in zip(steps, values)]
        return GoldenMetric(name, start, end, interval, steps, raw, [0] * len(raw), full, legacy_list=True)
    if not isinstance(values, dict):
        raise InputError(f"{path}: metric {name!r}: values is neither an object nor a list ({REJECTED})")
    by_step: dict[int, Raw] = {}
    for key, v in values.items():
        step = _int(key)
        if step is None:
            raise InputError(f"{path}: metric {name!r}: step key {key!r} is not an integer ({REJECTED})")
        by_step[step] = _value(path, name, step, v)  # a repeated step keeps its first position
    return GoldenMetric(name, start, end, interval, list(by_step), list(by_step.values()), [0] * len(by_step), full)


def _value(path: str, name: str, step: int, v: object) -> Raw:
    if isinstance(v, bool):
        return int(v)
    if not isinstance(v, (int, float, str)):
        raise InputError(f"{path}: metric {name!r} step {step}: value {json.dumps(v)} is not a number or string "
                         f"({REJECTED})")
    return v


def _attach_lines(text: str, metrics: dict[str, GoldenMetric]) -> None:
    """Line numbers of values (cheap: one regex pass per metric block). Best effort; 0 if unknown."""
    starts: list[tuple[int, str]] = []
    pos = 0
    for name in metrics:
        key = json.dumps(name)
        at, m = text.find(key, pos), None
        while at >= 0 and (m := _OPENS_OBJECT.match(text, at + len(key))) is None:
            at = text.find(key, at + 1)
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
