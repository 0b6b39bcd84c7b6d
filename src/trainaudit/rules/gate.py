"""TA8xx: what the golden-value gate and a run-vs-run comparison report. Their findings come from
the comparison (``trainaudit compare`` / ``audit``), not from checking one run, so these rules
declare what a finding means and what to do about it; :mod:`trainaudit.compare` reports them."""

from __future__ import annotations

from trainaudit.answer.schema import Category, Severity
from trainaudit.model import EventKind
from trainaudit.rules.base import Context, Guidance, Hit, Rule, Scope

GOLDEN_GUIDANCE = Guidance(
    fix="Find what changed between the run that produced the golden values and this one (code, container, "
        "config); refresh the golden values only when the change is intended and its effect understood.",
    impact="The gate passes against the golden values.",
    verify="Re-run the test: `trainaudit compare --golden` passes.")


class ExactCheck(Rule):
    """The golden-value gate's exact check failed: a deterministic test's values differ from the
    golden at one or more steps (Megatron-LM: ``numpy.isclose`` with rtol 0 for deterministic
    tests; every step must match).

    Why: in a deterministic test any difference means the computation changed: the code, a
    kernel, the container or the hardware. Differences in the 4th-5th significant digit that the
    approximate check still accepts point to numerical drift from an environment change.

    Fix: compare against the approximate check; if only the exact check fails, look for an
    environment change (container, PyTorch, Transformer Engine, NCCL); otherwise for the code
    change that moved the numbers.
    """

    id = "TA801"
    name = "golden-exact-check"
    category = Category.GOLDEN_MISMATCH
    severity = Severity.HIGH
    scope = Scope.GATE
    guidance = GOLDEN_GUIDANCE


class ApproximateCheck(Rule):
    """The golden-value gate's approximate check failed: more steps than the budget are outside
    the relative tolerance (Megatron-LM: rtol 0.05 for losses, 0.20 for num-zeros; at most
    ``min(max(N // 100, 1), 50)`` steps may fail).

    Why: beyond the tolerance the model trains differently, not just with different rounding.

    Fix: find the code or configuration change that moved the metric; check where the deviation
    starts (a systematic shift from step k, a growing drift, isolated outliers).
    """

    id = "TA802"
    name = "golden-approximate-check"
    category = Category.GOLDEN_MISMATCH
    severity = Severity.HIGH
    scope = Scope.GATE
    guidance = GOLDEN_GUIDANCE


class IterationTimeCheck(Rule):
    """The golden-value gate's iteration-time check failed: the median step time over the
    steady-state window differs from the golden's by more than the tolerance (Megatron-LM: rtol
    0.05 over steps 30-45 since 2026-05).

    Why: wall-clock time measures the platform (container, kernels, node, load) as much as the
    code; a failure here alone says nothing about the training.

    Fix: look for an environment change (container, libraries) or launcher change; if the speed
    change is expected, refresh the golden's iteration-time; a tolerance tighter than the
    run-to-run spread of the platform is a gating problem.
    """

    id = "TA803"
    name = "golden-iteration-time"
    category = Category.THROUGHPUT_REGRESSION
    severity = Severity.MEDIUM
    scope = Scope.GATE
    guidance = Guidance(
        fix="Find the environment or launcher change that moved the step time; refresh the golden's iteration-time "
            "if the change is intended, or widen a tolerance tighter than the platform's run-to-run spread.",
        impact="The iteration-time check passes without hiding a real slowdown.",
        verify="Re-run twice on the same platform and compare both medians with the golden's.")


class GateAborted(Rule):
    """The golden-value gate stopped before comparing: a metric the test checks is missing from
    the golden file or from the run's values, or a file is malformed (Megatron-LM fails the test
    before any check, or raises ``MissingTensorboardLogsError``).

    Why: no comparison ran, so the failure says nothing about the numbers; the golden file, the
    test's METRICS or the run's logging is what broke.

    Fix: compare the test's METRICS with the metrics of the golden and of the run; regenerate a
    malformed golden; check that the run logged every metric.
    """

    id = "TA804"
    name = "golden-gate-aborted"
    category = Category.GOLDEN_MISMATCH
    severity = Severity.MEDIUM
    scope = Scope.GATE
    guidance = Guidance(
        fix="Make the test's METRICS, the golden file and the run's logged metrics agree; regenerate a malformed "
            "golden file.",
        impact="The gate compares every metric instead of aborting.",
        verify="Re-run the gate: every check runs.")


