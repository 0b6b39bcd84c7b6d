"""Bulk reading of text logs, a chunk of lines at a time (for :mod:`trainaudit.ingest.formats.text.lines`).

Once the extractor has decided which counter is the step (:attr:`Extractor.steady`), a chunk's
lines are grouped by shape: the line with every digit a ``0`` (:class:`LineShape`). Lines of one
shape have their digits at the same offsets, so a group's numbers are read at once from a matrix
of its lines, its records follow the shape's layout, and the records between two lines that need
the line reader are placed and handed to the sink as arrays.

The grouping (:class:`ShapeBook`: shapes, numbers, facts) needs nothing of the extractor, so worker
processes can do it for the chunks ahead (:func:`range_grouper`), each with its own book; the
placing (:class:`BulkLines`) takes each chunk's :class:`Grouped` in order.

A line goes through the line reader, in order, when its shape cannot promise the line reader's
result: the signature scanner may speak of it (or a traceback is open), a launcher prefix, ANSI
codes, carriage returns, non-ASCII text, a shape without a plan, or numbers whose facts differ
from those of the line the shape was read off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.chunks import cut_long_lines, read_range
from trainaudit.ingest.extract import (
    _ZERO_BYTES,
    NAN_SOURCE,
    RATE_KEYS,
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
LINE_SHARE = 4  # a chunk whose lines are more than 1 in LINE_SHARE for the line reader is left to it

LINE, NONE, HEADER, RECORD = 0, 1, 2, 3  # what a shape's lines need

def _slow(raw: bytes) -> float:
    v = number(raw.decode("ascii"))
    return float("nan") if v is None else v


class SpanNumbers:
    """The numbers at a shape's spans, for the lines of that shape (a row a line): vectorised where
    :class:`~trainaudit.ingest.fastnum.FixedNumbers` can, the same text on every line where a span
    has no digit ("nan"); else a column of texts cast by numpy, which parses each as ``float()``
    does (long mantissas; checked bitwise in the tests), and ``number()`` line by line where that
    cast refuses a column (thousands commas)."""

    def __init__(self, text: str, spans: tuple[tuple[int, int], ...]) -> None:
        self.spans = spans
        digits = [j for j, (a, b) in enumerate(spans) if any("0" <= c <= "9" for c in text[a:b])]
        self.const = {j: _slow(text[a:b].encode("ascii")) for j, (a, b) in enumerate(spans) if j not in digits}
        self.fixed = FixedNumbers(text, [spans[j] for j in digits])
        self.digits = np.array(digits, dtype=np.int64)

    def read(self, lines: ChunkLines, rows: NDArray[np.int64]) -> NDArray[np.float64]:
        return self.read_at(lines.buf, lines.starts[rows])

    def read_at(self, buf: NDArray[np.uint8], starts: NDArray[np.int64]) -> NDArray[np.float64]:
        """The numbers of the lines (or segments) of this shape that start at ``starts`` of ``buf``."""
        out = np.empty((starts.shape[0], len(self.spans)))
        vals, ok = self.fixed.read_at(buf, starts)
        out[:, self.digits] = vals
        bad = ~ok
        for q in np.flatnonzero(bad.any(axis=0)).tolist():
            at = starts[bad[:, q]]
            j = int(self.digits[q])
            a, b = self.spans[j]
            texts = buf[at[:, None] + np.arange(a, b)].view(f"S{b - a}").ravel()
            try:
                with np.errstate(all="ignore"):  # an overflow to inf is float()'s result too
                    out[bad[:, q], j] = texts.astype(np.float64)
            except ValueError:
                out[bad[:, q], j] = [_slow(t) for t in texts.tolist()]
        for j, v in self.const.items():
            out[:, j] = v
        return out


def _by_facts(facts: NDArray[np.uint8]) -> list[NDArray[np.int64]]:
    """The rows of each combination of facts (a row a line, a column a number's facts)."""
    n, k = facts.shape
    if not k or bool((facts == facts[0]).all()):
        return [np.arange(n)]
    if k <= 16:  # a fact is 4 bits: a line's combination as one integer
        code = facts.astype(np.uint64) @ (np.uint64(1) << (np.arange(k, dtype=np.uint64) * np.uint64(4)))
        values = np.unique(code)
        if values.shape[0] <= 8:  # (the usual few) one pass each
            return [np.flatnonzero(code == v) for v in values]
        inv = np.searchsorted(values, code)
    else:
        _, inv = np.unique(np.ascontiguousarray(facts).view(f"V{k}").ravel(), return_inverse=True)
    order = np.argsort(inv, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(inv[order])) + 1)


