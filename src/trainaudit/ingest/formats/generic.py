"""Generic metric files: CSV/TSV with a header and JSONL of flat dicts (text lines of any other
shape are read by :mod:`trainaudit.ingest.extract`).

These formats say nothing about the framework that wrote them, so they sniff low (0.2-0.4) and
any specific reader wins. The step is taken from the first step-like column or key found in
:data:`STEP_KEYS` order; without one, the step is the 1-based index of the row or record.
Non-numeric cells are ignored; every NaN/Inf spelling becomes NaN/Inf (never dropped).

The small value helper here (:func:`num`) is shared by the other readers of this package.
"""

from __future__ import annotations

import csv
import math
import re
from typing import Any

from trainaudit.errors import InputError
from trainaudit.ingest.base import LineReader, Priority, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import SourceKind
from trainaudit.safeio import load_json

# current_steps: LLaMA-Factory's trainer_log.jsonl (src/llamafactory/train/callbacks.py, LogCallback),
# whose records also carry a fractional "epoch" that is integral at 1.0, 2.0, ...
STEP_KEYS = ("step", "global_step", "current_steps", "iteration", "iter", "epoch", "_step")
# the run's length printed beside the step counter ("current_steps": 3200, "total_steps": 3235)
STEP_TOTAL_KEYS = frozenset({"total_steps", "max_steps"})

# Lightning's tqdm prints nan as "nan.0", inf as "inf.0", -inf as "-inf." (zero padding).
_PADDED_SPECIAL = re.compile(r"^([-+]?)(nan|inf|infinity)\.0*$", re.IGNORECASE)
_UNIT = re.compile(r"^([-+]?(?:\d[\d,]*+\.?+\d*+|\.\d++)(?:[eE][-+]?\d+)?)\s*+(%|[A-Za-z]{1,4}(?:/[A-Za-z]+)?)$")
# key=value or key: value; the number must not continue as a clock time or a date ("2:46:39").
# "key value" chunks of comma-separated lines (i6/RETURNN: "step 1347, ce 0.324, ...").


def num(text: str, *, units: bool = False) -> float | None:
    """A number as logs print it (``nan``, ``NaN``, ``-inf``, ``nan.0``, ``1.2E+00``, ``7,282``,
    quoted, ``12.5%``). With ``units`` a short unit glued to the number is dropped
    (``9.95G`` -> 9.95): the caller's metric name or docs say what the unit is."""
    try:
        return float(text)  # the common case, without the slower spellings below
    except ValueError:
        pass
    t = text.strip().strip("'\"")
    v = parse_number(t)
    if v is not None:
        return v
    m = _PADDED_SPECIAL.match(t)
    if m:
        base = math.nan if m.group(2).lower() == "nan" else math.inf
        return -base if m.group(1) == "-" else base
    if t.endswith("%"):
        return parse_number(t[:-1])
    if units:
        m = _UNIT.match(t)
        if m:
            return parse_number(m.group(1))
    return None


def is_step_key(key: str) -> bool:
    return key.strip().lower() in STEP_KEYS


def step_value(v: float | None) -> int | None:
    """An integral, finite step value, or None."""
    if v is None or not math.isfinite(v) or v != int(v) or v < 0:
        return None
    return int(v)


def _step_of(pairs: list[tuple[str, float]]) -> tuple[str, int] | None:
    """The first step-like key in STEP_KEYS order, with an integral value."""
    by_key: dict[str, float] = {}
    for k, v in pairs:
        by_key.setdefault(k.lower(), v)
    for sk in STEP_KEYS:
        if sk in by_key:
            s = step_value(by_key[sk])
            if s is not None:
                return sk, s
    return None


# --------------------------------------------------------------------------------------------
# CSV / TSV
# --------------------------------------------------------------------------------------------

def _delimiter(header: str) -> str | None:
    for d in ("\t", ",", ";"):
        if header.count(d) >= 1:
            return d
    return None


def _split(text: str, delim: str) -> list[str]:
    if '"' in text:
        return next(csv.reader([text], delimiter=delim))
    return text.split(delim)


