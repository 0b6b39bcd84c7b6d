"""Errors that the CLI turns into one line on stderr and exit code 2."""

from __future__ import annotations


class InputError(Exception):
    """Input that cannot be read or used: missing, empty, binary, unknown format, corrupt.

    The message is the whole user-facing line, so it names the path (as the user gave it) and
    what is wrong with it.
    """


class UsageError(InputError):
    """Options or arguments that do not fit together (also exit 2)."""


class PathRefused(InputError):
    """A path outside the allowed roots (or leading there through a link)."""


# The next step after an input that held nothing to analyse (appended to those errors).
READABLE_HINT = ("give a training log, a metrics file (CSV, JSONL, Parquet) or TensorBoard event files; "
                 "`trainaudit parse FILE` shows what is read, --format NAME forces a reader")