class ChunkLines:
    """A chunk's lines as slices of its bytes, cut when asked for: most lines are only ever read
    as rows of a matrix."""

    __slots__ = ("buf", "data", "ends", "starts")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.buf = np.frombuffer(data, dtype=np.uint8)
        ends = np.flatnonzero(self.buf == 10)
        if data and not data.endswith(b"\n"):
            ends = np.append(ends, len(data))
        self.ends = ends
        self.starts = np.concatenate([[0], ends[:-1] + 1]) if ends.shape[0] else ends

    def __len__(self) -> int:
        return int(self.ends.shape[0])

    def __getitem__(self, i: int) -> bytes:
        return self.data[int(self.starts[i]):int(self.ends[i])]

    def __reduce__(self) -> tuple[Callable[[NDArray[np.uint8]], ChunkLines], tuple[NDArray[np.uint8]]]:
        # the bytes as an array: a worker's result sends its arrays through shared memory, not the
        # pipe (chunks.OrderedWorkers); the rest is made from them again
        return _chunk_lines, (self.buf,)


def _chunk_lines(buf: NDArray[np.uint8]) -> ChunkLines:
    return ChunkLines(buf.tobytes())


class _Texts:
    """The text of a chunk's lines for the line reader: those a book sent, else (a line after a
    traceback, which a book cannot know of) from the chunk, read once when first needed."""

    def __init__(self, texts: dict[int, bytes], lines: ChunkLines | Callable[[], bytes]) -> None:
        self.texts = texts
        self.lines = lines

    def __getitem__(self, i: int) -> bytes:
        got = self.texts.get(i)
        if got is None:
            if not isinstance(self.lines, ChunkLines):
                self.lines = ChunkLines(self.lines())
            got = self.lines[i]
        return got


@dataclass(slots=True)
class _Kind:
    """What one shape's lines need; for record lines, how to read their numbers and a
    :class:`LineShape` for each facts of them seen (None: those lines are read one by one)."""

    kind: int
    numbers: SpanNumbers | None = None
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


@dataclass(slots=True)
class Grouped:
    """A chunk's lines as a :class:`ShapeBook` grouped them: what each line needs, the header rows
    with their variants, the record lines of each variant with their values, and the text of the
    lines for the line reader. ``shapes`` are the variants the book added since its last chunk
    (after ``reset``, since it started afresh)."""

    book: int
    reset: bool
    shapes: list[LineShape]
    kind: NDArray[np.int8]
    heads: NDArray[np.int64]
    head_variants: NDArray[np.int64]
    groups: list[_Group]
    texts: dict[int, bytes]
    cut_lines: int = 0  # over-long lines cut in the chunk (see chunks.cut_long_lines)

    def after(self, start: int) -> Grouped:
        """The lines from ``start`` on (numbered from 0 again); the book's news stay with them."""
        h = np.searchsorted(self.heads, start)
        groups = []
        for g in self.groups:
            i = int(np.searchsorted(g.rows, start))
            if i < g.rows.shape[0]:
                groups.append(_Group(g.variant, g.rows[i:] - start, g.values[i:]))
        return Grouped(self.book, self.reset, self.shapes, self.kind[start:], self.heads[h:] - start,
                       self.head_variants[h:], groups, {i - start: t for i, t in self.texts.items() if i >= start})


