"""``trainaudit parse``: extract per-step series (and events) from any supported artifact."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from trainaudit.ingest import format_names, scan
from trainaudit.ingest.export import RowWriter
from trainaudit.ingest.sink import SourceStats, StatsSink


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


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write series to OUT (.csv, .jsonl or .parquet), one row per value with source and line.")
@click.option("--format", "fmt", metavar="NAME", help="Force a format (see the list below).")
@click.option("--quiet", is_flag=True, help="No summary table.")
def parse(inputs: tuple[str, ...], out: Path | None, fmt: str | None, quiet: bool) -> int:
    """Extract per-step metric series and events from logs, metric files, TensorBoard files,
    MLflow/W&B run folders and archives of CI artifacts.

    \b
    Example:
      trainaudit parse train.log                    # what was found, per source
      trainaudit parse run/ artifacts.zip -o series.csv
    """
    writer = RowWriter(out) if out else None
    sink = _Both(writer)
    try:
        problems = scan(list(inputs), sink, fmt)
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
    console = Console(file=sys.stdout, soft_wrap=True)
    table = Table(title="trainaudit parse", show_lines=False)
    for col in ("source", "format", "metrics", "steps", "values", "events"):
        table.add_column(col, overflow="fold")
    for st in stats:
        names = sorted(st.metrics)
        shown = ", ".join(names[:8]) + (f" (+{len(names) - 8})" if len(names) > 8 else "")
        lo = min((m.min_step for m in st.metrics.values() if m.min_step is not None), default=None)
        hi = max((m.max_step for m in st.metrics.values() if m.max_step is not None), default=None)
        steps = f"{lo}..{hi}" if lo is not None else "-"
        n = sum(m.count for m in st.metrics.values())
        ev = ", ".join(f"{k}={v}" for k, v in sorted(st.events.items())) or "-"
        table.add_row(st.source.path, st.source.format, shown or "-", steps, str(n), ev)
    console.print(table)
    if out:
        console.print(f"series written to {out}")


parse.epilog = "Formats: " + ", ".join(format_names())
