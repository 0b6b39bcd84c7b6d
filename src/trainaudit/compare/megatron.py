"""Megatron-LM's golden-value gate (``common.pipeline`` of
tests/functional_tests/python_test_utils, driven by ``test_regular_pipeline`` /
``test_resume_checkpoint_pipeline``), with dated variants that replay older comparator behaviour.
Checked case by case against the comparator itself by tests/compare/test_oracle.py.

Per metric (in METRICS order, duplicates once, as the ``checks`` dict the tests build) and per
check (exact, then approximate):
- the golden file drives the step list; a missing actual step counts as ``"nan"``; any string is
  mapped to ``inf`` on both sides, so matching ``"nan"``s pass;
- ``is_close = |a - g| <= atol + rtol * |g|`` (numpy ``isclose``: relative to the golden value);
- exact checks (and any single-value check) need every step; approximate checks pass when
  ``mean(is_close) >= 1 - k / N`` with ``k = min(max(N // 100, 1), 50)``, in floating point;
- ``iteration-time`` compares one number: the median over steps 30-45 (5-20 when the last finite
  golden step is <= 25; else the first 4 finite steps after the window start);
- a metric in METRICS but absent from the golden file fails the test before any check; a metric
  absent from the actual values raises ``MissingTensorboardLogsError`` and aborts the test; a
  METRICS name without thresholds raises ``KeyError`` before anything runs.

Where the comparator itself raises (``KeyError``, ``ValueError``, ``ZeroDivisionError``) the gate
stops with ``abort_kind == "comparator_error"``: the inputs cannot be compared by that comparator,
which the command line reports as an input error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Literal

import numpy as np

from trainaudit.ingest.golden import GoldenFile, GoldenMetric, Raw
from trainaudit.errors import UsageError

CheckKind = Literal["exact", "approximate"]
Status = Literal["passed", "failed", "error", "skipped"]
ITERATION_TIME = "iteration-time"


@dataclass(frozen=True, slots=True)
class Change:
    commit: str
    day: date
    what: str


# Comparator changes a dated policy replays, each the commit of Megatron-LM's
# tests/functional_tests/python_test_utils that made it (author date). A policy dated D includes
# every change made on or before D; dates before EARLIEST are refused (the comparator before
# adc69dba2d used a different rtol scheme that is not replayed).
EARLIEST = Change("adc69dba2d", date(2025, 10, 21), "oldest comparator replayed: mean(is_close) >= k/N, "
                  "N = end_step/step_interval + 1, values filtered to the golden steps by position")
CHANGES: tuple[Change, ...] = (
    Change("f5590597c4", date(2025, 10, 31), "iteration-time rtol 0.25 -> 0.05; default METRICS drop iteration-time"),
    Change("4e85d74ae9", date(2026, 4, 14), "pass budget: exact needs every step, approximate "
           "mean(is_close) >= 1 - k/N (was mean(is_close) >= k/N for both); num-zeros approx rtol 0.05 -> 0.20"),
    Change("00317523a3", date(2026, 5, 2), "N = (end_step - start_step)/step_interval + 1 (was end_step/step_interval + 1)"),
    Change("71223d53ba", date(2026, 5, 27), "iteration-time median over the steady-state window 30-45 "
           "(5-20 for short runs, 0cb403483a) instead of all steps"),
    Change("e97ac83603", date(2026, 7, 14), "CHECK_THRESHOLDS gain 'total loss'"),
    Change("d2715d78a8", date(2026, 8, 7), "CHECK_THRESHOLDS gain 'mtp_2 loss'"),
    Change("3e75961a74", date(2026, 8, 22), "actual looked up per golden step (missing -> 'nan'); "
           "N = number of golden values; an empty golden metric fails; iteration-time uses finite golden "
           "steps only, with a fallback when the window is empty"),
)
NFormula = Literal["end", "span", "count"]
BASE_METRICS = ("iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes", "lm loss", "mtp_1 loss",
                "num-zeros", "generated_tokens", "logprobs")


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    strict_budget: bool = True  # 4e85d74ae9
    num_zeros_rtol: float = 0.20
    iteration_time_rtol: float = 0.05
    n_formula: NFormula = "count"  # 00317523a3 ("span"), 3e75961a74 ("count")
    steady_window: bool = True  # 71223d53ba
    by_step: bool = True  # 3e75961a74
    known_metrics: tuple[str, ...] = BASE_METRICS + ("total loss", "mtp_2 loss")
    default_metrics: tuple[str, ...] = ("lm loss", "num-zeros")

    def thresholds(self, metric: str) -> list[tuple[CheckKind, float]]:
        """CHECK_THRESHOLDS of test_pretraining_regular_pipeline.py (atol is 0 everywhere); a
        metric the comparator has no entry for is a ``KeyError`` there, checked by ``run_gate``."""
        if metric == ITERATION_TIME:
            return [("approximate", self.iteration_time_rtol)]
        if metric in ("mem-allocated-bytes", "mem-max-allocated-bytes"):
            return [("approximate", 0.05)]
        if metric == "num-zeros":
            return [("exact", 0.0), ("approximate", self.num_zeros_rtol)]
        if metric in self.known_metrics:
            return [("exact", 0.0), ("approximate", 0.05)]
        return []


_POLICY_RE = re.compile(r"^megatron(?:@(\d{4})-(\d{2})-(\d{2}))?$")


def policy_for(name: str) -> Policy:
    """``megatron`` (current) or ``megatron@YYYY-MM-DD`` (the comparator as of that day)."""
    m = _POLICY_RE.match(name.strip())
    if m is None:
        raise UsageError(f"--policy {name}: unknown policy (use megatron or megatron@YYYY-MM-DD)")
    if m.group(1) is None:
        return Policy("megatron")
    try:
        day = date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise UsageError(f"--policy {name}: not a valid date") from None
    if day < EARLIEST.day:
        raise UsageError(f"--policy {name}: the oldest comparator replayed is Megatron-LM {EARLIEST.commit} "
                         f"({EARLIEST.day.isoformat()}); use that date or a later one")
    p = Policy(name.strip())
    changes = {c.commit: c.day for c in CHANGES}
    if day < changes["f5590597c4"]:
        p = replace(p, iteration_time_rtol=0.25, default_metrics=("iteration-time", "lm loss", "num-zeros"))
    if day < changes["4e85d74ae9"]:
        p = replace(p, strict_budget=False, num_zeros_rtol=0.05)
    if day < changes["00317523a3"]:
        p = replace(p, n_formula="end")
    elif day < changes["3e75961a74"]:
        p = replace(p, n_formula="span")
    if day < changes["71223d53ba"]:
        p = replace(p, steady_window=False)
    if day < changes["e97ac83603"]:
        p = replace(p, known_metrics=BASE_METRICS)
    elif day < changes["d2715d78a8"]:
        p = replace(p, known_metrics=BASE_METRICS + ("total loss",))
    if day < changes["3e75961a74"]:
        p = replace(p, by_step=False)
    return p


def budget_k(n: float) -> float:
    return min(max(n // 100, 1), 50)


def passes(n_close: int, length: int, n_total: float, kind: CheckKind, policy: Policy) -> bool:
    """The pass condition on a count of close steps, evaluated in floating point like numpy's
    ``mean`` (an exact sum of ones divided by the length; the mean of nothing is NaN, which fails
    every comparison, while ``all`` of nothing is true)."""
    mean = n_close / length if length else math.nan
    if not policy.strict_budget:
        return mean >= budget_k(n_total) / n_total
    if kind == "exact" or n_total == 1:
        return n_close == length
    return mean >= 1 - budget_k(n_total) / n_total


def allowed_failing(length: int, n_total: float, kind: CheckKind, policy: Policy) -> int:
    """The largest number of failing steps that still passes (may be one less than k)."""
    best = -1
    for n_fail in range(length + 1):
        if passes(length - n_fail, length, n_total, kind, policy):
            best = n_fail
    return max(best, 0)


def to_inf(v: Raw) -> float:
    return math.inf if isinstance(v, str) else float(v)


def _median(values: list[float]) -> float:
    """``np.median``, which is NaN (with a warning) for an empty list."""
    return float(np.median(values)) if values else math.nan


@dataclass(slots=True)
class CheckResult:
    metric: str
    check: CheckKind
    rtol: float
    atol: float
    status: Status
    message: str  # the line Megatron would log
    steps: list[int] = field(default_factory=list)
    golden: list[float] = field(default_factory=list)  # strings already mapped to inf
    actual: list[float] = field(default_factory=list)
    actual_missing: list[int] = field(default_factory=list)  # golden steps absent from the actual run
    is_close: list[bool] = field(default_factory=list)
    n_steps: float = 0  # the N of the budget (a float before 3e75961a74, from the step fields)
    allowed_failing: int = 0
    window: tuple[int, int] | None = None
    window_steps: list[int] = field(default_factory=list)
    golden_median: float | None = None
    actual_median: float | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failing_steps(self) -> list[int]:
        if self.window is not None:
            return [] if all(self.is_close) else list(self.window_steps)
        return [s for s, ok in zip(self.steps, self.is_close) if not ok]

    @property
    def n_failing(self) -> int:
        return sum(1 for ok in self.is_close if not ok)


AbortKind = Literal["missing_in_actual", "missing_in_golden", "comparator_error"] | None


@dataclass(slots=True)
class GateResult:
    policy: Policy
    pipeline: Literal["regular", "resume"]
    nondeterministic: bool
    metrics: list[str]
    checks: list[CheckResult] = field(default_factory=list)
    abort: str | None = None  # message of an error that stopped the test
    abort_kind: AbortKind = None
    abort_metric: list[str] = field(default_factory=list)
    failed_metrics: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.abort is None and not self.failed_metrics

    def assertion(self) -> str | None:
        if self.passed:
            return None
        if self.abort_kind == "missing_in_actual":
            return f"MissingTensorboardLogsError: {self.abort}"
        if self.abort_kind == "comparator_error":
            return self.abort
        if self.abort:
            return f"AssertionError: {self.abort}"
        return f"AssertionError: The following metrics failed: {', '.join(self.failed_metrics)}"


class _ComparatorError(Exception):
    """An exception Megatron's comparator raises out of a check (not one of its own gate errors)."""


