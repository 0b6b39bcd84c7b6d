"""The ``trainaudit`` command line. Each command lives in ``trainaudit.commands.<name>``.

Exit codes (SPEC.md): 0 analysis completed / check passed, 1 check failed or ``--fail-on`` met,
2 usage error or unreadable input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import os
import sys

import click

from trainaudit import __version__
from trainaudit.commands import COMMANDS
from trainaudit.errors import InputError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="trainaudit")
def app() -> None:
    """Find the root cause of failed ML training runs and CI checks, from their artifacts.

    \b
    Example:
      trainaudit diagnose train.log
      trainaudit compare --golden golden_values.json actual.json
      trainaudit parse logs/ -o series.csv
    """


for _cmd in COMMANDS:
    app.add_command(_cmd)


def main(argv: list[str] | None = None) -> None:
    try:
        rv = app.main(args=argv, prog_name="trainaudit", standalone_mode=False)
    except InputError as exc:
        click.echo(f"trainaudit: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("trainaudit: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # Usage errors: click's own one-line message, exit 2.
        msg = exc.format_message()
        click.echo(f"trainaudit: error: {msg}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("TRAINAUDIT_DEBUG"):
            raise
        click.echo(f"trainaudit: internal error: {type(exc).__name__}: {exc} "
                   "(set TRAINAUDIT_DEBUG=1 for the traceback)", err=True)
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
