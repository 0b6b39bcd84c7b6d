"""Rule base class and what a rule reports.

A rule looks at one :class:`~trainaudit.model.Run` (through a :class:`Context` that has the
metric roles resolved) and returns :class:`Hit` objects. A hit is report-ready but id-free: it
names the series points and events it rests on (:class:`PointRef`, :class:`EventRef`) and the
calculations over them (:class:`CalcSpec`, formulas over point keys like ``{base}``), and the
report layer turns those into facts (with the quoted source line) and recomputable calculations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from trainaudit.answer.schema import Category, Severity
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
    """One finding of one rule: what, from when, how sure, and the points, events and
    calculations it rests on. ``by`` is the rule class, whose metadata (guidance, role, what it
    explains) the diagnosis reads."""

    by: type[Rule]
    category: Category
    severity: Severity
    message: str
    confidence: float
    metric: str | None = None
    first_bad_step: int | None = None
    last_step: int | None = None
    points: list[PointRef] = field(default_factory=list)
    events: list[EventRef] = field(default_factory=list)
    calcs: list[CalcSpec] = field(default_factory=list)
    fatal: bool = False  # the run died of this (crash verdict)
    cause: str | None = None  # for a precursor: why it is the likely cause of what follows (None: it is not)
    needs: list[str] = field(default_factory=list)  # what would settle this finding (beyond the rule's own list)
    data: dict[str, Any] = field(default_factory=dict)
    guidance: Guidance | None = None  # this finding needs other advice than its rule's usual one

    @property
    def rule(self) -> str:
        return self.by.id

    @property
    def advice(self) -> Guidance:
        return self.guidance or self.by.guidance

    @property
    def precursor(self) -> bool:
        return self.by.role is Role.PRECURSOR

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
    # what the rule being run asked for and did not get (role, why), when someone records it
    # (:func:`trainaudit.rules.run_rules_covered`): a rule that got none of the series it asked
    # for could not run
    asked: list[tuple[str, str | None]] | None = None

    @classmethod
    def of(cls, run: Run) -> Context:
        return cls(run, find_roles(run))

    def series(self, role: str, finite: bool = False, min_points: int = 0) -> Series | None:
        """The series playing ``role`` (finite points only if asked), or None when there is none
        or it has fewer than ``min_points`` points: too short to judge."""
        s = self.roles.get(self.run, role)
        if s is None:
            self._asked(role, f"no {role} metric")
            return None
        s = s.finite() if finite else s
        if len(s) < min_points:
            self._asked(role, f"{role} has {len(s)} point(s), fewer than {min_points}")
            return None
        self._asked(role, None)
        return s

    def _asked(self, role: str, missing: str | None) -> None:
        if self.asked is not None:
            self.asked.append((role, missing))

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


class Role(StrEnum):
    SYMPTOM = "symptom"  # a problem in its own right
    PRECURSOR = "precursor"  # a cause of other symptoms (an lr jump, a grad-norm spike), never a category alone


class Scope(StrEnum):
    RUN = "run"  # checks a Run (diagnose, watch, the monitor's online rules)
    GATE = "gate"  # reported by the golden-value gate or a run-vs-run comparison (compare, audit)
    MONITOR = "monitor"  # detected live by the monitor on the model itself (torch)
    INSPECT = "inspect"  # found by ``inspect`` on a model and one sample batch (torch)


@dataclass(frozen=True, slots=True)
class Guidance:
    """What to do about a finding, as a report's root cause states it."""

    fix: str
    impact: str
    verify: str


# threshold name -> the values the fit may choose from (the ``Params`` default among them)
Grid = dict[str, tuple[float, ...]]


class Thresholds(BaseModel):
    """A rule's thresholds: typed, with defaults; ``[tool.trainaudit.rules.ID]`` overrides them
    (an unknown name or a value of the wrong type is a configuration error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Rule:
    """Base class: a rule is the unit of knowledge. A subclass declares, typed, everything the rest
    of trainaudit needs to know about it, and implements :meth:`check`:

    - ``id`` (stable, never reused), ``name``, ``category`` and ``severity`` (defaults of its hits);
    - ``Params``: a :class:`Thresholds` model of its thresholds;
    - ``guidance``: fix, expected impact and how to verify, for the report's root cause;
    - ``role``: a symptom, or a precursor (a cause of other symptoms, never a story alone);
    - ``explains``: symptom categories its finding explains when it starts with them (sustained
      gradient growth explains the divergence it starts with);
    - ``follows``: categories whose story this finding joins as a consequence when there is one
      (zero gradients after a loss-scale collapse);
    - ``end_of_run``: only meaningful once the run has ended (not evaluated on a live run);
    - ``needs_more_data``: what would settle any finding of this rule (a finding adds its own in
      ``Hit.needs``);
    - ``scope``: what produces its findings (a Run, the gate, the live monitor);
    - ``grid``: the thresholds fitted on the labelled corpus, each with the values the fit may
      choose from (the ``Params`` default is the prior, kept unless the data say otherwise;
      :mod:`trainaudit.rules.fitted`).

    The class docstring is the rule's documentation (``trainaudit rules ID``): what, why, fix,
    example. Defining the class registers it (:mod:`trainaudit.rules.registry`).
    """

    id: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[Category]
    severity: ClassVar[Severity]
    # the other severities a hit can carry (e.g. medium, high when the evidence is stronger): the
    # listing shows the whole range, so `trainaudit rules` never says medium for what reports high
    also: ClassVar[tuple[Severity, ...]] = ()
    guidance: ClassVar[Guidance]
    role: ClassVar[Role] = Role.SYMPTOM
    explains: ClassVar[frozenset[Category]] = frozenset()
    follows: ClassVar[frozenset[Category]] = frozenset()
    end_of_run: ClassVar[bool] = False
    needs_more_data: ClassVar[tuple[str, ...]] = ()
    scope: ClassVar[Scope] = Scope.RUN
    grid: ClassVar[Grid] = {}

    class Params(Thresholds):
        pass

    registered: ClassVar[list[type[Rule]]] = []

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "id" in cls.__dict__:
            Rule.registered.append(cls)

    def __init__(self, params: Thresholds | None = None) -> None:
        self.p: Any = params if params is not None else self.Params()

    @classmethod
    def with_overrides(cls, overrides: dict[str, Any]) -> Rule:
        """The rule with thresholds from configuration; raises ValueError naming what is wrong."""
        try:
            return cls(cls.Params(**overrides))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"])
            known = ", ".join(cls.Params.model_fields) or "none"
            what = f"unknown threshold {where}" if first["type"] == "extra_forbidden" else \
                f"threshold {where}: {first['msg']}"
            raise ValueError(f"{cls.id}: {what} (known: {known})") from None

    @classmethod
    def severity_range(cls) -> str:
        """``medium`` or ``medium-high``: the lowest and highest severity its hits carry."""
        levels = sorted({cls.severity, *cls.also}, key=lambda s: -list(Severity).index(s))
        return str(levels[0]) if len(levels) == 1 else f"{levels[0]}-{levels[-1]}"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return cls.Params().model_dump()

    def hit(self, message: str, confidence: float, **kw: Any) -> Hit:
        kw.setdefault("severity", self.severity)
        kw.setdefault("category", self.category)
        return Hit(by=type(self), message=message, confidence=round(float(min(max(confidence, 0.0), 1.0)), 3), **kw)

    def check(self, ctx: Context) -> list[Hit]:
        """Findings on a run (scope RUN); rules of other scopes are reported by their producer."""
        return []
