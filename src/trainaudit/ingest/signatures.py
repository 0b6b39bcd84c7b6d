"""Error signatures in stderr and CI logs, turned into typed events with their numbers.

(Being filled in: see the ingest issue. Interface: ``SignatureScanner(source).feed(line)`` returns
the events a line completes; ``finish()`` returns what is still pending at end of file.)
"""

from __future__ import annotations

from trainaudit.ingest.text import Line
from trainaudit.model import Event


class SignatureScanner:
    def __init__(self, source: str) -> None:
        self.source = source

    def feed(self, line: Line) -> list[Event]:
        return []

    def finish(self) -> list[Event]:
        return []
