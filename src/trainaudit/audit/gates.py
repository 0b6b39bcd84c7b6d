"""The gate of the failing run's date against today's gate.

A CI run was gated by the comparator of its day; the same golden and run may pass or fail
differently under Megatron-LM's newest comparator (tolerances, default METRICS and the pass budget
changed over time: :data:`trainaudit.compare.megatron.CHANGES`). When the two outcomes differ (pass
against fail, or another set of failing checks) the answer shows both, so a reader knows whether
rerunning the job today would still fail; when they agree nothing is added.
"""

from __future__ import annotations

import re
from datetime import date

from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.schema import GateDisagreement, GateOutcome
from trainaudit.compare.megatron import CHANGES, Change, GateResult, Policy
from trainaudit.compare.pipeline import GoldenGate, regate

_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
MAX_CHANGES = 3


def policy_day(policy: Policy) -> date | None:
    """The day a dated comparator is as of (``megatron@2025-10-25``, ``megatron~2025-06-01``);
    None for today's."""
    m = _DAY.search(policy.name)
    return date(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def failing_checks(gate: GateResult) -> list[str]:
    return [f"{c.metric} ({c.check})" for c in gate.checks if not c.passed]


def _outcome_key(gate: GateResult) -> tuple[bool, frozenset[str], str | None, tuple[str, ...]]:
    return gate.passed, frozenset(failing_checks(gate)), gate.abort_kind, tuple(gate.abort_metric)


def replay_today(run: GoldenGate, today: Policy) -> GateResult | None:
    """Today's gate on the same inputs, when its outcome differs from the dated gate's; else None."""
    if run.gate.policy.name == today.name:
        return None
    now = regate(run, today)
    return None if _outcome_key(now) == _outcome_key(run.gate) else now


def in_words(gate: GateResult) -> str:
    """``passes``, ``fails on iteration-time (approximate)``, ``stops: ...``."""
    if gate.passed:
        return "passes"
    if gate.abort:
        return f"stops before comparing: {gate.abort}"
    failing = list(dict.fromkeys(failing_checks(gate)))
    return "fails on " + ", ".join(failing)


def changes_between(then: date | None) -> list[Change]:
    """The comparator changes a gate dated ``then`` lacks (all of them before the oldest replayed)."""
    return [c for c in CHANGES if then is None or c.day > then]


def _relevant(changes: list[Change], metrics: set[str]) -> list[Change]:
    named = [c for c in changes if any(m in c.what for m in metrics)]
    return named or changes


def record(b: AnswerBuilder, source: str, then: GateResult, now: GateResult) -> GateDisagreement:
    """Both outcomes as facts of ``source`` (the golden values) and the typed field that cites them."""
    day = policy_day(then.policy)
    when = day.isoformat() if day else then.policy.name
    differ = set(failing_checks(then)) ^ set(failing_checks(now))
    metrics = {d.split(" (")[0] for d in differ} | set(then.abort_metric) | set(now.abort_metric)
    changed = _relevant(changes_between(day), metrics)
    why = "; ".join(f"{c.commit} ({c.day.isoformat()}): {c.what}" for c in changed[:MAX_CHANGES])
    if len(changed) > MAX_CHANGES:
        why += f"; and {len(changed) - MAX_CHANGES} more"
    summary = (f"under the gate of {when} ({then.policy.name}) this {in_words(then)}; under today's gate "
               f"({now.policy.name}) it {in_words(now)}: the comparator changed in between ({why})")
    f_then = b.fact(source, f"the golden-value gate as of {when} ({then.policy.name}, the comparator of the failing "
                            f"run's date) {in_words(then)}")
    f_now = b.fact(source, f"the golden-value gate of today ({now.policy.name}) {in_words(now)}")

    def outcome(g: GateResult, fact: str, day_of: date | None) -> GateOutcome:
        return GateOutcome(policy=g.policy.name, date=day_of.isoformat() if day_of else None, passed=g.passed,
                           failing=list(dict.fromkeys(failing_checks(g))), aborted=g.abort, evidence=[fact])

    return GateDisagreement(at_run=outcome(then, f_then, day), today=outcome(now, f_now, None), summary=summary)


__all__ = ["changes_between", "failing_checks", "in_words", "policy_day", "record", "replay_today"]
