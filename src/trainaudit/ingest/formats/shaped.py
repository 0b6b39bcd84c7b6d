"""A line format's log read a chunk of physical lines at a time, by the shape of their
carriage-return segments (for the formats of progress bars and metric lines: HF Trainer dicts,
Lightning and Keras bars, torchtitan lines).

A segment's shape is its bytes with every digit a ``0``. Segments of one shape differ in their
digits only, so whatever a format's line reader does with one of them it does with all of them
but for the numbers, which stand at the same offsets in each: the format looks at one segment of
a shape (``classify``) and then reads the numbers of every segment of that shape at once, from a
matrix of segments (:class:`~trainaudit.ingest.formats.text.bulk.SpanNumbers`). The shapes of a
chunk's segments are found in C (one ``bytes.translate``, one ``split``, one dict lookup each).

Each segment gets a kind from its shape, and each physical line one from its segments':

- ``OTHER``: read by the line reader, exactly as :class:`~trainaudit.ingest.base.LineReader.read`
  reads it (invalid UTF-8 or control bytes, what the signature scanner may speak of, what the
  format's ``classify`` leaves to the line reader, a shape too long or one past
  :data:`MAX_SHAPES`);
- ``BLANK``: blanks only (the line reader does nothing with it);
- ``QUIET``: the format does nothing with it (its gate finds nothing in it, or its feed ignores it),
  but for the bar a waiting format reads in a line's first non-blank segment;
- ``ROW``: a record the format's ``place`` reads in bulk.

A run of lines without ``OTHER`` is handed to the format's ``place`` while no traceback is open
and the format has found something (:class:`SpareNumbers` no longer reads along): those lines then
never reach the scanner (it would find nothing in them) nor the extractor. ``place`` returns where
the line reader takes over again (its state must then be what the line reader would have left
there). Which segments the signature scanner may speak of is decided once a shape
(:func:`~trainaudit.ingest.signatures.may_speak` is blind to digits). ANSI codes and launcher
prefixes are removed as the line cleaner removes them (:class:`Where`), the rank's digits read per
segment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.base import SIGNALS_RAW, LineReader, SpareNumbers
from trainaudit.ingest.chunks import POOL_MIN_SIZE, OrderedWorkers, cut_long_lines, file_ranges, in_order, \
    read_range, stream_chunks, usable_cpus
from trainaudit.ingest.extract import _ZERO_BYTES
from trainaudit.ingest.formats.text.bulk import ChunkLines
from trainaudit.ingest.signatures import SignatureScanner, may_speak
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import ANSI_RE, Line, gated_split, literals, split_line, strip_prefixes, trie_pattern
from trainaudit.model import Event

OTHER, BLANK, QUIET, ROW = 0, 1, 2, 3
CHUNK_SIZE = 1 << 20  # (larger chunks cost more memory in transient arrays than they save time)
MAX_SHAPES = 16384  # then new shapes are read by the line reader (a log of ever new shapes stays bounded)
MAX_LEN = 4096  # longer lines are read by the line reader (a shape is a key held in memory)

# bytes a segment read in bulk never holds: control bytes but tab and backspace (Keras redraws with
# it; the formats read it as any other character), ANSI escapes among them, and DEL
_ODD = re.compile(rb"[\x00-\x07\x0a-\x1a\x1c-\x1f\x7f]")


DIGIT_RE = re.compile(r"[0-9]")
DIGITS_RE = re.compile(r"[0-9]+")


def zeroed_pattern(pattern: str) -> bytes:
    """The literals of ``pattern`` (see :func:`literals`) with their digits zeroed, as one bytes
    pattern (compile it where it is defined): what it finds nothing in, in a shape, no line of the
    shape holds a literal of."""
    words = {w.encode("ascii").translate(_ZERO_BYTES).decode("ascii") for w in literals(pattern)}
    return trie_pattern(sorted(words)).encode("ascii")


@dataclass(slots=True)
class Shape:
    """What one segment shape's segments are, and what the format keeps of it (``info``)."""

    kind: int
    info: Any = None
    rank: tuple[int, int] | None = None  # the bytes of a ROW segment's launcher rank


