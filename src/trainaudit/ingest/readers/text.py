"""Any text log: error signatures on every line (tracebacks, OOM, NCCL, Xid ...) and, through the
format-agnostic extractor (:mod:`trainaudit.ingest.extract`), the step counters and metrics of
lines in any spelling. Specific readers win when they claim a file; this one reads the rest."""

from __future__ import annotations

import bisect
import io
from array import array

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.extract import Extractor, Record, Table, record_of
from trainaudit.ingest.readers.megatron_fast import stream_chunks
from trainaudit.ingest.readers.text_bulk import BulkLines
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
    description = ("any text log: step counters and metrics in any spelling (k: v, k=v, dicts, JSON lines, "
                   "tables, progress bars), error signatures, tracebacks, phase markers")

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text:
            return 0.0
        table = Table()
        n = sum(1 for ln in sample.lines[:200] if record_of(ln, 0, None, table) is not None)
        return 0.15 if n else 0.01

    def read(self, inp: InputFile, sink: Sink) -> None:
        read_metrics(inp, sink, scan_events=True)

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        raise NotImplementedError("read() drives the extractor and the signature scanner together")


CHUNK_SIZE = 16 << 20  # lines read in bulk at a time: fewer, larger groups of a shape


def read_metrics(inp: InputFile, sink: Sink, *, scan_events: bool = False, bulk: bool = True) -> None:
    """The extractor over a file (alone when another reader claimed the file, found no metric in
    it and already reported its events; with the signature scanner when ``scan_events``). Line by
    line until the extractor has decided its step counter, then a chunk of lines at a time
    (:mod:`~trainaudit.ingest.readers.text_bulk`), with the same result (``bulk=False``: line by
    line throughout, the reference)."""
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
    with inp.open() as stream:
        for data in stream_chunks(stream, CHUNK_SIZE):
            start = 0
            if not (bulk and ex.steady and placed_lines):
                start = -1
                for ln in iter_lines(io.BytesIO(data)):
                    if bulk and ex.steady and placed_lines and ln.no - 1 > start:
                        start = ln.no - 1  # a physical line not begun: the rest goes in bulk
                        break
                    start = ln.no - 1
                    ln.no += base
                    events = scanner.feed(ln)
                    line(ln, events, not scanner.busy and not events)
                else:
                    start = -1
            if start < 0:
                base += data.count(b"\n") + (not data.endswith(b"\n"))
                continue
            lines = data.split(b"\n")
            if data.endswith(b"\n"):
                lines.pop()
            chunks.chunk(lines[start:], base + start)
            base += len(lines)
    emit(ex.finish())
    if scan_events:
        held.extend(scanner.finish())
    release(final=True)
    if ex.texts:
        sink.meta("step_text", ex.texts)
    if ex.step is not None and ex.step.key is None and placed_steps:
        sink.meta("steps_are_line_counts", True)  # no step counter in the log: steps number its records
