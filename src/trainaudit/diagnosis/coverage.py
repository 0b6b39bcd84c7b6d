"""What a diagnosis could look at: every metric with its points and step range, the events read,
the rules that ran and those that could not (and why). A run is only called healthy when this
covers it."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainaudit.model import Run
from trainaudit.rules.base import Context


@dataclass
class MetricCoverage:
    points: int
    first_step: int | None
    last_step: int | None
    read: int | None = None  # points read, where the series was thinned while read (Run.read_counts)


@dataclass
class Coverage:
    """What the diagnosis could look at."""

    metrics: dict[str, MetricCoverage] = field(default_factory=dict)
    events: int = 0
    rules_run: list[str] = field(default_factory=list)
    rules_skipped: dict[str, str] = field(default_factory=dict)
    loss_points: int = 0
    roles: dict[str, str] = field(default_factory=dict)
    skimmed: list[str] = field(default_factory=list)  # paths of the sources read in part (Source.note)


def coverage_of(run: Run, ctx: Context, ran: list[str], skipped: dict[str, str]) -> Coverage:
    cov = Coverage(events=run.n_events(), rules_run=list(ran), rules_skipped=dict(skipped),
                   roles=dict(ctx.roles.names), skimmed=[s.path for s in run.sources if s.note])
    for name, s in sorted(run.series.items()):
        fin = s.finite()
        cov.metrics[name] = MetricCoverage(len(s), int(s.steps[0]) if len(s) else None,
                                           int(s.steps[-1]) if len(s) else None,
                                           (run.read_counts(name) or (None,))[0])
        if ctx.roles.names.get("loss") == name:
            cov.loss_points = len(fin)
    return cov
