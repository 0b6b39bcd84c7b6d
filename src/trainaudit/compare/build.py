"""Assemble answer.json for a golden-value comparison: sources, facts (whole golden/actual series
so aggregates recompute), calculations backing every number of ``comparisons[]``, findings and
the final verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trainaudit.compare.cilog import CiGateReport
from trainaudit.compare.explain import Deviation
from trainaudit.ingest.golden import SHAPE, GoldenFile, GoldenRejected, nulls_in_words
from trainaudit.compare.megatron import CheckResult, GateResult
from trainaudit.compare.verdict import Decision
from trainaudit.rules.base import Rule
from trainaudit.rules.gate import ApproximateCheck, ExactCheck, GateAborted, IterationTimeCheck
from trainaudit.answer.builder import AnswerBuilder, sha256_file
from trainaudit.answer.charts import Band, Curve, PlotSpec, relative_panel
from trainaudit.answer.schema import Answer, Category, Comparison, FinalAnswer, RootCause, Severity
from trainaudit.answer.paths import display_path

RULE_OF: dict[str, type[Rule]] = {"exact": ExactCheck, "approximate": ApproximateCheck,
                                  "iteration-time": IterationTimeCheck, "abort": GateAborted}


@dataclass(slots=True)
class Inputs:
    golden: GoldenFile
    actual: GoldenFile
    actual_kind: str  # golden_values | tensorboard | log | metrics
    actual_paths: list[str]
    model_config: str | None = None
    ci: list[CiGateReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _sha(path: str) -> str | None:
    p = Path(path)
    return sha256_file(p) if p.is_file() else None


def build_answer(inp: Inputs, gate: GateResult, devs: dict[int, Deviation], decision: Decision
                 ) -> tuple[Answer, list[PlotSpec]]:
    b = AnswerBuilder("compare")
    gpath = display_path(inp.golden.path)
    sg = b.source(gpath, "golden_values", sha256=_sha(inp.golden.path),
                  description=("first run of the resume pipeline (its values play the golden)"
                               if gate.pipeline == "resume" else "golden values"))
    akind = {"golden_values": "golden_values", "tensorboard": "tensorboard", "log": "log"}.get(inp.actual_kind, "metrics")
    a_label = ", ".join(display_path(p) for p in inp.actual_paths)
    sa = b.source(a_label, akind, sha256=_sha(inp.actual_paths[0]) if len(inp.actual_paths) == 1 else None,
                  description="actual values" + (f" ({'; '.join(inp.notes)})" if inp.notes else ""))
    evidence_for_cause: dict[int, list[str]] = {}
    if inp.model_config:
        sc = b.source(display_path(inp.model_config), "config", sha256=_sha(inp.model_config),
                      description="model_config.yaml (METRICS, nondeterministic flags, TEST_TYPE)")
        f = b.fact(sc, f"METRICS checked by the gate: {', '.join(gate.metrics)}; mode "
                       f"{'nondeterministic (exact checks skipped)' if gate.nondeterministic else 'deterministic'}")
        evidence_for_cause[-1] = [f]
    plots: list[PlotSpec] = []
    abort_ev: list[str] = []
    if gate.abort:
        abort_ev.append(b.fact(sg if gate.abort_kind != "missing_in_actual" else sa,
                               f"gate aborts: {gate.abort}", metric=gate.abort_metric[0] if gate.abort_metric else None))
    for i, c in enumerate(gate.checks):
        evidence_for_cause[i] = _check_facts(b, sg, sa, inp, c, gate, devs.get(i), plots)
    for rep in inp.ci:
        sci = b.source(display_path(rep.path), "ci_log", sha256=_sha(rep.path), description="CI job log with the gate's output")
        ids = []
        for gl in rep.lines[:12]:
            ids.append(b.fact(sci, "gate output in the CI log", line=gl.line, quote=gl.text.strip()))
        if rep.failed_metrics is not None:
            agree = sorted(rep.failed_metrics) == sorted(gate.failed_metrics)
            ids.append(b.fact(sci, f"CI says the failed metrics were: {', '.join(rep.failed_metrics)}; "
                                   f"reproduced here: {', '.join(gate.failed_metrics) or 'none'} "
                                   f"({'agrees' if agree else 'DIFFERS'})", line=rep.failed_line))
        evidence_for_cause.setdefault(-2, []).extend(ids)
    causes: list[RootCause] = []
    for cause in decision.causes:
        src = sg if cause.golden else sa
        decided = [b.fact(src, f"decides the verdict: {why}", metric=cause.metrics[0] if cause.metrics else None)
                   for why in dict.fromkeys(cause.decided_by)]
        ev: list[str] = decided + (list(abort_ev) if not cause.checks else [])
        for ci in cause.checks:
            ev += [e for e in evidence_for_cause.get(ci, []) if e not in ev]
        ev += [e for e in evidence_for_cause.get(-1, []) + evidence_for_cause.get(-2, [])[:3] if e not in ev]
        d = b.finding(rule=(RULE_OF["iteration-time"] if cause.metrics == ["iteration-time"] else
                            RULE_OF["abort"] if not cause.checks else
                            RULE_OF[gate.checks[cause.checks[0]].check]).id,
                      category=cause.category, severity=cause.severity,
                      metric=cause.metrics[0] if cause.metrics else None, first_bad_step=cause.first_bad_step,
                      message=cause.issue, evidence=ev, confidence=cause.confidence)
        causes.append(RootCause(issue=cause.issue, category=Category(cause.category), severity=Severity(cause.severity),
                                evidence=decided + [d] + [e for e in ev if e not in decided][:8], fix=cause.fix,
                                expected_impact=cause.expected_impact,
                                verify=cause.verify, confidence=cause.confidence))
    final = FinalAnswer(verdict=decision.verdict, category=decision.category,  # type: ignore[arg-type]
                        first_bad_step=decision.first_bad_step, summary=decision.summary, root_causes=causes,
                        quick_fixes=decision.quick_fixes, needs_more_data=decision.needs_more_data)
    return b.build(final), plots


def check_in_words(c: Comparison) -> str:
    """One check of ``comparisons[]`` in words: what was compared and by how much."""
    if c.window:
        med = f"{c.actual_median:.5g} s" if c.actual_median is not None else "n/a (missing or 'nan' steps)"
        gold = f"{c.golden_median:.5g} s" if c.golden_median is not None else "n/a"
        ratio = f", {c.actual_median / c.golden_median - 1:+.1%}" if c.actual_median is not None and c.golden_median \
            else ""
        return (f"{c.metric} {c.check}: median over steps {c.window[0]}-{c.window[-1]} {med} vs golden {gold}{ratio}, "
                f"band {c.rtol:.0%}")
    err = f", max rel err {c.max_rel_err:.3g}" if c.max_rel_err is not None else ""
    return (f"{c.metric} {c.check}: {c.n_failing}/{c.n_steps} steps outside rtol {c.rtol:g} "
            f"({c.allowed_failing} allowed{err}, first at step {c.first_failing_step})")


def _check_facts(b: AnswerBuilder, sg: str, sa: str, inp: Inputs, c: CheckResult, gate: GateResult,
                 dev: Deviation | None, plots: list[PlotSpec]) -> list[str]:
    gm = inp.golden.metrics.get(c.metric)
    am = inp.actual.metrics.get(c.metric)
    if not c.steps:
        b.comparison(metric=c.metric, check=c.check, policy=gate.policy.name, passed=c.passed, rtol=c.rtol,
                     atol=c.atol, n_steps=0, n_failing=0, allowed_failing=0, evidence=[])
        return []
    gline = gm.line_of(c.steps[0]) if gm else 0
    aline = am.line_of(c.steps[0]) if am else 0
    fg = b.fact(sg, f"golden {c.metric} at steps {c.steps[0]}..{c.steps[-1]} ({len(c.steps)} values; "
                    "'nan' strings mapped to inf as the gate does)", metric=c.metric, steps=c.steps,
                values=c.golden, line=gline)
    fa = b.fact(sa, f"actual {c.metric} at the golden's steps (a missing step counts as 'nan' -> inf)",
                metric=c.metric, steps=c.steps, values=c.actual, line=aline)
    ev = [fg, fa]
    rt = repr(float(c.rtol))
    kw: dict = {}
    if c.window is not None:
        cg = b.calc("golden_median: median of golden iteration-time over the window steps", f"median({fg})",
                    [fg], unit="s")
        ca = b.calc("actual_median: median of actual iteration-time over the window steps", f"median({fa})", [fa], unit="s")
        cr = b.calc("ratio actual/golden median", f"{ca} / {cg}", [ca, cg], unit="ratio")
        cn = b.calc("n_failing: 1 - isclose(actual median, golden median, rtol)", f"1 - isclose({ca}, {cg}, {rt}, 0)",
                    [ca, cg], unit="steps")
        cs = b.calc("n_steps: a single median is compared", f"len({ca})", [ca], unit="steps")
        ev += [cg, ca, cr, cn, cs]
        kw = {"window": list(c.window), "golden_median": _opt(b.result(cg)), "actual_median": _opt(b.result(ca)),
              "n_steps": 1, "n_failing": int(b.result(cn))}
    else:
        cs = b.calc("n_steps: number of golden values (the golden drives the step list)", f"len({fg})", [fg],
                    unit="steps")
        cn = b.calc(f"n_failing: steps where not |a - g| <= {c.atol:g} + {c.rtol:g}*|g|",
                    f"count(1 - isclose({fa}, {fg}, {rt}, {c.atol!r}))", [fa, fg], unit="steps")
        pol = gate.policy
        n_ev: list[str] = []
        if pol.n_formula == "count":
            n_ref, n_in = f"len({fg})", [fg]
        else:
            # Before 3e75961a74 the budget's N came from the golden's step fields, not the count.
            how = ("end_step / step_interval + 1" if pol.n_formula == "end"
                   else "(end_step - start_step) / step_interval + 1")
            fn = b.fact(sg, f"N of the budget for golden {c.metric}: {how} = {c.n_steps!r} (the comparator before "
                            "3e75961a74 reads it from the step fields"
                            + ("; resume: start_step = train_iters // 2 + 1)" if gate.pipeline == "resume" else ")"),
                        metric=c.metric, value=c.n_steps)
            n_ref, n_in, n_ev = fn, [fn], [fn]
        length = f"len({fg})"
        if (c.check == "exact" and pol.strict_budget) or c.n_steps == 1:
            cal = b.calc("allowed_failing: exact checks need every step", f"0 * len({fg})", [fg], unit="steps")
            extra = [*n_ev, cal]
        else:
            ck = b.calc("budget k = min(max(N // 100, 1), 50)", f"min(max(floor({n_ref} / 100), 1), 50)", n_in,
                        unit="steps")
            if pol.strict_budget:
                f = f"floor({length} * {ck} / {n_ref})"
                cal = b.calc("allowed_failing: largest n with (L - n)/L >= 1 - k/N in floating point, L the "
                             "number of compared values", f"max({f} - 1 + (({length} - {f}) / {length} >= 1 - {ck} / "
                             f"{n_ref}), 0)", [fg, ck, *n_in], unit="steps")
            else:
                f = f"floor({length} * (1 - {ck} / {n_ref}))"
                cal = b.calc("allowed_failing: pre-4e85d74ae9 budget, largest n with (L - n)/L >= k/N",
                             f"max({f} - 1 + (({length} - {f}) / {length} >= {ck} / {n_ref}), 0)",
                             [fg, ck, *n_in], unit="steps")
            extra = [*n_ev, ck, cal]
        rel = f"where(isfinite({fa} - {fg}), abs({fa} - {fg}) / abs({fg}), nan)"
        cmx = b.calc("max_rel_err: max |a - g| / |g| over steps finite on both sides", f"nanmax({rel})", [fa, fg],
                     unit="ratio")
        cmd = b.calc("median_rel_err: median |a - g| / |g| over steps finite on both sides", f"nanmedian({rel})",
                     [fa, fg], unit="ratio")
        ev += [cs, cn, *extra, cmx, cmd]
        kw = {"n_steps": int(b.result(cs)), "n_failing": int(b.result(cn)), "allowed_failing": int(b.result(cal)),
              "max_rel_err": _opt(b.result(cmx)), "median_rel_err": _opt(b.result(cmd))}
        if c.allowed_failing != kw["allowed_failing"] or c.n_failing != kw["n_failing"]:
            kw["allowed_failing"], kw["n_failing"] = c.allowed_failing, c.n_failing  # comparator is authoritative
    first = c.failing_steps[0] if c.failing_steps else None
    if first is not None and c.window is None:
        for side, src, metric_file, vals in (("golden", sg, gm, c.golden), ("actual", sa, am, c.actual)):
            j = c.steps.index(first)
            ev.append(b.fact(src, f"{side} {c.metric} at the first failing step {first}", metric=c.metric,
                             step=first, value=vals[j], line=metric_file.line_of(first) if metric_file else None))
    b.comparison(metric=c.metric, check=c.check, policy=gate.policy.name, passed=c.passed, rtol=c.rtol, atol=c.atol,
                 allowed_failing=kw.pop("allowed_failing", 0), first_failing_step=first,
                 deviation=dev.to_dict() if dev else None, evidence=ev[2:], **kw)
    if not c.passed:
        g = np.where(np.isfinite(c.golden), np.asarray(c.golden, float), np.nan)
        lo, hi = g - c.rtol * np.abs(g), g + c.rtol * np.abs(g)
        gsteps = c.steps
        band = Band(f"golden ±{c.rtol:g}", gsteps, lo, hi)
        if c.window is not None and gm is not None:
            gsteps = gm.steps
            g = np.asarray(gm.floats(float("nan")), float)
        curves = [Curve("golden", gsteps, g), Curve("actual", c.steps if c.window is None else
                                                     (am.steps if am else []),
                                                     c.actual if c.window is None else
                                                     (am.floats(float("nan")) if am else []), "dashed")]
        if c.window is not None and c.golden_median is not None:
            # the gate compares medians over the window: the band is the golden median's, and the
            # actual median is drawn over the same steps
            a, z = c.window
            gmed = c.golden_median
            band = Band(f"golden median ±{c.rtol:g}", [a, z], [gmed - c.rtol * abs(gmed)] * 2,
                        [gmed + c.rtol * abs(gmed)] * 2)
            if c.actual_median is not None:
                curves.append(Curve(f"actual median, steps {a}-{z}", [a, z], [c.actual_median] * 2))
        marked = first if c.window is None else (c.window_steps[0] if c.window_steps else None)
        # beside the absolute values, actual/golden - 1 against the tolerance: a shift of a few
        # per cent is a line leaving the band there, not a hair on a curve spanning decades
        panel = relative_panel(c.metric, c.steps, c.actual, c.golden, c.rtol, c.atol, marked)
        if c.window is not None and c.golden_median is not None and c.actual_median is not None and c.golden_median:
            a, z = c.window
            panel.curves.append(Curve(f"median ratio - 1, steps {a}-{z}", [a, z],
                                      [c.actual_median / c.golden_median - 1.0] * 2))
            panel.window = c.window
        plots.append(PlotSpec(metric=c.metric, title=f"{c.metric}: {c.check} check ({c.rtol:g} rtol) failed",
                              curves=curves, first_bad_step=marked, band=band, stem=f"{c.metric}_{c.check}",
                              window=c.window, panel=panel))
    return ev


def _opt(v: float) -> float | None:
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def rejected_golden_answer(golden_path: str, why: GoldenRejected, actual_paths: list[str],
                           model_config: str | None = None) -> Answer:
    """The answer for a golden Megatron-LM's comparator refuses to load (null values, a JSON null):
    the gate itself breaks before comparing any value, whatever the run did, so the verdict is the
    gate's (``gating_policy_issue``), not the training's."""
    b = AnswerBuilder("compare")
    sg = b.source(display_path(golden_path), "golden_values", sha256=_sha(golden_path), description="golden values")
    for p in actual_paths:
        b.source(display_path(p), "metrics", sha256=_sha(p), description="actual values (not compared: the gate "
                                                                         "stops when it loads the golden)")
    if model_config:
        b.source(display_path(model_config), "config", sha256=_sha(model_config), description="model_config.yaml")
    ev = [b.fact(sg, f"the golden holds null at step {s} of {m}", metric=m, step=s)
          for m, steps in why.nulls.items() for s in steps[:20]]
    where = nulls_in_words(why.nulls)
    raised = why.raised
    what = f"null values in the golden ({where})" if why.nulls else why.what
    ev.append(b.fact(sg, f"decides the verdict: {what}: Megatron-LM's comparator raises {raised} when it loads the "
                         "golden (read_golden_values_from_json), so the gate breaks before it compares any value; "
                         "the gate, not the training, is broken"))
    cause = RootCause(
        issue=f"{what}: Megatron-LM's comparator raises {raised} there and the test fails without comparing anything",
        category=Category.GOLDEN_MISMATCH, severity=Severity.HIGH, evidence=ev,
        fix="regenerate the golden values from a run that logged every step (download_golden_values.py), or write "
            "the values the run logged in place of the nulls (\"nan\" if the step was not logged)" if why.nulls else
            "regenerate the golden values from the reference run (download_golden_values.py): " + SHAPE,
        expected_impact="the gate loads the golden and compares the run's values again",
        verify="rerun `trainaudit compare --golden` on the regenerated golden: the checks run", confidence=0.9)
    final = FinalAnswer(verdict="gating_policy_issue", category=Category.GOLDEN_MISMATCH,
                        summary=f"Gating-policy issue (golden_mismatch): {what}; Megatron-LM's comparator raises "
                                f"{raised} when it loads this golden, so the gate itself breaks before comparing.",
                        root_causes=[cause], quick_fixes=[cause.fix])
    return b.build(final)
