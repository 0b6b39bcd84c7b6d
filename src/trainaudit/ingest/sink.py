"""Where readers put what they find.

Readers never build a :class:`~trainaudit.model.Run` themselves: they call ``add``/``add_many``/
``event``/``meta`` on a :class:`Sink`. That lets one reader serve three consumers: an in-memory
run (:class:`RunBuilder`, for diagnose/compare), a constant-memory summary (:class:`StatsSink`,
for ``parse`` without ``-o``) and a streaming row writer (``trainaudit.ingest.export``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from trainaudit.model import Event, EventKind, Run, Series, Source

FLUSH_POINTS = 1 << 16
# Series one run may hold. A real run has a few thousand at most (per-rank copies of a few metrics
# on thousands of ranks, per-layer statistics); a hostile one-line log of half a million numbers
# or a JSONL of 700 000 metric names would otherwise make as many series, each one matched
# against every metric role. Values of further series are counted and left out, and the answer
# says so.
MAX_SERIES = 20_000


class _Buffer:
    __slots__ = ("lines", "steps", "values")

    def __init__(self) -> None:
        self.steps = array("q")
        self.values = array("d")
        self.lines = array("q")

    def __len__(self) -> int:
        return len(self.steps)


STEP_MIN, STEP_MAX = -(2**63), 2**63 - 1  # the steps a series stores (int64)


class Sink:
    """Base sink: buffers per-value ``add`` calls and hands whole arrays to ``write_values``.

    Values from a rank other than the first rank seen for a metric are kept as a separate
    metric named ``"<metric>@rank<r>"``, so interleaved ranks never mix into one curve.
    """

    def __init__(self) -> None:
        self.source: Source | None = None
        self.last_step: int | None = None
        self._buffers: dict[str, _Buffer] = {}
        self._primary_rank: dict[str, int] = {}
        self.n_values = 0
        self.n_step_overflow = 0  # values dropped: their step does not fit 64 bits (no training has one)
        self.n_series_over = 0  # values dropped: their series would be beyond MAX_SERIES
        self.n_events = 0
        self.n_meta = 0
        self._bulk_line = 0  # the last line handed over by add_many in the current source
        self.first_seen: dict[str, int] = {}  # metric -> when its first value was handed over

    # -- reader API -------------------------------------------------------------------------
    def begin(self, source: Source) -> None:
        self.source = source
        self.last_step = None
        self._primary_rank = {}
        self._bulk_line = 0

    def lines_read(self) -> int:
        """The highest line of the current source that values came from so far, for a progress
        display that polls it from another thread (the per-value ``add`` stays untouched)."""
        best = self._bulk_line
        for buf in list(self._buffers.values()):
            if len(buf):
                best = max(best, buf.lines[-1])
        return best

    def metric_for(self, metric: str, rank: int | None) -> str:
        """The series name a value of ``metric`` from ``rank`` goes to (the first rank seen owns the
        plain name). Bulk readers call it in line order before ``add_many``."""
        if rank is not None:
            primary = self._primary_rank.get(metric)
            if primary is None:
                primary = self._primary_rank[metric] = rank
                self.meta(f"rank_of.{metric}", rank)  # who owns the plain name, for per-rank rules
            if rank != primary:
                return f"{metric}@rank{rank}"
        return metric

    def add(self, metric: str, step: int, value: float, line: int, rank: int | None = None) -> None:
        if not STEP_MIN <= step <= STEP_MAX:
            self.n_step_overflow += 1
            return
        if rank is not None:
            metric = self.metric_for(metric, rank)
        buf = self._buffers.get(metric)
        if buf is None:
            if not self._admit(metric, 1):
                return
            buf = self._buffers[metric] = _Buffer()
        buf.steps.append(step)
        buf.values.append(value)
        buf.lines.append(line)
        self.n_values += 1
        self.last_step = step
        if len(buf.steps) >= FLUSH_POINTS and self.flushes_early:
            self._flush(metric)

    def add_many(self, metric: str, steps: ArrayLike, values: ArrayLike, lines: ArrayLike) -> None:
        s = np.asarray(steps, dtype=np.int64)
        if s.size == 0 or not self._admit(metric, int(s.size)):
            return
        ln = np.asarray(lines, dtype=np.int64)
        if not self.flushes_early and s.size < FLUSH_POINTS:
            # a consumer that keeps everything to the end: short runs join the metric's buffer, one
            # growing array, not thousands of small ones that the allocator cannot give back
            buf = self._buffers.get(metric)
            if buf is None:
                buf = self._buffers[metric] = _Buffer()
            buf.steps.frombytes(s.tobytes())
            buf.values.frombytes(np.asarray(values, dtype=np.float64).tobytes())
            buf.lines.frombytes(ln.tobytes())
        else:
            self._flush(metric)
            self.write_values(metric, s, np.asarray(values, dtype=np.float64), ln)
        self.n_values += int(s.size)
        self.last_step = int(s[-1])
        self._bulk_line = max(self._bulk_line, int(ln[-1]))

    def _admit(self, metric: str, n: int) -> bool:
        """Whether ``metric`` may hold values (it has some already, or the run has room for one
        more series); else its ``n`` values are counted as left out."""
        if metric not in self.first_seen:
            if len(self.first_seen) >= self.max_series:
                self.n_series_over += n
                return False
            self.first_seen[metric] = len(self.first_seen)
        return True

    def event(self, ev: Event) -> None:
        if ev.step is None:
            ev.step = self.last_step
        self.n_events += 1
        self.write_event(ev)

    def events(self, kind: EventKind, n: int, build: Callable[[], Iterable[Event]]) -> None:
        """``n`` events of one ``kind``, each with its step, in line order. ``build`` makes them and
        is called (at once) only by consumers that keep events: a bulk reader may hand over a
        million like events (a NaN run's lines) that a summary only counts."""
        if n <= 0:
            return
        self.n_events += n
        self.write_events(kind, n, build)

    def meta(self, key: str, value: Any) -> None:
        self.n_meta += 1
        self.write_meta(key, value)

    def end(self) -> None:
        for metric in list(self._buffers):
            self._flush(metric)
        self._buffers.clear()

    # -- consumer API -----------------------------------------------------------------------
    flushes_early = True
    max_series = MAX_SERIES

    def write_values(self, metric: str, steps: np.ndarray, values: np.ndarray, lines: np.ndarray) -> None:
        raise NotImplementedError

    def write_event(self, ev: Event) -> None:
        raise NotImplementedError

    def write_events(self, kind: EventKind, n: int, build: Callable[[], Iterable[Event]]) -> None:
        for ev in build():
            self.write_event(ev)

    def write_meta(self, key: str, value: Any) -> None:
        """Metadata is optional for consumers."""

    def _flush(self, metric: str) -> None:
        buf = self._buffers.get(metric)
        if buf is None or not len(buf):
            return
        self._buffers[metric] = _Buffer()
        self.write_values(
            metric,
            np.frombuffer(buf.steps, dtype=np.int64),
            np.frombuffer(buf.values, dtype=np.float64),
            np.frombuffer(buf.lines, dtype=np.int64),
        )


class RunBuilder(Sink):
    """Collects everything into one :class:`Run` (all sources merged)."""

    flushes_early = False

    def __init__(self) -> None:
        super().__init__()
        self.run = Run()
        self._parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]] = {}

    def begin(self, source: Source) -> None:
        super().begin(source)
        self.run.sources.append(source)

    def write_values(self, metric: str, steps: np.ndarray, values: np.ndarray, lines: np.ndarray) -> None:
        self._parts.setdefault(metric, []).append((steps, values, lines, len(self.run.sources) - 1))

    def write_event(self, ev: Event) -> None:
        self.run.events.append(ev)

    def write_meta(self, key: str, value: Any) -> None:
        self.run.meta.setdefault(key, value)

    def build(self) -> Run:
        """Merge parts per metric: sort by step; a restart from the series' first step drops what the
        run before it logged; elsewhere, where a step repeats (a resume re-logging steps, or ranks
        printing the same line) the value read last wins. Restarts are recorded."""
        restarts: list[int] = []
        # series in the order their first values were handed over, however they were buffered
        # Each metric's parts are let go once merged, and steps already in order are not reordered
        # (a stable sort of them is the identity): the peak is the series plus one metric's parts,
        # not twice or three times the series.
        for metric in sorted(self._parts, key=lambda m: self.first_seen[m]):
            parts = self._parts.pop(metric)
            steps = np.concatenate([p[0] for p in parts])
            values = np.concatenate([p[1] for p in parts])
            lines = np.concatenate([p[2] for p in parts])
            src = np.concatenate([np.full(p[0].shape[0], p[3], dtype=np.int16) for p in parts])
            del parts
            back = np.flatnonzero(np.diff(steps) < 0) + 1 if steps.size > 1 else np.zeros(0, dtype=np.intp)
            if back.size:
                if "@" not in metric:
                    restarts.extend(int(steps[i]) for i in back)
                    # a restart from the very first step supersedes what the run before it logged, its tail
                    # too (a second fit of the same model, a run launched again with a fix, in one file); a
                    # resume from a later step keeps the steps before it, and the value read last wins
                    # (a progress bar's rate, "it/s", starts again with every bar: not a new run)
                    anew = back[steps[back] <= steps[0]] if not metric.endswith("/s") else back[:0]
                    later = np.full(steps.shape[0] + 1, np.iinfo(np.int64).max, dtype=np.int64)
                    later[anew] = steps[anew]
                    later = np.minimum.accumulate(later[::-1])[::-1][1:]  # the lowest restart after each point
                    live = steps < later
                    if not live.all():
                        steps, values, lines, src = steps[live], values[live], lines[live], src[live]
                order = np.argsort(steps, kind="stable")
                steps, values, lines, src = steps[order], values[order], lines[order], src[order]
            if steps.size > 1:
                keep = np.append(steps[1:] != steps[:-1], True)  # last of each run of equal steps
                if not keep.all():
                    steps, values, lines, src = steps[keep], values[keep], lines[keep], src[keep]
            self.run.series[metric] = Series(metric, steps, values, lines, src)
        if restarts:
            self.run.meta["restarts"] = sorted(set(restarts))
        self._parts.clear()
        return self.run


