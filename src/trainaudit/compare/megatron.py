"""Megatron-LM's golden-value gate (``common.pipeline``), reimplemented from its description in
megatron_golden.md §1.4-1.11, with dated variants that replay older comparator behaviour.

Per metric (in METRICS order) and per check (exact, then approximate):
- the golden file drives the step list; a missing actual step counts as ``"nan"``; any string is
  mapped to ``inf`` on both sides, so matching ``"nan"``s pass;
- ``is_close = |a - g| <= atol + rtol * |g|`` (numpy ``isclose``: relative to the golden value);
- exact checks (and any single-value check) need every step; approximate checks pass when
  ``mean(is_close) >= 1 - k / N`` with ``k = min(max(N // 100, 1), 50)``, in floating point;
- ``iteration-time`` compares one number: the median over steps 30-45 (5-20 when the last finite
  golden step is <= 25; else the first 4 finite steps after the window start);
- a metric in METRICS but absent from the golden file fails the test before any check; a metric
  absent from the actual values raises ``MissingTensorboardLogsError`` and aborts the test.
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


# Comparator changes a dated policy replays (megatron_golden.md §4). A policy dated D includes
# every change made on or before D.
CHANGES: tuple[Change, ...] = (
    Change("f5590597c4", date(2025, 10, 31), "iteration-time rtol 0.25 -> 0.05; default METRICS drop iteration-time"),
    Change("4e85d74ae9", date(2026, 4, 14), "pass budget: exact needs every step, approximate "
           "mean(is_close) >= 1 - k/N (was mean(is_close) >= k/N for both); num-zeros approx rtol 0.05 -> 0.20"),
    Change("71223d53ba", date(2026, 5, 27), "iteration-time median over the steady-state window 30-45 "
           "(5-20 for short runs, 0cb403483a) instead of all steps"),
    Change("3e75961a74", date(2026, 8, 22), "actual looked up per golden step (missing -> 'nan'); "
           "N = number of golden values; iteration-time uses finite golden steps only"),
)


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    strict_budget: bool = True  # 4e85d74ae9
    num_zeros_rtol: float = 0.20
    iteration_time_rtol: float = 0.05
    steady_window: bool = True  # 71223d53ba
    by_step: bool = True  # 3e75961a74
    default_metrics: tuple[str, ...] = ("lm loss", "num-zeros")

    def thresholds(self, metric: str) -> list[tuple[CheckKind, float]]:
        """CHECK_THRESHOLDS of test_pretraining_regular_pipeline.py (atol is 0 everywhere)."""
        if metric == ITERATION_TIME:
            return [("approximate", self.iteration_time_rtol)]
        if metric in ("mem-allocated-bytes", "mem-max-allocated-bytes"):
            return [("approximate", 0.05)]
        if metric == "num-zeros":
            return [("exact", 0.0), ("approximate", self.num_zeros_rtol)]
        if metric in ("lm loss", "mtp_1 loss", "mtp_2 loss", "total loss", "generated_tokens", "logprobs"):
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
    p = Policy(name.strip())
    if day < CHANGES[0].day:
        p = replace(p, iteration_time_rtol=0.25, default_metrics=("iteration-time", "lm loss", "num-zeros"))
    if day < CHANGES[1].day:
        p = replace(p, strict_budget=False, num_zeros_rtol=0.05)
    if day < CHANGES[2].day:
        p = replace(p, steady_window=False)
    if day < CHANGES[3].day:
        p = replace(p, by_step=False)
    return p


def budget_k(n: int) -> int:
    return min(max(n // 100, 1), 50)


def passes(n_close: int, length: int, n_total: int, kind: CheckKind, policy: Policy) -> bool:
    """The pass condition on a count of close steps, evaluated in floating point like numpy's
    ``mean`` (an exact sum of ones divided by the length)."""
    if length == 0:
        return False
    mean = n_close / length
    if not policy.strict_budget:
        return mean >= budget_k(n_total) / n_total
    if kind == "exact" or n_total == 1:
        return n_close == length
    return mean >= 1 - budget_k(n_total) / n_total


def allowed_failing(length: int, n_total: int, kind: CheckKind, policy: Policy) -> int:
    """The largest number of failing steps that still passes (may be one less than k)."""
    best = -1
    for n_fail in range(length + 1):
        if passes(length - n_fail, length, n_total, kind, policy):
            best = n_fail
    return max(best, 0)


def to_inf(v: Raw) -> float:
    return math.inf if isinstance(v, str) else float(v)


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
    n_steps: int = 0  # the N of the budget
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


@dataclass(slots=True)
class GateResult:
    policy: Policy
    pipeline: Literal["regular", "resume"]
    nondeterministic: bool
    metrics: list[str]
    checks: list[CheckResult] = field(default_factory=list)
    abort: str | None = None  # message of an error that stopped the test
    abort_kind: Literal["missing_in_actual", "missing_in_golden", "unreadable_golden", None] = None
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
        if self.abort:
            return f"AssertionError: {self.abort}"
        return f"AssertionError: The following metrics failed: {', '.join(self.failed_metrics)}"


def run_gate(golden: GoldenFile, actual: GoldenFile, metrics: list[str], *, nondeterministic: bool,
             policy: Policy, pipeline: Literal["regular", "resume"] = "regular",
             train_iters: int | None = None) -> GateResult:
    """One pytest run of the gate. For ``resume`` the first run is ``golden`` and only steps after
    ``train_iters // 2`` are compared."""
    res = GateResult(policy, pipeline, nondeterministic, list(metrics))
    if golden.legacy_list and policy.by_step:
        res.abort_kind = "unreadable_golden"
        res.abort = ("the golden file's 'values' is a list (2024 layout); the current comparator's pydantic "
                     "model needs a step->value mapping and cannot load it")
        res.log.append(res.abort)
        return res
    g_metrics, a_metrics = golden.metrics, actual.metrics
    if pipeline == "resume":
        if train_iters is None:
            raise UsageError("--pipeline resume needs --train-iters (or --train-iters in --model-config)")
        cut = train_iters // 2
        g_metrics = {k: _after(v, cut) for k, v in g_metrics.items()}
        a_metrics = {k: _after(v, cut) for k, v in a_metrics.items()}
    missing = [m for m in metrics if m not in g_metrics]
    if missing:
        res.abort_kind, res.abort_metric = "missing_in_golden", missing
        res.abort = f"The following metrics are required but not provided in golden values: {', '.join(missing)}"
        res.log.append(res.abort)
        return res
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
            r = _check(metric, kind, rtol, g_metrics[metric], a_metrics[metric], policy)
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
    return replace(m, steps=[m.steps[i] for i in keep], raw=[m.raw[i] for i in keep],
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


def _check(metric: str, kind: CheckKind, rtol: float, g: GoldenMetric, a: GoldenMetric,
           policy: Policy) -> CheckResult:
    atol = 0.0
    r = CheckResult(metric, kind, rtol, atol, "failed", _fail_message(metric, kind))
    if not g.steps:
        r.status, r.error = "error", f"Metric {metric} has no values in the golden file."
        r.message = r.error
        return r
    actual = a.as_dict()
    if metric == ITERATION_TIME:
        return _iteration_time(r, g, a, actual, policy)
    if policy.by_step:
        r.steps = list(g.steps)
        r.golden = g.floats()
        r.actual_missing = [s for s in g.steps if s not in actual]
        r.actual = [to_inf(actual.get(s, "nan")) for s in g.steps]
        r.n_steps = len(g.steps)
    else:
        # Before 3e75961a74: positional lists (the extractor had filled "nan" for absent steps),
        # N from start/end/interval; lists of different length could not be compared.
        r.steps = list(g.steps)
        r.golden = g.floats()
        r.actual = a.floats()
        r.n_steps = (g.end_step - g.start_step) // max(g.step_interval, 1) + 1
        if len(r.actual) != len(r.golden):
            r.status = "error"
            r.error = (f"operands could not be broadcast together with shapes ({len(r.actual)},) "
                       f"({len(r.golden)},)")
            r.message = f"{_fail_message(metric, kind)} ({r.error})"
            r.is_close = [False] * len(r.golden)
            return r
    r.is_close = [bool(x) for x in np.isclose(np.array(r.actual), np.array(r.golden), rtol=rtol, atol=atol)]
    r.allowed_failing = allowed_failing(len(r.is_close), r.n_steps, kind, policy)
    ok = passes(sum(r.is_close), len(r.is_close), r.n_steps, kind, policy)
    r.status = "passed" if ok else "failed"
    return r


def window_for(last_finite_step: int) -> tuple[int, int]:
    return (5, 20) if last_finite_step <= 25 else (30, 45)


def _iteration_time(r: CheckResult, g: GoldenMetric, a: GoldenMetric, actual: dict[int, Raw],
                    policy: Policy) -> CheckResult:
    gd = g.as_dict()
    if not policy.steady_window:
        # Before 71223d53ba: median over every golden/actual value (warm-up steps included).
        r.window_steps = list(g.steps)
        r.window = (min(g.steps), max(g.steps))
        r.golden_median = float(np.median(g.floats()))
        vals = [to_inf(actual.get(s, "nan")) for s in g.steps] if policy.by_step else a.floats()
        r.actual_median = float(np.median(vals)) if vals else math.inf
    else:
        if policy.by_step:
            finite = sorted(s for s, v in gd.items() if not isinstance(v, str) and math.isfinite(v))
            if not finite:
                r.status, r.error = "error", f"Metric {ITERATION_TIME} has no finite values."
                r.message = r.error
                return r
            last = finite[-1]
        else:
            finite = sorted(gd)  # "nan" placeholders were still inside the window then
            last = max(gd)
        lo, hi = window_for(last)
        steps = [s for s in finite if lo <= s <= hi] or [s for s in finite if s >= lo][:4]
        if not steps:
            r.status, r.error = "error", f"Metric {ITERATION_TIME} has no finite values after its warmup window."
            r.message = r.error
            return r
        r.window, r.window_steps = (lo, hi), steps
        r.golden_median = float(np.median([to_inf(gd[s]) for s in steps]))
        r.actual_median = float(np.median([to_inf(actual.get(s, "nan")) for s in steps]))
    r.steps = list(r.window_steps)
    r.golden = [to_inf(gd[s]) for s in r.window_steps]
    r.actual = [to_inf(actual.get(s, "nan")) for s in r.window_steps]
    r.actual_missing = [s for s in r.window_steps if s not in actual]
    r.n_steps = 1
    r.is_close = [bool(np.isclose(r.actual_median, r.golden_median, rtol=r.rtol, atol=r.atol))]
    r.allowed_failing = 0
    r.status = "passed" if all(r.is_close) else "failed"
    return r
