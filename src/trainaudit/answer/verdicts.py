"""The verdict vocabulary: one typed table of what each verdict is called, how it looks and how
severe it is, read by every output (terminal, HTML, Markdown, posts) and by the gate's findings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainaudit.answer.schema import Severity, Verdict

Tone = Literal["ok", "warn", "bad"]


@dataclass(frozen=True, slots=True)
class VerdictInfo:
    label: str  # as a heading says it
    tone: Tone  # ok: nothing to do; warn: look, no failure of the training; bad: a failure
    severity: Severity  # of a finding that carries this verdict (compare's gate findings)
    icon: str  # Slack / GitHub emoji shortcode
    explanation: str  # one line: who must act
    change: str | None = None  # the kind of change that explains it, for the history's ranking


VERDICT_INFO: dict[Verdict, VerdictInfo] = {
    "healthy": VerdictInfo("Healthy", "ok", Severity.INFO, ":white_check_mark:", "a run with nothing wrong"),
    "pass": VerdictInfo("Pass", "ok", Severity.INFO, ":white_check_mark:", "the golden-value gate passes"),
    "unhealthy": VerdictInfo("Unhealthy", "bad", Severity.HIGH, ":rotating_light:", "a run with a problem; the category says which"),
    "crash": VerdictInfo("Crash", "bad", Severity.CRITICAL, ":rotating_light:", "the run died before it produced comparable values", "crash"),
    "infrastructure_failure": VerdictInfo("Infrastructure failure", "bad", Severity.CRITICAL, ":rotating_light:",
                                          "the platform failed the run (OOM, NCCL, a GPU): the platform's owners act", "infra"),
    "real_regression": VerdictInfo("Real regression", "bad", Severity.HIGH, ":rotating_light:",
                                   "a change in the repository moved the numbers: someone looks at the change", "training"),
    "numerical_drift": VerdictInfo("Numerical drift", "warn", Severity.LOW, ":warning:",
                                   "only the environment moved, within what it explains: refresh the golden", "drift"),
    "gating_policy_issue": VerdictInfo("Gating-policy issue", "warn", Severity.MEDIUM, ":warning:",
                                       "the check, not the training, is at fault: fix the gate or its golden", "golden"),
    "inconclusive": VerdictInfo("Inconclusive", "warn", Severity.MEDIUM, ":grey_question:",
                                "the evidence does not decide; needs_more_data says what would"),
}


def verdict_info(verdict: str) -> VerdictInfo:
    """The entry of ``verdict`` (a str from a model field typed as :data:`Verdict`)."""
    return VERDICT_INFO[verdict]  # type: ignore[index]
