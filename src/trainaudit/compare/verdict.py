"""Decide the CI verdict of a golden-value gate run (the verdicts of docs/answer.md) from the shape of the failure:
which checks fail, how far each metric is from its golden against the check's tolerance and
against the known run-to-run and cross-environment spread, where the differences start, and
whether the golden itself is consistent. Every cause carries the statements that decided it.

Scales (relative differences ``|a - g| / |g|``):

- the loss of a deterministic test moves by less than ``RUN_TO_RUN_REL`` between runs of one
  environment and by less than ``DRIFT_REL`` (4th significant digit) across containers, kernels and
  reduction orders: Megatron-LM's skills/update-golden-values/SKILL.md reads an ``lm loss``
  ``|avg_rel_diff|`` below 1e-4 as run-to-run variance and buckets 1e-4..1e-3 and 1e-3..1e-2 apart;
- ``num-zeros`` (zero elements in the gradient) jitters by tens of percent when the loss agrees to
  1e-5 (same SKILL.md: "within historical run-to-run variance"), so it never decides alone when a
  loss is checked;
- memory is identical between runs of one environment (SKILL.md: ``== 0`` or below 1e-6);
- wall-clock time measures the platform: a failure of it alone says nothing about the training.

Order of precedence: the run died (crash / infrastructure_failure) > the training changed
(real_regression) > the golden is inconsistent (gating_policy_issue, golden_mismatch) >
inconclusive > numerical_drift > only wall-clock or a reported quantity moved
(gating_policy_issue) > pass.

``substance=True`` (the audit) also counts a check that passes only thanks to a comparator's
budget that was later corrected (before 4e85d74ae9 the gate passed when ~1 % of steps matched):
the audit explains a failure by what changed, not by a budget bug.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from trainaudit.compare.explain import DRIFT_REL, Deviation
from trainaudit.compare.megatron import ITERATION_TIME, CheckResult, GateResult, passes
from trainaudit.model import EventKind, Run

LOSS_METRICS = frozenset({"lm loss", "mtp_1 loss", "mtp_2 loss", "total loss"})
MAIN_LOSS = "lm loss"
COUNTER_METRICS = frozenset({"num-zeros"})
MEMORY_METRICS = frozenset({"mem-allocated-bytes", "mem-max-allocated-bytes"})
RUN_TO_RUN_REL = 1e-4
# At the first logged step the loss comes from the initial weights before any update: a kernel or
# reduction-order change moves it by one forward pass of rounding (observed up to ~2e-4 with an NCCL
# algorithm switch); a different model, initialisation or data moves it more.
FIRST_STEP_REL = 3 * RUN_TO_RUN_REL
INFRA_EVENTS = frozenset({EventKind.NCCL_TIMEOUT, EventKind.DISTRIBUTED_ERROR, EventKind.XID, EventKind.ECC,
                          EventKind.GPU_LOST, EventKind.HOST_OOM, EventKind.OOM, EventKind.ELASTIC_FAILURE})
# primary cause first; golden-consistency causes carry the rank just below a training change
PRIORITY = ("crash", "infrastructure_failure", "real_regression", "golden", "inconclusive", "numerical_drift",
            "gating_policy_issue")


def metric_kind(metric: str) -> str:
    """loss | counter | memory | wall_clock | other: what a difference in the metric can mean."""
    if metric in LOSS_METRICS:
        return "loss"
    if metric in COUNTER_METRICS:
        return "counter"
    if metric in MEMORY_METRICS:
        return "memory"
    if metric == ITERATION_TIME:
        return "wall_clock"
    return "other"


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
    decided_by: list[str] = field(default_factory=list)  # the statements that decided it
    # what kind of change explains it (trainaudit.history.classify.WEIGHTS): drift, training,
    # memory, wall_clock, golden (the golden is malformed), stale_golden (the golden no longer fits
    # the comparator, extractor or config), reported_metric, crash, infra; "" when undecided
    explanation: str = ""

    @property
    def golden(self) -> bool:
        """The golden itself is at fault: ranks above drift, below a training change."""
        return self.explanation in ("golden", "stale_golden")

    @property
    def rank(self) -> int:
        return PRIORITY.index("golden" if self.golden else self.verdict)


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
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class NoiseInfo:
    """Run-to-run spread of a metric measured from several baseline runs (relative)."""

    metric: str
    rel_spread: float
    n_runs: int


@dataclass(slots=True)
class Shape:
    """How the run differs from the golden on one metric, over the steps the gate compared."""

    metric: str
    kind: str
    steps: list[int]
    n_compared: int = 0  # steps finite on both sides
    n_diff: int = 0
    max_rel: float = 0.0
    median_rel: float = 0.0
    first_step: int | None = None
    first_rel: float | None = None  # at the first compared step
    first_diff_step: int | None = None
    golden_nonfinite: list[int] = field(default_factory=list)  # the golden has NaN/inf where the run is finite
    # golden steps the run did not log, or logged as the extractor's "nan" placeholder (a real NaN
    # read from TensorBoard or a log is a crash, decided before any shape)
    missing: list[int] = field(default_factory=list)
    clean_until: int | None = None  # first golden_nonfinite step: later golden values are not trusted
    max_rel_clean: float = 0.0  # before clean_until
    n_diff_clean: int = 0
    beyond_band: int = 0  # clean steps outside the approximate check's tolerance
    band: float | None = None
    n_beyond_drift: int = 0

    @property
    def identical(self) -> bool:
        return self.n_diff == 0 and not self.golden_nonfinite and not self.missing


def _rel(a: float, g: float) -> float:
    if a == g:
        return 0.0
    return abs(a - g) / abs(g) if g else math.inf


def shape_of(metric: str, checks: list[CheckResult]) -> Shape:
    base = next((c for c in checks if c.steps and c.window is None), None)
    band = next((c.rtol for c in checks if c.check == "approximate"), None)
    out = Shape(metric, metric_kind(metric), list(base.steps) if base else [], band=band)
    if base is None:
        return out
    missing = set(base.actual_missing)
    rels: list[float] = []
    for s, a, g in zip(base.steps, base.actual, base.golden):
        if s in missing:
            out.missing.append(s)
            continue
        fa, fg = math.isfinite(a), math.isfinite(g)
        if fa and not fg:
            out.golden_nonfinite.append(s)
            continue
        if fg and not fa:
            out.missing.append(s)
            continue
        if not (fa and fg):
            continue  # "nan" on both sides compares equal
        r = _rel(a, g)
        if out.first_step is None:
            out.first_step, out.first_rel = s, r
        rels.append(r)
        if r > 0:
            out.n_diff += 1
            out.first_diff_step = out.first_diff_step if out.first_diff_step is not None else s
        if not out.golden_nonfinite:  # golden values after a golden NaN are not trusted
            out.n_diff_clean += r > 0
            out.max_rel_clean = max(out.max_rel_clean, r)
            out.beyond_band += band is not None and r > band
            out.n_beyond_drift += r > DRIFT_REL
    out.n_compared = len(rels)
    out.clean_until = out.golden_nonfinite[0] if out.golden_nonfinite else None
    if rels:
        out.max_rel = max(rels)
        out.median_rel = sorted(rels)[len(rels) // 2]
    return out


def _pct(x: float) -> str:
    if math.isinf(x):
        return "inf (golden value 0)"
    return f"{x:.2g}" if x < 1e-3 else f"{x:.2%}"


def _steps(xs: list[int], n: int = 6) -> str:
    return ", ".join(map(str, xs[:n])) + (f" and {len(xs) - n} more" if len(xs) > n else "")


def fails_in_substance(c: CheckResult, gate: GateResult) -> bool:
    """The check fails, or passes only through a budget the comparator later corrected
    (4e85d74ae9: exact checks need every step, approximate ones at most k of N failing)."""
    if not c.passed:
        return True
    if gate.policy.strict_budget or c.window is not None or not c.is_close:
        return False
    return not passes(sum(c.is_close), len(c.is_close), c.n_steps, c.check, replace(gate.policy, strict_budget=True))


def decide(gate: GateResult, deviations: dict[int, Deviation], *, run: Run | None = None,
           nan_metrics: dict[str, int] | None = None, noise: dict[str, NoiseInfo] | None = None,
           substance: bool = False, last_step: int | None = None, last_step_from: str = "") -> Decision:
    """``last_step``: the last step the test's config lets the run reach (``--exit-interval`` or
    ``--train-iters``), named by ``last_step_from``; a golden that goes further cannot be met."""
    causes: list[Cause] = []
    notes: list[str] = []
    infra = _infra_event(run)
    if nan_metrics:
        m, step = min(nan_metrics.items(), key=lambda kv: kv[1])
        causes.append(Cause(
            "crash", "nan_inf", "critical",
            f"the actual run has a non-finite {m} at step {step}: Megatron's extractor writes JSON with "
            "allow_nan=False and crashes ('Out of range float values are not JSON compliant'), so the gate "
            "never compares anything", "find why the value became NaN/Inf (run `trainaudit diagnose` on the log)",
            "the gate runs again once the run stays finite", "the actual values contain no NaN/Inf", 0.9, [m],
            first_bad_step=step, decided_by=[f"the run's {m} is NaN/Inf at step {step}"], explanation="crash"))
    if gate.abort_kind == "missing_in_actual":
        m = gate.abort_metric[0]
        kind = "infrastructure_failure" if infra else "crash"
        why = [f"METRICS lists {m} but the run logged no {m} at all"]
        if infra:
            why.append(f"the run's log shows {infra.kind.value} at line {infra.line}")
        causes.append(Cause(
            kind, _infra_category(infra), "critical",
            f"metric {m} is in METRICS but the actual run has no values for it: the gate raises "
            "MissingTensorboardLogsError and aborts; this is not a golden mismatch"
            + (f" (the run log shows {infra.kind.value} at line {infra.line})" if infra else ""),
            f"make the run produce {m} (it crashed, or the config lacks the flag that logs it, e.g. "
            "--log-memory-to-tensorboard / --log-num-zeros-in-grad / --log-timers-to-tensorboard)",
            "the gate can compare the metric", f"the actual values contain {m} for every golden step", 0.85, [m],
            decided_by=why, explanation="infra" if infra else "crash"))
    if gate.abort_kind == "missing_in_golden":
        what = f"METRICS requires {', '.join(gate.abort_metric)} but the golden file has no such metric"
        causes.append(Cause(
            "gating_policy_issue", "golden_mismatch", "high", what + ": the gate fails before comparing anything",
            "regenerate the golden values from a good run (download_golden_values.py) or fix METRICS in "
            "model_config.yaml", "the gate compares values again",
            "rerun `trainaudit compare` with the new golden file", 0.9, list(gate.abort_metric),
            decided_by=[what], explanation="stale_golden"))

    by_metric: dict[str, list[int]] = {}
    for i, c in enumerate(gate.checks):
        by_metric.setdefault(c.metric, []).append(i)
    shapes = {m: shape_of(m, [gate.checks[i] for i in idx]) for m, idx in by_metric.items()}
    failing = {i for i, c in enumerate(gate.checks) if not c.passed or (substance and fails_in_substance(c, gate))}
    lenient = sorted({gate.checks[i].metric for i in failing if gate.checks[i].passed})
    if lenient:
        notes.append(f"{', '.join(lenient)} pass(es) the {gate.policy.name} comparator only through its budget "
                     "(mean(is_close) >= k/N, corrected by 4e85d74ae9 to need every step for exact checks)")
    tail = _stopped_early(gate)
    loss_state = _loss_state(shapes, gate, failing)
    for m, idx in by_metric.items():
        bad = [i for i in idx if i in failing]
        if not bad:
            continue
        cause = _cause_for(m, bad, gate, shapes, deviations, tail, infra, noise or {}, loss_state, last_step,
                           last_step_from)
        if cause is not None:
            causes.append(cause)
    causes = _merge(causes)
    if not causes:
        checked = ", ".join(dict.fromkeys(c.metric for c in gate.checks)) or "nothing"
        return Decision("pass", "healthy", 0.95, None,
                        f"The golden-value gate passes ({gate.policy.name}, "
                        f"{'nondeterministic: approximate checks only' if gate.nondeterministic else 'exact and approximate checks'}) "
                        f"on {checked}.", notes=notes)
    causes.sort(key=lambda c: (c.rank, -c.confidence))
    primary = causes[0]
    needs: list[str] = []
    if primary.verdict == "inconclusive":
        needs.append("rerun the same commit 2-3 times (or give several baseline runs) to measure run-to-run noise")
    if any(c.metrics == [ITERATION_TIME] for c in causes) and not noise:
        needs.append("iteration-time of several runs of the same commit (is the 5 % band tighter than run-to-run noise?)")
    if primary.verdict == "numerical_drift":
        needs.append("the container / TE / cuBLAS versions of the golden run and of this run")
    summary = _summary(primary, causes, gate)
    return Decision(primary.verdict, primary.category, primary.confidence, primary.first_bad_step, summary, causes,
                    needs, [c.fix for c in causes[:3]], notes)


def _infra_event(run: Run | None):  # type: ignore[no-untyped-def]
    if run is None:
        return None
    return next((e for e in run.events if e.kind in INFRA_EVENTS), None)


def _infra_category(infra) -> str:  # type: ignore[no-untyped-def]
    if infra is None:
        return "crash"
    if infra.kind in (EventKind.NCCL_TIMEOUT, EventKind.DISTRIBUTED_ERROR, EventKind.ELASTIC_FAILURE):
        return "distributed_failure"
    if infra.kind in (EventKind.XID, EventKind.ECC, EventKind.GPU_LOST):
        return "hardware_fault"
    return "oom"


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


@dataclass(slots=True)
class _LossState:
    """What the checked losses say about the training, for metrics that cannot decide alone."""

    checked: bool = False  # a loss is among the compared metrics
    changed: bool = False  # a loss moved beyond the drift scale on trusted steps
    within_drift: bool = True  # every loss agrees to the drift scale
    main_identical: bool = False  # lm loss bit-identical at every compared step


def _loss_state(shapes: dict[str, Shape], gate: GateResult, failing: set[int]) -> _LossState:
    st = _LossState()
    for m, s in shapes.items():
        if s.kind != "loss" or not s.n_compared:
            continue
        st.checked = True
        if s.max_rel_clean > DRIFT_REL:
            st.within_drift = False
            st.changed = st.changed or s.n_beyond_drift > 3 or s.n_beyond_drift >= max(2, s.n_compared // 2) or \
                any(i in failing and gate.checks[i].check == "approximate" and gate.checks[i].metric == m
                    for i in range(len(gate.checks)))
    main = shapes.get(MAIN_LOSS)
    st.main_identical = bool(main and main.n_compared and main.identical)
    return st


def _cause_for(m: str, idx: list[int], gate: GateResult, shapes: dict[str, Shape], devs: dict[int, Deviation],
               tail: int | None, infra, noise: dict[str, NoiseInfo], loss: _LossState,  # type: ignore[no-untyped-def]
               last_step: int | None, last_step_from: str) -> Cause | None:
    checks = [gate.checks[i] for i in idx]
    c = checks[0]
    sh = shapes[m]
    approx = next((x for x in checks if x.check == "approximate"), None)
    dev = next((devs[i] for i in idx if i in devs), None)
    first = c.failing_steps[0] if c.failing_steps else None
    if c.status == "error":
        return Cause("gating_policy_issue", "golden_mismatch", "high", f"{m}: {c.error}",
                     "regenerate or repair the golden values for this metric", "the check can run",
                     "rerun the comparison", 0.8, [m], idx, decided_by=[f"the golden's {m}: {c.error}"],
                     explanation="golden")
    if tail is not None and c.window is None:
        golden_end = c.steps[-1]
        if last_step is not None and tail > last_step and golden_end > last_step:
            return Cause("gating_policy_issue", "golden_mismatch", "high",
                         f"the golden has {m} up to step {golden_end} but the test's config stops the run at step "
                         f"{last_step} ({last_step_from}); the run logged every step it could: the gate counts "
                         "the steps the config cannot produce as 'nan'",
                         f"regenerate the golden values with the current config, or restore {last_step_from} in "
                         "model_config.yaml", "the golden covers the steps the run produces",
                         "rerun the comparison against the regenerated golden", 0.85, [m], idx, tail,
                         explanation="stale_golden",
                         decided_by=[f"the golden's last step is {golden_end}",
                                     f"the config ends the run at step {last_step} ({last_step_from})",
                                     f"the run has every golden step up to {tail - 1} and none after"])
        kind = "infrastructure_failure" if infra else "crash"
        return Cause(kind, _infra_category(infra) if infra else "crash", "critical",
                     f"the actual run has no values from step {tail} on (golden goes to {golden_end}): the run "
                     "stopped early and the gate counts every missing step as 'nan'",
                     "find why the run ended (run `trainaudit diagnose` on its log)",
                     "a complete run compares normally", "the actual values reach the golden's last step",
                     0.85, [m], idx, tail,
                     decided_by=[f"the run has no {m} from step {tail} on; the golden goes to step {golden_end}"]
                     + ([f"the config lets the run reach step {last_step}"] if last_step else []),
                     explanation="infra" if infra else "crash")
    if m == ITERATION_TIME:
        return _wall_clock(c, idx, noise)

    kind = sh.kind
    where = f"from step {sh.first_diff_step}" if sh.first_diff_step is not None else ""
    facts = [f"{m}: {sh.n_diff}/{sh.n_compared} compared steps differ {where}, max {_pct(sh.max_rel)} relative"
             + (f"; at the first compared step ({sh.first_step}) "
                + (f"by {_pct(sh.first_rel)}" if sh.first_rel else "identical")
                if sh.first_step is not None and sh.first_step != sh.first_diff_step else "")]
    decides = kind in ("loss", "other") or (kind == "counter" and not loss.checked)
    if kind == "loss" and m != MAIN_LOSS and loss.main_identical and sh.max_rel > 0:
        # an auxiliary loss enters the gradient: had it changed, lm loss would differ after step 1
        return Cause("gating_policy_issue", "golden_mismatch", "medium",
                     f"only the reported {m} moves (max {_pct(sh.max_rel)}) while {MAIN_LOSS} is identical at every "
                     "step: the gradients did not change, so the training is unchanged and what is logged as "
                     f"{m} changed", f"refresh the golden's {m} after checking the change to how it is computed "
                     "or logged", f"the {m} check passes",
                     f"rerun: {MAIN_LOSS} identical, {m} matches the refreshed golden", 0.75, [m], idx,
                     sh.first_diff_step,
                     decided_by=facts + [f"{MAIN_LOSS} is identical at all {shapes[MAIN_LOSS].n_compared} compared "
                                         "steps"], explanation="reported_metric")
    # -- the training changed ---------------------------------------------------------------------
    if kind == "memory" and approx is not None and sh.beyond_band:
        frac = sh.beyond_band / max(sh.n_compared, 1)
        return Cause("real_regression", "memory_growth", "high",
                     f"{m} is outside the {approx.rtol:.0%} band on {sh.beyond_band}/{sh.n_compared} steps"
                     + (" (nearly all): a real memory change" if frac >= 0.9 else ""),
                     "find the commit that changed memory use (activation/optimizer state, allocator settings)",
                     "memory back within 5 % of the golden", f"{m} within the band on every step",
                     0.85 if frac >= 0.9 else 0.6, [m], idx, sh.first_diff_step,
                     decided_by=facts + [f"{m} beyond the {approx.rtol:.0%} band on {sh.beyond_band} steps; memory "
                                         "of one environment is identical from run to run"], explanation="memory")
    approx_fails = approx is not None and any(x is approx for x in checks) and sh.beyond_band > 0
    systematic = sh.n_beyond_drift >= max(2, (sh.n_compared + 1) // 2) or sh.n_beyond_drift > 3
    from_start = sh.first_rel is not None and sh.first_rel >= FIRST_STEP_REL
    beyond = sh.max_rel_clean > DRIFT_REL and (systematic or from_start)
    if decides and (approx_fails or beyond):
        start = dev.shift_from_step if dev and dev.shift_from_step is not None else (sh.first_diff_step or first)
        if approx_fails:
            why = f"{m} is outside the {approx.rtol:.0%} approximate band on {sh.beyond_band} step(s)"  # type: ignore[union-attr]
        else:
            why = (f"{m} moves by up to {_pct(sh.max_rel_clean)} on {sh.n_beyond_drift}/{sh.n_compared} steps: "
                   f"beyond the {DRIFT_REL:g} a container or kernel change produces (4th significant digit)")
        at_start = ""
        if from_start and sh.first_step is not None and sh.first_rel is not None:
            at_start = (f"; it differs at the first compared step {sh.first_step} already ({_pct(sh.first_rel)}): "
                        "the model, its initialisation or its data changed, not the rounding")
        return Cause("real_regression", "golden_mismatch", "high",
                     f"the model trains differently: {why}{at_start}. {dev.summary if dev else ''}".strip(),
                     "find the code change between the golden and this run (`trainaudit audit --good --bad`)",
                     f"{m} back within {DRIFT_REL:g} of the golden", "rerun the gate after reverting the suspect commit",
                     0.85 if approx_fails or sh.n_beyond_drift >= 0.9 * sh.n_compared else 0.7, [m], idx, start,
                     decided_by=facts + [why + at_start], explanation="training")
    # -- the golden is inconsistent ---------------------------------------------------------------
    if sh.golden_nonfinite:
        s0 = sh.golden_nonfinite[0]
        after = (f"; after it the golden differs from the run by up to {_pct(sh.max_rel)} while the steps before "
                 "match" if sh.max_rel > sh.max_rel_clean else "")
        return Cause("gating_policy_issue", "golden_mismatch", "medium" if kind != "loss" else "high",
                     f"the golden file has a 'nan' placeholder (NaN) for {m} at step(s) {_steps(sh.golden_nonfinite)} "
                     f"where the run has a value: a NaN never compares equal, so the check fails{after}; the golden "
                     "was recorded from a run that was broken there",
                     "regenerate the golden values from a healthy run (download_golden_values.py)",
                     "the exact check passes", "rerun the comparison with the regenerated golden",
                     0.85 if kind == "loss" else 0.8, [m], idx, s0, explanation="golden",
                     decided_by=[f"the golden's {m} is NaN at step(s) {_steps(sh.golden_nonfinite)}; the run logged "
                                 "finite values there"]
                     + ([f"{m} agrees on every step before {s0} (max {_pct(sh.max_rel_clean)})"] if sh.clean_until else []))
    if sh.missing and sh.max_rel <= DRIFT_REL:
        grid = _grid_note(sh)
        return Cause("gating_policy_issue", "golden_mismatch", "medium",
                     f"the actual run has no {m} value at step(s) {_steps(sh.missing)}{grid}; every other step "
                     f"{'is identical' if sh.n_diff == 0 else f'agrees to {_pct(sh.max_rel)}'}. The gate counts a "
                     "missing step as 'nan' and the check fails on it",
                     "find why the samples are missing (TensorBoard flush, log interval, the extractor's step size); "
                     "the training itself matches the golden", "the check passes when the steps are logged",
                     "rerun and check that every golden step has an actual value",
                     0.8 if grid else 0.6, [m], idx, min(sh.missing), explanation="stale_golden" if grid else "",
                     decided_by=[f"{len(sh.missing)} golden step(s) of {m} have no actual value{grid}",
                                 f"the {sh.n_compared} steps both have agree to {_pct(sh.max_rel)}"])
    # -- a metric that cannot decide alone --------------------------------------------------------
    if kind == "counter" and loss.checked:
        if loss.changed:
            return Cause("real_regression", "golden_mismatch", "medium",
                         f"{m} moves with the loss ({sh.n_diff}/{sh.n_compared} steps, max {_pct(sh.max_rel)})",
                         "see the loss", "", "", 0.6, [m], idx, sh.first_diff_step, decided_by=facts,
                         explanation="training")
        if loss.within_drift and sh.n_diff:
            return Cause("numerical_drift", "golden_mismatch", "low",
                         f"{m} differs on {sh.n_diff}/{sh.n_compared} steps (max {_pct(sh.max_rel)}) while the loss "
                         f"agrees to {DRIFT_REL:g}: {m} counts zero gradient elements and jitters between runs; the "
                         "loss decides", "refresh the golden values once the loss difference is understood",
                         "the exact check passes against refreshed goldens", "rerun on the same environment twice",
                         0.7, [m], idx, sh.first_diff_step,
                         decided_by=facts + [f"the checked loss agrees to {DRIFT_REL:g}; {m} jitters between runs"],
                         explanation="drift")
    if dev is None or sh.n_diff == 0:
        return Cause("inconclusive", "golden_mismatch", "medium", f"{c.check} {m} check failed", "inspect the values",
                     "", "", 0.4, [m], idx, first, decided_by=facts)
    # -- only an exact check can fail now: drift or a real, small change --------------------------
    if sh.max_rel <= DRIFT_REL:
        scale = "run-to-run" if sh.max_rel <= RUN_TO_RUN_REL else "cross-environment"
        return Cause("numerical_drift", "golden_mismatch", "low",
                     f"only the exact {m} check fails: {sh.n_diff}/{sh.n_compared} steps differ, max relative "
                     f"difference {_pct(sh.max_rel)} (<= {DRIFT_REL:g}, 4th-5th significant digit, {scale} scale); "
                     "the approximate check passes",
                     "confirm the environment or numerics changed (container, TE, cuBLAS, NCCL algorithm, reduction "
                     "order), then refresh the golden values", "the exact check passes against refreshed goldens",
                     "rerun on the new environment twice: identical values both times", 0.8, [m], idx,
                     dev.first_diff_step,
                     decided_by=facts + [f"{m} within {DRIFT_REL:g} of the golden on every step ({scale} scale)"],
                     explanation="drift")
    nz = noise.get(m)
    if nz is not None and (dev.median_rel_err or 0) <= nz.rel_spread:
        return Cause("numerical_drift", "golden_mismatch", "low",
                     f"exact {m} check fails by {_pct(sh.max_rel)}, inside the run-to-run spread measured over "
                     f"{nz.n_runs} runs ({nz.rel_spread:.2g})", "refresh the golden values", "", "", 0.6, [m], idx,
                     dev.first_diff_step, decided_by=facts, explanation="drift")
    return Cause("inconclusive", "golden_mismatch", "medium",
                 f"exact {m} check fails on {sh.n_diff} step(s) ({dev.summary}); beyond the drift scale at "
                 f"{sh.n_beyond_drift} isolated step(s) only, the rest identical or within drift",
                 "rerun the same commit to see whether the deviation reproduces", "a decided verdict",
                 "two reruns agree with each other and with the golden", 0.45, [m], idx, dev.first_diff_step,
                 decided_by=facts)


def _grid_note(sh: Shape) -> str:
    """', on a regular grid the run does not sample' when the present steps and the missing ones
    interleave regularly (the extractor's step size changed, not the run)."""
    present = [s for s in sh.steps if s not in set(sh.missing)]
    if len(present) < 2 or len(sh.missing) < 2:
        return ""
    gaps = {b - a for a, b in itertools.pairwise(present[1:])}
    if len(gaps) == 1 and sh.missing[0] < present[-1]:
        return f" (the run logs every {gaps.pop()} steps; the golden every {sh.steps[1] - sh.steps[0]})"
    return ""


def _wall_clock(c: CheckResult, idx: list[int], noise: dict[str, NoiseInfo]) -> Cause:
    ratio = (c.actual_median / c.golden_median) if c.golden_median and c.actual_median is not None else None
    slower = sum(1 for a, g in zip(c.actual, c.golden) if a > g)
    consistent = bool(c.actual) and slower >= 0.9 * len(c.actual)
    faster = sum(1 for a, g in zip(c.actual, c.golden) if a < g)
    how = (f"all {slower}/{len(c.actual)} steady-state steps are slower: a consistent slowdown"
           if consistent and ratio and ratio > 1 else
           f"{faster}/{len(c.actual)} steady-state steps are faster: a consistent speed-up"
           if ratio and ratio < 1 and faster >= 0.9 * len(c.actual) else f"{slower}/{len(c.actual)} window steps slower")
    nz = noise.get(ITERATION_TIME)
    noise_txt = ""
    if nz is not None:
        noise_txt = (f"; run-to-run spread of the median over {nz.n_runs} baseline runs is {nz.rel_spread:.1%}"
                     + (", wider than the 5 % band" if nz.rel_spread > c.rtol else ", inside the 5 % band"))
    change = f"{(ratio - 1):+.1%}" if ratio is not None and math.isfinite(ratio) else "n/a"
    w = c.window or (0, 0)
    return Cause("gating_policy_issue", "throughput_regression", "medium",
                 f"only wall-clock iteration-time fails: median over steps {w[0]}-{w[1]} is "
                 f"{c.actual_median:.5g} s vs golden {c.golden_median:.5g} s ({change}, band {c.rtol:.0%}); "
                 f"{how}{noise_txt}",
                 "treat as a performance/infrastructure question: compare container and node type; if the "
                 "change is expected, refresh the iteration-time golden or widen/move it out of the gate",
                 "the gate stops failing on wall-clock while loss and memory stay gated",
                 "rerun: iteration-time median within the band of the golden, loss/memory checks unchanged",
                 0.8 if consistent or (ratio and ratio < 1) else 0.65, [ITERATION_TIME], idx,
                 c.window_steps[0] if c.window_steps else None,
                 decided_by=[f"iteration-time median {c.actual_median:.5g} s vs golden {c.golden_median:.5g} s "
                             f"({change}; band {c.rtol:.0%}): {how}"], explanation="wall_clock")


def _merge(causes: list[Cause]) -> list[Cause]:
    """One cause per (verdict, metric); exact+approximate failures of one metric become one."""
    out: dict[tuple[str, tuple[str, ...]], Cause] = {}
    for c in causes:
        key = (c.verdict, tuple(c.metrics))
        if key in out:
            out[key].checks += [i for i in c.checks if i not in out[key].checks]
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
