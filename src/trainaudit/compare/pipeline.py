"""The golden-value comparison end to end: load, run the gate, explain, decide, build the answer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.compare.cilog import CiGateReport, read_ci_log
from trainaudit.compare.explain import Deviation, describe
from trainaudit.compare.extract import Actual, complete_from_reports, load_actual
from trainaudit.ingest.golden import GoldenFile, GoldenRejected, load_golden, strict_check
from trainaudit.compare.megatron import GateResult, Policy, policy_for, run_gate
from trainaudit.compare.model_config import ModelConfig, load_model_config
from trainaudit.compare.build import Inputs, build_answer, rejected_golden_answer
from trainaudit.compare.verdict import Decision, decide
from trainaudit.errors import InputError, UsageError
from trainaudit.answer.charts import PlotSpec
from trainaudit.answer.schema import Answer


@dataclass(slots=True)
class GoldenGate:
    """The inputs as the gate saw them and the gate's result, before any explanation."""

    golden: GoldenFile
    actual: Actual
    actual_paths: list[str]
    config: ModelConfig
    nondeterministic: bool
    gate: GateResult
    reports: list[CiGateReport] = field(default_factory=list)  # the comparator's own output, from CI logs
    decision: Decision | None = None  # set by :func:`answer_golden`
    pipeline: str = "regular"
    train_iters: int | None = None
    dropped: list[str] = field(default_factory=list)  # METRICS left out: the CI log says PASSED, no file holds them


def explain_checks(gate: GateResult) -> dict[int, Deviation]:
    out: dict[int, Deviation] = {}
    for i, c in enumerate(gate.checks):
        if c.steps and c.window is None:
            out[i] = describe(c.steps, c.golden, c.actual)
    return out


def gate_golden(golden_path: str | GoldenFile, actual_paths: list[str], *, model_config: str | None = None,
                deterministic: bool | None = None, pipeline: str | None = None, train_iters: int | None = None,
                policy: str | Policy = "megatron", fmt: str | None = None,
                ci_logs: list[str] | None = None) -> GoldenGate:
    """Load the golden file (or take one already parsed: it is checked as the comparator would
    load it), the actual run and the model config, and run the gate; what the actual run's files
    lack is completed from the comparator's output in ``ci_logs``. Unreadable inputs raise
    :class:`InputError` (:class:`~trainaudit.ingest.golden.GoldenRejected` for a golden the
    comparator refuses to load); a comparison Megatron's comparator itself cannot carry out is
    returned as ``gate.abort_kind == "comparator_error"``."""
    pol = policy if isinstance(policy, Policy) else policy_for(policy)
    if not actual_paths:
        raise UsageError("compare --golden GOLDEN needs the ACTUAL run as input")
    if isinstance(golden_path, GoldenFile):
        golden = golden_path
        strict_check(golden)
    else:
        if not Path(golden_path).exists():
            raise InputError(f"{golden_path}: no such file")
        golden = load_golden(golden_path, strict=True)
    cfg = load_model_config(model_config) if model_config else ModelConfig()
    nondet = cfg.nondeterministic if deterministic is None else not deterministic
    pipe = pipeline or ("resume" if cfg.is_resume else "regular")
    iters = train_iters or cfg.train_iters or max((max(m.steps) for m in golden.metrics.values() if m.steps), default=None)
    actual = load_actual(actual_paths, golden, iters, fmt)
    wanted = cfg.effective_metrics(pol.default_metrics)
    reports = [read_ci_log(p) for p in ci_logs or []]
    metrics = complete_from_reports(actual, golden, wanted, reports) if reports else wanted
    gate = run_gate(golden, actual.values, metrics, nondeterministic=nondet, policy=pol,
                    pipeline=pipe, train_iters=iters)  # type: ignore[arg-type]
    return GoldenGate(golden, actual, list(actual_paths), cfg, nondet, gate, reports, pipeline=pipe,
                      train_iters=iters, dropped=[m for m in wanted if m not in metrics])


def regate(run: GoldenGate, policy: Policy) -> GateResult:
    """The same golden and run through the gate of another comparator version (its METRICS
    default and thresholds), without reading anything again."""
    wanted = run.config.effective_metrics(policy.default_metrics)
    fresh = [m for m in wanted if m not in run.gate.metrics and m not in run.dropped]
    if fresh and run.reports:
        kept = complete_from_reports(run.actual, run.golden, fresh, run.reports)
        wanted = [m for m in wanted if m not in fresh or m in kept]
    metrics = [m for m in wanted if m not in run.dropped]
    return run_gate(run.golden, run.actual.values, metrics, nondeterministic=run.nondeterministic, policy=policy,
                    pipeline=run.pipeline, train_iters=run.train_iters)  # type: ignore[arg-type]


def answer_golden(run: GoldenGate, *, deterministic: bool | None = None, substance: bool = False, last_step: int | None = None, last_step_from: str = ""
                  ) -> tuple[Answer, list[PlotSpec], bool]:
    """Explain, decide and build the answer for a gate run of :func:`gate_golden`; ``substance``,
    ``last_step``: see :func:`trainaudit.compare.verdict.decide`."""
    gate, cfg, actual, nondet = run.gate, run.config, run.actual, run.nondeterministic
    if gate.abort_kind == "comparator_error":
        raise InputError(f"{run.golden.path}: {gate.abort}")
    devs = explain_checks(gate)
    reports = run.reports
    fatal_nans = _fatal_nans(run, reports)
    decision = decide(gate, devs, run=actual.run, nan_metrics=fatal_nans, substance=substance,
                      last_step=last_step, last_step_from=last_step_from)
    run.decision = decision
    notes = list(actual.notes) + decision.notes
    if nondet:
        notes.append("nondeterministic mode: exact checks skipped"
                     + (f" ({cfg.nondeterministic_flag}=1)" if cfg.nondeterministic_flag and deterministic is None else ""))
    inp = Inputs(run.golden, actual.values, actual.kind, run.actual_paths, cfg.path, reports, notes)
    answer, plots = build_answer(inp, gate, devs, decision)
    return answer, plots, gate.passed and not fatal_nans


def _fatal_nans(run: GoldenGate, reports: list[CiGateReport]) -> dict[str, int]:
    """The run's non-finite metrics that stop the gate before it compares: not those the CI log
    shows compared, nor those the golden holds as non-finite too (values recorded by an extractor
    that wrote them, so the gate compared them as inf)."""
    compared = {c.metric for r in reports for c in r.checks}
    out = {}
    for m, step in run.actual.nan_metrics.items():
        g = run.golden.metrics.get(m)
        golden_nan = g is not None and any(not math.isfinite(v) for v in g.floats())
        if m not in compared and not golden_nan:
            out[m] = step
    return out


def run_golden(golden_path: str | GoldenFile, actual_paths: list[str], *, model_config: str | None = None,
               deterministic: bool | None = None, pipeline: str | None = None, train_iters: int | None = None,
               policy: str | Policy = "megatron", ci_logs: list[str] | None = None, fmt: str | None = None
               ) -> tuple[Answer, list[PlotSpec], bool]:
    try:
        run = gate_golden(golden_path, actual_paths, model_config=model_config, deterministic=deterministic,
                          pipeline=pipeline, train_iters=train_iters, policy=policy, fmt=fmt, ci_logs=ci_logs)
    except GoldenRejected as exc:
        if isinstance(golden_path, GoldenFile) or exc.path != golden_path:
            raise  # the actual values, not the golden: an input that cannot be compared
        return rejected_golden_answer(golden_path, exc, actual_paths, model_config), [], False
    return answer_golden(run, deterministic=deterministic)
