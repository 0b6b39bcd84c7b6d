"""The reader interface and the shared driver for line-oriented text formats."""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, BinaryIO, ClassVar, NamedTuple, Protocol, runtime_checkable

from trainaudit.ingest.extract import Extractor, Record
from trainaudit.ingest.signatures import SIGNAL_LITERALS, SignatureScanner
from trainaudit.ingest.sink import STEP_MAX, STEP_MIN, Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, iter_gated, iter_lines, literals, strip_prefixes, trie_pattern, ANSI_RE
from trainaudit.model import STEP_TOTAL, Event, SourceKind

SNIFF_LINES = 400


@dataclass(slots=True)
class Sample:
    """What sniffing sees: the file's base name, its first bytes and, for text, its first lines
    already cleaned (prefixes and ANSI removed, carriage-return segments split)."""

    name: str
    head: bytes
    is_text: bool
    lines: list[str] = field(default_factory=list)

    @classmethod
    def from_head(cls, name: str, head: bytes) -> Sample:
        is_text = looks_like_text(head)
        lines: list[str] = []
        if is_text:
            text = head.decode("utf-8", "replace")
            physical = text.split("\n")
            if len(head) >= 65536:
                # the last line may be cut by the head limit: its carriage-return segments but the
                # last are whole (a progress bar redrawn for a whole epoch is one line of megabytes)
                if "\r" in physical[-1]:
                    physical[-1] = physical[-1].rpartition("\r")[0]
                elif len(physical) > 1:
                    physical.pop()
            for raw in physical[:SNIFF_LINES]:
                raw = ANSI_RE.sub("", raw.rstrip("\r"))
                for seg in raw.split("\r"):
                    if seg.strip():
                        lines.append(strip_prefixes(seg)[0])
        return cls(name, head, is_text, lines)


def looks_like_text(head: bytes) -> bool:
    if not head:
        return False
    if b"\x00" in head[:8192]:
        return False
    sample = head[:8192]
    # Control bytes other than backspace (Keras redraws bars with it)/tab/newline/CR/ESC/formfeed
    # point to a binary file.
    control = sum(1 for b in sample if b < 32 and b not in (8, 9, 10, 12, 13, 27))
    return control <= len(sample) // 100


class Priority(IntEnum):
    """Which format wins when two sniff a file with the same confidence: the higher priority."""

    FALLBACK = 0  # any text at all (the format-agnostic extractor)
    GENERIC = 10  # any CSV table or JSON lines, whoever wrote them
    SPECIFIC = 20  # one framework's or one tool's output
    RUNTIME = 30  # a runtime's lines inside another format's log, read together with that format


class Reader(abc.ABC):
    """A format. Subclasses set ``name`` (the format's id, ``--format NAME``), ``kind``,
    ``description`` and ``priority`` and implement ``sniff`` and ``read``. ``sniff`` returns a
    confidence in [0, 1]; the highest wins, 0 means "not mine"; between equal confidences the
    higher ``priority``. A subclass that sets ``name`` registers itself when its module is
    imported (the registry, :mod:`trainaudit.ingest.formats`, imports every module of its package).

    ``numbers_fallback``: when the format recognises a file but reads nothing from it (no value,
    no event), or cannot parse it (a structured file cut short), the format-agnostic extractor
    reads the file's numbers instead."""

    name: ClassVar[str]
    kind: ClassVar[SourceKind] = SourceKind.LOG
    description: ClassVar[str] = ""
    priority: ClassVar[Priority] = Priority.SPECIFIC
    numbers_fallback: ClassVar[bool] = True
    registered: ClassVar[list[type[Reader]]] = []

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "name" in cls.__dict__:
            Reader.registered.append(cls)

    @abc.abstractmethod
    def sniff(self, sample: Sample) -> float: ...

    @abc.abstractmethod
    def read(self, inp: InputFile, sink: Sink) -> None: ...


class LineReader(Reader):
    """Base for text logs: cleaned lines go to ``feed``; every line is also scanned for error
    signatures (OOM, NCCL timeouts, tracebacks...), whatever the format.

    ``gate``: when set, literals (compiled with :func:`gate_pattern`) found in every line ``feed``
    acts on: a line they are not in is one ``feed`` ignores, keeping no state
    from it. The lines neither the gate nor the signature scanner's literals find are then not
    read at all (nor decoded) once the format has found something, while no traceback is open."""

    gate: ClassVar[Gate | None] = None

    def read(self, inp: InputFile, sink: Sink) -> None:
        scanner = SignatureScanner(inp.display)
        state = self.new_state()
        spare = SpareNumbers(sink, along=self.numbers_fallback)
        with inp.open() as stream:
            for line in self.lines(stream, scanner, spare, awaits=lambda: self.awaits(state)):
                self.feed(line, sink, state)
                events = scanner.feed(line)
                for ev in events:
                    sink.event(ev)
                spare.line(line, events, scanner.busy)
        for ev in scanner.finish():
            sink.event(ev)
        self.finish(sink, state)
        if self.numbers_fallback:
            spare.end(inp)

    def new_state(self) -> dict:
        return {}

    def lines(self, stream: BinaryIO, scanner: SignatureScanner, spare: SpareNumbers,
              gate: Gate | None = None, awaits: Callable[[], bool] = lambda: False) -> Iterator[Line]:
        """The lines of ``stream`` the format, the scanner and ``spare`` must see (``gate``: the
        format's own, when it reads for another; ``awaits``: true while the format needs the next
        line whatever it holds)."""
        gate = gate or self.gate
        if gate is None:
            return iter_lines(stream)
        return iter_gated(stream, gate.text, gate.raw, lambda: scanner.busy or spare.reading, SIGNALS_RAW, awaits)

    def awaits(self, state: dict) -> bool:
        """True while ``feed`` holds a record that the next line completes, whatever that line
        holds (so the gate must not skip it)."""
        return False

    @abc.abstractmethod
    def feed(self, line: Line, sink: Sink, state: dict) -> None: ...

    def finish(self, sink: Sink, state: dict) -> None:
        """Called once after the last line (flush multi-line records)."""

    @staticmethod
    def count_matches(sample: Sample, pattern) -> int:  # type: ignore[no-untyped-def]
        return sum(1 for ln in sample.lines if pattern.search(ln))