def _comparator_error(res: GateResult, metrics: list[str], message: str) -> GateResult:
    res.abort_kind, res.abort_metric, res.abort = "comparator_error", metrics, message
    res.log.append(message)
    return res


def run_gate(golden: GoldenFile, actual: GoldenFile, metrics: list[str], *, nondeterministic: bool,
             policy: Policy, pipeline: Literal["regular", "resume"] = "regular",
             train_iters: int | None = None) -> GateResult:
    """One pytest run of the gate. For ``resume`` the first run is ``golden`` and only steps after
    ``train_iters // 2`` are compared."""
    # The tests build {metric: CHECK_THRESHOLDS[metric] for metric in METRICS}: one entry per
    # name, and a KeyError for a name the comparator has no thresholds for.
    metrics = list(dict.fromkeys(metrics))
    res = GateResult(policy, pipeline, nondeterministic, metrics)
    unknown = [m for m in metrics if not policy.thresholds(m)]
    if unknown:
        return _comparator_error(res, unknown[:1], f"KeyError: {unknown[0]!r}: METRICS names a metric Megatron's "
                                 f"comparator ({policy.name}) has no CHECK_THRESHOLDS for")
    g_metrics, a_metrics = golden.metrics, actual.metrics
    missing = [m for m in metrics if m not in g_metrics]
    if missing:
        res.abort_kind, res.abort_metric = "missing_in_golden", missing
        res.abort = (f"The following metrics are required but not "
                     f"{'logged during training' if pipeline == 'resume' else 'provided in golden values'}: "
                     f"{', '.join(missing)}")
        res.log.append(res.abort)
        return res
    if pipeline == "resume":
        if train_iters is None:
            raise UsageError("--pipeline resume needs --train-iters (or --train-iters in --model-config)")
        # test_pretraining_resume_checkpoint_pipeline.py keeps the steps after train_iters // 2 of
        # both runs (start_step moved to train_iters // 2 + 1); the second run must have every metric.
        absent = [m for m in metrics if m not in a_metrics]
        if absent:
            return _comparator_error(res, absent[:1], f"KeyError: {absent[0]!r}: the second run has no "
                                     f"{absent[0]} values (the resume pipeline indexes it before comparing)")
        cut = train_iters // 2
        g_metrics = {k: _after(v, cut) for k, v in g_metrics.items() if k in metrics}
        a_metrics = {k: _after(v, cut) for k, v in a_metrics.items() if k in metrics}
    for metric in metrics:
        if metric not in a_metrics:
            res.abort_kind, res.abort_metric = "missing_in_actual", [metric]
            res.abort = (f"Metric {metric} not found in Tensorboard logs! Please modify `model_config.yaml` "
                         "to record it.")
            res.log.append(res.abort)
            return res
        for kind, rtol in policy.thresholds(metric):
            if kind == "exact" and nondeterministic:
                continue
            try:
                r = _check(metric, kind, rtol, g_metrics[metric], a_metrics[metric], policy)
            except _ComparatorError as exc:
                r = CheckResult(metric, kind, rtol, 0.0, "error", str(exc), error=str(exc))
                res.checks.append(r)
                return _comparator_error(res, [metric], f"{exc}, in the {kind} check of {metric}")
            res.checks.append(r)
            if r.passed:
                res.log.append(f"{'DETERMINISTIC' if kind == 'exact' else 'APPROXIMATE'} test for metric "
                               f"{metric}: PASSED")
            else:
                if r.golden or r.actual:
                    res.log.append("Actual values: " + ", ".join(_fmt(v) for v in _shown(r, "actual")))
                    res.log.append("Golden values: " + ", ".join(_fmt(v) for v in _shown(r, "golden")))
                res.log.append(r.message)
                res.failed_metrics.append(metric)
    return res