class RunDivergesFromBaseline(Rule):
    """Run vs run: a metric of the candidate run leaves the baseline's band (the measured
    run-to-run noise of the baseline runs, or a relative tolerance) from some step on, or becomes
    NaN where the baseline is finite.

    Why: beyond the baseline's own noise, the candidate trains differently.

    Fix: find the change between the two runs (code, config, data, environment), e.g. with
    ``trainaudit audit --good --bad``.
    """

    id = "TA810"
    name = "run-vs-baseline"
    category = Category.DIVERGENCE
    severity = Severity.HIGH
    scope = Scope.GATE
    guidance = Guidance(
        fix="Find the change between the two runs (code, config, data, environment) with `trainaudit audit --good "
            "--bad`.",
        impact="The candidate's metric back inside the baseline band.",
        verify="Re-run the candidate: the comparison passes.")


class RunConfigDiffers(Rule):
    """Run vs run: the two runs were not configured alike. A hyper-parameter (learning rate and its
    schedule, batch size, gradient accumulation, precision, optimizer, world size, planned length)
    or a library version differs between what each run's own logs and config files say, or the
    learning rate each run logged differs by a factor from some step.

    Why: a configuration difference explains a metric difference before any code change does; it
    is the first thing to rule out (a learning rate 2000x larger diverges whatever the code).

    Fix: confirm the difference is intended; if not, give the candidate the baseline's value.

    Example: ``learning_rate=2.0,`` in one run's ``TrainingArguments`` and ``learning_rate=0.001,``
    in the other's; the logged ``learning_rate`` 2000x larger from step 2.
    """

    id = "TA811"
    name = "run-config-differs"
    category = Category.DIVERGENCE
    severity = Severity.HIGH
    also = (Severity.MEDIUM, Severity.LOW, Severity.INFO)
    scope = Scope.GATE
    guidance = Guidance(
        fix="Confirm the configuration difference is intended; if not, run the candidate with the baseline's value.",
        impact="The runs differ only in what is being tested.",
        verify="Re-run the comparison: no configuration difference is reported but the intended one.")


class ReferenceCheckFailed(Rule):
    """A reference (golden-value) check failed in the log itself: Megatron-LM's comparator output
    in a CI job log (``Exact comparison of lm loss: FAILED``, ``The following metrics failed``), or
    a test suite's assertion comparing numbers of a run with their expected values
    (``AssertionError: 0.646 not greater than or equal to 0.65``, torch.testing's ``Mismatched
    elements``, numpy.testing's ``Not equal to tolerance``, a GoogleTest ``Failure``).

    Why: the run's numbers no longer match their reference; what remains is to find what changed
    and whether the difference is real, drift or a too tight tolerance.

    Fix: compare the run with the one that produced the reference (``trainaudit compare``), and
    the code and environment between them (``trainaudit audit``).

    Example: ``E   AssertionError: 0.6461915373802185 not greater than or equal to 0.65``.
    """

    id = "TA805"
    name = "reference-check-failed"
    category = Category.GOLDEN_MISMATCH
    severity = Severity.HIGH
    also = (Severity.MEDIUM,)  # the failed check line's catalogue entry decides (an assertion on a test utility)
    guidance = GOLDEN_GUIDANCE
    needs_more_data = ("the reference values and the run's values (for trainaudit compare)",)

    def check(self, ctx: Context) -> list[Hit]:
        evs = [e for e in ctx.events(EventKind.GATE) if e.data.get("passed") is not True]
        if not evs:
            return []
        e = evs[0]
        # a check of the finished run has no step, unless its message names one ("Loss mismatch at step 2")
        h = self.hit(f"a reference check failed: {e.message}" + (f" ({len(evs)} failure lines)" if len(evs) > 1 else ""),
                     0.85, severity=e.data.get("severity", self.severity), first_bad_step=e.data.get("named_step"),
                     last_step=e.data.get("named_step"))
        h.ev("gate", e, "the failed check")
        return [h]
