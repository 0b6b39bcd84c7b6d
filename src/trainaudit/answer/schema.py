"""answer.json, schema_version "1", as docs/answer.md describes it (pydantic models).

Optional fields beyond the essentials, and why:
- ``ExtractedFact.values`` / ``steps``: a fact may quote a whole series excerpt (e.g. the golden and
  actual values of a metric), so that aggregate calculations (median, max relative error) are
  recomputable from facts in the same file.
- ``ExtractedFact.quote``: the raw source line the fact rests on (secrets masked).
- ``Comparison.deviation``: the shape of the deviation (sign, trend, systematic shift from step k).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

SCHEMA_VERSION: Literal["1"] = "1"

SourceKindName = Literal["log", "metrics", "tensorboard", "golden_values", "config", "ci_log", "archive_member",
                         "commit", "repo"]
Task = Literal["diagnose", "compare", "audit"]
Verdict = Literal["real_regression", "numerical_drift", "gating_policy_issue", "infrastructure_failure", "crash",
                  "pass", "inconclusive", "healthy", "unhealthy"]
CommitRole = Literal["suspect", "environment_change", "golden_update", "policy_change", "fix"]


class Severity(StrEnum):
    CRITICAL = "critical"  # the run is lost
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 (info) to 4 (critical), for ordering."""
        return SEVERITY_ORDER[self.value]


class Category(StrEnum):
    """What went wrong, as the primary root cause of a run (docs/answer.md)."""

    NAN_INF = "nan_inf"
    DIVERGENCE = "divergence"
    LOSS_SPIKE = "loss_spike"
    LOSS_SCALE_COLLAPSE = "loss_scale_collapse"
    PLATEAU = "plateau"
    OVERFITTING = "overfitting"
    GRAD_EXPLOSION = "grad_explosion"
    GRAD_VANISHING = "grad_vanishing"
    OOM = "oom"
    MEMORY_GROWTH = "memory_growth"
    DISTRIBUTED_FAILURE = "distributed_failure"
    THROUGHPUT_REGRESSION = "throughput_regression"
    GOLDEN_MISMATCH = "golden_mismatch"
    MODE_COLLAPSE = "mode_collapse"
    DATA_PIPELINE = "data_pipeline"
    HARDWARE_FAULT = "hardware_fault"
    CRASH = "crash"
    HEALTHY = "healthy"


SEVERITY_ORDER: dict[str, int] = {"info": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
VERDICTS: tuple[str, ...] = Verdict.__args__  # type: ignore[attr-defined]

# What kind of failure a category is (one definition, read by diagnosis and audit):
# the platform killed the run (not the code or the training dynamics)
PLATFORM_CATEGORIES: frozenset[Category] = frozenset({Category.OOM, Category.DISTRIBUTED_FAILURE,
                                                      Category.HARDWARE_FAULT})
# the run died: the platform, or any other fatal error
FATAL_CATEGORIES: frozenset[Category] = PLATFORM_CATEGORIES | {Category.CRASH}
# the model trains badly
TRAINING_CATEGORIES: frozenset[Category] = frozenset({
    Category.NAN_INF, Category.DIVERGENCE, Category.LOSS_SPIKE, Category.LOSS_SCALE_COLLAPSE, Category.PLATEAU,
    Category.GRAD_EXPLOSION, Category.GRAD_VANISHING, Category.MODE_COLLAPSE, Category.OVERFITTING})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=True)


class ToolInfo(_Model):
    name: Literal["trainaudit"] = "trainaudit"
    version: str


class SourceRef(_Model):
    id: str
    kind: SourceKindName
    path: str
    sha256: str | None = None
    commit: str | None = None
    description: str = ""


class ExtractedFact(_Model):
    id: str
    source_ref: str
    statement: str
    metric: str | None = None
    step: int | None = None
    value: float | str | None = None
    unit: str | None = None
    line: int | None = None
    quote: str | None = None
    steps: list[int] | None = None
    values: list[float | str | None] | None = None  # non-finite as "nan", "inf", "-inf"


class Calculation(_Model):
    id: str
    description: str
    formula: str
    inputs: list[str]
    result: float | None
    unit: str | None = None


class Finding(_Model):
    """One problem one rule found, wherever it is reported: an answer's finding (``evidence``: ids
    of its facts and calculations), an alert of the live monitor or of ``watch`` (``last_step``:
    the step it was detected at), a check of ``inspect``, an MCP result. ``data``: what the check
    measured, when it has more than the message says (e.g. the module where the first NaN/Inf
    appeared, the parameters it names)."""

    id: str
    rule: str
    category: Category
    severity: Severity
    metric: str | None = None
    first_bad_step: int | None = None
    last_step: int | None = None
    message: str
    evidence: list[str] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    data: dict[str, Any] | None = None

    @staticmethod
    def named(rule: str, metric: str | None) -> str:
        """The id of a finding reported once per (rule, metric), outside an answer (a live alert, an
        ``inspect`` check): ``TA101:loss``, or the rule's id alone."""
        return f"{rule}:{metric}" if metric else rule

    def text(self) -> str:
        """``[TA101 critical] nan_inf since step 57: loss is NaN ...``: one line, as logs print it."""
        since = f" since step {self.first_bad_step}" if self.first_bad_step is not None else ""
        return f"[{self.rule} {self.severity}] {self.category}{since}: {self.message}"

    def at_least(self, severity: str) -> bool:
        return SEVERITY_ORDER[str(self.severity)] >= SEVERITY_ORDER[severity]