@dataclass(slots=True)
class Chunk:
    """A chunk's physical lines with their kinds; for each line, the shape id and start of its first
    non-blank segment and of its ``ROW`` segment (0 where none)."""

    lines: ChunkLines
    kind: NDArray[np.int8]
    first: NDArray[np.int64]
    first_at: NDArray[np.int64]
    row: NDArray[np.int64]
    row_at: NDArray[np.int64]
    segments: NDArray[np.int64]  # the chunk's ROW segments: shape id, start, line, rank or -1 (a row each)
    cache: dict[str, Any] = field(default_factory=dict)  # what a format read of the chunk at once


_SEGMENT_KEYS = bytes.maketrans(b"123456789\r", b"000000000\n")  # digits zeroed, CR a break too


class ShapeTable:
    """The shapes of a file's carriage-return segments. ``classify(body, quiet, where)`` is the
    format's look at one segment of a new shape (valid UTF-8 without control characters but tab,
    BS and the ANSI codes the cleaner removes, not blank, no line the scanner may speak of), as
    the line reader sees it (``body``: cleaned, launcher prefixes stripped; ``where``: how that maps
    to the segment's bytes, its rank), with ``quiet`` when its gate finds nothing in it, and
    returns its :class:`Shape`, ``QUIET``, ``ROW`` or ``OTHER``, with offsets in the segment's
    bytes: segments of a shape have the same bytes but for ASCII digits.

    A line is ``OTHER`` when a segment is, or (``one_row``) when two are ``ROW``s; ``BLANK`` when all
    are blank; ``ROW`` when one is (or more); else ``QUIET``. A format without a gate has no
    ``quiet`` segments (its line reader reads every line)."""

    def __init__(self, gate: re.Pattern[bytes] | None, classify: Callable[[str, bool, Where], Shape], *,
                 one_row: bool = True) -> None:
        self.ids: dict[bytes, int] = {}
        self.shapes: list[Shape] = [Shape(OTHER)]  # id 0: the line reader's
        self.gate = gate  # the format's gate literals, zeroed (zeroed_pattern)
        self.one_row = one_row  # a line with two ROW segments is the line reader's
        self.classify = classify
        self.memo: dict[str, Any] = {}  # what a format derives from the shapes, with the count it had then

    def chunk(self, data: bytes) -> Chunk:
        lines = ChunkLines(data)
        n = len(lines)
        buf = lines.buf
        brk = np.flatnonzero((buf == 10) | (buf == 13))
        starts = np.concatenate(([0], brk + 1))
        ends = np.append(brk, len(data))
        line_of = np.concatenate(([0], np.cumsum(buf[brk] == 10)))
        keep = line_of < n  # (the empty segment after the last newline belongs to no line)
        keys = data.translate(_SEGMENT_KEYS).split(b"\n")
        sid = np.fromiter(map(self.ids.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        for i in np.flatnonzero(sid < 0).tolist():
            key = keys[i]
            got = self.ids.get(key)
            if got is None:
                if len(key) > MAX_LEN or len(self.ids) >= MAX_SHAPES:
                    sid[i] = 0
                    continue
                got = self.ids[key] = len(self.shapes)
                self.shapes.append(self._shape(data[int(starts[i]):int(ends[i])], key))
            sid[i] = got
        sid, starts, line_of = sid[keep], starts[keep], line_of[keep]
        skind = np.array([s.kind for s in self.shapes], dtype=np.int8)[sid]
        others = np.bincount(line_of[skind == OTHER], minlength=n)
        is_row = np.flatnonzero(skind == ROW)
        rows = np.bincount(line_of[is_row], minlength=n)
        shown = np.flatnonzero(skind != BLANK)
        has, at = np.unique(line_of[shown], return_index=True)
        first = np.zeros(n, dtype=np.int64)
        first_at = np.zeros(n, dtype=np.int64)
        first[has], first_at[has] = sid[shown[at]], starts[shown[at]]
        row = np.zeros(n, dtype=np.int64)
        row_at = np.zeros(n, dtype=np.int64)
        row[line_of[is_row]], row_at[line_of[is_row]] = sid[is_row], starts[is_row]
        kind = np.full(n, QUIET, dtype=np.int8)
        kind[np.bincount(line_of[shown], minlength=n) == 0] = BLANK
        kind[rows >= 1] = ROW
        kind[(others > 0) | ((rows > 1) & self.one_row)] = OTHER
        ranks = np.full(is_row.shape[0], -1, dtype=np.int64)
        rsid = sid[is_row]
        for s in np.unique(rsid).tolist():
            span = self.shapes[s].rank
            if span is not None:
                sel = rsid == s
                ranks[sel] = digits_at(buf, starts[is_row][sel] + span[0], span[1] - span[0])
        segments = np.stack([rsid, starts[is_row], line_of[is_row], ranks])
        return Chunk(lines, kind, first, first_at, row, row_at, segments)

    def _shape(self, raw: bytes, key: bytes) -> Shape:
        if _ODD.search(raw) is not None:
            return Shape(OTHER)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return Shape(OTHER)
        where = Where(text)
        if "\x1b" in where.clean:
            return Shape(OTHER)  # an escape the cleaner leaves
        if not where.clean.strip():
            return Shape(BLANK)
        if may_speak(where.body):
            return Shape(OTHER)
        if where.rank_span is False:
            return Shape(OTHER)
        got = self.classify(where.body, self.gate is not None and self.gate.search(key) is None, where)
        if got.kind == ROW and isinstance(where.rank_span, tuple):
            got.rank = where.raw_span(*where.rank_span, body=False)
        return got


def byte_offset(text: str, at: int) -> int:
    """Where character ``at`` of ``text`` starts in its UTF-8 bytes."""
    return at if text.isascii() else len(text[:at].encode("utf-8"))


class Where:
    """A segment as the line cleaner makes it: ``clean`` (ANSI codes removed), ``body`` (launcher
    prefixes stripped, ``rank`` theirs), ``plain`` when both are the segment itself. ``raw_span``
    maps a span of the body to the segment's bytes (None when an escape code stands inside it);
    ``rank_span`` is the span of the rank's digits in ``clean`` (None: no rank; False: the rank is
    not one run of digits that lines of the shape share the place of)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.kept: list[int] = []  # the segment's index of each character of clean
        if "\x1b" in text:
            pos = 0
            for m in ANSI_RE.finditer(text):
                self.kept += range(pos, m.start())
                pos = m.end()
            self.kept += range(pos, len(text))
            self.clean = "".join(text[i] for i in self.kept)
        else:
            self.kept = list(range(len(text)))
            self.clean = text
        self.body, self.rank = strip_prefixes(self.clean)
        self.plen = len(self.clean) - len(self.body)
        self.plain = self.body == text
        self.rank_span: tuple[int, int] | bool | None = None
        if self.rank is not None:
            # the digits of the prefix whose change changes the rank (lines of a shape differ in digits only)
            moved = [i for i in range(self.plen) if self.clean[i] in "0123456789"
                     and strip_prefixes(self.clean[:i] + ("1" if self.clean[i] != "1" else "2") + self.clean[i + 1:])
                     [1] != self.rank]
            ok = bool(moved) and moved == list(range(moved[0], moved[-1] + 1)) and \
                self.clean[moved[0]:moved[-1] + 1].isascii() and int(self.clean[moved[0]:moved[-1] + 1]) == self.rank
            self.rank_span = (moved[0], moved[-1] + 1) if ok else False

    def raw_span(self, a: int, b: int, body: bool = True) -> tuple[int, int] | None:
        """The bytes of the segment that hold characters ``a`` to ``b`` of the body (of ``clean``
        with ``body`` False)."""
        if body:
            a, b = a + self.plen, b + self.plen
        if b <= a:
            return None
        ra, rb = self.kept[a], self.kept[b - 1] + 1
        if rb - ra != b - a:
            return None
        return byte_offset(self.text, ra), byte_offset(self.text, rb)


def digits_at(buf: NDArray[np.uint8], at: NDArray[np.int64], width: int) -> NDArray[np.int64]:
    """The decimal integers of ``width`` ASCII digits at offsets ``at`` of ``buf``."""
    d = (buf[at[:, None] + np.arange(width)] - 48).astype(np.int64)
    return d @ (10 ** np.arange(width - 1, -1, -1, dtype=np.int64))


class Columns(dict[str, tuple[NDArray[np.float64], NDArray[np.bool_]]]):
    """Each key's values over ``k`` rows of a chunk (NaN where a row lacks it) and where a row has it."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def put(self, key: str, sel: NDArray[np.int64], values: NDArray[np.float64]) -> None:
        """The values of ``key`` at rows ``sel``."""
        if key not in self:
            self[key] = (np.full(self.k, np.nan), np.zeros(self.k, dtype=bool))
        self[key][0][sel] = values
        self[key][1][sel] = True


class RunValues(Sink):
    """What a run of lines adds to ``sink``: the values kept per metric in the order they come and
    handed over at once (``add_many``, each metric in the order of its first value) by ``done``;
    events and metadata passed on as they come."""

    def __init__(self, sink: Sink) -> None:
        super().__init__()
        self.sink = sink
        self.source = sink.source
        self.last_step = sink.last_step
        self.got: dict[str, tuple[list[int], list[float], list[int]]] = {}

    def add(self, metric: str, step: int, value: float, line: int, rank: int | None = None) -> None:
        if rank is not None:
            metric = self.sink.metric_for(metric, rank)
        got = self.got.get(metric)
        if got is None:
            got = self.got[metric] = ([], [], [])
        got[0].append(step)
        got[1].append(value)
        got[2].append(line)
        self.last_step = step

    def event(self, ev: Event) -> None:
        if ev.step is None:
            ev.step = self.last_step
        self.sink.event(ev)

    def meta(self, key: str, value: Any) -> None:
        self.sink.meta(key, value)

    def done(self) -> None:
        for metric, (steps, values, lines) in self.got.items():
            self.sink.add_many(metric, steps, values, lines)
        self.got = {}
        self.sink.last_step = self.last_step


Place = Callable[[ShapeTable, Chunk, int, int, int], int]
Prepare = Callable[[ShapeTable, Chunk], None]
ReadChunk = Callable[[Chunk, list[Any]], Any]


def _unprepared(_table: ShapeTable, _chunk: Chunk) -> None:
    pass


def chunk_numbers(table: ShapeTable, chunk: Chunk, key: str, read: ReadChunk) -> Any:
    """What a format reads of ``chunk`` at once, ``read(chunk, the shapes' infos)``, kept in the
    chunk's cache under ``key``: read where the chunk was made (a format's ``prepare``), else when
    first asked for."""
    got = chunk.cache.get(key)
    if got is None:
        got = chunk.cache[key] = read(chunk, [s.info for s in table.shapes])
    return got


def shaped_chunks(inp: InputFile, make_table: Callable[[], ShapeTable], prepare: Prepare = _unprepared,
                  chunk_size: int | None = None, workers: int | None = None) -> Iterator[tuple[ShapeTable, Chunk]]:
    """The chunks of ``inp`` in order, each with the table its shape ids refer to and what
    ``prepare`` (the format's reading of a chunk at once) put in its cache. A file on disk of
    :data:`~trainaudit.ingest.chunks.POOL_MIN_SIZE` or more is chunked in worker processes (``workers``;
    default one per CPU, at most two) a few chunks ahead: each worker keeps a table of its own, whose
    new shapes come back with each chunk, so that here a copy of each worker's table follows it."""
    size = chunk_size or CHUNK_SIZE
    if inp.fs_path is None or inp.compressed:
        table = make_table()
        with inp.open() as stream:
            for data in stream_chunks(stream, size):
                got = table.chunk(data)
                prepare(table, got)
                yield table, got
        return
    # A file on disk is read in newline-aligned ranges, its long lines cut here as the stream of
    # the path above would cut them (inp.line_bytes), and counted: the same chunks in one process
    # or in workers (what is thinned while read depends on where chunks end).
    path, limit = str(inp.fs_path), inp.line_bytes
    ranges = file_ranges(path, inp.size, size, limit)
    cut = 0
    nproc = 0
    if inp.size >= POOL_MIN_SIZE:
        nproc = workers if workers is not None else (min(2, usable_cpus()) if usable_cpus() > 1 else 0)

    def make(_: int) -> Callable[[tuple[int, int]], tuple[Chunk, list[Shape], int]]:
        """A chunker with its own table: each range's chunk, the shapes it added, the lines it cut."""
        table = make_table()

        def work(where: tuple[int, int]) -> tuple[Chunk, list[Shape], int]:
            data, n = cut_long_lines(read_range(path, *where), limit)
            known = len(table.shapes)
            got = table.chunk(data)
            prepare(table, got)
            return got, table.shapes[known:], n

        return work

    copies = [make_table() for _ in range(max(nproc, 1))]
    if not nproc:
        work = make(0)
        for where in ranges:
            got, shapes, n = work(where)
            copies[0].shapes += shapes  # (a copy of the chunker's table, as a worker's is followed below)
            cut += n
            yield copies[0], got
        inp.cut_lines = max(inp.cut_lines, cut)
        return
    with OrderedWorkers(make, nproc) as pool:
        for k, (_, (got, shapes, n)) in enumerate(in_order(pool, ranges)):
            table = copies[k % nproc]  # requests go round-robin: the k-th result is worker k % nproc's
            table.shapes += shapes
            cut += n
            yield table, got
    inp.cut_lines = max(inp.cut_lines, cut)


def read_shaped(reader: LineReader, inp: InputFile, sink: Sink, make_table: Callable[[], ShapeTable], state: dict,
                place: Place, chunk_size: int | None = None, prepare: Prepare = _unprepared) -> None:
    """What ``reader.read`` (:class:`LineReader`) does with ``inp``, runs of lines without
    ``OTHER`` placed by ``place(table, chunk, start, stop, base)`` (``base``: the lines before the
    chunk), which returns the first line the line reader must read again; ``chunk_size``: the bytes
    read at a time (:data:`CHUNK_SIZE` when None); the chunks and their tables as
    :func:`shaped_chunks` makes them."""
    gate = reader.gate
    scanner = SignatureScanner(inp.display)
    spare = SpareNumbers(sink, along=reader.numbers_fallback)

    def everything() -> bool:
        return scanner.busy or spare.reading

    def one(no: int, raw: bytes) -> None:
        if gate is None:
            got: Iterable[Line] = split_line(no, raw)
        else:
            wait = not everything() and reader.awaits(state)
            if not (wait or everything()) and gate.raw.search(raw) is None:
                return
            got = gated_split(no, raw, gate.text, everything, SIGNALS_RAW, wait)
        for line in got:
            reader.feed(line, sink, state)
            events = scanner.feed(line)
            for ev in events:
                sink.event(ev)
            spare.line(line, events, scanner.busy)

    base = 0
    for table, got in shaped_chunks(inp, make_table, prepare, chunk_size):
        lines, kind = got.lines, got.kind
        n = len(lines)
        others = np.flatnonzero(kind == OTHER)
        i = 0
        while i < n:
            if kind[i] == OTHER or everything():
                one(base + i + 1, lines[i])
                i += 1
                continue
            k = int(np.searchsorted(others, i))
            end = int(others[k]) if k < others.shape[0] else n
            for j in range(place(table, got, i, end, base), end):
                one(base + j + 1, lines[j])
            i = end
        base += n
        # what a format cached of the chunk refers back to it (NumberedLines keeps its chunk): a cycle
        # that only the cyclic collector frees, which numpy's allocations do not wake, so dozens of
        # read chunks with their arrays stayed in memory
        got.cache.clear()
    for ev in scanner.finish():
        sink.event(ev)
    reader.finish(sink, state)
    if reader.numbers_fallback:
        spare.end(inp)


class ShapedReader(LineReader):
    """A line reader that reads runs of its records by shape (:func:`read_shaped`), and line by
    line when ``bulk`` is False (the tests compare the two). A subclass gives its
    :meth:`shape_table` and :meth:`place_run`, which places the records of lines ``start`` to
    ``stop`` (no ``OTHER``) as its ``feed`` would and returns the first line to read again."""

    bulk: ClassVar[bool] = True
    chunk_size: ClassVar[int | None] = None  # bytes read at a time (:data:`CHUNK_SIZE` when None)

    def shape_table(self) -> ShapeTable:
        raise NotImplementedError

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        raise NotImplementedError

    def read_chunk(self, chunk: Chunk, info: list[Any]) -> Any:
        """What the format reads of a chunk at once (``info``: its table's shapes' infos), for
        :meth:`place_run` (:func:`chunk_numbers`); None: nothing."""
        return None

    def prepare(self, table: ShapeTable, chunk: Chunk) -> None:
        """:meth:`read_chunk` before any of the chunk is placed: in a worker process, for a large file."""
        chunk_numbers(table, chunk, self.name, self.read_chunk)

    def read(self, inp: InputFile, sink: Sink) -> None:
        if not self.bulk:
            super().read(inp, sink)
            return
        state = self.new_state()

        def place(table: ShapeTable, chunk: Chunk, start: int, stop: int, base: int) -> int:
            return self.place_run(table, sink, state, chunk, start, stop, base)

        read_shaped(self, inp, sink, self.shape_table, state, place, self.chunk_size, self.prepare)
