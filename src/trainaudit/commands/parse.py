"""``trainaudit parse``: extract per-step series (and events) from any supported artifact."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from trainaudit.commands.common import console, reading_progress
from trainaudit.ingest import format_names, scan
from trainaudit.ingest.export import RowWriter
from trainaudit.ingest.sink import SourceStats, StatsSink
from trainaudit.ingest.sources import reading_stdin
from trainaudit.redact import terminal_value


class _Both(StatsSink):
    """Summary plus streaming rows in a single pass over the inputs."""

    def __init__(self, writer: RowWriter | None) -> None:
        super().__init__()
        self.writer = writer

    def begin(self, source):  # type: ignore[no-untyped-def]
        super().begin(source)
        if self.writer:
            self.writer.begin(source)

    def write_values(self, metric, steps, values, lines):  # type: ignore[no-untyped-def]
        super().write_values(metric, steps, values, lines)
        if self.writer:
            self.writer.write_values(metric, steps, values, lines)

    def write_event(self, ev):  # type: ignore[no-untyped-def]
        super().write_event(ev)
        if self.writer:
            self.writer.write_event(ev)

    def write_events(self, kind, n, build):  # type: ignore[no-untyped-def]
        if self.writer:  # the rows need the events themselves
            for ev in build():
                self.write_event(ev)
        else:
            super().write_events(kind, n, build)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write series to OUT (.csv, .jsonl or .parquet), one row per value with source and line.")
@click.option("--format", "fmt", metavar="NAME", help="Force a format (see the list below).")
@click.option("-q", "--quiet", "quiet", is_flag=True, help="No summary.")
def parse(inputs: tuple[str, ...], out: Path | None, fmt: str | None, quiet: bool) -> int:
    """Extract per-step metric series and events from logs, metric files, TensorBoard files,
    MLflow/W&B run folders and archives of CI artifacts. ``-`` reads standard input.

    \b
    Example:
      trainaudit parse train.log                    # what was found, per source
      trainaudit parse run/ artifacts.zip -o series.csv
      kubectl logs job/train | trainaudit parse -
    """
    writer = RowWriter(out) if out else None
    sink = _Both(writer)
    try:
        with reading_stdin(), reading_progress(quiet) as position:
            problems = scan(list(inputs), sink, fmt, position)
    finally:
        if writer:
            writer.close()
    if not quiet:
        _print_summary(sink.stats, out)
    fatal = [p for p in problems if p.fatal]
    for p in problems:
        if not p.fatal and not quiet:
            click.echo(f"trainaudit: note: {p}", err=True)
    if fatal:
        # Partial data was still written/summarised above; the exit code says some input was bad.
        click.echo(f"trainaudit: error: {fatal[0]}", err=True)
        return 2
    return 0


def _print_summary(stats: list[SourceStats], out: Path | None) -> None:
    """Per source: one line (format, values, steps), then its events and metrics, wrapped at the
    terminal's width (never cut: the names are what a user looks for), then a closing line."""
    con = console()
    total = 0
    for st in stats:
        lo = min((m.min_step for m in st.metrics.values() if m.min_step is not None), default=None)
        hi = max((m.max_step for m in st.metrics.values() if m.max_step is not None), default=None)
        n = sum(m.count for m in st.metrics.values())
        total += n
        line = Text(f"{terminal_value(st.source.path)}: ", style="bold")
        line.append(f"{st.source.format or 'unknown'}, {n} values" + (f", steps {lo}..{hi}" if lo is not None else ""))
        con.print(line, soft_wrap=True)
        if st.events:
            con.print(Text("  events: " + ", ".join(f"{terminal_value(k)}={v}" for k, v in sorted(st.events.items()))))
        if st.metrics:
            con.print(Text(f"  {len(st.metrics)} metrics: " + ", ".join(terminal_value(m) for m in sorted(st.metrics)), style="dim"))
    con.print(f"{len(stats)} sources, {total} values" + (f"; series written to {out}" if out else ""))


parse.epilog = "Formats: " + ", ".join(format_names())