def _after(m: GoldenMetric, cut: int) -> GoldenMetric:
    keep = [i for i, s in enumerate(m.steps) if s > cut]
    return replace(m, start_step=cut + 1, steps=[m.steps[i] for i in keep], raw=[m.raw[i] for i in keep],
                   lines=[m.lines[i] for i in keep])


def _shown(r: CheckResult, side: str) -> list[float]:
    if r.window is not None:
        return [r.actual_median if side == "actual" else r.golden_median]  # type: ignore[list-item]
    return r.actual if side == "actual" else r.golden


def _fmt(v: float | None) -> str:
    if v is None:
        return "nan"
    return repr(float(v)) if math.isfinite(v) else "inf"


def _fail_message(metric: str, kind: CheckKind) -> str:
    return f"{'Exact' if kind == 'exact' else 'Approximate'} comparison of {metric}: FAILED"


def _n_total(g: GoldenMetric, policy: Policy) -> float:
    """N of the budget. Before 3e75961a74 it came from the step fields, as a float division that
    raises ZeroDivisionError for step_interval 0."""
    if policy.n_formula == "count":
        return len(g.steps)
    if g.step_interval == 0:
        raise _ComparatorError("ZeroDivisionError: division by zero (the golden step_interval is 0)")
    if policy.n_formula == "end":  # before 00317523a3
        return g.end_step / g.step_interval + 1
    return (g.end_step - g.start_step) / g.step_interval + 1


