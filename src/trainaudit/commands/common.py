"""What the commands that write a report share: the output folder, ``--fail-on`` and the exit
code, ``-q``/``-v``, and the summary on the terminal (see docs/cli.md).

Exit codes, the same for every command: 0 done and nothing wrong (healthy, the check passed),
1 a problem was found or a gate failed (or ``--fail-on`` was met), 2 bad input or a usage error,
3 an internal error (a bug), 130 interrupted.
"""

from __future__ import annotations

import difflib
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from trainaudit.answer.schema import SEVERITY_ORDER, Answer
from trainaudit.ingest import Position
from trainaudit.redact import mask_secrets
from trainaudit.render.terminal import (DEFAULT_FINDINGS, closing_line, comparison_line, finding_line,
                                        ordered_findings, verdict_line)
from trainaudit.render.numbers import coverage_line
from trainaudit.render.write import ReportPaths, fresh_dir
from trainaudit.rules.registry import ALL_RULES

F = TypeVar("F", bound=Callable[..., Any])

OUT_ROOT = Path("trainaudit-out")
FAIL_ON = ("critical", "high", "medium", "low", "never")
FILE_SUFFIXES = (".md", ".json", ".html", ".htm", ".txt", ".csv", ".png", ".log")
PROGRESS_MIN_BYTES = 4 * 2**20  # smaller inputs are read in well under a second: no bar


class Rated(Protocol):
    """A finding, an alert, an inspection finding: anything with a severity."""

    @property
    def severity(self) -> str: ...


def default_out(command: str) -> Path:
    """``trainaudit-out/COMMAND``, or ``-2``, ``-3``... when it already holds a report."""
    return fresh_dir(OUT_ROOT / command)


