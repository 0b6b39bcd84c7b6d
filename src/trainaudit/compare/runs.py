"""Run vs run: a baseline (passing) run against a candidate (failing) run, in any format
trainaudit reads. Steps are aligned on the steps both runs logged; with several baseline runs the
run-to-run spread gives a noise band, so "beyond noise" is measured, not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainaudit.compare.explain import describe
from trainaudit.rules.gate import RunDivergesFromBaseline
from trainaudit.ingest import load_run
from trainaudit.model import EventKind, Run, Series
from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.charts import Band, Curve, PlotSpec, relative_panel
from trainaudit.answer.schema import Answer, Category, FinalAnswer, RootCause, Severity
from trainaudit.answer.paths import display_path

DEFAULT_RTOL = 0.05  # the Megatron approximate band, used when no noise band can be measured
NOISE_FLOOR = 1e-6


def is_loss(name: str) -> bool:
    n = name.lower()
    return "loss" in n and "scale" not in n


@dataclass(slots=True)
class MetricDiff:
    metric: str
    steps: list[int]
    base: list[float]
    cand: list[float]
    rtol: float
    noise: float | None
    n_runs: int
    failing: list[int] = field(default_factory=list)
    diverge_step: int | None = None


def _load(paths: list[str], fmt: str | None) -> Run:
    run, _ = load_run(paths, fmt)
    return run


def _aligned(a: Series, b: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def diff_runs(baselines: list[Run], cand: Run) -> list[MetricDiff]:
    base = baselines[0]
    out: list[MetricDiff] = []
    for name, sb in base.series.items():
        sc = cand.series.get(name)
        if sc is None or "@rank" in name:
            continue
        steps, vb, vc = _aligned(sb, sc)
        if steps.size == 0:
            continue
        noise = None
        spreads: list[np.ndarray] = []
        for other in baselines[1:]:
            so = other.series.get(name)
            if so is None:
                continue
            _, v0, v1 = _aligned(sb, so)
            ok = np.isfinite(v0) & np.isfinite(v1) & (v0 != 0)
            if ok.any():
                spreads.append(np.abs(v1[ok] - v0[ok]) / np.abs(v0[ok]))
        if spreads:
            noise = float(np.quantile(np.concatenate(spreads), 0.95))
        rtol = max(noise * 2, NOISE_FLOOR) if noise is not None else DEFAULT_RTOL
        close = np.isclose(vc, vb, rtol=rtol, atol=0.0) | (np.isnan(vc) & np.isnan(vb))
        md = MetricDiff(name, steps.tolist(), vb.tolist(), vc.tolist(), rtol, noise, len(baselines))
        md.failing = [int(s) for s in steps[~close]]
        # Where the curves separate: first failing step after which most steps fail too.
        bad = ~close
        for i in np.flatnonzero(bad):
            if bad[i:].mean() >= 0.5:
                md.diverge_step = int(steps[i])
                break
        out.append(md)
    return out


def compare_runs(baseline_paths: list[str], candidate_path: str, fmt: str | None = None
                 ) -> tuple[Answer, list[PlotSpec], bool]:
    baselines = [_load([p], fmt) for p in baseline_paths]
    cand = _load([candidate_path], fmt)
    diffs = diff_runs(baselines, cand)
    b = AnswerBuilder("compare")
    sb = [b.source(display_path(p), _kind(r), description=f"baseline run {i + 1}")
          for i, (p, r) in enumerate(zip(baseline_paths, baselines))]
    sc = b.source(display_path(candidate_path), _kind(cand), description="candidate run")
    plots: list[PlotSpec] = []
    causes: list[RootCause] = []
    verdict, category, first_bad = "pass", "healthy", None
    loss_fail: list[MetricDiff] = []
    for md in diffs:
        fb = b.fact(sb[0], f"baseline {md.metric} on the steps both runs logged", metric=md.metric, steps=md.steps,
                    values=md.base)
        fc = b.fact(sc, f"candidate {md.metric} on the same steps", metric=md.metric, steps=md.steps, values=md.cand)
        rt = repr(float(md.rtol))
        cs = b.calc("n_steps: steps logged by both runs", f"len({fb})", [fb], unit="steps")
        cn = b.calc(f"n_failing: steps where |c - b| > {md.rtol:.3g}*|b| "
                    + ("(band = 2 x 95th percentile of baseline-to-baseline spread)" if md.noise is not None
                       else "(no noise band measured: Megatron's 5 % band)"),
                    f"count(1 - isclose({fc}, {fb}, {rt}, 0))", [fc, fb], unit="steps")
        rel = f"where(isfinite({fc} - {fb}), abs({fc} - {fb}) / abs({fb}), nan)"
        cm = b.calc("max_rel_err: max |c - b| / |b|", f"nanmax({rel})", [fc, fb], unit="ratio")
        cd = b.calc("median_rel_err: median |c - b| / |b|", f"nanmedian({rel})", [fc, fb], unit="ratio")
        dev = describe(md.steps, md.base, md.cand, tol=md.rtol)
        nanstep = [s for s, c, bb in zip(md.steps, md.cand, md.base) if not np.isfinite(c) and np.isfinite(bb)]
        n_fail = int(b.result(cn))
        b.comparison(metric=md.metric, check="approximate", policy="run-vs-run", passed=n_fail == 0,
                     rtol=md.rtol, atol=0.0, n_steps=int(b.result(cs)), n_failing=n_fail, allowed_failing=0,
                     first_failing_step=md.failing[0] if md.failing else None,
                     max_rel_err=_opt(b.result(cm)), median_rel_err=_opt(b.result(cd)),
                     deviation=dev.to_dict(), evidence=[cs, cn, cm, cd])
        if n_fail and is_loss(md.metric) and (md.diverge_step is not None or nanstep):
            loss_fail.append(md)
            plots.append(PlotSpec(md.metric, f"{md.metric}: candidate vs baseline", [
                Curve("baseline", md.steps, md.base), Curve("candidate", md.steps, md.cand, "dashed")],
                first_bad_step=md.diverge_step, band=Band(f"baseline ±{md.rtol:.3g}", md.steps,
                                                          np.asarray(md.base) * (1 - md.rtol),
                                                          np.asarray(md.base) * (1 + md.rtol)),
                panel=relative_panel(md.metric, md.steps, md.cand, md.base, md.rtol, 0.0, md.diverge_step,
                                     actual_name="candidate", reference="baseline")))
            d = b.finding(rule=RunDivergesFromBaseline.id, category="divergence" if not nanstep else "nan_inf", severity="high",
                          metric=md.metric, first_bad_step=md.diverge_step or nanstep[0],
                          message=f"{md.metric} of the candidate leaves the baseline band from step "
                                  f"{md.diverge_step or nanstep[0]}: {dev.summary}",
                          evidence=[fb, fc, cn, cm], confidence=0.8 if md.noise is not None else 0.65)
            causes.append(RootCause(issue=f"{md.metric} diverges from the baseline from step "
                                          f"{md.diverge_step or nanstep[0]} ({dev.summary})",
                                    category=Category.DIVERGENCE if not nanstep else Category.NAN_INF,
                                    severity=Severity.HIGH, evidence=[d, cn, cm], fix="find the change between the two runs (code, config, "
                                    "data, environment) with `trainaudit audit --good --bad`",
                                    expected_impact=f"{md.metric} back inside the baseline band",
                                    verify="rerun the candidate: the comparison passes",
                                    confidence=0.8 if md.noise is not None else 0.65))
    short = _ended_early(baselines[0], cand)
    crashed = [e for e in cand.events if e.kind in (EventKind.TRACEBACK, EventKind.OOM, EventKind.NCCL_TIMEOUT,
                                                   EventKind.SIGNAL, EventKind.XID, EventKind.ECC, EventKind.GPU_LOST)]
    needs: list[str] = []
    if short is not None:
        infra = any(e.kind in (EventKind.NCCL_TIMEOUT, EventKind.XID, EventKind.ECC, EventKind.GPU_LOST) for e in crashed)
        verdict, category, first_bad = ("infrastructure_failure" if infra else "crash"), \
            ("distributed_failure" if infra else "crash"), short
        f = b.fact(sc, f"candidate's last logged step is {short} (the baseline goes further)", step=short)
        causes.insert(0, RootCause(issue=f"the candidate run stopped at step {short}", category=Category(category),
                                   severity=Severity.CRITICAL, evidence=[f], fix="see why the candidate ended "
                                   "(`trainaudit diagnose`)", expected_impact="a complete run to compare",
                                   verify="the candidate reaches the baseline's last step", confidence=0.8))
    elif loss_fail:
        first = min((m.diverge_step for m in loss_fail if m.diverge_step is not None), default=None)
        verdict, category, first_bad = "real_regression", "divergence", first
        if any(m.noise is None for m in loss_fail):
            needs.append("two or more baseline runs (--baseline) to measure the run-to-run noise band")
    elif not diffs:
        verdict, category = "inconclusive", "healthy"
        needs.append("the two runs share no metric on common steps: give runs in comparable formats")
    summary = {"pass": "The candidate stays inside the baseline band on every shared metric.",
               "real_regression": f"The candidate's loss leaves the baseline band from step {first_bad}.",
               "inconclusive": "Nothing to compare."}.get(verdict, f"The candidate run stopped at step {first_bad}.")
    final = FinalAnswer(verdict=verdict, category=category, first_bad_step=first_bad, summary=summary,  # type: ignore[arg-type]
                        root_causes=causes, needs_more_data=needs)
    return b.build(final), plots, verdict == "pass"


def _ended_early(base: Run, cand: Run) -> int | None:
    losses = [n for n in base.series if is_loss(n) and n in cand.series and "@rank" not in n]
    if not losses:
        return None
    lb = max(int(base.series[n].steps[-1]) for n in losses if len(base.series[n]))
    lc = max(int(cand.series[n].steps[-1]) for n in losses if len(cand.series[n]))
    return lc if lc < lb else None


def _kind(run: Run) -> str:
    kinds = {s.kind.value for s in run.sources}
    for k in ("tensorboard", "golden_values", "metrics", "ci_log", "log"):
        if k in kinds:
            return k
    return "log"


def _opt(v: float) -> float | None:
    return v if np.isfinite(v) else None
