"""The reader interface and the shared driver for line-oriented text formats."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, ClassVar

from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, iter_lines, strip_prefixes, ANSI_RE
from trainaudit.model import SourceKind

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
            if len(head) >= 65536 and len(physical) > 1:
                physical = physical[:-1]  # the last one may be cut by the head limit
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
    signatures (OOM, NCCL timeouts, tracebacks...), whatever the format."""

    def read(self, inp: InputFile, sink: Sink) -> None:
        scanner = SignatureScanner(inp.display)
        state = self.new_state()
        with inp.open() as stream:
            for line in iter_lines(stream):
                self.feed(line, sink, state)
                for ev in scanner.feed(line):
                    sink.event(ev)
        for ev in scanner.finish():
            sink.event(ev)
        self.finish(sink, state)

    def new_state(self) -> dict:
        return {}

    @abc.abstractmethod
    def feed(self, line: Line, sink: Sink, state: dict) -> None: ...

    def finish(self, sink: Sink, state: dict) -> None:
        """Called once after the last line (flush multi-line records)."""

    @staticmethod
    def count_matches(sample: Sample, pattern) -> int:  # type: ignore[no-untyped-def]
        return sum(1 for ln in sample.lines if pattern.search(ln))
