"""torchtitan metric lines (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``)::

    [rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319
        memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%

Metric names are the printed ones, with the units that the printed value carries: ``loss``,
``grad_norm``, ``memory(GiB)`` and ``memory(%)`` (peak reserved memory, one field printed as
``9.46GiB(64.99%)``), ``tps`` (``wps`` before 2025-03), ``tflops``, ``mfu(%)``. ``mfu: N/A`` (FP8)
is not a value and is skipped. Validation lines (``validate step: N ...``) go to
``validate/<name>``. The ANSI colours torchtitan prints even into files are removed by the line
cleaner; ``7,282`` thousands separators are parsed.

Without a rank filter every rank prints the same step (``--tee`` without ``--local-ranks-filter``);
with ``[rankN]:`` prefixes those become ``<metric>@rankN`` series (sink), and without prefixes a
repeated step on consecutive metric lines is a duplicate: the first copy is kept and the number of
copies goes to meta ``torchtitan.lines_per_step``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.base import Sample
from trainaudit.ingest.formats.hf import NUMBER_RE
from trainaudit.ingest.formats.shaped import (
    DIGITS_RE, DIGIT_RE, OTHER, QUIET, ROW, Chunk, chunk_numbers, Columns, Shape, ShapeTable, ShapedReader, Where, digits_at,
)
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import SourceKind

STEP_RE = re.compile(r"\b(validate )?step:\s*(\d+)\s+loss:")
FIELD_RE = re.compile(r"(?<![a-z_])([a-z_]++):\s*+(\S+)")
MEM_RE = re.compile(r"^([\d.]+)GiB\(([\d.]+)%\)$")
TITAN_RE = re.compile(r"\[titan\]")
RENAME = {"mfu": "mfu(%)"}
COMMAS_RE = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+")  # "7,282": an integer, read group by group


@dataclass(slots=True)
class _LineShape:
    """A metric line's shape: validation or not, the span of its step, its series names with how
    to read their values (``numbers`` for plain numbers; ``commas``: the digit groups of a number
    with thousands separators, by name)."""

    validate: bool
    step: tuple[int, int]
    names: tuple[str, ...]
    numbers: SpanNumbers
    plain: tuple[int, ...]  # the names read by numbers, in its order
    commas: dict[int, tuple[tuple[int, int], ...]]


class TorchtitanReader(ShapedReader):
    name = "torchtitan"
    kind = SourceKind.LOG
    description = "torchtitan '[titan] ... step: N  loss: X  grad_norm: Y  memory: ZGiB(P%)  tps: T' lines"

    def sniff(self, sample: Sample) -> float:
        steps = titan = 0
        for ln in sample.lines:
            if STEP_RE.search(ln) and "memory:" in ln:
                steps += 1
            elif TITAN_RE.search(ln):
                titan += 1
        if steps:
            return 0.9
        return 0.5 if titan else 0.0


    def new_state(self) -> dict:
        return {"last": None, "copies": 1, "max_copies": 1, "framework": False}

    def shape_table(self) -> ShapeTable:
        return ShapeTable(None, self._classify, one_row=False)

    @staticmethod
    def _classify(text: str, quiet: bool, where: Where) -> Shape:
        """What :meth:`feed` does with a segment (see :class:`ShapeTable`) once the framework is
        known, for every segment of its shape: ``ROW`` for a metric line whose values are numbers,
        ``QUIET`` for any line without a step, else ``OTHER``."""
        m = STEP_RE.search(text)
        if m is None:
            return Shape(QUIET)
        step = where.raw_span(*m.span(2))
        if step is None or not m.group(2).isascii():
            return Shape(OTHER)
        prefix = "validate/" if m.group(1) is not None else ""
        names: list[str] = []
        spans: list[tuple[int, int]] = []
        plain: list[int] = []
        commas: dict[int, tuple[tuple[int, int], ...]] = {}
        consts: dict[int, float] = {}
        for f in FIELD_RE.finditer(text, m.end() - len("loss:")):
            name, raw = f.group(1), f.group(2)
            if name == "step":
                continue
            mem = MEM_RE.match(raw)
            if mem:
                for g, unit in ((1, "(GiB)"), (2, "(%)")):
                    if NUMBER_RE.fullmatch(mem.group(g)) is None:
                        return Shape(OTHER)
                    span = where.raw_span(f.start(2) + mem.start(g), f.start(2) + mem.end(g))
                    if span is None:
                        return Shape(OTHER)
                    plain.append(len(names))
                    names.append(f"{prefix}{name}{unit}")
                    spans.append(span)
                continue
            token = raw.rstrip("%")
            v = parse_number(token)
            has_digits = DIGIT_RE.search(token) is not None
            if v is None:
                if has_digits:
                    return Shape(OTHER)
                continue  # "mfu: N/A"
            span = where.raw_span(f.start(2), f.start(2) + len(token))
            if span is None or not token.isascii():
                return Shape(OTHER)
            if has_digits and NUMBER_RE.fullmatch(token) is None:
                if COMMAS_RE.fullmatch(token) is None:
                    return Shape(OTHER)
                at = span[0]
                groups = tuple((at + g.start(), at + g.end()) for g in DIGITS_RE.finditer(token))
                commas[len(names)] = groups
                names.append(prefix + RENAME.get(name, name))
                continue
            if not has_digits:
                consts[len(spans)] = v
            plain.append(len(names))
            names.append(prefix + RENAME.get(name, name))
            spans.append(span)
        if len(set(names)) != len(names):
            return Shape(OTHER)
        numbers = SpanNumbers(where.text.encode("utf-8").decode("latin-1"), tuple(spans))  # a character a byte
        for j, v in consts.items():
            numbers.const[j] = v
        return Shape(ROW, _LineShape(m.group(1) is not None, step, tuple(names), numbers, tuple(plain), commas))

    def read_chunk(self, chunk: Chunk, info: list[Any]) -> _Metrics:
        return _Metrics(chunk, info)

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        """The metric lines of lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`feed` reads
        them: a line repeating the last one's (rank, validation, step) is a copy, counted; the
        others' values go to their rank's series."""
        if not state["framework"]:
            return start  # (the line reader notes the framework first)
        _, _, seg_line, _ = chunk.segments
        lo, hi = (int(x) for x in np.searchsorted(seg_line, [start, stop]))
        if hi <= lo:
            return stop
        got = chunk_numbers(table, chunk, self.name, self.read_chunk)
        rank, val, step = got.rank[lo:hi], got.validate[lo:hi], got.step[lo:hi]
        same = np.zeros(hi - lo, dtype=bool)
        same[1:] = (rank[1:] == rank[:-1]) & (val[1:] == val[:-1]) & (step[1:] == step[:-1])
        last = state["last"]
        if last is not None:
            same[0] = last == (None if rank[0] < 0 else int(rank[0]), bool(val[0]), int(step[0]))
        # copies: the place in a run of the same key, counted on from the state's for a run it continues
        run = np.cumsum(~same)
        begin = np.flatnonzero(~same)
        first_run = np.flatnonzero(~same)[0] if (~same).any() else hi - lo
        copies = np.arange(hi - lo) + 1 - np.concatenate(([0], begin))[run]
        copies[:first_run] += state["copies"]
        state["copies"] = int(copies[-1])
        state["max_copies"] = max(state["max_copies"], int(copies.max()))
        state["last"] = (None if rank[-1] < 0 else int(rank[-1]), bool(val[-1]), int(step[-1]))
        written = np.flatnonzero(~same)
        if not written.shape[0]:
            return stop
        rows = written + lo
        steps = step[written]
        ranks = rank[written]
        line_nos = seg_line[rows] + base + 1
        entries: list[tuple[int, int, str, str, NDArray[np.bool_]]] = []
        for name, (_, has) in got.columns.items():
            h = has[rows]
            if not h.any():
                continue
            rk = ranks[h]
            uniq, first = np.unique(rk, return_index=True)
            series: dict[str, list[int]] = {}
            for r in uniq[np.argsort(first)].tolist():
                series.setdefault(sink.metric_for(name, None if r < 0 else r), []).append(r)
            where = np.flatnonzero(h)
            for metric, rs in series.items():
                sel = np.zeros(written.shape[0], dtype=bool)
                sel[where[np.isin(rk, rs)]] = True
                row0 = int(np.flatnonzero(sel)[0])
                entries.append((row0, got.field(int(rows[row0]), name), metric, name, sel))
        # new series in the order the line reader would have made them: by line, then by field
        for _, _, metric, name, sel in sorted(entries, key=lambda e: (e[0], e[1])):
            sink.add_many(metric, steps[sel], got.columns[name][0][rows[sel]], line_nos[sel])
        any_value = np.zeros(written.shape[0], dtype=bool)
        for *_, sel in entries:
            any_value |= sel
        if any_value.any():
            sink.last_step = int(steps[np.flatnonzero(any_value)[-1]])
        return stop

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        m = STEP_RE.search(text)
        if m is None:
            if not state["framework"] and TITAN_RE.search(text):
                state["framework"] = True
                sink.meta("framework", "torchtitan")
            return
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "torchtitan")
        validate = m.group(1) is not None
        step = int(m.group(2))
        key = (line.rank, validate, step)
        if key == state["last"]:
            state["copies"] += 1
            state["max_copies"] = max(state["max_copies"], state["copies"])
            return
        state["last"], state["copies"] = key, 1
        prefix = "validate/" if validate else ""
        for name, raw in FIELD_RE.findall(text[m.end() - len("loss:"):]):
            if name == "step":
                continue
            mem = MEM_RE.match(raw)
            if mem:
                sink.add(f"{prefix}{name}(GiB)", step, float(mem.group(1)), line.no, line.rank)
                sink.add(f"{prefix}{name}(%)", step, float(mem.group(2)), line.no, line.rank)
                continue
            v = parse_number(raw.rstrip("%"))
            if v is None:
                continue  # "mfu: N/A"
            sink.add(prefix + RENAME.get(name, name), step, v, line.no, line.rank)

    def finish(self, sink: Sink, state: dict) -> None:
        if state["max_copies"] > 1:
            sink.meta("torchtitan.lines_per_step", state["max_copies"])


class _Metrics:
    """A chunk's metric lines read at once (a row a ``ROW`` segment, in order): rank (-1: none),
    validation or not, step, and each series name's values (``has`` where the line holds it)."""

    def __init__(self, chunk: Chunk, info: list[Any]) -> None:
        sid, at, _, self.rank = chunk.segments
        self.sid = sid
        self.names: dict[int, tuple[str, ...]] = {}  # the chunk's shapes' series names (not every shape's info)
        buf = chunk.lines.buf
        k = sid.shape[0]
        self.validate = np.zeros(k, dtype=bool)
        self.step = np.zeros(k, dtype=np.int64)
        self.columns = Columns(k)
        for s in np.unique(sid).tolist():
            sel = np.flatnonzero(sid == s)
            shape: _LineShape = info[s]
            self.names[s] = shape.names
            where = at[sel]
            self.validate[sel] = shape.validate
            self.step[sel] = digits_at(buf, where + shape.step[0], shape.step[1] - shape.step[0])
            values = shape.numbers.read_at(buf, where)
            for c, j in enumerate(shape.plain):
                self.columns.put(shape.names[j], sel, values[:, c])
            for j, groups in shape.commas.items():
                total = np.zeros(sel.shape[0], dtype=np.int64)
                for a, b in groups:
                    total = total * 10 ** (b - a) + digits_at(buf, where + a, b - a)
                self.columns.put(shape.names[j], sel, total.astype(np.float64))

    def field(self, row: int, name: str) -> int:
        """The place of series ``name`` among the fields of ``row``'s line."""
        return self.names[int(self.sid[row])].index(name)