def _is_close(actual: list[float], golden: list[float], rtol: float, atol: float) -> list[bool]:
    """``np.isclose`` on the two lists, broadcasting as numpy does (a list of one value is compared
    with every value of the other); lists that cannot be broadcast are the comparator's ValueError."""
    try:
        return [bool(x) for x in np.isclose(np.array(actual, dtype=float), np.array(golden, dtype=float),
                                            rtol=rtol, atol=atol)]
    except ValueError as exc:
        raise _ComparatorError(f"ValueError: {exc} (actual and golden value lists differ in length)") from None


def _check(metric: str, kind: CheckKind, rtol: float, g: GoldenMetric, a: GoldenMetric,
           policy: Policy) -> CheckResult:
    atol = 0.0
    r = CheckResult(metric, kind, rtol, atol, "failed", _fail_message(metric, kind))
    if policy.by_step and not g.steps:
        r.status, r.error = "error", f"Metric {metric} has no values in the golden file."
        r.message = r.error
        return r
    actual = a.as_dict()
    if metric == ITERATION_TIME:
        return _iteration_time(r, g, a, actual, policy)
    r.n_steps = _n_total(g, policy)
    r.steps = list(g.steps)
    r.golden = g.floats()
    if policy.by_step:
        r.actual_missing = [s for s in g.steps if s not in actual]
        r.actual = [to_inf(actual.get(s, "nan")) for s in g.steps]
    else:
        # Before 3e75961a74: the actual values at golden steps, in the actual file's order, compared
        # by position with every golden value (the extractor wrote "nan" for absent steps then).
        gset = set(g.steps)
        r.actual = [to_inf(v) for s, v in zip(a.steps, a.raw) if s in gset]
        r.actual_missing = [s for s in g.steps if s not in actual]
    r.is_close = _is_close(r.actual, r.golden, rtol, atol)
    n = len(r.is_close)
    if len(r.actual) != n or len(r.golden) != n:
        # numpy broadcast a single value against the other list (or an empty list against one
        # value): report the values as they were compared.
        r.golden = [float(x) for x in np.broadcast_to(np.array(r.golden, dtype=float), (n,))]
        r.actual = [float(x) for x in np.broadcast_to(np.array(r.actual, dtype=float), (n,))]
        r.steps = r.steps[:n]
    r.allowed_failing = allowed_failing(len(r.is_close), r.n_steps, kind, policy)
    ok = passes(sum(r.is_close), len(r.is_close), r.n_steps, kind, policy)
    r.status = "passed" if ok else "failed"
    return r


