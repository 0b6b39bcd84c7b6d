"""The ``trainaudit`` command line. Each command lives in ``trainaudit.commands.<name>`` and is
imported only when it runs (click's documented lazy-loading pattern), so ``trainaudit --help`` and
a single command do not pay for importing every other command.

Exit codes: 0 analysis completed / check passed / healthy, 1 a problem was found or a check failed
(with ``--fail-on``, a finding at or above that severity), 2 usage error or unreadable input (one
line on stderr, never a traceback). Input never causes another code: the readers bound what they
read (``trainaudit.safeio``), and the errors that only input can cause in the standard library
(nesting past the recursion limit, memory) are input errors too. An internal error (a bug) exits 3
with one line.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import warnings
from typing import Any, TextIO

import click

from trainaudit import __version__
from trainaudit.errors import InputError
from trainaudit.redact import terminal_text

# command name -> (module, one-line help shown by ``trainaudit --help`` without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("audit", "The whole CI-failure audit: compare, diagnose, trace the history, decide."),
    "batch": ("batch", "Audit several failures at once and group them by shared root cause."),
    "compare": ("compare", "Golden-value check (Megatron-LM's gate) or a run against a passing run."),
    "diagnose": ("diagnose", "Diagnose one training run: logs, metric files, TensorBoard files, stderr."),
    "inspect": ("inspect", "Inspect a model: parameters per module, trainable vs frozen, gradient flow."),
    "mcp": ("mcp", "Serve trainaudit's tools to agents over MCP (stdio, or HTTP on 127.0.0.1)."),
    "parse": ("parse", "Extract per-step series from any supported input (CSV, JSONL, Parquet)."),
    "post": ("post", "Post a report to a GitHub issue or a Slack webhook (dry run by default)."),
    "report": ("report", "Render answer.json as a self-contained HTML page."),
    "rules": ("rules", "List the detection rules, or show one rule's documentation."),
    "watch": ("watch", "Follow a growing log and alert as problems appear."),
}
# Commands that draw PNG plots with a painter (trainaudit.render.painter) started before they load.
PAINTING = frozenset({"audit", "compare", "diagnose"})


class LazyGroup(click.Group):
    """Loads a command's module on first use (https://click.palletsprojects.com/en/stable/complex/,
    "Lazily Loading Subcommands")."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"trainaudit.commands.{COMMANDS[cmd_name][0]}")
        cmd = getattr(module, cmd_name)
        assert isinstance(cmd, click.Command)
        return cmd

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """An unknown command says which one was probably meant (as git's "did you mean")."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else " See `trainaudit --help`."
            raise click.UsageError(f"No such command '{name}'.{hint}", ctx)
        if name in PAINTING and not {"--no-plots", "-h", "--help"} & set(args):
            # before the command's imports: the painter's child imports matplotlib meanwhile
            importlib.import_module("trainaudit.render.painter").start_early()
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="trainaudit")
def app() -> None:
    """Find the root cause of failed ML training runs and CI checks, from their artifacts.

    \b
    Example:
      trainaudit diagnose train.log
      trainaudit compare --golden golden_values.json actual.json
      trainaudit parse logs/ -o series.csv
    """


class _Sanitised:
    """stdout/stderr for text that may carry input: other escapes than colours (SGR, which rich
    writes itself) and control characters are dropped, secrets masked (``redact``)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._line_start = True

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes with b"" whether a stream takes bytes: it does not
            raise TypeError("write() argument must be str")
        self._inner.write(terminal_text(text, self._line_start))
        if text:
            self._line_start = text.endswith("\n")
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def main(argv: list[str] | None = None) -> None:
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Sanitised(out), _Sanitised(err)  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            # numpy's floating-point notes on extreme input (1e308 / 1e-308): the rules check what they read
            # for finiteness, and the note would reach the user's terminal with a library's path in it
            warnings.filterwarnings("ignore", r"(overflow|divide by zero|invalid value|underflow) encountered",
                                    RuntimeWarning)
            _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> None:
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
    except (RecursionError, MemoryError) as exc:
        click.echo(f"trainaudit: error: input too deeply nested or too large ({type(exc).__name__})", err=True)
        sys.exit(2)
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("TRAINAUDIT_DEBUG"):
            raise
        click.echo(f"trainaudit: internal error: {type(exc).__name__}: {exc} "
                   "(set TRAINAUDIT_DEBUG=1 for the traceback)", err=True)
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
