"""Rule base class and what a rule reports.

A rule looks at one :class:`~trainaudit.model.Run` (through a :class:`Context` that has the
metric roles resolved) and returns :class:`Hit` objects. A hit is report-ready but id-free: it
names the series points and events it rests on (:class:`PointRef`, :class:`EventRef`) and the
calculations over them (:class:`CalcSpec`, formulas over point keys like ``{base}``), and the
report layer turns those into facts (with the quoted source line) and recomputable calculations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from trainaudit.model import Event, EventKind, Run, Series
from trainaudit.series.roles import Roles, find_roles


@dataclass(slots=True)
class PointRef:
    """One logged value (``index`` into ``series``) or a short excerpt (``indices``)."""

    key: str
    series: Series
    index: int
    statement: str
    indices: np.ndarray | None = None
    value_override: float | None = None  # e.g. a window median, quoted with the line of ``index``

    @property
    def step(self) -> int:
        return int(self.series.steps[self.index])

    @property
    def value(self) -> float:
        return float(self.series.values[self.index]) if self.value_override is None else self.value_override


@dataclass(slots=True)
class EventRef:
    key: str
    event: Event
    statement: str
    value: float | str | None = None
    unit: str | None = None


@dataclass(slots=True)
class CalcSpec:
    """``formula`` uses ``{key}`` placeholders for points/events/other calcs of the same hit."""

    key: str
    description: str
    formula: str
    unit: str | None = None


@dataclass(slots=True)
class Hit:
    rule: str
    category: str
    severity: str
    message: str
    confidence: float
    metric: str | None = None
    first_bad_step: int | None = None
    last_step: int | None = None
    points: list[PointRef] = field(default_factory=list)
    events: list[EventRef] = field(default_factory=list)
    calcs: list[CalcSpec] = field(default_factory=list)
    fatal: bool = False  # the run died of this (crash verdict)
    precursor: bool = False  # a cause of other symptoms (lr jump, grad-norm spike), never a category alone
    data: dict[str, Any] = field(default_factory=dict)

    def point(self, key: str, series: Series, index: int, statement: str, **kw: Any) -> str:
        self.points.append(PointRef(key, series, int(index), statement, **kw))
        return key

    def ev(self, key: str, event: Event, statement: str, **kw: Any) -> str:
        self.events.append(EventRef(key, event, statement, **kw))
        return key

    def calc(self, key: str, description: str, formula: str, unit: str | None = None) -> str:
        self.calcs.append(CalcSpec(key, description, formula, unit))
        return key


@dataclass(slots=True)
class Context:
    run: Run
    roles: Roles

    @classmethod
    def of(cls, run: Run) -> Context:
        return cls(run, find_roles(run))

    def series(self, role: str, finite: bool = False, min_points: int = 0) -> Series | None:
        """The series playing ``role`` (finite points only if asked), or None when there is none
        or it has fewer than ``min_points`` points: too short to judge."""
        s = self.roles.get(self.run, role)
        if s is None:
            return None
        s = s.finite() if finite else s
        return s if len(s) >= min_points else None

    def events(self, *kinds: EventKind) -> list[Event]:
        return [e for e in self.run.events if e.kind in kinds]

    def step_of(self, e: Event) -> int | None:
        """An event's step, or the last logged step when the event came from a file without
        steps (stderr next to a metrics file): the run died after that step."""
        return e.step if e.step is not None else self.last_step

    @property
    def last_step(self) -> int | None:
        steps = [int(s.steps[-1]) for s in self.run.series.values() if len(s)]
        return max(steps) if steps else None


class Rule:
    """Base class. Subclasses set ``id``, ``name``, ``category``, ``severity`` and ``Params`` (a
    dataclass of thresholds with defaults) and implement :meth:`check`. The class docstring is
    the rule's documentation (``trainaudit rules ID``): what, why, fix, example."""

    id: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[str]
    severity: ClassVar[str]

    @dataclass
    class Params:
        pass

    def __init__(self, params: Any = None) -> None:
        self.p = params if params is not None else self.Params()

    @classmethod
    def with_overrides(cls, overrides: dict[str, Any]) -> Rule:
        known = {f.name: f for f in dataclasses.fields(cls.Params)}
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise KeyError(f"{cls.id}: unknown threshold(s) {', '.join(unknown)} (known: {', '.join(known) or 'none'})")
        base = cls.Params()
        vals = {}
        for k, v in overrides.items():
            default = getattr(base, k)
            vals[k] = type(default)(v) if isinstance(default, (int, float)) and not isinstance(default, bool) else v
        return cls(dataclasses.replace(base, **vals))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return dataclasses.asdict(cls.Params())

    def hit(self, message: str, confidence: float, **kw: Any) -> Hit:
        kw.setdefault("severity", self.severity)
        kw.setdefault("category", self.category)
        return Hit(rule=self.id, message=message, confidence=round(float(min(max(confidence, 0.0), 1.0)), 3), **kw)

    def check(self, ctx: Context) -> list[Hit]:
        raise NotImplementedError