def window_for(last_step: int) -> tuple[int, int]:
    return (5, 20) if last_step <= 25 else (30, 45)


def _iteration_time(r: CheckResult, g: GoldenMetric, a: GoldenMetric, actual: dict[int, Raw],
                    policy: Policy) -> CheckResult:
    gd = g.as_dict()
    gset = set(g.steps)
    if policy.by_step:
        finite = sorted(s for s, v in gd.items() if not isinstance(v, str) and math.isfinite(v))
        if not finite:
            r.status, r.error = "error", f"Metric {ITERATION_TIME} has no finite values."
            r.message = r.error
            return r
        lo, hi = window_for(finite[-1])
        steps = [s for s in finite if lo <= s <= hi] or [s for s in finite if s >= lo][:4]
        if not steps:
            r.status, r.error = "error", f"Metric {ITERATION_TIME} has no finite values after its warmup window."
            r.message = r.error
            return r
        r.window, r.window_steps = (lo, hi), steps
        r.golden = [to_inf(gd[s]) for s in steps]
        r.actual = [to_inf(actual.get(s, "nan")) for s in steps]
        r.actual_missing = [s for s in steps if s not in actual]
    else:
        # Before 3e75961a74: golden values in the window (every golden step before 71223d53ba), and
        # the actual values at golden steps in the window, in the actual file's order; an empty
        # list has a NaN median, which fails.
        if policy.steady_window:
            lo, hi = window_for(max(g.steps) if g.steps else 0)
        else:
            lo, hi = (min(g.steps), max(g.steps)) if g.steps else (0, 0)
        inside = (lambda s: lo <= s <= hi) if policy.steady_window else (lambda s: True)
        r.window = (lo, hi)
        r.window_steps = [s for s in g.steps if inside(s)]
        r.golden = [to_inf(gd[s]) for s in r.window_steps]
        r.actual = [to_inf(v) for s, v in zip(a.steps, a.raw) if s in gset and inside(s)]
        r.actual_missing = [s for s in r.window_steps if s not in actual]
    r.golden_median = _median(r.golden)
    r.actual_median = _median(r.actual)
    r.steps = list(r.window_steps)
    r.n_steps = 1
    r.is_close = [bool(np.isclose(r.actual_median, r.golden_median, rtol=r.rtol, atol=r.atol))]
    r.allowed_failing = 0
    r.status = "passed" if passes(sum(r.is_close), 1, 1, r.check, policy) else "failed"
    return r
