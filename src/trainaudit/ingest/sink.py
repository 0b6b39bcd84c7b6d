"""Where readers put what they find.

Readers never build a :class:`~trainaudit.model.Run` themselves: they call ``add``/``add_many``/
``event``/``meta`` on a :class:`Sink`. That lets one reader serve three consumers: an in-memory
run (:class:`RunBuilder`, for diagnose/compare), a constant-memory summary (:class:`StatsSink`,
for ``parse`` without ``-o``) and a streaming row writer (``trainaudit.ingest.export``).
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from trainaudit.model import EVENTS_LEFT_OUT, THINNED, Event, EventKind, Run, Series, Source

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
        if len(buf.steps) >= self.flush_points:
            self._flush(metric)

    def add_many(self, metric: str, steps: ArrayLike, values: ArrayLike, lines: ArrayLike) -> None:
        s = np.asarray(steps, dtype=np.int64)
        if s.size == 0 or not self._admit(metric, int(s.size)):
            return
        ln = np.asarray(lines, dtype=np.int64)
        if not self.flushes_early and s.size < self.flush_points:
            # a consumer that keeps everything to the end: short runs join the metric's buffer, one
            # growing array, not thousands of small ones that the allocator cannot give back
            buf = self._buffers.get(metric)
            if buf is None:
                buf = self._buffers[metric] = _Buffer()
            buf.steps.frombytes(s.tobytes())
            buf.values.frombytes(np.asarray(values, dtype=np.float64).tobytes())
            buf.lines.frombytes(ln.tobytes())
            if len(buf) >= self.flush_points:
                self._flush(metric)
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
    flush_points = FLUSH_POINTS  # a metric's buffered values are handed over at this many
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


# Points a series may hold while read (MAX_POINTS): a longer one is thinned (``thin``) to THIN_BUCKETS
# ranges of steps, and again each time it grows past MAX_POINTS, so that the memory of a run stays
# bounded whatever the size of the log (a 1 GB Megatron log has 14 series of 2.7 million points). A
# real run's curve has far fewer points than this; the rules see the thinned series, and the answer's
# coverage says how many points were read.
MAX_POINTS = 400_000
# Points all series together may hold while read: past it, every series longer than its share of half of
# it is thinned to that share (a 1 GB log of 8 ranks logging 7 metrics each has 56 series of 770 000 points).
MAX_HELD = 3_000_000
THIN_SAMPLES = 64  # evenly spaced points kept in each range of a thinned series
THIN_BUCKETS = MAX_POINTS // (4 * THIN_SAMPLES)  # ranges: a thinned series holds at most ~MAX_POINTS / 3

# Events of one kind kept at each end of a run (KEEP_EVENTS first, KEEP_EVENTS last); those between are
# counted with their step and line range. A 1 GB DeepSpeed log has 750 000 fp16 overflow lines, a Megatron
# one 600 000 iterations without a loss, each an Event with its line; a diagnosis cites the first and the
# last of such a run, and counts the rest.
KEEP_EVENTS = 10_000

_Part = tuple[np.ndarray, np.ndarray, np.ndarray, "int | np.ndarray"]  # steps, values, lines, source(s)
_Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # a merged series: steps, values, lines, sources


def thin(steps: np.ndarray, values: np.ndarray, buckets: int) -> np.ndarray:
    """Indices of the points of a series (``steps`` sorted, unique) kept by bucketed decimation: the
    steps are cut into ``buckets`` ranges of equal width, each cut again into THIN_SAMPLES; each small
    range keeps its first point (an even sample of the curve, so that means, medians and trends are
    those of the series), each range its last point, its lowest and highest finite value (so a spike
    or a dip survives), its first and last non-finite point and its first and last change between
    finite and non-finite (so where a series turns NaN, and where it recovers, keeps its step). At
    most THIN_SAMPLES + 7 points a range, in step order. A series thinned again with wider ranges
    keeps the highest and lowest value and the first non-finite point of the whole series: each is
    kept by every thinning."""
    n = int(steps.size)
    if n <= 2:
        return np.arange(n)
    # the distance from the first step, as an unsigned number: exact for any two int64 steps
    span = int(steps[-1]) - int(steps[0]) + 1
    fine = max(1, -(-span // (buckets * THIN_SAMPLES)))
    off = steps.view(np.uint64) - np.uint64(int(steps[0]) % (1 << 64))
    sample = off // np.uint64(fine)
    b = sample // np.uint64(THIN_SAMPLES)
    starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    ends = np.r_[starts[1:], n] - 1
    k = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))  # each point's range
    finite = np.isfinite(values)
    picks = [np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]]), ends]
    if finite.any():
        for pick, fill in ((np.minimum, np.inf), (np.maximum, -np.inf)):
            v = np.where(finite, values, fill)
            best = pick.reduceat(v, starts)
            at = np.flatnonzero(finite & (v == best[k]))
            picks.append(at[np.r_[True, k[at][1:] != k[at][:-1]]])  # the first such point of each range
    for at in (np.flatnonzero(~finite), np.flatnonzero(np.r_[False, finite[1:] != finite[:-1]])):
        if at.size:
            kb = k[at]
            picks.append(at[np.r_[True, kb[1:] != kb[:-1]]])
            picks.append(at[np.r_[kb[1:] != kb[:-1], True]])
    return np.unique(np.concatenate(picks))


class RunBuilder(Sink):
    """Collects everything into one :class:`Run` (all sources merged). A series that grows past
    ``max_points`` while read, or the longest ones when all of them hold more than ``max_held``, are
    merged as ``build`` merges them and thinned (``thin``)."""

    flushes_early = False
    flush_points = 1 << 13  # buffers of many series (one per rank and metric) stay small
    max_points = MAX_POINTS
    max_held = MAX_HELD
    thin_buckets = THIN_BUCKETS
    keep_events = KEEP_EVENTS

    def __init__(self) -> None:
        super().__init__()
        self.run = Run()
        self._parts: dict[str, list[_Part]] = {}
        self._held: dict[str, int] = {}  # points in a metric's parts
        self._total = 0  # points in all parts
        self._buckets: dict[str, int] = {}  # the ranges a thinned series is thinned to (thin)
        self._restarts: list[int] = []
        # metric -> (points, non-finite values) left out by thinning, for the series thinned
        self.dropped: dict[str, tuple[int, int]] = {}
        self._kind_seen: dict[EventKind, int] = {}  # events of each kind written
        self._head_seq = array("q")  # the place in line order of each event in run.events
        self._tails: dict[EventKind, deque[tuple[int, Event]]] = {}  # the last events of a kind past the first
        self._left_out: dict[EventKind, list[Any]] = {}  # kind -> [count, first/last step, first/last line]
        self._seq = 0

    def begin(self, source: Source) -> None:
        super().begin(source)
        self.run.sources.append(source)

    def write_values(self, metric: str, steps: np.ndarray, values: np.ndarray, lines: np.ndarray) -> None:
        self._parts.setdefault(metric, []).append((steps, values, lines, len(self.run.sources) - 1))
        held = self._held[metric] = self._held.get(metric, 0) + int(steps.size)
        self._total += int(steps.size)
        if held > self.max_points:
            self._thin(metric, self._merge(metric, self._parts.pop(metric)))
        if self._total > self.max_held:
            share = max(self.max_held // (2 * len(self._held)), 4 * (THIN_SAMPLES + 8))
            for m, n in list(self._held.items()):
                if n > share:
                    self._buckets[m] = min(self._buckets.get(m, self.thin_buckets), share // (THIN_SAMPLES + 8))
                    self._thin(m, self._merge(m, self._parts.pop(m)))

    def _thin(self, metric: str, series: _Arrays) -> _Arrays:
        """``series`` thinned (``thin``) as the metric's one part; the points and non-finite values
        left out are counted in ``dropped``."""
        steps, values, lines, src = series
        keep = thin(steps, values, self._buckets.get(metric, self.thin_buckets))
        out = np.ones(steps.size, dtype=bool)
        out[keep] = False
        n, bad = self.dropped.get(metric, (0, 0))
        self.dropped[metric] = (n + int(np.count_nonzero(out)), bad + int(np.count_nonzero(~np.isfinite(values[out]))))
        part = steps[keep], values[keep], lines[keep], src[keep]
        self._parts[metric] = [part]
        self._total += int(keep.size) - self._held[metric]
        self._held[metric] = int(keep.size)
        return part

    def write_event(self, ev: Event) -> None:
        self._seq += 1
        seen = self._kind_seen[ev.kind] = self._kind_seen.get(ev.kind, 0) + 1
        if seen <= self.keep_events:
            self.run.events.append(ev)
            self._head_seq.append(self._seq)
            return
        tail = self._tails.get(ev.kind)
        if tail is None:
            tail = self._tails[ev.kind] = deque(maxlen=self.keep_events)
        if len(tail) == self.keep_events:
            old = tail[0][1]  # leaves the tail: counted, not kept
            run = self._left_out.get(ev.kind)
            if run is None:
                self._left_out[ev.kind] = [1, old.step, old.step, old.line, old.line]
            else:
                run[0] += 1
                run[2], run[4] = old.step, old.line
        tail.append((self._seq, ev))

    def write_meta(self, key: str, value: Any) -> None:
        self.run.meta.setdefault(key, value)

    def _merge(self, metric: str, parts: list[_Part]) -> _Arrays:
        """One metric's parts as a series: sorted by step; a restart from the series' first step drops
        what the run before it logged; elsewhere, where a step repeats (a resume re-logging steps, or
        ranks printing the same line) the value read last wins. Restarts are recorded."""
        steps = np.concatenate([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        lines = np.concatenate([p[2] for p in parts])
        src = np.concatenate([np.full(p[0].shape[0], p[3], dtype=np.int16) if isinstance(p[3], int) else p[3]
                              for p in parts])
        del parts
        back = np.flatnonzero(np.diff(steps) < 0) + 1 if steps.size > 1 else np.zeros(0, dtype=np.intp)
        if back.size:
            if "@" not in metric:
                self._restarts.extend(int(steps[i]) for i in back)
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
        return steps, values, lines, src

    def build(self) -> Run:
        """Merge parts per metric (``_merge``); restarts are recorded in the run's metadata, and the
        series thinned while read in ``meta[THINNED]`` (metric -> points and non-finite values read)."""
        # series in the order their first values were handed over, however they were buffered
        # Each metric's parts are let go once merged, and steps already in order are not reordered
        # (a stable sort of them is the identity): the peak is the series plus one metric's parts,
        # not twice or three times the series.
        for metric in sorted(self._parts, key=lambda m: self.first_seen[m]):
            steps, values, lines, src = self._merge(metric, self._parts.pop(metric))
            if metric in self.dropped:  # the points read after the last thinning too: one width for all
                steps, values, lines, src = self._thin(metric, (steps, values, lines, src))
                self._parts.pop(metric)
            self.run.series[metric] = Series(metric, steps, values, lines, src)
        if self._restarts:
            self.run.meta["restarts"] = sorted(set(self._restarts))
        if self._tails:
            # the first events of each kind and the last ones, in line order
            merged = heapq.merge(zip(self._head_seq, self.run.events), *self._tails.values(), key=lambda t: t[0])
            self.run.events = [e for _, e in merged]
            self._tails.clear()
        if self._left_out:
            self.run.meta[EVENTS_LEFT_OUT] = {k.value: r for k, r in self._left_out.items()}
        if self.dropped:
            # what each thinned series stands for: its points and non-finite values with those left out
            self.run.meta[THINNED] = {
                m: (len(self.run.series[m]) + n, int(np.count_nonzero(~np.isfinite(self.run.series[m].values))) + bad)
                for m, (n, bad) in self.dropped.items()}
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
