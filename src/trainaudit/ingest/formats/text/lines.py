"""Any text log: error signatures on every line (tracebacks, OOM, NCCL, Xid ...) and, through the
format-agnostic extractor (:mod:`trainaudit.ingest.extract`), the step counters and metrics of
lines in any spelling. Specific readers win when they claim a file; this one reads the rest."""

from __future__ import annotations

import bisect
import functools
import io
from array import array
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import ThreadpoolController

from trainaudit.ingest.base import LineReader, Priority, Sample, extractor_meta
from trainaudit.ingest.extract import Extractor, Record, Table, record_of
from trainaudit.ingest.chunks import (
    POOL_MIN_SIZE,
    OrderedWorkers,
    count_lines,
    cut_long_lines,
    file_ranges,
    in_order,
    read_range,
    reread_range,
    stream_chunks,
    usable_cpus,
)
from trainaudit.ingest.formats.text.bulk import BulkLines, ChunkLines, Grouped, range_grouper
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import STEP_MAX, STEP_MIN, Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, iter_lines
from trainaudit.model import Event, SourceKind

MAX_HELD = 10_000


class TextLogReader(LineReader):
    """The extractor decides which counter is the step after a few thousand records, so events
    (a warning, a traceback) are held until then and take the step of the record before them."""

    name = "text"
    kind = SourceKind.LOG
    priority = Priority.FALLBACK
    numbers_fallback = False  # it is the extractor
    description = ("any text log: step counters and metrics in any spelling (k: v, k=v, dicts, JSON lines, "
                   "tables, progress bars), error signatures, tracebacks, phase markers")

    FOUND = 0.15  # the sniff's score of a sample with a record in it

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text:
            return 0.0
        table = Table()
        n = sum(1 for ln in sample.lines[:200] if record_of(ln, 0, None, table) is not None)
        return self.FOUND if n else 0.01

    def read(self, inp: InputFile, sink: Sink) -> None:
        read_metrics(inp, sink, scan_events=True)

    def read_numbers(self, inp: InputFile, sink: Sink) -> None:
        """As the fallback format: the numbers of a file another format claimed and found nothing
        in, or could not parse (its events are that format's)."""
        read_metrics(inp, sink)

    # Line by line, for a log that is still growing (``watch``): ``read`` is the path for a whole
    # file. The caller scans the lines for events itself; the state's own scanner only says which
    # lines belong to a traceback or carry an error, which are not fed to the extractor (as in
    # ``read_metrics``). A live log cannot wait for ``Extractor.decide_after`` records before its
    # first value shows, so the step counter is decided after the first ``LIVE_DECIDE_AFTER``.
    def new_state(self) -> dict:
        ex = Extractor()
        ex.decide_after = LIVE_DECIDE_AFTER
        return {"ex": ex, "scanner": SignatureScanner("")}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        scanner: SignatureScanner = state["scanner"]
        events = scanner.feed(line)
        if scanner.busy or events:
            return
        for step, rec in state["ex"].feed(line.text, line.no, line.rank):
            for k, v in rec.metrics.items():
                sink.add(k, step, v, rec.line, rec.rank)

    def finish(self, sink: Sink, state: dict) -> None:
        ex: Extractor = state["ex"]
        for step, rec in ex.finish():
            for k, v in rec.metrics.items():
                sink.add(k, step, v, rec.line, rec.rank)
        if ex.texts:
            sink.meta("step_text", ex.texts)


LIVE_DECIDE_AFTER = 20  # records: enough to tell a step counter from an epoch or a batch counter


@functools.cache
def _blas() -> ThreadpoolController:
    # Finding the loaded BLAS libraries reads /proc/self/maps and each library: about 3 ms, which a
    # folder of 10 000 small logs paid 10 000 times. numpy's BLAS is loaded once, at its import.
    return ThreadpoolController()


CHUNK_SIZE = 16 << 20  # lines read in bulk at a time: fewer, larger groups of a shape