class ShapeBook:
    """The shapes seen in a file and what their lines need: groups a chunk's lines by shape and
    reads each group's numbers. It needs nothing of the extractor, so a worker process can keep
    one and group chunks ahead of the reader (``book`` tells the reader whose variant ids these
    are)."""

    def __init__(self, book: int = 0) -> None:
        self.book = book
        self.ids: dict[bytes, int] = {}
        self.kinds: list[_Kind] = [_Kind(LINE)]  # id 0: lines read one by one
        self.shapes: list[LineShape] = []  # the variants
        self.sent = 0  # variants already handed over with a chunk

    def group(self, lines: ChunkLines) -> Grouped:
        """A chunk's lines grouped; the book keeps what it learnt for the next chunk."""
        reset = len(self.ids) >= MAX_SHAPES or len(self.shapes) >= MAX_LAYOUTS
        if reset:
            self.ids.clear()
            self.kinds[1:] = []
            self.shapes.clear()
            self.sent = 0
        sid = self._ids(lines)
        kind = np.array([k.kind for k in self.kinds], dtype=np.int8)[sid]
        groups = self._read_groups(lines, sid, kind)
        heads = np.flatnonzero(kind == HEADER)
        header_variant = np.array([k.variants[b""] if k.kind == HEADER and k.variants else -1 for k in self.kinds],
                                  dtype=np.int64)
        new = self.shapes[self.sent:]
        self.sent = len(self.shapes)
        texts = {i: lines[i] for i in np.flatnonzero(kind == LINE).tolist()}
        return Grouped(self.book, reset, new, kind, heads, header_variant[sid[heads]], groups, texts)

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
        return _Kind(RECORD, SpanNumbers(text, tuple(spans)), {})

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

    def _ids(self, lines: ChunkLines) -> NDArray[np.int64]:
        # the chunk's shapes: one translation of all its bytes, then one lookup a line in C
        keys = lines.data.translate(_ZERO_BYTES).split(b"\n")[:len(lines)]
        sid = np.fromiter(map(self.ids.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        for i in np.flatnonzero(sid < 0).tolist():
            k = keys[i]
            if len(k) > SHAPES.max_len:
                sid[i] = 0  # read one by one, its shape not kept (a shape is a key held in memory)
                continue
            got = self.ids.get(k)
            if got is None:
                got = 0
                if len(self.ids) < MAX_SHAPES:
                    got = self.ids[k] = len(self.kinds)
                    self.kinds.append(self._kind_of(lines[i]))
            sid[i] = got
        return sid

    def _read_groups(self, lines: ChunkLines, sid: NDArray[np.int64], kind: NDArray[np.int8]) -> list[_Group]:
        """Each record shape's lines read at once and split by the facts of their numbers; lines
        no variant reads become lines for the line reader (``kind`` updated)."""
        rows = np.flatnonzero(kind == RECORD)
        # (shape ids fit 16 bits, whose stable sort is a radix sort)
        order = rows[np.argsort(sid[rows].astype(np.int16), kind="stable")]
        cut = np.flatnonzero(np.diff(sid[order])) + 1
        out: list[_Group] = []
        for idx in np.split(order, cut):
            if not idx.shape[0]:
                continue
            k = self.kinds[int(sid[idx[0]])]
            assert k.numbers is not None
            nums = k.numbers.read(lines, idx)
            facts = facts_of(nums).astype(np.uint8)
            for sel in _by_facts(facts):
                first = int(sel[0])
                v = self._variant(k, facts[first].tobytes(), lines[int(idx[first])])
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


def range_grouper(path: str, line_bytes: int | None) -> Callable[[int], Callable[[tuple[int, int]], Grouped]]:
    """What worker ``i`` of :class:`~trainaudit.ingest.chunks.OrderedWorkers` does with a range
    (offset, length) of the file at ``path``: its lines grouped by the worker's own book
    (``i + 1``; book 0 is the reader's)."""

    def make(i: int) -> Callable[[tuple[int, int]], Grouped]:
        book = ShapeBook(i + 1)

        def group(r: tuple[int, int]) -> Grouped:
            data, cut = cut_long_lines(read_range(path, r[0], r[1]), line_bytes)
            got = book.group(ChunkLines(data))
            got.cut_lines = cut
            return got

        return group

    return make


class BulkLines:
    """Reads chunks of lines for a text reader whose extractor is steady. ``line`` is the line
    reader's handling of one cleaned line (its scanner events already taken); ``emit`` hands
    placed records to the sink one by one; ``emit_many`` hands a run of placed records over."""

    def __init__(self, ex: Extractor, scanner: SignatureScanner,
                 line: Callable[[Line, list[Event], bool], None], emit: Emit, emit_many: EmitMany) -> None:
        self.ex, self.scanner, self.line, self.emit, self.emit_many = ex, scanner, line, emit, emit_many
        self.book = ShapeBook()  # for the chunks no worker grouped
        self.shapes: dict[int, list[LineShape]] = {}  # each book's variants
        self.headers: dict[tuple[str, ...], int] = {}
        self.header_list: list[tuple[str, ...]] = []
        self.layouts: dict[tuple[int, int, int], tuple[RecordLayout | None, _RowPlan | None, int]] = {}

    def _header_id(self, header: list[str] | tuple[str, ...]) -> int:
        key = tuple(header)
        got = self.headers.get(key)
        if got is None:
            got = self.headers[key] = len(self.header_list)
            self.header_list.append(key)
        return got

    def _layout(self, book: int, v: int, hid: int) -> tuple[RecordLayout | None, _RowPlan | None, int]:
        """The layout of ``book``'s variant ``v``'s records under header ``hid`` and its row plan;
        for a header row, the header after it."""
        got = self.layouts.get((book, v, hid))
        if got is None:
            shape = self.shapes[book][v]
            header = list(self.header_list[hid])
            lay, after = shape.layout(header)
            got = (lay, None if lay is None else self.ex.row_plan(lay, shape.facts), self._header_id(after))
            self.layouts[(book, v, hid)] = got
        return got

    def learn(self, g: Grouped) -> None:
        """Take in the news of ``g``'s book (once for each chunk the book grouped, read or not)."""
        if g.reset or len(self.layouts) >= MAX_LAYOUTS:
            self.layouts.clear()  # (their variant ids may be gone)
            self.headers.clear()
            self.header_list.clear()
        shapes = self.shapes[g.book] = [] if g.reset else self.shapes.get(g.book, [])
        shapes.extend(g.shapes)

    # -- a chunk ----------------------------------------------------------------------------------
    def chunk(self, data: bytes | Callable[[], bytes], base: int, grouped: Grouped | None = None) -> int | None:
        """Read the lines of ``data`` (whole lines, the last one's newline may be missing); its
        first line is line ``base + 1``. ``grouped``: the lines as a worker's book grouped them
        (else this reader's own book groups them); then ``data`` may be a function that reads
        them, called only if the line reader needs more lines than the worker sent. Returns the
        number of lines read, or None, having read none, when the line reader would read more
        than a quarter of them anyway (launcher prefixes on every line, say): then the runs of
        records between them are short, and reading them in bulk costs more than it saves."""
        lines: ChunkLines | Callable[[], bytes]
        if grouped is None:
            assert isinstance(data, bytes)
            known = ChunkLines(data)
            g, lines = self.book.group(known), known
        else:
            g, lines = grouped, (lambda: data) if isinstance(data, bytes) else data
        n = g.kind.shape[0]
        self.learn(g)
        groups, kind, heads = g.groups, g.kind, g.heads
        if int(np.count_nonzero(kind == LINE)) * LINE_SHARE > n:
            return None
        said = self._scan(_Texts(g.texts, lines), base, kind)
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
        for q, grp in enumerate(groups):
            cuts[q] = np.searchsorted(grp.rows, starts)
            ends_at[q] = np.searchsorted(grp.rows, ends)
        # the groups with lines in each run, all runs at once
        run_of, group_of = np.nonzero((ends_at > cuts).T)
        in_run = np.split(group_of, np.searchsorted(run_of, np.arange(1, starts.shape[0])))
        head_at = np.searchsorted(heads, np.stack([starts, ends]))
        alone_at = np.searchsorted(alone, np.stack([starts, ends]))
        for r in range(starts.shape[0]):
            if ends[r] > starts[r]:
                here = in_run[r].tolist()
                h0, h1 = int(head_at[0, r]), int(head_at[1, r])
                s0, s1 = int(alone_at[0, r]), int(alone_at[1, r])
                if here or h1 > h0 or s1 > s0:
                    self._run(g.book, [(groups[q], int(cuts[q, r]), int(ends_at[q, r])) for q in here],
                              [*zip(heads[h0:h1].tolist(), g.head_variants[h0:h1].tolist())],
                              [(i, simple[i]) for i in alone[s0:s1].tolist()], base)
            if r < len(stops):
                for ln, events, feed in said[stops[r]]:
                    self.line(ln, events, feed)
        return n

    def _scan(self, lines: _Texts, base: int, kind: NDArray[np.int8]) -> Said:
        """The signature scanner over the lines for the line reader, in order; a line after one
        that leaves a record open (a traceback) is for the line reader too. The scanner keeps
        nothing from the other lines, so it may see these first; what it found is played in line
        order with the records."""
        todo = np.flatnonzero(kind == LINE).tolist()
        said: Said = {}
        n = kind.shape[0]
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

    def _run(self, book: int, parts_in: list[tuple[_Group, int, int]], heads: list[tuple[int, int]],
             alone: list[tuple[int, Line]], base: int) -> None:
        """One run of lines between two lines that stop it: the table headers its header rows set
        (``heads``: line and variant), then its records (``parts_in``: each group's slice in the
        run; ``alone``: lines the extractor reads one by one, in the run)."""
        ex = self.ex
        shapes = self.shapes[book]
        first = hid = self._header_id(ex.table.header)
        at_change: list[int] = []
        hids = [first]
        parts: list[_Part] = []
        ordered: list[tuple[int, int | Line]] = sorted([*heads, *alone], key=itemgetter(0)) if alone else [*heads]
        for i, what in ordered:
            if isinstance(what, int):
                new = self._layout(book, what, hid)[2]
            else:
                ln = what
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
            if not at_change or not shapes[g.variant].uses_header:
                lay, plan, _ = self._layout(book, g.variant, first)
                if lay is not None and plan is not None:
                    parts.append(_Part(plan, lay, rows, vals))
                continue
            at = hid_at[np.searchsorted(changes, rows)]  # the header each line is read under
            for h in np.unique(at).tolist():
                lay, plan, _ = self._layout(book, g.variant, h)
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

    def _main_bars(self, parts: list[_Part]) -> list[_Part]:
        """The parts as :meth:`Extractor.main_bar` leaves their records, in line order: a row of a
        progress bar shorter than the longest one that printed its rate before it loses its rates and
        its count, and the row itself when it has no other metric."""
        rated = []
        for j, p in enumerate(parts):
            slot = dict(p.layout.totals).get("progress")
            rates = [k for k, _ in p.layout.metrics if k.lower() in RATE_KEYS]
            if slot is not None and rates:
                rated.append((j, p.values[:, slot], rates))
        if not rated:
            return parts
        drop = {j: np.zeros(parts[j].rows.shape[0], dtype=bool) for j, _, _ in rated}
        for key in sorted({k for _, _, rates in rated for k in rates}):
            with_key = [(j, tot) for j, tot, rates in rated if key in rates]
            rows = np.concatenate([parts[j].rows for j, _ in with_key])
            tot = np.concatenate([t for _, t in with_key])
            order = np.argsort(rows, kind="stable")
            top = np.maximum.accumulate(np.concatenate([[self.ex.bar_total.get(key, -np.inf)], tot[order]]))
            short = np.empty(rows.shape[0], dtype=bool)
            short[order] = tot[order] < top[:-1]
            at = 0
            for j, _ in with_key:
                m = parts[j].rows.shape[0]
                drop[j] |= short[at:at + m]
                at += m
        # the longest bar after these rows: a row that lost its rates sets nothing (as line by line)
        for j, tot, rates in rated:
            kept = tot[~drop[j]]
            if kept.size:
                for k in rates:
                    self.ex.bar_total[k] = max(self.ex.bar_total.get(k, -np.inf), float(kept.max()))
        out: list[_Part] = []
        for j, p in enumerate(parts):
            d = drop.get(j)
            if d is None or not d.any():
                out.append(p)
                continue
            if not d.all():
                out.append(_Part(p.plan, p.layout, p.rows[~d], p.values[~d]))
            left = tuple((k, i) for k, i in p.layout.metrics if k.lower() not in RATE_KEYS)
            if left:
                lay = RecordLayout(left, tuple(c for c in p.layout.counters if c[0] != "progress"),
                                   tuple(t for t in p.layout.totals if t[0] != "progress"))
                vals = p.values[d]
                out.append(_Part(self.ex.row_plan(lay, [_facts(v) for v in vals[0]]), lay, p.rows[d], vals))
        return out

    def _place(self, parts: list[_Part], base: int) -> None:
        parts = self._main_bars(parts)
        if not parts:
            return
        n = sum(p.rows.shape[0] for p in parts)
        if n < SMALL_RUN:
            self._one_by_one(parts, base)
            return
        # the parts' lines (each part's ascending, no line in two) in order, and each one's position
        lo = min(int(p.rows[0]) for p in parts)
        mark = np.zeros(max(int(p.rows[-1]) for p in parts) + 1 - lo, dtype=bool)
        for p in parts:
            mark[p.rows - lo] = True
        rows = np.flatnonzero(mark) + lo
        index = np.cumsum(mark) - 1
        groups = [(p.plan, index[p.rows - lo], p.values) for p in parts]
        steps = self.ex.place_many(n, groups)
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