@dataclass
class MetricStats:
    count: int = 0
    n_nonfinite: int = 0
    first_step: int | None = None
    last_step: int | None = None
    min_step: int | None = None
    max_step: int | None = None


@dataclass
class SourceStats:
    source: Source
    metrics: dict[str, MetricStats] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


class StatsSink(Sink):
    """Constant-memory summary per source: metric counts, step ranges, event counts."""

    def __init__(self) -> None:
        super().__init__()
        self.stats: list[SourceStats] = []

    def begin(self, source: Source) -> None:
        super().begin(source)
        self.stats.append(SourceStats(source))

    def write_values(self, metric: str, steps: np.ndarray, values: np.ndarray, lines: np.ndarray) -> None:
        st = self.stats[-1].metrics.setdefault(metric, MetricStats())
        st.count += int(steps.size)
        st.n_nonfinite += int(np.count_nonzero(~np.isfinite(values)))
        lo, hi = int(steps.min()), int(steps.max())
        st.min_step = lo if st.min_step is None else min(st.min_step, lo)
        st.max_step = hi if st.max_step is None else max(st.max_step, hi)
        if st.first_step is None:
            st.first_step = int(steps[0])
        st.last_step = int(steps[-1])

    def write_event(self, ev: Event) -> None:
        ev_counts = self.stats[-1].events
        ev_counts[ev.kind.value] = ev_counts.get(ev.kind.value, 0) + 1

    def write_events(self, kind: EventKind, n: int, build: Callable[[], Iterable[Event]]) -> None:
        ev_counts = self.stats[-1].events
        ev_counts[kind.value] = ev_counts.get(kind.value, 0) + n  # counted, never built

    def write_meta(self, key: str, value: Any) -> None:
        self.stats[-1].meta.setdefault(key, value)
