"""Ingest: user inputs -> detected formats -> readers -> a sink (run, summary or row writer).

    run, problems = load_run(["train.log", "ci-artifacts.zip"])

Formats are detected by content (the first 64 KiB), with the file name as a hint; ``fmt``
forces one reader for every input.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainaudit.errors import READABLE_HINT, InputError
from trainaudit.ingest.base import LineReader, Reader, Sample, fallback_format, looks_like_text
from trainaudit.ingest.formats import all_readers, best_reader, format_names, reader_by_name
from trainaudit.ingest.ranks import RankHead, Skim, describe, keep_per_rank, plan, rank_head, skim
from trainaudit.ingest.sink import RunBuilder, Sink
from trainaudit.ingest.sources import STREAM_ERRORS, InputFile, context_file, expand_inputs, read_head
from trainaudit.model import EVENTS_LEFT_OUT, Run, Source
from trainaudit.safeio import LIMITS

__all__ = ["Detected", "Position", "Problem", "detect", "format_names", "load_run", "scan"]

INPUT_LIMIT_ERRORS = (RecursionError, OverflowError, MemoryError, ValueError)
MAX_SHAPES = 1000  # per-rank log head shapes whose format detect remembers


@dataclass(slots=True)
class Detected:
    inp: InputFile
    reader: Reader
    bytes_per_line: float = 0.0  # from the head, to turn a line number into a position
    rank: RankHead | None = None  # a single rank's log found in a folder: its rank and head's shape


@dataclass(slots=True)
class Position:
    """How far a :func:`scan` is, for a progress display that polls it from another thread: the
    bytes of the inputs finished, and within the file being read, its highest line read so far
    times the head's bytes per line (an estimate, capped at the file's size)."""

    total: int = 0
    done: int = 0
    current: Detected | None = None
    sink: Sink | None = None

    def bytes_read(self) -> int:
        cur, sink = self.current, self.sink
        if cur is None or sink is None:
            return self.done
        return self.done + min(int(sink.lines_read() * cur.bytes_per_line), cur.inp.size)


@dataclass(slots=True)
class Problem:
    """An input that was skipped or only partly read; ``fatal`` ones stop ``parse`` with exit 2."""

    path: str
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def detect(inputs: list[InputFile], fmt: str | None = None, *, explicit: set[str] | None = None,
           problems: list[Problem] | None = None) -> list[Detected]:
    """Pick a reader per input. Files found inside directories or archives that no reader claims
    are skipped (recorded as non-fatal problems); a file the user named directly must be readable."""
    forced = None
    if fmt:
        forced = reader_by_name(fmt)
        if forced is None:
            raise InputError(f"--format {fmt}: unknown format (known: {', '.join(format_names())})")
    readers = all_readers()
    out: list[Detected] = []
    # the format of each per-rank log head shape seen (a job's hundreds of rank logs are sniffed once)
    by_shape: dict[bytes, Reader | None] = {}
    for inp in inputs:
        direct = explicit is not None and inp.display in explicit
        if inp.skip is not None:
            if problems is not None:
                problems.append(Problem(inp.display, f"skipped: {inp.skip}", fatal=False))
            continue
        if inp.size == 0 and not inp.compressed:
            if direct:
                raise InputError(f"{inp.display}: file is empty")
            continue
        head = read_head(inp)
        if not head:
            if direct:
                raise InputError(f"{inp.display}: file is empty")
            continue
        per_line = len(head) / max(1, head.count(b"\n"))
        rank = rank_head(inp.name, head) if explicit is not None and not direct else None
        if forced is not None:
            out.append(Detected(inp, forced, per_line, rank))
            continue
        if rank is not None and rank.shape in by_shape:
            best = by_shape[rank.shape]
        else:
            sample = Sample.from_head(inp.name, head)
            best, _ = best_reader(sample, readers)
            if rank is not None and len(by_shape) < MAX_SHAPES:
                by_shape[rank.shape] = best
        if best is None:
            what = "binary file" if not looks_like_text(head) else "text"
            if direct:
                raise InputError(f"{inp.display}: unknown format ({what} that no reader recognises; "
                                 f"use --format, one of: {', '.join(format_names())})")
            if problems is not None:
                problems.append(Problem(inp.display, f"skipped: unknown format ({what})", fatal=False))
            continue
        if explicit is not None and not direct and best.name == "text" and \
                (context := context_file(inp.name)) is not None:
            # code, documents and configuration found in a folder are the run's context: only a
            # format's own reader takes them (a named file is read as given)
            if problems is not None:
                problems.append(Problem(inp.display, f"skipped: {context}, not a log", fatal=False))
            continue
        out.append(Detected(inp, best, per_line, rank))
    return out


def scan(paths: list[str], sink: Sink, fmt: str | None = None, position: Position | None = None,
         skims: list[tuple[Source, Skim]] | None = None) -> list[Problem]:
    """Read every input into ``sink``. Returns problems; raises :class:`InputError` when nothing
    at all could be read. ``position`` is kept up to date for a progress display. With ``skims``,
    a directory of many per-rank logs has all but its metric-carrying ranks skimmed
    (:mod:`trainaudit.ingest.ranks`): each skimmed source and what was found in it go there."""
    problems: list[Problem] = []
    inputs = expand_inputs(paths)
    detected = detect(inputs, fmt, explicit=set(paths), problems=problems)
    if not detected:
        raise InputError(f"{', '.join(paths)}: no readable training artifacts found")
    to_skim = plan([(d.inp, d.reader, d.rank) for d in detected]) if skims is not None else {}
    keep = keep_per_rank(len(to_skim))
    position = position or Position()
    position.total, position.sink = sum(d.inp.size for d in detected), sink
    useful = 0
    # paths already in the problems list: a lookup per file of a 100 000-file folder must not scan it
    with_problem = {p.path for p in problems}
    for i, d in enumerate(detected):
        position.current = d
        before_problems = len(problems)
        source = Source(d.inp.display, d.reader.name, d.reader.kind, d.inp.size)
        before_values, before_events, before_meta = sink.n_values, sink.n_events, sink.n_meta
        before_overflow, before_over = sink.n_step_overflow, sink.n_series_over
        sink.begin(source)
        if isinstance(d.reader, LineReader):
            d.inp.line_bytes = LIMITS.line_bytes
        try:
            try:
                if i in to_skim and skims is not None and isinstance(d.reader, LineReader):
                    skims.append((source, skim(d.inp, d.reader, sink, to_skim[i], keep)))
                    source.note = "skimmed"
                else:
                    d.reader.read(d.inp, sink)
            except InputError as exc:
                if not d.reader.numbers_fallback or sink.n_values > before_values or \
                        not looks_like_text(read_head(d.inp)):
                    raise
                # a structured file cut short (an excerpt of trainer_state.json): its lines still
                # hold numbers (a line format that finds nothing hands over the same way, in its read)
                fallback_format().read_numbers(d.inp, sink)
                problems.append(Problem(d.inp.display, str(exc).removeprefix(f"{d.inp.display}: ")
                                        + "; its numbers were read line by line", fatal=False))
        except InputError as exc:
            problems.append(Problem(d.inp.display, str(exc).removeprefix(f"{d.inp.display}: ")))
        except STREAM_ERRORS as exc:
            problems.append(Problem(d.inp.display, f"corrupt or truncated data ({exc}); "
                                                   "values read before the damage are kept"))
        except INPUT_LIMIT_ERRORS as exc:
            # Raised by a parser on what the input holds (nesting past the recursion limit, an
            # integer of more than 4300 digits, a count that does not fit): the input's fault.
            problems.append(Problem(d.inp.display, f"unreadable ({type(exc).__name__}: {str(exc)[:200]})"))
        finally:
            sink.end()
            position.current, position.done = None, position.done + d.inp.size
        got = sink.n_values - before_values + sink.n_events - before_events
        if got or source.note:
            useful += 1
        elif sink.n_meta > before_meta and d.inp.display not in paths:
            pass  # a run folder's params/config files add metadata only: nothing to report
        elif d.inp.display not in with_problem and all(p.path != d.inp.display for p in problems[before_problems:]):
            problems.append(Problem(d.inp.display, f"no metrics or events found (read as {d.reader.name})",
                                    fatal=d.inp.display in paths))
        if sink.n_step_overflow > before_overflow:
            problems.append(Problem(d.inp.display, f"{sink.n_step_overflow - before_overflow} value(s) at steps "
                                                   "beyond 64 bits left out", fatal=False))
        if sink.n_series_over > before_over:
            problems.append(Problem(d.inp.display, f"{sink.n_series_over - before_over} value(s) of series beyond "
                                                   f"the first {sink.max_series} left out", fatal=False))
        if d.inp.cut_lines:
            problems.append(Problem(d.inp.display, f"{d.inp.cut_lines} line(s) longer than "
                                                   f"{LIMITS.line_bytes >> 20} MiB cut to their first "
                                                   f"{LIMITS.line_bytes >> 20} MiB", fatal=False))
    if useful == 0:
        raise InputError(f"{problems[0] if problems else ', '.join(paths) + ': nothing readable'}: {READABLE_HINT}")
    return problems


def load_run(paths: list[str], fmt: str | None = None, position: Position | None = None) -> tuple[Run, list[Problem]]:
    """The run of ``paths``; a directory of many per-rank logs has its ranks but the metric-carrying
    ones skimmed (:mod:`trainaudit.ingest.ranks`), each skimmed source saying so in its ``note``."""
    builder = RunBuilder()
    skims: list[tuple[Source, Skim]] = []
    problems = scan(paths, builder, fmt, position, skims)
    run = builder.build()
    if builder.dropped:
        names = ", ".join(f"{m} ({len(run.series[m]) + n} points read, {len(run.series[m])} kept)"
                          for m, (n, _) in builder.dropped.items())
        problems.append(Problem(", ".join(paths), f"series of more than {builder.max_points} points thinned while "
                                "read (each range of steps keeps its first, last, lowest, highest and non-finite "
                                f"points): {names}", fatal=False))
    for kind, (n, step_a, step_b, line_a, line_b) in run.meta.get(EVENTS_LEFT_OUT, {}).items():
        problems.append(Problem(", ".join(paths), f"{n} {kind} events between lines {line_a} and {line_b} (steps "
                                f"{step_a} to {step_b}) counted, not kept: the first and the last "
                                f"{builder.keep_events} of that kind are", fatal=False))
    if skims:
        differ = []
        for source, found in skims:
            source.note, metrics = describe(found, run)
            if metrics:
                differ.append(found.rank)
        ranks = sorted(found.rank for _, found in skims)
        msg = (f"{len(skims)} per-rank logs skimmed (ranks {rank_ranges(ranks)}): their errors, tracebacks, "
               "timeouts, non-finite values and last steps were read, their other metric lines were not")
        if differ:
            msg += (f"; ranks {rank_ranges(sorted(differ))} log values that differ from the rank read in full "
                    "at the steps compared (give one of those logs alone to see its own curves)")
        problems.append(Problem(", ".join(paths), msg, fatal=False))
    return run, problems


def rank_ranges(ranks: list[int]) -> str:
    """Sorted ranks as ranges: ``0-3, 7, 9-10``."""
    runs: list[list[int]] = []
    for r in ranks:
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