class CsvReader(LineReader):
    name = "csv"
    kind = SourceKind.METRICS
    priority = Priority.GENERIC
    description = "generic CSV/TSV with a header row (step from step/global_step/current_steps/iteration/iter/epoch/_step, else row number)"

    def sniff(self, sample: Sample) -> float:
        lines = [ln for ln in sample.lines if ln.strip()]
        if len(lines) < 2:
            return 0.0
        delim = _delimiter(lines[0])
        if delim is None:
            return 0.0
        header = [h.strip() for h in _split(lines[0], delim)]
        if len(header) < 2 or any(num(h) is not None for h in header) or not all(header):
            return 0.0
        if any("=" in h or h.startswith("[") for h in header):
            return 0.0  # a log line with commas ("[olmo.train:816, rank=0] [step=1/739328]"), not column names
        rows = [_split(ln, delim) for ln in lines[1:50]]
        good = [r for r in rows if len(r) == len(header)]
        if len(good) < max(1, len(rows) // 2):
            return 0.0
        if not any(num(c) is not None for r in good for c in r):
            return 0.0
        has_step = any(is_step_key(h) for h in header)
        return 0.3 if has_step else 0.2

    def new_state(self) -> dict:
        return {"header": None, "delim": ",", "step_col": None, "row": 0, "last_step": 0}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if not text.strip():
            return
        if state["header"] is None:
            delim = _delimiter(text) or ","
            state["delim"] = delim
            state["header"] = [h.strip() for h in _split(text, delim)]
            return
        header: list[str] = state["header"]
        cells = _split(text, state["delim"])
        if len(cells) != len(header):
            return  # a truncated last line or a stray line: not a row of this table
        if [c.strip() for c in cells] == header:
            return  # a repeated header (appended file after a restart)
        values = [num(c) if c.strip() else None for c in cells]
        state["row"] += 1
        if state["step_col"] is None:
            state["step_col"] = self._pick_step_col(header, values)
        col = state["step_col"]
        if col >= 0:
            s = values[col]
            step = round(s) if s is not None and math.isfinite(s) else state["last_step"]
        else:
            step = state["row"]
        state["last_step"] = step
        for i, v in enumerate(values):
            if v is None or i == col:
                continue
            sink.add(header[i], step, v, line.no, line.rank)

    @staticmethod
    def _pick_step_col(header: list[str], values: list[float | None]) -> int:
        lower = [h.lower() for h in header]
        for sk in STEP_KEYS:
            if sk in lower:
                i = lower.index(sk)
                if step_value(values[i]) is not None:
                    return i
        return -1


# --------------------------------------------------------------------------------------------
# JSONL
# --------------------------------------------------------------------------------------------

_BARE_SPECIAL = re.compile(r'(:\s*)(-?(?:nan|inf(?:inity)?))(?=\s*[,}])', re.IGNORECASE)


def parse_json_object(text: str) -> dict[str, Any] | None:
    """One JSON object per line; bare ``nan``/``inf`` (not valid JSON) are accepted too."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        return None
    try:
        obj = load_json(t, "")
    except InputError:
        try:
            obj = load_json(_BARE_SPECIAL.sub(r'\1"\2"', t), "")
        except InputError:
            return None
    return obj if isinstance(obj, dict) else None


def flat_numbers(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, float]]:
    """Numeric leaves (numbers and numeric strings) of a dict; nested dicts joined with '/'."""
    out: list[tuple[str, float]] = []
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out.append((key, float(v)))
        elif isinstance(v, str):
            x = num(v)
            if x is not None:
                out.append((key, x))
        elif isinstance(v, dict) and not prefix:
            out.extend(flat_numbers(v, f"{key}/"))
    return out


class JsonlReader(LineReader):
    name = "jsonl"
    kind = SourceKind.METRICS
    priority = Priority.GENERIC
    description = "generic JSON lines of flat dicts (step from step/global_step/current_steps/iteration/iter/epoch/_step, else record number)"

    def sniff(self, sample: Sample) -> float:
        lines = [ln for ln in sample.lines if ln.strip()][:50]
        if not lines:
            return 0.0
        objs = [parse_json_object(ln) for ln in lines]
        good = [o for o in objs if o is not None]
        if len(good) < max(1, (len(lines) + 1) // 2):
            return 0.0
        # At least one top-level number: a single nested JSON document (golden values) is not a log.
        if not any((isinstance(v, (int, float)) and not isinstance(v, bool)) or
                   (isinstance(v, str) and num(v) is not None) for o in good for v in o.values()):
            return 0.0
        has_step = any(is_step_key(k) for o in good for k in o)
        return 0.35 if has_step else 0.25

    def new_state(self) -> dict:
        return {"record": 0}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        obj = parse_json_object(line.text)
        if obj is None:
            return
        state["record"] += 1
        pairs = flat_numbers(obj)
        found = _step_of(pairs)
        step = found[1] if found else state["record"]
        skip = found[0] if found else None
        for k, v in pairs:
            if skip is not None and (k.lower() == skip or k.lower() in STEP_TOTAL_KEYS):
                continue
            sink.add(k, step, v, line.no, line.rank)
