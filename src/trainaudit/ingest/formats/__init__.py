"""The format registry: every log and metric format trainaudit reads, one module (or one small
package, for a format with a bulk fast path) each.

A format is a :class:`~trainaudit.ingest.base.Reader` subclass with a ``name``; defining it in a
module of this package registers it (this module imports them all). Nothing here lists or orders
formats: detection takes the highest confidence of ``sniff``, then the highest declared
``priority`` (:class:`~trainaudit.ingest.base.Priority`). The engine the formats share (sources,
sniffing samples, sinks, chunks, numbers, text cleaning, error signatures) lives in
:mod:`trainaudit.ingest`, outside this package.
"""

from __future__ import annotations

import importlib
import pkgutil

from trainaudit.ingest.base import FORMATS_PACKAGE, Reader, Sample, registered_formats

assert __name__ == FORMATS_PACKAGE
for _module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    importlib.import_module(_module.name)

# Registry order: the tie-break (priority), then the id; every format's id is unique.
FORMATS: list[type[Reader]] = sorted(registered_formats(), key=lambda c: (-c.priority, c.name))
_BY_NAME: dict[str, type[Reader]] = {c.name: c for c in FORMATS}
assert len(_BY_NAME) == len(FORMATS), "duplicate format id"


def format_names() -> list[str]:
    return [c.name for c in FORMATS]


def all_readers() -> list[Reader]:
    return [c() for c in FORMATS]


def reader_by_name(name: str) -> Reader | None:
    cls = _BY_NAME.get(name)
    return cls() if cls is not None else None


def best_reader(sample: Sample, readers: list[Reader]) -> tuple[Reader | None, float]:
    """The reader that claims ``sample``: the highest confidence, then the highest priority (an
    equal pair goes to the first of ``readers``, in registry order); (None, 0) when none does."""
    best: Reader | None = None
    key = (0.0, 0)
    for r in readers:
        s = r.sniff(sample)
        if s > 0 and (s, r.priority) > key:
            best, key = r, (s, r.priority)
    return best, key[0]
