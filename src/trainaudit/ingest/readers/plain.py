"""Fallback for text with no known metric format (stderr, CI job logs): error signatures only."""

from __future__ import annotations

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line
from trainaudit.model import SourceKind


class PlainTextReader(LineReader):
    name = "text"
    kind = SourceKind.LOG
    description = "any text log (stderr, CI job log): error signatures, tracebacks, phase markers"

    def sniff(self, sample: Sample) -> float:
        return 0.01 if sample.is_text else 0.0

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        return None