def read_metrics(inp: InputFile, sink: Sink, *, scan_events: bool = False, bulk: bool = True,
                 chunk_size: int | None = None, workers: int | None = None) -> None:
    """The extractor over a file (alone when another reader claimed the file, found no metric in
    it and already reported its events; with the signature scanner when ``scan_events``). Line by
    line until the extractor has decided its step counter, then a chunk of lines at a time
    (:mod:`~trainaudit.ingest.formats.text.bulk`), with the same result (``bulk=False``: line by
    line throughout, the reference). A large file on disk is then grouped by shape in ``workers``
    processes (default: up to 2, as CPUs allow), a few chunks ahead of the placing."""
    ex = Extractor()
    scanner = SignatureScanner(inp.display)  # also says when a traceback is open: its lines are code
    held: list[Event] = []  # events seen before the extractor has placed the records around them
    # Every placed record's line and step, for the held events: 16 bytes a record as int64 arrays
    # (a list of ints is 50 or more: a GB of a 15M-line log).
    placed_lines: array[int] = array("q")
    placed_steps: array[int] = array("q")

    def emit(placed: list[tuple[int, Record]]) -> None:
        for step, rec in placed:
            if STEP_MIN <= step <= STEP_MAX:  # beyond, the sink leaves the values out and counts them
                placed_steps.append(step)
                placed_lines.append(rec.line)
            for k, v in rec.metrics.items():
                sink.add(k, step, v, rec.line, rec.rank)
        release(final=False)

    def emit_many(steps: NDArray[np.int64], lines: NDArray[np.int64], placed: NDArray[np.int64],
                  metrics: list[tuple[str, NDArray[np.int64], NDArray[np.float64]]]) -> None:
        placed_steps.frombytes(steps[placed].astype(np.int64).tobytes())
        placed_lines.frombytes(lines[placed].astype(np.int64).tobytes())
        for key, pos, values in metrics:
            sink.add_many(key, steps[pos], values, lines[pos])
        sink.last_step = int(steps[placed[-1]])  # as the last value added one by one leaves it
        release(final=False)

    def release(final: bool) -> None:
        while held and (final or (placed_lines and placed_lines[-1] >= held[0].line)):
            ev = held.pop(0)
            if ev.step is None:  # a step the message names itself stays
                i = bisect.bisect_right(placed_lines, ev.line) - 1
                ev.step = placed_steps[i] if i >= 0 else None
            sink.event(ev)

    def line(ln: Line, events: list[Event], feed: bool) -> None:
        if feed:
            emit(ex.feed(ln.text, ln.no, ln.rank))
        if scan_events:
            held.extend(events)
            if len(held) > MAX_HELD:
                release(final=True)  # a log of events and no metrics: no step to wait for

    chunks = BulkLines(ex, scanner, line, emit, emit_many)
    base = 0  # lines before the chunk

    def steady() -> bool:
        return bulk and ex.steady and bool(placed_lines)

    def by_line(data: bytes, first: int, stop: bool) -> int:
        """The lines of ``data`` (its first is line ``first + 1``) through the line reader; with
        ``stop``, up to the first physical line after the extractor became steady, whose index in
        ``data`` it returns (-1: read to the end)."""
        last = -1
        for ln in iter_lines(io.BytesIO(data)):
            if stop and steady() and ln.no - 1 > last:
                return ln.no - 1
            last = ln.no - 1
            ln.no += first
            events = scanner.feed(ln)
            line(ln, events, not scanner.busy and not events)
        return -1

    def read(data: bytes | Callable[[], bytes], grouped: Grouped | None) -> None:
        """One chunk: its lines (or the function that reads them) and, from a worker, their
        grouping (from the chunk's first line)."""
        nonlocal base
        whole = False  # the chunk is left to the line reader
        if steady():
            taken = chunks.chunk(data, base, grouped)
            if taken is not None:
                base += taken
                return
            whole, grouped = True, None  # (the book's news are taken in)
        if not isinstance(data, bytes):
            data = data()
        start = by_line(data, base, stop=not whole)
        if start > 0:  # the bytes of line ``start`` on
            data = data[int(ChunkLines(data).starts[start]):]
            if chunks.chunk(data, base + start, None if grouped is None else grouped.after(start)) is None:
                by_line(data, base + start, stop=False)
            base += start
        elif grouped is not None:
            chunks.learn(grouped)  # the lines were read one by one, but the book went on
        base += count_lines(data)

    chunk_size = chunk_size or CHUNK_SIZE
    # One BLAS thread: the numbers of a shape are read with small matrix products, which a second
    # thread does not speed up, and whose idle threads spin on the cores the workers need.
    with _blas().limit(limits=1, user_api="blas"):
        if inp.fs_path is None or inp.compressed:
            with inp.open() as stream:
                for data in stream_chunks(stream, chunk_size):
                    read(data, None)
        else:
            _read_ranges(inp, chunk_size, workers if bulk else 0, read)
    emit(ex.finish())
    if scan_events:
        held.extend(scanner.finish())
    release(final=True)
    extractor_meta(sink, ex, bool(placed_steps))


def _read_ranges(inp: InputFile, chunk_size: int, workers: int | None,
                 read: Callable[[bytes | Callable[[], bytes], Grouped | None], None]) -> None:
    """A file on disk in ranges, read directly (long lines cut as the stream cuts them, counted
    for the input's report). A large file's ranges are grouped in worker processes, a few ahead
    of the reader; until the extractor is steady the reader reads their lines itself, and uses a
    worker's grouping from the line where it became steady."""
    path, limit = str(inp.fs_path), inp.line_bytes
    nproc = 0
    if inp.size >= POOL_MIN_SIZE:
        nproc = workers if workers is not None else (min(2, usable_cpus()) if usable_cpus() > 1 else 0)
    ranges = file_ranges(path, inp.size, chunk_size, limit)
    cut = 0
    if not nproc:
        for off, length in ranges:
            data, n = cut_long_lines(read_range(path, off, length), limit)
            cut += n
            read(data, None)
        inp.cut_lines = max(inp.cut_lines, cut)
        return
    with OrderedWorkers(range_grouper(path, limit), nproc) as pool:
        for (off, length), grouped in in_order(pool, ranges):
            cut += grouped.cut_lines
            read(functools.partial(reread_range, path, off, length, limit, grouped.kind.shape[0], inp.display), grouped)
    inp.cut_lines = max(inp.cut_lines, cut)
