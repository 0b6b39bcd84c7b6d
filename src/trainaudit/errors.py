"""Errors that the CLI turns into one line on stderr and exit code 2."""

from __future__ import annotations

import os
from pathlib import Path


class InputError(Exception):
    """Input that cannot be read or used: missing, empty, binary, unknown format, corrupt.

    The message is the whole user-facing line, so it names the path (as the user gave it) and
    what is wrong with it.
    """


class UsageError(InputError):
    """Options or arguments that do not fit together (also exit 2)."""


def read_text(path: str | os.PathLike[str], shown: str | None = None) -> str:
    """A whole UTF-8 text file, or an :class:`InputError` naming ``shown`` (the path as the user
    gave it) when it is missing or unreadable."""
    where = shown if shown is not None else os.fspath(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{where}: is a directory, expected a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot read ({exc.__class__.__name__})") from None