class Gate(NamedTuple):
    """A line format's gate: its literals and the signature scanner's, as a pattern of text and a
    pattern of bytes (with ``|\\x1b``), compiled where the format is defined from
    :func:`gate_pattern`."""

    text: re.Pattern[str]
    raw: re.Pattern[bytes]


def gate_pattern(gate: str) -> str:
    """A format's gate literals and the signature scanner's, as one trie (ValueError when the gate
    is not literals only)."""
    return trie_pattern(literals(f"{gate}|{SIGNAL_LITERALS}"))


# the lines that may open a traceback or an elastic block (every other line's segments are gated)
# (UTF-8, as the formats' gates: a trie is alternatives and groups only, so its bytes find the words' bytes)
SIGNALS_RAW = re.compile(trie_pattern(literals(SIGNAL_LITERALS)).encode() + b"|\x1b")

FORMATS_PACKAGE = "trainaudit.ingest.formats"


def registered_formats() -> list[type[Reader]]:
    """The formats defined so far in the formats package (a subclass defined elsewhere, in a test,
    is not a format of trainaudit)."""
    return [c for c in Reader.registered if c.__module__.startswith(f"{FORMATS_PACKAGE}.")]


@runtime_checkable
class NumbersReader(Protocol):
    def read_numbers(self, inp: InputFile, sink: Sink) -> None:
        """The numbers of any text file, without its events (another reader scanned those)."""


def fallback_format() -> NumbersReader:
    """The registered format of priority ``FALLBACK`` (the format-agnostic extractor): it reads
    the numbers of a file another format claimed and found nothing in, or could not parse."""
    cls = next(c for c in registered_formats() if c.priority is Priority.FALLBACK)
    reader = cls()
    assert isinstance(reader, NumbersReader), f"{cls.name} cannot read numbers"
    return reader


def extractor_meta(sink: Sink, ex: Extractor, placed: bool) -> None:
    """What the extractor learnt about the file, once its records are in ``sink``: the text of its
    step records, and that steps number records when the log has no step counter."""
    if ex.texts:
        sink.meta("step_text", ex.texts)
    if ex.step is not None and ex.step.key is None and placed:
        sink.meta("steps_are_line_counts", True)  # no step counter in the log: steps number its records
    if ex.step is not None and ex.step.total is not None:
        sink.meta(STEP_TOTAL, ex.step.total)


SPARE_RECORDS = 100_000  # records held while the format finds nothing (some tens of MB at most)


class SpareNumbers:
    """The format-agnostic extractor reading along with a line format (``along``) for as long as
    the format has found nothing (no value, no event) in the file. When it finds nothing in the
    whole file, the numbers read along are the file's: the file is read once. Past
    :data:`SPARE_RECORDS` records (or without ``along``), the extractor stops, and a file the format
    found nothing in is read again by the fallback format."""

    def __init__(self, sink: Sink, *, along: bool = True) -> None:
        self.sink = sink
        self.before = (sink.n_values, sink.n_events)
        self.ex: Extractor | None = Extractor() if along else None
        self.placed: list[tuple[int, Record]] = []
        self.format_read = False  # the format found something: the extractor has stopped for good

    def found(self) -> bool:
        self.format_read = self.format_read or (self.sink.n_values, self.sink.n_events) != self.before
        return self.format_read

    @property
    def reading(self) -> bool:
        """Whether the extractor still reads along (it must then see every line)."""
        return self.ex is not None

    def line(self, line: Line, events: list[Event], busy: bool) -> None:
        """After the format and the signature scanner read ``line`` (``busy``: inside a traceback,
        whose lines are code, not records)."""
        if self.ex is None:
            return
        if self.found():
            self.ex, self.placed = None, []
        elif not busy and not events:
            self.placed += self.ex.feed(line.text, line.no, line.rank)
            if len(self.placed) > SPARE_RECORDS:
                self.ex, self.placed = None, []

    def end(self, inp: InputFile) -> None:
        """After the format's last line: the file's numbers go to the sink when the format found
        nothing in it."""
        if self.found():
            return
        if self.ex is None:
            fallback_format().read_numbers(inp, self.sink)
            return
        placed = self.placed + self.ex.finish()
        for step, rec in placed:
            for key, value in rec.metrics.items():
                self.sink.add(key, step, value, rec.line, rec.rank)
        extractor_meta(self.sink, self.ex, any(STEP_MIN <= step <= STEP_MAX for step, _ in placed))
