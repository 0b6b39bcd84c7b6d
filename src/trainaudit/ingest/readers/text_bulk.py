"""Bulk reading of text logs, a chunk of lines at a time (for :mod:`trainaudit.ingest.readers.text`).

Once the extractor has decided which counter is the step (:attr:`Extractor.steady`), a chunk's
lines are grouped by shape: the line with every digit a ``0`` (:class:`LineShape`). Lines of one
shape have their digits at the same offsets, so a group's numbers are read at once from a matrix
of its lines, its records follow the shape's layout, and the records between two lines that need
the line reader are placed and handed to the sink as arrays.

A line goes through the line reader, in order, when its shape cannot promise the line reader's
result: the signature scanner may speak of it (or a traceback is open), a launcher prefix, ANSI
codes, carriage returns, non-ASCII text, a shape without a plan, or numbers whose facts differ
from those of the line the shape was read off.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.extract import (
    _ZERO_BYTES,
    NAN_SOURCE,
    SHAPES,
    Extractor,
    LineShape,
    Record,
    RecordLayout,
    Table,
    _facts,
    _RowPlan,
    facts_of,
    line_shape,
    number,
    number_spans,
    record_of,
)
from trainaudit.ingest.fastnum import FixedNumbers
from trainaudit.ingest.signatures import SignatureScanner, may_signal
from trainaudit.ingest.text import Line, split_line, strip_prefixes
from trainaudit.model import Event

MAX_SHAPES = 4096  # then the shapes start afresh (a log of ever new shapes stays bounded)
MAX_LAYOUTS = 16384  # (shape, table header) pairs
MAX_VARIANTS = 32  # facts of a shape's numbers
SMALL_RUN = 24  # records below which a run is placed one by one: setting up arrays costs more

LINE, NONE, HEADER, RECORD = 0, 1, 2, 3  # what a shape's lines need

def _slow(raw: bytes) -> float:
    v = number(raw.decode("ascii"))
    return float("nan") if v is None else v


class _Numbers:
    """The numbers at a shape's spans, for a matrix of its lines (a row a line): vectorised where
    :class:`~trainaudit.ingest.fastnum.FixedNumbers` can, the same text on every line where a span
    has no digit ("nan"), else ``number()`` line by line (thousands commas, long mantissas)."""

    def __init__(self, text: str, spans: tuple[tuple[int, int], ...]) -> None:
        self.spans = spans
        digits = [j for j, (a, b) in enumerate(spans) if any("0" <= c <= "9" for c in text[a:b])]
        self.const = {j: _slow(text[a:b].encode("ascii")) for j, (a, b) in enumerate(spans) if j not in digits}
        self.fixed = FixedNumbers(text, [spans[j] for j in digits])
        self.digits = np.array(digits, dtype=np.int64)

    def read(self, mat: NDArray[np.uint8], rows: list[bytes]) -> NDArray[np.float64]:
        out = np.empty((mat.shape[0], len(self.spans)))
        vals, ok = self.fixed.read(mat)
        out[:, self.digits] = vals
        for r, q in zip(*np.nonzero(~ok)):
            a, b = self.spans[int(self.digits[q])]
            out[r, self.digits[q]] = _slow(rows[r][a:b])
        for j, v in self.const.items():
            out[:, j] = v
        return out


@dataclass(slots=True)
class _Kind:
    """What one shape's lines need; for record lines, how to read their numbers and a
    :class:`LineShape` for each facts of them seen (None: those lines are read one by one)."""

    kind: int
    numbers: _Numbers | None = None
    variants: dict[bytes, int] | None = None  # facts of the numbers -> variant id (-1: none)


@dataclass(slots=True)
class _Group:
    """The lines of one variant in a chunk: line indices (ascending) and values (a column a slot)."""

    variant: int
    rows: NDArray[np.int64]
    values: NDArray[np.float64]


@dataclass(slots=True)
class _Part:
    """Records of one layout in a run of lines."""

    plan: _RowPlan
    layout: RecordLayout
    rows: NDArray[np.int64]
    values: NDArray[np.float64]


Emit = Callable[[list[tuple[int, Record]]], None]
# steps and lines of a run's records, the positions of those with metrics, and each metric's
# (name, positions, values)
EmitMany = Callable[[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64],
                     list[tuple[str, NDArray[np.int64], NDArray[np.float64]]]], None]
Said = dict[int, list[tuple[Line, list[Event], bool]]]


class BulkLines:
    """Reads chunks of lines for a text reader whose extractor is steady. ``line`` is the line
    reader's handling of one cleaned line (its scanner events already taken); ``emit`` hands
    placed records to the sink one by one; ``emit_many`` hands a run of placed records over."""

    def __init__(self, ex: Extractor, scanner: SignatureScanner,
                 line: Callable[[Line, list[Event], bool], None], emit: Emit, emit_many: EmitMany) -> None:
        self.ex, self.scanner, self.line, self.emit, self.emit_many = ex, scanner, line, emit, emit_many
        self.ids: dict[bytes, int] = {}
        self.kinds: list[_Kind] = [_Kind(LINE)]  # id 0: lines read one by one
        self.shapes: list[LineShape] = []  # the variants
        self.headers: dict[tuple[str, ...], int] = {}
        self.header_list: list[tuple[str, ...]] = []
        self.layouts: dict[tuple[int, int], tuple[RecordLayout | None, _RowPlan | None, int]] = {}

    # -- shapes -----------------------------------------------------------------------------------
    def _kind_of(self, raw: bytes) -> _Kind:
        if not raw:
            return _Kind(NONE)  # the line reader skips empty lines
        if not raw.isascii() or b"\x1b" in raw or b"\r" in raw:
            return _Kind(LINE)
        text = raw.decode("ascii")
        if strip_prefixes(text) != (text, None) or may_signal(text):
            return _Kind(LINE)
        spans = number_spans(text)
        if spans is None:
            return _Kind(LINE)
        if not spans:
            shape = line_shape(text, spans)
            if shape is None:
                return _Kind(LINE)
            if shape.header_row:
                self.shapes.append(shape)
                return _Kind(HEADER, variants={b"": len(self.shapes) - 1})
        return _Kind(RECORD, _Numbers(text, tuple(spans)), {})

    def _variant(self, k: _Kind, facts: bytes, raw: bytes) -> int:
        assert k.variants is not None
        got = k.variants.get(facts)
        if got is None:
            shape = None
            if len(k.variants) < MAX_VARIANTS:
                text = raw.decode("ascii")
                spans = number_spans(text)
                shape = None if spans is None else line_shape(text, spans)
            if shape is None or shape.header_row:
                got = -1
            else:
                self.shapes.append(shape)
                got = len(self.shapes) - 1
            k.variants[facts] = got
        return got

    def _ids(self, lines: list[bytes]) -> NDArray[np.int64]:
        if len(self.ids) >= MAX_SHAPES or len(self.layouts) >= MAX_LAYOUTS or len(self.shapes) >= MAX_LAYOUTS:
            self.ids.clear()
            self.kinds[1:] = []
            self.shapes.clear()
            self.headers.clear()
            self.header_list.clear()
            self.layouts.clear()
        get = self.ids.get
        sid = np.array([get(ln.translate(_ZERO_BYTES), -1) for ln in lines], dtype=np.int64)
        for i in np.flatnonzero(sid < 0).tolist():
            if len(lines[i]) > SHAPES.max_len:
                sid[i] = 0  # read one by one, its shape not kept (a shape is a key held in memory)
                continue
            k = lines[i].translate(_ZERO_BYTES)
            got = self.ids.get(k)
            if got is None:
                got = 0
                if len(self.ids) < MAX_SHAPES:
                    got = self.ids[k] = len(self.kinds)
                    self.kinds.append(self._kind_of(lines[i]))
            sid[i] = got
        return sid

    def _header_id(self, header: list[str] | tuple[str, ...]) -> int:
        key = tuple(header)
        got = self.headers.get(key)
        if got is None:
            got = self.headers[key] = len(self.header_list)
            self.header_list.append(key)
        return got

    def _layout(self, v: int, hid: int) -> tuple[RecordLayout | None, _RowPlan | None, int]:
        """The layout of variant ``v``'s records under header ``hid`` and its row plan; for a
        header row, the header after it."""
        got = self.layouts.get((v, hid))
        if got is None:
            shape = self.shapes[v]
            header = list(self.header_list[hid])
            lay, after = shape.layout(header)
            got = (lay, None if lay is None else self.ex.row_plan(lay, shape.facts), self._header_id(after))
            self.layouts[(v, hid)] = got
        return got

    # -- a chunk ----------------------------------------------------------------------------------
    def chunk(self, lines: list[bytes], base: int) -> None:
        """Read ``lines`` (raw, without their newlines); ``lines[i]`` is line ``base + i + 1``."""
        n = len(lines)
        sid = self._ids(lines)
        kind = np.array([k.kind for k in self.kinds], dtype=np.int8)[sid]
        groups = self._read_groups(lines, sid, kind)
        said = self._scan(lines, base, kind)
        # a line the scanner found nothing in and the extractor reads alone joins the records
        # around it; the others stop them
        simple = {i: v[0][0] for i, v in said.items()
                  if len(v) == 1 and v[0][2] and v[0][0].rank is None and not v[0][1]}
        stops = sorted(i for i in said if i not in simple)
        alone = np.array(sorted(simple), dtype=np.int64)
        starts = np.array([0, *(i + 1 for i in stops)], dtype=np.int64)
        ends = np.array([*stops, n], dtype=np.int64)
        # where each run of lines between two lines for the line reader starts in each group
        cuts = np.zeros((len(groups), starts.shape[0]), dtype=np.int64)
        ends_at = np.zeros((len(groups), starts.shape[0]), dtype=np.int64)
        for g, grp in enumerate(groups):
            cuts[g] = np.searchsorted(grp.rows, starts)
            ends_at[g] = np.searchsorted(grp.rows, ends)
        heads = np.flatnonzero(kind == HEADER)
        for r in range(starts.shape[0]):
            a, b = int(starts[r]), int(ends[r])
            if b > a:
                here = np.flatnonzero(ends_at[:, r] > cuts[:, r]).tolist()
                h0, h1 = np.searchsorted(heads, [a, b])
                s0, s1 = np.searchsorted(alone, [a, b])
                if here or h1 > h0 or s1 > s0:
                    self._run([(groups[g], int(cuts[g, r]), int(ends_at[g, r])) for g in here],
                              heads[h0:h1], [(i, simple[i]) for i in alone[s0:s1].tolist()], sid, base)
            if r < len(stops):
                for ln, events, feed in said[stops[r]]:
                    self.line(ln, events, feed)

    def _read_groups(self, lines: list[bytes], sid: NDArray[np.int64], kind: NDArray[np.int8]) -> list[_Group]:
        """Each record shape's lines read at once and split by the facts of their numbers; lines
        no variant reads become lines for the line reader (``kind`` updated)."""
        rows = np.flatnonzero(kind == RECORD)
        order = rows[np.argsort(sid[rows], kind="stable")]
        cut = np.flatnonzero(np.diff(sid[order])) + 1
        out: list[_Group] = []
        for idx in np.split(order, cut):
            if not idx.shape[0]:
                continue
            k = self.kinds[int(sid[idx[0]])]
            assert k.numbers is not None
            raw = [lines[i] for i in idx.tolist()] if idx.shape[0] == 1 else list(itemgetter(*idx.tolist())(lines))
            mat = np.frombuffer(b"".join(raw), dtype=np.uint8).reshape(len(raw), -1)
            nums = k.numbers.read(mat, raw)
            facts = facts_of(nums).astype(np.uint8)
            if not facts.shape[1] or bool((facts == facts[0]).all()):
                splits = [np.arange(idx.shape[0])]
            else:
                keys = np.ascontiguousarray(facts).view(f"V{facts.shape[1]}").ravel()
                _, inv = np.unique(keys, return_inverse=True)
                order_v = np.argsort(inv, kind="stable")
                splits = np.split(order_v, np.flatnonzero(np.diff(inv[order_v])) + 1)
            for sel in splits:
                first = int(sel[0])
                v = self._variant(k, facts[first].tobytes(), raw[first])
                if v < 0:
                    kind[idx[sel]] = LINE
                    continue
                shape = self.shapes[v]
                vals = self._values(shape, nums[sel])
                # a value that is one of the numbers has its facts already; an inverse may not
                recip = [c for c, (how, _) in enumerate(shape.sources) if how == 1]
                ok = np.all(facts_of(vals[:, recip]) == np.array([shape.facts[c] for c in recip], dtype=np.int64),
                            axis=1) if recip else np.ones(sel.shape[0], dtype=bool)
                if not ok.all():
                    kind[idx[sel[~ok]]] = LINE
                    sel, vals = sel[ok], vals[ok]
                if sel.shape[0]:
                    out.append(_Group(v, idx[sel], vals))
        return out

    @staticmethod
    def _values(shape: LineShape, nums: NDArray[np.float64]) -> NDArray[np.float64]:
        direct = [i for how, i in shape.sources if how == 0]
        if len(direct) == len(shape.sources):
            return nums[:, direct]
        vals = np.empty((nums.shape[0], len(shape.sources)))
        for c, (how, i) in enumerate(shape.sources):
            if (how, i) == NAN_SOURCE:
                vals[:, c] = np.nan
            elif how == 0:
                vals[:, c] = nums[:, i]
            else:
                x = nums[:, i]
                vals[:, c] = np.where(x == 0, np.inf, 1.0 / np.where(x == 0, 1.0, x))
        return vals

    def _scan(self, lines: list[bytes], base: int, kind: NDArray[np.int8]) -> Said:
        """The signature scanner over the lines for the line reader, in order; a line after one
        that leaves a record open (a traceback) is for the line reader too. The scanner keeps
        nothing from the other lines, so it may see these first; what it found is played in line
        order with the records."""
        todo = np.flatnonzero(kind == LINE).tolist()
        said: Said = {}
        n = len(lines)
        t = 0
        i: int | None = 0 if self.scanner.busy else None
        while True:
            if i is None:
                while t < len(todo) and todo[t] in said:
                    t += 1
                if t >= len(todo):
                    break
                i = todo[t]
            if i >= n:
                break
            out = []
            for ln in split_line(base + i + 1, lines[i]):
                events = self.scanner.feed(ln)
                out.append((ln, events, not self.scanner.busy and not events))
            said[i] = out
            i = i + 1 if self.scanner.busy else None
        return said

    def _run(self, parts_in: list[tuple[_Group, int, int]], heads: NDArray[np.int64], alone: list[tuple[int, Line]],
             sid: NDArray[np.int64], base: int) -> None:
        """One run of lines between two lines that stop it: the table headers its header rows set,
        then its records (``parts_in``: each group's slice in the run; ``alone``: lines the
        extractor reads one by one, in the run)."""
        ex = self.ex
        first = hid = self._header_id(ex.table.header)
        at_change: list[int] = []
        hids = [first]
        parts: list[_Part] = []
        ordered = sorted([*((i, None) for i in heads.tolist()), *alone], key=lambda x: x[0])
        for i, ln in ordered:
            if ln is None:
                k = self.kinds[int(sid[i])]
                assert k.variants is not None
                new = self._layout(k.variants[b""], hid)[2]
            else:
                table = Table()
                table.header = list(self.header_list[hid])
                rec = record_of(ln.text, ln.no, None, table)
                new = self._header_id(table.header)
                if rec is not None:
                    parts.append(self._part_of(i, rec))
            if new != hid:
                hid = new
                at_change.append(i)
                hids.append(hid)
        changes = np.array(at_change, dtype=np.int64)
        hid_at = np.array(hids, dtype=np.int64)
        for g, lo, hi in parts_in:
            rows, vals = g.rows[lo:hi], g.values[lo:hi]
            if not at_change or not self.shapes[g.variant].uses_header:
                lay, plan, _ = self._layout(g.variant, first)
                if lay is not None and plan is not None:
                    parts.append(_Part(plan, lay, rows, vals))
                continue
            at = hid_at[np.searchsorted(changes, rows)]  # the header each line is read under
            for h in np.unique(at).tolist():
                lay, plan, _ = self._layout(g.variant, h)
                if lay is not None and plan is not None:
                    sel = at == h
                    parts.append(_Part(plan, lay, rows[sel], vals[sel]))
        if at_change:
            ex.table.header = list(self.header_list[hid])
        if parts:
            self._place(parts, base)

    def _part_of(self, i: int, rec: Record) -> _Part:
        """One record read by the extractor as a part of its own."""
        keys = [*rec.metrics, *rec.counters, *rec.totals]
        vals = [*rec.metrics.values(), *rec.counters.values(), *rec.totals.values()]
        nm, nc = len(rec.metrics), len(rec.counters)
        lay = RecordLayout(tuple((k, j) for j, k in enumerate(keys[:nm])),
                           tuple((k, nm + j) for j, k in enumerate(keys[nm:nm + nc])),
                           tuple((k, nm + nc + j) for j, k in enumerate(keys[nm + nc:])))
        plan = self.ex.row_plan(lay, [_facts(v) for v in vals])
        return _Part(plan, lay, np.array([i], dtype=np.int64), np.array([vals], dtype=np.float64).reshape(1, -1))

    def _place(self, parts: list[_Part], base: int) -> None:
        rows = np.sort(np.concatenate([p.rows for p in parts]))
        n = rows.shape[0]
        groups = [(p.plan, np.searchsorted(rows, p.rows), p.values) for p in parts]
        steps = self.ex.place_many(n, groups) if n >= SMALL_RUN else None
        if steps is None:
            self._one_by_one(parts, base)
            return
        # each metric in line order; the metrics in the order they first appear (then the layout's)
        firsts: dict[str, tuple[int, int]] = {}
        values: dict[str, NDArray[np.float64]] = {}
        has: dict[str, NDArray[np.bool_]] = {}
        placed = np.zeros(n, dtype=bool)
        for p, (_, pos, vals) in zip(parts, groups):
            if not p.plan.metrics:
                continue
            placed[pos] = True
            for j, (key, i) in enumerate(p.layout.metrics):
                f = (int(pos[0]), j)
                if key not in firsts:
                    firsts[key] = f
                    values[key] = np.empty(n)
                    has[key] = np.zeros(n, dtype=bool)
                elif f < firsts[key]:
                    firsts[key] = f
                values[key][pos] = vals[:, i]
                has[key][pos] = True
        if not firsts:
            return
        metrics = []
        for key in sorted(firsts, key=firsts.__getitem__):
            pos = np.flatnonzero(has[key])
            metrics.append((key, pos, values[key][pos]))
        self.emit_many(steps, rows + (base + 1), np.flatnonzero(placed), metrics)

    def _one_by_one(self, parts: list[_Part], base: int) -> None:
        recs: list[tuple[int, Record]] = []
        for p in parts:
            lay = p.layout
            for line, v in zip(p.rows.tolist(), p.values.tolist()):
                recs.append((line, Record(base + line + 1, None, {k: v[i] for k, i in lay.metrics},
                                          {k: v[i] for k, i in lay.counters}, {k: v[i] for k, i in lay.totals})))
        recs.sort(key=lambda x: x[0])
        for _, rec in recs:
            placed = self.ex.place(rec)
            self.emit([placed] if placed is not None else [])
