"""Paths as a report shows them: as the user gave them, never the layout of the machine."""

from __future__ import annotations

import os
from pathlib import Path


def printable_name(s: str) -> str:
    """``s`` with the undecodable bytes of a file name (lone surrogates) as ``\\xNN`` escapes."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return s


def display_path(p: str | os.PathLike[str]) -> str:
    """A path for a report: as the user typed it when relative; an absolute path under the current
    directory becomes relative; any other absolute path keeps only its last two components, so the
    machine's layout (home directories, mount points) never leaks into a report. A name that is not
    UTF-8 (Python keeps its bytes as lone surrogates, PEP 383) shows them as ``\\xff`` escapes: a
    report is UTF-8 text."""
    s = printable_name(os.fspath(p))
    if not os.path.isabs(s):
        return s
    try:
        rel = os.path.relpath(s, os.getcwd())
    except ValueError:
        rel = None
    if rel is not None and not rel.startswith(".."):
        return rel
    parts = Path(s).parts
    return os.path.join("...", *parts[-2:]) if len(parts) > 2 else Path(s).name