def out_option(command: str) -> Callable[[F], F]:
    def resolve(_ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
        if value is not None and value.suffix.lower() in FILE_SUFFIXES and not value.is_dir():
            raise click.BadParameter(f"{value} looks like a file, but -o names the report folder (answer.json, "
                                     f"answer.md and plots/ go in it): e.g. -o {value.with_suffix('')}", param=param)
        return value if value is not None else default_out(command)

    return click.option(
        "-o", "--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None, callback=resolve,
        help=f"Report folder: answer.json, answer.md, plots/. Default: {OUT_ROOT}/{command}, or {command}-2, "
             f"{command}-3... beside it when that one already holds a report. An earlier report in the folder "
             "is replaced whole (said on stderr).")


def no_plots_option(f: F) -> F:
    return click.option("--no-plots", "no_plots", is_flag=True,
                        help="No PNG plots (answer.json, answer.md and the chart data are still written).")(f)


def _rule_ids(_ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    """``TA1,TA204``: rule ids or prefixes, each of which names at least one rule."""
    ids = [x.strip().upper() for x in (value or "").split(",") if x.strip()]
    known = [cls.id for cls in ALL_RULES]
    for x in ids:
        if not any(k.startswith(x) for k in known):
            close = difflib.get_close_matches(x, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (see `trainaudit rules`)"
            raise click.BadParameter(f"{x} is no rule id nor the prefix of one{hint}", param=param)
    return ids


def rule_selection_options(f: F) -> F:
    """``--select``/``--ignore`` as Ruff's: comma-separated rule ids or prefixes; ``--select``
    replaces the configuration's ``select``, ``--ignore`` adds to its ``ignore``."""
    f = click.option("--ignore", "ignore", metavar="IDS", callback=_rule_ids,
                     help="Rules not to run, added to [tool.trainaudit] ignore: ids or prefixes, comma-separated "
                          "(e.g. TA405,TA6).")(f)
    return click.option("--select", "select", metavar="IDS", callback=_rule_ids,
                        help="Only these rules (replaces [tool.trainaudit] select): ids or prefixes, comma-separated "
                             "(e.g. TA1,TA204).")(f)


def fail_on_option(problem: str) -> Callable[[F], F]:
    return click.option(
        "--fail-on", "fail_on", type=click.Choice(FAIL_ON), default=None,
        help=f"Exit 1 if a finding at or above this severity exists (never: exit 0 whatever was found). "
             f"Default: exit 1 when {problem}.")


def verbosity_options(f: F) -> F:
    f = click.option("-v", "--verbose", "verbose", is_flag=True,
                     help="Every finding, every root cause with its fix and check, what would raise the "
                          "confidence.")(f)
    return click.option("-q", "--quiet", "quiet", is_flag=True, help="Only the closing line (and errors).")(f)


def exit_code(findings: Iterable[Rated], fail_on: str | None, problem: bool) -> int:
    """1 when ``problem`` (the command's own failure: not healthy, the gate failed), or with
    ``--fail-on`` when a finding at or above that severity exists; else 0."""
    if fail_on == "never":
        return 0
    if fail_on is not None:
        limit = SEVERITY_ORDER[fail_on]
        return int(any(SEVERITY_ORDER[d.severity] >= limit for d in findings))
    return int(problem)


def console() -> Console:
    """stdout; colours only on a terminal (rich's detection, NO_COLOR honoured); 80 columns on a pipe."""
    return Console(file=sys.stdout, highlight=False)


def note(message: str) -> None:
    click.echo(f"trainaudit: note: {message}", err=True)


def report_notes(paths: ReportPaths, quiet: bool, extra: Iterable[object] = ()) -> None:
    """What a user should know about the report folder, on stderr; with -q only that an earlier
    report was replaced (never silently)."""
    if paths.replaced:
        note(f"replaced the earlier report in {paths.out_dir}")
    if not quiet:
        for n in [*paths.notes, *extra]:
            note(str(n))


FIRST_FINDINGS = 4  # findings_first: lines of findings shown without -v
FIRST_CHECKS = 3  # and of failing checks


def print_summary(answer: Answer, paths: ReportPaths, *, quiet: bool, verbose: bool,
                  head: Iterable[Text] = (), findings_first: bool = False) -> None:
    """Checks and findings one line each, the verdict with its summary and fix, the closing line.
    ``head``: command-specific lines printed before the verdict (e.g. the commit an audit names).
    ``findings_first``: the findings, in the answer's own order (run vs run: how the runs' configuration
    differs comes first), then the failing checks, each list cut to a few lines unless verbose."""
    con = console()
    report = str(paths.out_dir)  # as the user gave it: on their own terminal, whole (a path to open)
    if not quiet:
        checks = [c for c in answer.comparisons if verbose or not c.passed]  # the closing line counts the passing ones
        findings = list(answer.findings) if findings_first else ordered_findings(answer)
        limit = FIRST_FINDINGS if findings_first else DEFAULT_FINDINGS
        # a list cut short gives its last line to "... N more": the head keeps its size however many
        shown = findings if verbose or len(findings) <= limit else findings[:limit - 1]
        cut = FIRST_CHECKS if len(checks) <= FIRST_CHECKS else FIRST_CHECKS - 1
        shown_checks = checks if verbose or not findings_first else checks[:cut]

        def print_findings() -> None:
            for d in shown:
                con.print(finding_line(answer, d), soft_wrap=True)
            if len(shown) < len(findings):
                con.print(f"... {len(findings) - len(shown)} more findings (-v shows all; answer.md has every one)",
                          style="dim", soft_wrap=True)

        if findings_first:
            print_findings()
        for c in shown_checks:
            con.print(comparison_line(c), soft_wrap=True)
        if len(shown_checks) < len(checks):
            con.print(f"... {len(checks) - len(shown_checks)} more failing checks (-v shows all; answer.md has every "
                      "one)", style="dim", soft_wrap=True)
        if not findings_first:
            print_findings()
        if answer.comparisons or findings:
            con.print()
        fa = answer.final_answer
        con.print(verdict_line(answer), soft_wrap=True)  # one line: the headline
        for head_line in head:
            con.print(Text(mask_secrets(head_line.plain), style=head_line.style), soft_wrap=True)
        lines = [fa.summary]
        checked = coverage_line(fa.coverage)
        if checked:
            lines.append(checked)
        causes = fa.root_causes if verbose else fa.root_causes[:1]
        for k, rc in enumerate(causes, 1):
            if verbose:
                lines += [f"{k}. [{rc.severity}] {rc.category} (confidence {rc.confidence:.2f}): {rc.issue}",
                          f"   fix: {rc.fix}", f"   verify: {rc.verify}"]
            else:  # the fix's first sentence; -v gives the whole of it
                lines.append(f"fix: {fa.quick_fixes[0] if fa.quick_fixes else rc.fix}")
        if verbose and fa.needs_more_data:
            lines.append("needs more data: " + "; ".join(fa.needs_more_data))
        for line in lines:  # text from the input: masked, escapes stripped; wrapped at the width
            con.print(Text(mask_secrets(line)))
        con.print()
    con.print(closing_line(answer, report), soft_wrap=True)  # one line, whatever the width: scripts read it


@contextmanager
def reading_progress(quiet: bool = False) -> Iterator[Position]:
    """A progress bar on stderr while the inputs are read (rich's Progress, erased when done):
    only on a terminal, only when the inputs add up to more than a few MB. Yields the
    :class:`Position` to hand to ``load_run``/``scan``; a thread polls it, so reading is not
    slowed by the display."""
    position = Position()
    # the interpreter's own stderr: the bar moves the cursor, which the sanitising wrapper around
    # sys.stderr (cli.main) rightly strips from text that may come from input; the bar's text is ours
    err = Console(file=sys.__stderr__ or sys.stderr)
    if quiet or not err.is_terminal:
        yield position
        return
    stop = threading.Event()

    def show() -> None:
        while not position.total and not stop.wait(0.05):
            pass
        if position.total < PROGRESS_MIN_BYTES:
            return
        with Progress(TextColumn("reading"), BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=err,
                      transient=True) as bar:
            task = bar.add_task("reading", total=position.total)
            while not stop.wait(0.1):
                bar.update(task, completed=position.bytes_read())
            bar.update(task, completed=position.total)

    shower = threading.Thread(target=show, name="trainaudit-progress", daemon=True)
    shower.start()
    try:
        yield position
    finally:
        stop.set()
        shower.join()
