"""Work counted, not timed: the lines the interpreter executes in chosen source files, in every
thread (``sys.settrace``; frames of other files are not traced line by line). A test bounds the count
by a number of lines per item of its input, so work that grows with the square of the input fails,
and fails fast: the counter raises :class:`TooMuchWork` as soon as the bound is passed."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class TooMuchWork(Exception):
    pass


@contextmanager
def lines_executed(prefixes: tuple[str, ...], limit: int) -> Iterator[dict[str, int]]:
    """Count the lines executed in files whose path starts with one of ``prefixes``; raise
    :class:`TooMuchWork` past ``limit``. Yields ``{"lines": n}``, kept up to date."""
    seen = {"lines": 0}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            seen["lines"] += 1
            if seen["lines"] > limit:
                raise TooMuchWork(f"over {limit} lines executed in {', '.join(prefixes)}")
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(prefixes) else None

    old = sys.gettrace()
    threading.settrace(global_)
    sys.settrace(global_)
    try:
        yield seen
    finally:
        sys.settrace(old)
        threading.settrace(old)  # type: ignore[arg-type]