class Comparison(_Model):
    metric: str
    check: Literal["exact", "approximate"]
    policy: str
    passed: bool
    rtol: float
    atol: float
    n_steps: int
    n_failing: int
    allowed_failing: int
    first_failing_step: int | None = None
    max_rel_err: float | None = None
    median_rel_err: float | None = None
    window: list[int] | None = None
    golden_median: float | None = None
    actual_median: float | None = None
    evidence: list[str] = Field(default_factory=list)
    deviation: dict[str, Any] | None = None


class Commit(_Model):
    sha: str
    date: str
    title: str
    files: list[str] = Field(default_factory=list)
    role: CommitRole
    relevance: float = Field(ge=0.0, le=1.0)
    reason: str


class RootCause(_Model):
    issue: str
    category: Category
    severity: Severity
    evidence: list[str] = Field(default_factory=list)
    fix: str
    expected_impact: str
    verify: str
    confidence: float = Field(ge=0.0, le=1.0)


class MetricCoverage(_Model):
    points: int
    first_step: int | None = None
    last_step: int | None = None
    # points read, where a series too long to hold was thinned to ``points`` while read (absent otherwise)
    read_points: int | None = None

    @model_serializer(mode="wrap")
    def _without_read_points(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("read_points") is None:
            out.pop("read_points", None)  # a series held whole: answers without thinning stay as they were
        return out


class Coverage(_Model):
    """What a diagnosis looked at: metrics with their points and step range, events read, rules
    that ran and those that could not (and why)."""

    metrics: dict[str, MetricCoverage] = Field(default_factory=dict)
    events: int = 0
    rules_run: list[str] = Field(default_factory=list)
    rules_skipped: dict[str, str] = Field(default_factory=dict)
    # sources read in part (per-rank logs skimmed for errors, timeouts, non-finite values and their
    # last step): their source_refs ids; each one's description says what was read of it
    skimmed: list[str] = Field(default_factory=list)


class DecisionReason(_Model):
    feature: str  # in words
    log_odds: float  # how much it moved the chosen category above the runner-up


class Decision(_Model):
    """How ``diagnose`` chose its category: the fitted model's probability of the chosen category
    and of the runner-up, the features that weighed most, and how sure it is of the answer."""

    category: str
    probability: float = Field(ge=0.0, le=1.0)
    runner_up: str
    runner_up_probability: float = Field(ge=0.0, le=1.0)
    reasons: list[DecisionReason] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)


class RunnerUp(_Model):
    sha: str
    confidence: float = Field(ge=0.0, le=1.0)


class Culprit(_Model):
    """The commit the answer names (``commits[0]``): its role and how sure the ranking is of it,
    beside the second commit's share."""

    sha: str
    role: CommitRole
    confidence: float = Field(ge=0.0, le=1.0)
    runner_up: RunnerUp | None = None


class GateOutcome(_Model):
    """The golden-value gate as one comparator version ran it."""

    policy: str  # the comparator replayed (``megatron@YYYY-MM-DD``, or ``megatron`` for today's)
    date: str | None = None  # the day that comparator is as of; null for today's newest
    passed: bool
    failing: list[str] = Field(default_factory=list)  # the failing checks, "metric (exact|approximate)"
    aborted: str | None = None  # what stopped the test before or between checks, if anything
    evidence: list[str] = Field(default_factory=list)


class GateDisagreement(_Model):
    """The gate of the failing run's date and today's gate give different outcomes on the same
    golden and run (present only then)."""

    at_run: GateOutcome
    today: GateOutcome
    summary: str


class FinalAnswer(_Model):
    verdict: Verdict
    category: Category
    first_bad_step: int | None = None
    summary: str
    root_causes: list[RootCause] = Field(default_factory=list)
    quick_fixes: list[str] = Field(default_factory=list)
    needs_more_data: list[str] = Field(default_factory=list)
    coverage: Coverage | None = None
    decision: Decision | None = None
    culprit: Culprit | None = None
    gate_disagreement: GateDisagreement | None = None


class ValidationCheck(_Model):
    name: str
    passed: bool
    detail: str = ""


class Validation(_Model):
    all_passed: bool
    checks: list[ValidationCheck] = Field(default_factory=list)


class Answer(_Model):
    schema_version: Literal["1"] = SCHEMA_VERSION
    tool: ToolInfo
    task: Task
    source_refs: list[SourceRef] = Field(default_factory=list)
    extracted_facts: list[ExtractedFact] = Field(default_factory=list)
    calculations: list[Calculation] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    commits: list[Commit] = Field(default_factory=list)
    final_answer: FinalAnswer
    validation: Validation = Field(default_factory=lambda: Validation(all_passed=False))
