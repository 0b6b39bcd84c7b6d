"""The diagnose rules, evaluated incrementally on a run that is still being written.

:class:`LiveRun` is a :class:`~trainaudit.ingest.sink.Sink`: readers (``watch``) and the monitor
feed it values as they appear. :class:`OnlineRules` turns the last ``window`` points of every
metric into a :class:`~trainaudit.model.Run` and runs the same rules as ``diagnose`` on it; each
(rule, metric) pair alerts once, with the step it was detected at and the step it started at.

This is an adapter over the rules' public API (``active_rules``, ``Context``): the rules are
written for whole runs, so rules that only make sense once a run has ended are left out.
No torch here: ``watch`` uses it too.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from trainaudit.ingest.sink import Sink
from trainaudit.model import Event, Run, Series, Source
from trainaudit.answer.schema import Category, Finding, Severity
from trainaudit.rules import Config, Context, Rule, active_rules

class TrainingStopped(Exception):
    """Raised by ``Monitor.step`` after the current step when an alert's action is ``stop``.

    The monitor's context manager swallows it, so ``with trainaudit.monitor(...)`` around the
    loop ends training cleanly; the alert is in ``.alert``."""

    def __init__(self, alert: Finding) -> None:
        super().__init__(f"training stopped by trainaudit at step {alert.last_step}: {alert.text()}")
        self.alert = alert


def alert(rule: str, category: str, severity: str, message: str, step: int, since: int | None,
          metric: str | None = None, *, confidence: float = 1.0, data: dict[str, Any] | None = None) -> Finding:
    """A finding of a run that is still alive: detected at ``step`` (its ``last_step``), bad since
    ``since`` (its ``first_bad_step``). A (rule, metric) pair alerts once, so it names the alert."""
    return Finding(id=Finding.named(rule, metric), rule=rule, category=Category(category),
                   severity=Severity(severity), metric=metric, first_bad_step=since, last_step=step,
                   message=message, confidence=confidence, data=data)


class _Buf:
    __slots__ = ("lines", "steps", "values")

    def __init__(self) -> None:
        self.steps = array("q")
        self.values = array("d")
        self.lines = array("q")


class LiveRun(Sink):
    """A sink whose values are visible as soon as they are added (no flush), plus events/meta.

    Only the last ``keep`` points per metric are kept (older ones are dropped in chunks), so a
    week-long run followed by ``watch`` stays small in memory."""

    def __init__(self, keep: int = 20000) -> None:
        super().__init__()
        self.keep = keep
        self.bufs: dict[str, _Buf] = {}
        self.recorded: list[Event] = []  # every event seen, in order
        self.meta_values: dict[str, Any] = {}
        self.sources: list[Source] = []

    def begin(self, source: Source) -> None:
        if not self.sources or self.sources[-1].path != source.path:
            self.sources.append(source)
        self.source = source
        # keep last_step and rank ownership across re-opened sources (rotation continues a run)

    def add(self, metric: str, step: int, value: float, line: int, rank: int | None = None) -> None:
        if rank is not None:
            metric = self.metric_for(metric, rank)
        b = self.bufs.get(metric)
        if b is None:
            b = self.bufs[metric] = _Buf()
        b.steps.append(int(step))
        b.values.append(float(value))
        b.lines.append(int(line))
        self.n_values += 1
        self.last_step = int(step)
        if len(b.steps) > 2 * self.keep:
            del b.steps[:-self.keep], b.values[:-self.keep], b.lines[:-self.keep]

    def add_row(self, step: int, values: dict[str, Any], skip: frozenset[str] = frozenset()) -> None:
        """All numeric values of one step (the monitor's per-step record) in one call: the same
        effect as :meth:`add` per value (line 0, no rank) without a method call for each."""
        bufs = self.bufs
        n = 0
        for metric, value in values.items():
            if metric in skip:
                continue
            b = bufs.get(metric)
            if b is None:
                b = bufs[metric] = _Buf()
            b.steps.append(step)
            b.values.append(value)
            b.lines.append(0)
            n += 1
            if len(b.steps) > 2 * self.keep:
                del b.steps[:-self.keep], b.values[:-self.keep], b.lines[:-self.keep]
        self.n_values += n
        self.last_step = step

    def add_many(self, metric: str, steps: ArrayLike, values: ArrayLike, lines: ArrayLike) -> None:
        for s, v, ln in zip(np.asarray(steps).tolist(), np.asarray(values).tolist(), np.asarray(lines).tolist()):
            self.add(metric, int(s), float(v), int(ln))

    def write_event(self, ev: Event) -> None:
        self.recorded.append(ev)

    def write_meta(self, key: str, value: Any) -> None:
        self.meta_values.setdefault(key, value)

    def end(self) -> None:
        """Nothing is buffered."""

    def snapshot(self, window: int) -> Run:
        """The last ``window`` points of each metric as a Run (sorted by step, last value of a
        repeated step wins, as RunBuilder does)."""
        run = Run(sources=list(self.sources) or [Source("<live>")], events=list(self.recorded),
                  meta=dict(self.meta_values))
        for name, b in self.bufs.items():
            n = len(b.steps)
            lo = max(0, n - window)
            steps = np.array(b.steps[lo:], dtype=np.int64)
            values = np.array(b.values[lo:], dtype=np.float64)
            lines = np.array(b.lines[lo:], dtype=np.int64)
            if steps.size > 1 and np.any(np.diff(steps) <= 0):
                order = np.argsort(steps, kind="stable")
                steps, values, lines = steps[order], values[order], lines[order]
                keep = np.append(steps[1:] != steps[:-1], True)
                steps, values, lines = steps[keep], values[keep], lines[keep]
            run.series[name] = Series(name, steps, values, lines, np.zeros(steps.size, dtype=np.int16))
        return run


NAN = Category.NAN_INF
# What a live run does after its first NaN follows from it, not a finding of its own: steps slow
# down while the monitor replays the step to find the NaN's origin and NaN arithmetic runs, and a
# loss or gradient that is NaN no longer decreases, spikes or grows.
AFTER_NAN = frozenset({Category.THROUGHPUT_REGRESSION, Category.DATA_PIPELINE, Category.MEMORY_GROWTH,
                       Category.PLATEAU, Category.LOSS_SPIKE, Category.DIVERGENCE, Category.GRAD_EXPLOSION,
                       Category.GRAD_VANISHING, Category.OVERFITTING})


@dataclass
class OnlineRules:
    """Evaluate the rules on the live run every ``every`` steps (and at once when the caller
    says it is urgent: a non-finite value, an lr change), over the last ``window`` points; return
    only new alerts. ``budget`` caps the share of time spent in routine evaluations: with very
    fast steps they are spaced out so that their cost stays under it. ``clock`` is that time (the
    monitor's leaves its paused blocks out: they are not training)."""

    config: Config | None = None
    every: int = 25
    window: int = 2000
    min_points: int = 20
    budget: float = 0.001
    clock: Callable[[], float] = time.perf_counter
    live: LiveRun = field(default_factory=LiveRun)
    fired: dict[tuple[str, str | None], Finding] = field(default_factory=dict)
    _rules: list[Rule] = field(default_factory=list)
    _last_eval: int | None = None
    _eval_cost: float = 0.0
    _eval_end: float = 0.0

    def __post_init__(self) -> None:
        # rules that only make sense once a run has ended run at the end (OnlineRules.finish)
        self._rules = [r for r in active_rules(self.config) if not r.end_of_run]
        self._final = [r for r in active_rules(self.config) if r.end_of_run]

    @property
    def alerts(self) -> list[Finding]:
        return list(self.fired.values())

    def due(self, step: int, urgent: bool = False) -> bool:
        if urgent:
            return True
        if self._last_eval is None:
            return step >= self.min_points
        if step - self._last_eval < self.every:
            return False
        return self.budget <= 0 or self.clock() - self._eval_end >= self._eval_cost / self.budget

    def evaluate(self, step: int, *, final: bool = False) -> list[Finding]:
        t0 = self.clock()
        try:
            return self._evaluate(step, final)
        finally:
            self._eval_end = self.clock()
            self._eval_cost = self._eval_end - t0

    def _evaluate(self, step: int, final: bool) -> list[Finding]:
        self._last_eval = step
        run = self.live.snapshot(self.window)
        if not run.series and not run.events:
            return []
        ctx = Context.of(run)
        new: list[Finding] = []
        rules = self._rules + (self._final if final else [])
        hits = [hit for rule in rules for hit in rule.check(ctx)]
        onsets = [s for a in self.fired.values() if a.category == NAN
                  for s in (a.first_bad_step if a.first_bad_step is not None else a.last_step,) if s is not None]
        onsets += [h.first_bad_step if h.first_bad_step is not None else step for h in hits if h.category == NAN]
        nan_since = min(onsets, default=None)
        for hit in hits:
            if nan_since is not None and hit.category in AFTER_NAN and \
                    (hit.first_bad_step if hit.first_bad_step is not None else step) >= nan_since:
                continue
            key = (hit.rule, hit.metric)
            if key in self.fired:
                continue
            a = alert(hit.rule, hit.category, hit.severity, hit.message, step, hit.first_bad_step, hit.metric,
                      confidence=hit.confidence)
            self.fired[key] = a
            new.append(a)
        return new

    def record(self, alert: Finding) -> bool:
        """Add an alert found outside the rules (the monitor's own checks); False if known."""
        key = (alert.rule, alert.metric)
        if key in self.fired:
            return False
        self.fired[key] = alert
        return True
