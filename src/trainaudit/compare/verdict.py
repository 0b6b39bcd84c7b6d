"""Decide the CI verdict of a golden-value gate run (SPEC.md §2, issue 4), from the checks that
ran, the shape of each deviation and what is known about the actual run.

Order of precedence: crash / infrastructure_failure > real_regression > inconclusive >
numerical_drift > gating_policy_issue > pass. Each cause carries its own confidence; the final
confidence is the primary cause's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainaudit.compare.explain import DRIFT_REL, Deviation
from trainaudit.compare.megatron import ITERATION_TIME, CheckResult, GateResult
from trainaudit.model import EventKind, Run

LOSS_METRICS = frozenset({"lm loss", "mtp_1 loss", "mtp_2 loss", "total loss"})
MEMORY_METRICS = frozenset({"mem-allocated-bytes", "mem-max-allocated-bytes"})
INFRA_EVENTS = frozenset({EventKind.NCCL_TIMEOUT, EventKind.DISTRIBUTED_ERROR, EventKind.XID, EventKind.ECC,
                          EventKind.GPU_LOST, EventKind.HOST_OOM, EventKind.OOM, EventKind.ELASTIC_FAILURE})
CRASH_EVENTS = frozenset({EventKind.TRACEBACK, EventKind.SIGNAL, EventKind.LOSS_SCALE_MIN, EventKind.NAN_CHECK})
PRIORITY = ("crash", "infrastructure_failure", "real_regression", "inconclusive", "numerical_drift",
            "gating_policy_issue")


@dataclass(slots=True)
class Cause:
    verdict: str
    category: str
    severity: str
    issue: str
    fix: str
    expected_impact: str
    verify: str
    confidence: float
    metrics: list[str] = field(default_factory=list)
    checks: list[int] = field(default_factory=list)  # indexes into GateResult.checks
    first_bad_step: int | None = None


@dataclass(slots=True)
class Decision:
    verdict: str
    category: str
    confidence: float
    first_bad_step: int | None
    summary: str
    causes: list[Cause] = field(default_factory=list)
    needs_more_data: list[str] = field(default_factory=list)
    quick_fixes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class NoiseInfo:
    """Run-to-run spread of a metric measured from several baseline runs (relative)."""

    metric: str
    rel_spread: float
    n_runs: int


def decide(gate: GateResult, deviations: dict[int, Deviation], *, run: Run | None = None,
           nan_metrics: dict[str, int] | None = None, golden_last_step: int | None = None,
           noise: dict[str, NoiseInfo] | None = None) -> Decision:
    causes: list[Cause] = []
    needs: list[str] = []
    infra = _infra_event(run)
    if nan_metrics:
        m, step = min(nan_metrics.items(), key=lambda kv: kv[1])
        causes.append(Cause(
            "crash", "nan_inf", "critical",
            f"the actual run has a non-finite {m} at step {step}: Megatron's extractor writes JSON with "
            "allow_nan=False and crashes ('Out of range float values are not JSON compliant'), so the gate "
            "never compares anything", "find why the value became NaN/Inf (run `trainaudit diagnose` on the log)",
            "the gate runs again once the run stays finite", "the actual values contain no NaN/Inf", 0.9, [m],
            first_bad_step=step))
    if gate.abort_kind == "missing_in_actual":
        m = gate.abort_metric[0]
        kind = "infrastructure_failure" if infra else "crash"
        causes.append(Cause(
            kind, "distributed_failure" if infra and infra.kind in (EventKind.NCCL_TIMEOUT, EventKind.DISTRIBUTED_ERROR)
            else ("hardware_fault" if infra and infra.kind in (EventKind.XID, EventKind.ECC, EventKind.GPU_LOST)
                  else ("oom" if infra and infra.kind in (EventKind.OOM, EventKind.HOST_OOM) else "crash")),
            "critical",
            f"metric {m} is in METRICS but the actual run has no values for it: the gate raises "
            "MissingTensorboardLogsError and aborts; this is not a golden mismatch"
            + (f" (the run log shows {infra.kind.value} at line {infra.line})" if infra else ""),
            f"make the run produce {m} (it crashed, or the config lacks the flag that logs it, e.g. "
            "--log-memory-to-tensorboard / --log-num-zeros-in-grad / --log-timers-to-tensorboard)",
            "the gate can compare the metric", f"the actual values contain {m} for every golden step", 0.85, [m]))
    if gate.abort_kind == "missing_in_golden":
        what = f"METRICS requires {', '.join(gate.abort_metric)} but the golden file has no such metric"
        causes.append(Cause(
            "gating_policy_issue", "golden_mismatch", "high", what + ": the gate fails before comparing anything",
            "regenerate the golden values from a good run (download_golden_values.py) or fix METRICS in "
            "model_config.yaml", "the gate compares values again",
            "rerun `trainaudit compare` with the new golden file", 0.9, list(gate.abort_metric)))
    # A run that stopped early: every metric's actual values end before the golden's last step.
    tail = _stopped_early(gate)
    for i, c in enumerate(gate.checks):
        if c.passed:
            continue
        dev = deviations.get(i)
        causes.append(_cause_for(i, c, dev, gate, tail, infra, noise or {}))
    causes = _merge(causes)
    if not causes:
        checked = ", ".join(dict.fromkeys(c.metric for c in gate.checks)) or "nothing"
        return Decision("pass", "healthy", 0.95, None,
                        f"The golden-value gate passes ({gate.policy.name}, "
                        f"{'nondeterministic: approximate checks only' if gate.nondeterministic else 'exact and approximate checks'}) "
                        f"on {checked}.")
    causes.sort(key=lambda c: (PRIORITY.index(c.verdict), -c.confidence))
    primary = causes[0]
    if primary.verdict == "inconclusive":
        needs.append("rerun the same commit 2-3 times (or give several baseline runs) to measure run-to-run noise")
    if any(c.metrics == [ITERATION_TIME] for c in causes) and not noise:
        needs.append("iteration-time of several runs of the same commit (is the 5 % band tighter than run-to-run noise?)")
    if primary.verdict in ("numerical_drift",):
        needs.append("the container / TE / cuBLAS versions of the golden run and of this run")
    first_bad = primary.first_bad_step
    summary = _summary(primary, causes, gate)
    quick = [c.fix for c in causes[:3]]
    return Decision(primary.verdict, primary.category, primary.confidence, first_bad, summary, causes, needs, quick)


def _infra_event(run: Run | None):  # type: ignore[no-untyped-def]
    if run is None:
        return None
    return next((e for e in run.events if e.kind in INFRA_EVENTS), None)


def _stopped_early(gate: GateResult) -> int | None:
    """First golden step from which the actual run has no values at all (for every checked metric)."""
    firsts: list[int] = []
    for c in gate.checks:
        if c.window is not None or not c.steps:
            continue
        missing = set(c.actual_missing)
        if not missing:
            return None
        tail_start = None
        for s in reversed(c.steps):
            if s in missing:
                tail_start = s
            else:
                break
        if tail_start is None:
            return None
        firsts.append(tail_start)
    return min(firsts) if firsts else None


def _cause_for(i: int, c: CheckResult, dev: Deviation | None, gate: GateResult, tail: int | None,
               infra, noise: dict[str, NoiseInfo]) -> Cause:  # type: ignore[no-untyped-def]
    m = c.metric
    first = c.failing_steps[0] if c.failing_steps else None
    if c.status == "error":
        return Cause("gating_policy_issue", "golden_mismatch", "high", f"{m}: {c.error}",
                     "regenerate or repair the golden values for this metric", "the check can run",
                     "rerun the comparison", 0.7, [m], [i])
    if tail is not None and c.window is None:
        kind = "infrastructure_failure" if infra else "crash"
        return Cause(kind, "crash" if not infra else "distributed_failure", "critical",
                     f"the actual run has no values from step {tail} on (golden goes to {c.steps[-1]}): the run "
                     "stopped early and the gate counts every missing step as 'nan'",
                     "find why the run ended (run `trainaudit diagnose` on its log)",
                     "a complete run compares normally", "the actual values reach the golden's last step",
                     0.85, [m], [i], tail)
    if m == ITERATION_TIME:
        ratio = (c.actual_median / c.golden_median) if c.golden_median and c.actual_median is not None else None
        slower = sum(1 for a, g in zip(c.actual, c.golden) if a > g)
        consistent = bool(c.actual) and slower >= 0.9 * len(c.actual)
        how = (f"all {slower}/{len(c.actual)} steady-state steps are slower: a consistent slowdown"
               if consistent and ratio and ratio > 1 else f"{slower}/{len(c.actual)} window steps slower")
        nz = noise.get(ITERATION_TIME)
        noise_txt = ""
        if nz is not None:
            noise_txt = (f"; run-to-run spread of the median over {nz.n_runs} baseline runs is {nz.rel_spread:.1%}"
                         + (", wider than the 5 % band" if nz.rel_spread > c.rtol else ", inside the 5 % band"))
        change = f"{(ratio - 1):+.1%}" if ratio is not None and ratio == ratio and ratio != float("inf") else "n/a"
        return Cause("gating_policy_issue", "throughput_regression", "medium",
                     f"only wall-clock iteration-time fails: median over steps {c.window[0]}-{c.window[1]} is "
                     f"{c.actual_median:.5g} s vs golden {c.golden_median:.5g} s ({change}, band {c.rtol:.0%}); "
                     f"{how}{noise_txt}",
                     "treat as a performance/infrastructure question: compare container and node type; if the "
                     "slowdown is expected, refresh the iteration-time golden or widen/move it out of the gate",
                     "the gate stops failing on wall-clock noise while loss and memory stay gated",
                     "rerun: iteration-time median within 5 % of the golden, loss/memory checks unchanged",
                     0.8 if consistent else 0.65, [m], [i], c.window_steps[0] if c.window_steps else None)
    if m in MEMORY_METRICS and c.check == "approximate":
        frac = c.n_failing / max(len(c.is_close), 1)
        nearly_all = frac >= 0.9
        return Cause("real_regression", "memory_growth", "high",
                     f"{m} is outside the 5 % band on {c.n_failing}/{len(c.is_close)} steps"
                     + (" (nearly all): a real memory change" if nearly_all else ""),
                     "find the commit that changed memory use (activation/optimizer state, allocator settings)",
                     "memory back within 5 % of the golden", f"{m} within the band on every step",
                     0.85 if nearly_all else 0.6, [m], [i], first)
    if c.check == "approximate":
        where = dev.shift_from_step if dev and dev.shift_from_step is not None else first
        shape = dev.summary if dev else ""
        return Cause("real_regression", "golden_mismatch", "high",
                     f"the approximate {m} check fails: {c.n_failing} steps outside the {c.rtol:.0%} band, "
                     f"{c.allowed_failing} allowed; curves separate from step {where}. {shape}",
                     "find the code change between the golden and this run (`trainaudit audit --good --bad`)",
                     f"{m} back inside the band", "rerun the gate after reverting the suspect commit",
                     0.85 if dev and dev.pattern in ("systematic_shift", "drift_growing") else 0.75, [m], [i], where)
    # Only an exact check of a loss-like metric or num-zeros failed (approximate passed or skipped).
    gaps = set(c.actual_missing) | {s for s, a, g in zip(c.steps, c.actual, c.golden) if a == float("inf") and g != a}
    golden_nan = [s for s, a, g in zip(c.steps, c.actual, c.golden) if g == float("inf") and a != g]
    real_diff = dev.n_different if dev else 0
    if golden_nan and real_diff == 0:
        return Cause("gating_policy_issue", "golden_mismatch", "medium",
                     f"the golden file has a 'nan' placeholder at step(s) {golden_nan[:10]} where the run has a value; "
                     "the gate maps it to inf and fails the exact check",
                     "regenerate the golden values (the current extractor writes only observed steps)",
                     "the exact check passes", "rerun the comparison with the regenerated golden", 0.8, [m], [i],
                     golden_nan[0])
    if gaps and real_diff == 0:
        return Cause("gating_policy_issue", "golden_mismatch", "medium",
                     f"the actual run has no {m} value at step(s) {sorted(gaps)[:10]}; every other step is "
                     "identical. The gate counts a missing step as 'nan' and the exact check fails on it",
                     "find why the sample is missing (TensorBoard flush, log interval, extractor); the training "
                     "itself matches the golden", "the exact check passes when the step is logged",
                     "rerun and check that every golden step has an actual value", 0.6, [m], [i], min(gaps))
    if dev is None or dev.pattern == "identical":
        return Cause("inconclusive", "golden_mismatch", "medium", f"exact {m} check failed", "inspect the values",
                     "", "", 0.4, [m], [i], first)
    if dev.pattern == "drift":
        return Cause("numerical_drift", "golden_mismatch", "low",
                     f"only the exact {m} check fails: {dev.n_different}/{dev.n_compared} steps differ, max relative "
                     f"difference {dev.max_rel_err:.2g} (<= {DRIFT_REL:g}, 4th-5th significant digit); the "
                     "approximate check passes",
                     "confirm the environment changed (container, TE, cuBLAS, NCCL algorithm), then refresh the "
                     "golden values", "the exact check passes against refreshed goldens",
                     "rerun on the new environment twice: identical values both times", 0.8, [m], [i],
                     dev.first_diff_step)
    if dev.pattern in ("systematic_shift", "drift_growing"):
        nz = noise.get(m)
        beyond = nz is None or (dev.median_rel_err or 0) > nz.rel_spread
        return Cause("real_regression" if beyond else "numerical_drift", "golden_mismatch", "high" if beyond else "low",
                     f"exact {m} check fails with a {dev.summary} beyond the drift size ({DRIFT_REL:g}); the "
                     "approximate check still passes",
                     "find the code change that shifted the curve", "the exact check passes again",
                     "rerun the gate after reverting the suspect commit", 0.6, [m], [i],
                     dev.shift_from_step or dev.first_diff_step)
    return Cause("inconclusive", "golden_mismatch", "medium",
                 f"exact {m} check fails on {dev.n_different} step(s) ({dev.summary}); the approximate check "
                 "passes and the deviation is neither tiny drift nor systematic",
                 "rerun the same commit to see whether the deviation reproduces", "a decided verdict",
                 "two reruns agree with each other and with the golden", 0.45, [m], [i], dev.first_diff_step)


def _merge(causes: list[Cause]) -> list[Cause]:
    """One cause per (verdict, metric); exact+approximate failures of one metric become one."""
    out: dict[tuple[str, tuple[str, ...]], Cause] = {}
    for c in causes:
        key = (c.verdict, tuple(c.metrics))
        if key in out:
            out[key].checks += c.checks
            out[key].confidence = max(out[key].confidence, c.confidence)
        else:
            out[key] = c
    return list(out.values())


def _summary(primary: Cause, causes: list[Cause], gate: GateResult) -> str:
    failed = gate.assertion() or ""
    others = [c for c in causes if c is not primary]
    text = f"Verdict {primary.verdict}: {primary.issue}."
    if failed:
        text = f"The gate fails ({failed}). " + text
    if others:
        text += " Also: " + "; ".join(f"{c.verdict} on {', '.join(c.metrics)}" for c in others[:3]) + "."
    return text
