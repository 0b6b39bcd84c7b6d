"""Run vs run: a baseline (passing) run against a candidate (failing) run, in any format
trainaudit reads. What the answer says, in order:

1. whether the candidate died (a traceback, an OOM, a signal, or it stopped before the length it
   planned with no end-of-training line): then nothing else can be compared fairly;
2. how the runs' own configuration differs (:mod:`trainaudit.compare.runconfig`), with both values
   and where each was read, and a learning rate each run logged that differs by a factor;
3. the correctness metrics (loss, accuracy, gradient norm, others) on the steps both runs logged,
   each against the band of its kind (:mod:`trainaudit.compare.bands`); with several baseline runs
   the run-to-run spread measures the band;
4. wall-clock, throughput and memory medians, as notes: they never fail the comparison.

A candidate that planned fewer steps than the baseline and finished them is compared on the steps
both logged; it is not a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.charts import Band as PlotBand, Curve, PlotSpec, relative_panel
from trainaudit.answer.formula import moving_average
from trainaudit.answer.paths import display_path
from trainaudit.answer.schema import Answer, Category, FinalAnswer, RootCause, Severity
from trainaudit.compare.bands import ALLOWED_SHARE, CORRECTNESS, MEMORY_BAND, WALL_CLOCK_FACTOR, Band, band_for, \
    metric_kind, self_scatter
from trainaudit.compare.explain import describe
from trainaudit.compare.runconfig import RANK, SEEDS, VERSION, Plan, Setting, plan_of, read_settings
from trainaudit.ingest import load_run
from trainaudit.model import Event, EventKind, Run, Series
from trainaudit.rules.gate import RunConfigDiffers, RunDivergesFromBaseline

FATAL = (EventKind.TRACEBACK, EventKind.OOM, EventKind.HOST_OOM, EventKind.NCCL_TIMEOUT, EventKind.SIGNAL,
         EventKind.XID, EventKind.ECC, EventKind.GPU_LOST, EventKind.DISTRIBUTED_ERROR, EventKind.ELASTIC_FAILURE,
         EventKind.LOSS_SCALE_MIN)
INFRA = (EventKind.NCCL_TIMEOUT, EventKind.XID, EventKind.ECC, EventKind.GPU_LOST, EventKind.DISTRIBUTED_ERROR)
# Logged learning rates closer than this are the same: logs print 4-5 significant digits (HF 5.x
# prints '0.0009947' for 0.000994737), a real change of the rate is larger.
LR_REL = 1e-3
PLANNED_LENGTH = ("max_steps", "num_train_epochs")


def is_loss(name: str) -> bool:
    return metric_kind(name) == "loss"


@dataclass(slots=True)
class MetricDiff:
    metric: str
    steps: list[int]
    base: list[float]
    cand: list[float]
    band: Band
    noise: float | None
    n_runs: int
    failing: list[int] = field(default_factory=list)  # steps whose (averaged) value is beyond the band
    first_failing: int | None = None  # where the first of them starts, on the steps' own values
    diverge_step: int | None = None

    @property
    def rtol(self) -> float:
        return self.band.tol


@dataclass(slots=True)
class SideDiff:
    """A wall-clock, throughput or memory metric: medians over the steps both runs logged."""

    metric: str
    kind: str
    steps: list[int]
    base: list[float]
    cand: list[float]
    ratio: float

    @property
    def beyond(self) -> bool:
        if not np.isfinite(self.ratio) or self.ratio <= 0:
            return False
        if self.kind == "wall_clock":
            return max(self.ratio, 1 / self.ratio) > WALL_CLOCK_FACTOR
        return abs(self.ratio - 1) > MEMORY_BAND

    @property
    def band_words(self) -> str:
        return f"a factor of {WALL_CLOCK_FACTOR:g}" if self.kind == "wall_clock" else f"+-{MEMORY_BAND:.0%}"


@dataclass(slots=True)
class LrDiff:
    """A learning rate both runs logged, from the first step where it differs."""

    metric: str
    first_step: int
    steps: list[int]
    base: list[float]
    cand: list[float]
    base_line: int
    cand_line: int
    base_path: str
    cand_path: str


@dataclass(slots=True)
class ConfigDiff:
    name: str
    base: Setting | None
    cand: Setting | None
    lr: LrDiff | None = None

    @property
    def group(self) -> str:
        if self.name.startswith(VERSION):
            return "version"
        if self.name in SEEDS:
            return "seed"
        if self.name in PLANNED_LENGTH:
            return "length"
        return "hyper"


def _load(paths: list[str], fmt: str | None) -> Run:
    run, _ = load_run(paths, fmt)
    return run


def _aligned(a: Series, b: Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps, ia, ib = np.intersect1d(a.steps, b.steps, return_indices=True)
    return steps, a.values[ia], b.values[ib]


def _beyond(md_base: np.ndarray, md_cand: np.ndarray, band: Band) -> np.ndarray:
    vb = moving_average(md_base, band.window)
    vc = moving_average(md_cand, band.window)
    if band.absolute:
        close = np.isclose(vc, vb, rtol=0.0, atol=band.tol)
    else:
        close = np.isclose(vc, vb, rtol=band.tol, atol=0.0)
    return ~(close | (np.isnan(vc) & np.isnan(vb)))


def _onset(steps: np.ndarray, raw: np.ndarray, i: int, window: int) -> int:
    """A trailing average crosses the band up to a window after the values do: the step is the
    first in that window whose own value (``raw``: beyond the band step by step) is beyond it."""
    lo = max(0, i - window + 1)
    near = np.flatnonzero(raw[lo: i + 1])
    return int(steps[lo + int(near[0])]) if near.size else int(steps[i])


def diff_runs(baselines: list[Run], cand: Run) -> list[MetricDiff]:
    """The correctness metrics (loss, accuracy, grad norm, others) both runs logged, each against
    its band; losses first."""
    base = baselines[0]
    out: list[MetricDiff] = []
    losses = [s for n, s in base.series.items() if metric_kind(n) == "loss" and "@rank" not in n]
    train = max(losses, key=len, default=None)
    loss_scatter = self_scatter(train.values, max(1, len(train) // 20)) if train is not None else 0.0
    for name, sb in base.series.items():
        sc = cand.series.get(name)
        if sc is None or "@rank" in name or metric_kind(name) not in CORRECTNESS:
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
        band = band_for(name, vb, noise, loss_scatter)
        md = MetricDiff(name, steps.tolist(), vb.tolist(), vc.tolist(), band, noise, len(baselines))
        bad = _beyond(vb, vc, band)
        md.failing = [int(s) for s in steps[bad]]
        raw = _beyond(vb, vc, Band(band.kind, band.tol, band.absolute, band.how)) if band.window > 1 else bad

        if md.failing:
            md.first_failing = _onset(steps, raw, int(np.argmax(bad)), band.window)
        # Where the curves separate: the first step beyond the band after which most steps are too
        # (isolated steps beyond it are noise).
        for i in np.flatnonzero(bad).tolist():
            if bad[i:].mean() >= 0.5 and bad[i:].sum() >= min(3, bad.size):
                md.diverge_step = _onset(steps, raw, i, band.window)
                break
        out.append(md)
    out.sort(key=lambda m: CORRECTNESS.index(m.band.kind))
    return out


def side_diffs(base: Run, cand: Run) -> list[SideDiff]:
    out: list[SideDiff] = []
    for name, sb in base.series.items():
        kind = metric_kind(name)
        sc = cand.series.get(name)
        if sc is None or "@rank" in name or kind not in ("wall_clock", "memory"):
            continue
        steps, vb, vc = _aligned(sb, sc)
        ok = np.isfinite(vb) & np.isfinite(vc)
        if not ok.any():
            continue
        mb, mc = float(np.median(vb[ok])), float(np.median(vc[ok]))
        out.append(SideDiff(name, kind, steps[ok].tolist(), vb[ok].tolist(), vc[ok].tolist(),
                            mc / mb if mb else float("nan")))
    return out


def lr_diffs(base: Run, cand: Run) -> list[LrDiff]:
    out: list[LrDiff] = []
    for name, sb in base.series.items():
        sc = cand.series.get(name)
        if sc is None or "@rank" in name or metric_kind(name) != "lr":
            continue
        steps, ia, ib = np.intersect1d(sb.steps, sc.steps, return_indices=True)
        vb, vc = sb.values[ia], sc.values[ib]
        differ = ~np.isclose(vc, vb, rtol=LR_REL, atol=0.0) & np.isfinite(vb) & np.isfinite(vc)
        if not differ.any():
            continue
        k = int(np.argmax(differ))
        out.append(LrDiff(name, int(steps[k]), steps[k:].tolist(), vb[k:].tolist(), vc[k:].tolist(),
                          int(sb.lines[ia[k]]), int(sc.lines[ib[k]]), display_path(base.sources[int(sb.src[ia[k]])].path),
                          display_path(cand.sources[int(sc.src[ib[k]])].path)))
    return out


def config_diffs(base: dict[str, Setting], cand: dict[str, Setting], lrs: list[LrDiff]) -> list[ConfigDiff]:
    """Settings both runs give with different values, most consequential first; a logged learning
    rate that differs joins the learning_rate setting (or stands for it)."""
    out: list[ConfigDiff] = []
    names = [n for n in RANK if n in base and n in cand]
    names += sorted(n for n in base if n.startswith(VERSION) and n in cand)
    names += [n for n in SEEDS if n in base and n in cand]
    for n in names:
        if _same(base[n].value, cand[n].value):
            continue
        out.append(ConfigDiff(n, base[n], cand[n]))
    if lrs:
        lr = next((d for d in out if d.name == "learning_rate"), None)
        if lr is None:
            lr = ConfigDiff("learning_rate", None, None)
            out.insert(0, lr)
        lr.lr = lrs[0]
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return bool(np.isclose(float(a), float(b), rtol=1e-9, atol=0.0))
    return str(a).strip().lower() == str(b).strip().lower()


def _last_step(run: Run) -> int | None:
    losses = [s for n, s in run.series.items() if is_loss(n) and "@rank" not in n and len(s)]
    series = losses or [s for n, s in run.series.items() if "@rank" not in n and len(s)]
    return max((int(s.steps[-1]) for s in series), default=None)


def _factor(d: LrDiff) -> float | None:
    b, c = np.asarray(d.base), np.asarray(d.cand)
    ok = (b > 0) & (c > 0) & np.isfinite(b) & np.isfinite(c)
    if not ok.any():
        return None
    r = c[ok] / b[ok]
    f = float(np.median(r))
    return f if float(r.max()) <= 1.01 * float(r.min()) and abs(f - 1) > 0.01 else None


def _times(x: float) -> str:
    """2000.0 -> '2000x', 0.5 -> '1/2x', 1.25 -> '1.25x'."""
    if x < 1:
        return f"1/{_times(1 / x)}"
    return f"{x:.0f}x" if x >= 10 else f"{x:.3g}x"


class _Writer:
    """Facts, calculations, findings and causes of one comparison, in the order they are read."""

    def __init__(self, b: AnswerBuilder) -> None:
        self.b = b

    def file_source(self, path: str, kind: str, role: str) -> str:
        return self.b.source(path, kind, description=f"{role} run file")

    def setting_fact(self, s: Setting, role: str) -> str:
        sid = self.file_source(s.path, "config" if s.path.lower().endswith((".json", ".yaml", ".yml")) else "log",
                               role)
        value = s.value if isinstance(s.value, (int, float)) and not isinstance(s.value, bool) else None
        return self.b.fact(sid, f"{role}'s {_label(s.name)} is {s.shown()}", value=value, line=s.line or None,
                           quote=s.quote or None)


def _label(name: str) -> str:
    return f"{name[len(VERSION):]} version" if name.startswith(VERSION) else name


def compare_runs(baseline_paths: list[str], candidate_path: str, fmt: str | None = None
                 ) -> tuple[Answer, list[PlotSpec], bool]:
    baselines = [_load([p], fmt) for p in baseline_paths]
    cand = _load([candidate_path], fmt)
    base = baselines[0]
    cfg_b, cfg_c = read_settings(base, [baseline_paths[0]]), read_settings(cand, [candidate_path])
    plan_b, plan_c = plan_of(base, cfg_b, _last_step(base)), plan_of(cand, cfg_c, _last_step(cand))
    diffs = diff_runs(baselines, cand)
    configs = config_diffs(cfg_b, cfg_c, lr_diffs(base, cand))
    sides = side_diffs(base, cand)

    b = AnswerBuilder("compare")
    w = _Writer(b)
    sb = [b.source(display_path(p), _kind(r), description=f"baseline run {i + 1}")
          for i, (p, r) in enumerate(zip(baseline_paths, baselines))]
    sc = b.source(display_path(candidate_path), _kind(cand), description="candidate run")
    plots: list[PlotSpec] = []
    causes: list[RootCause] = []
    needs: list[str] = []

    # -- 1. did the candidate die? ------------------------------------------------------------------
    end = _ending(w, sc, plan_b, plan_c, cand)

    # -- 2. configuration, first: it explains what follows ------------------------------------------
    diverging = [md for md in diffs if md.band.kind == "loss" and md.failing
                 and (md.diverge_step is not None or _nan_steps(md))][:2]
    config_ids: list[tuple[ConfigDiff, str, list[str]]] = []
    for cd in configs:
        ids = _config_finding(w, cd, bool(diverging) and not end.crashed)
        config_ids.append((cd, ids[0], ids[1:]))

    # -- 3. correctness metrics -----------------------------------------------------------------------
    loss_fail: list[tuple[MetricDiff, str, str]] = []
    for md in diffs:
        fid = _comparison(w, sb[0], sc, md)
        if any(md is x for x in diverging):
            nanstep = _nan_steps(md)
            first = md.diverge_step if md.diverge_step is not None else nanstep[0]
            dev = describe(md.steps, md.base, md.cand, tol=md.rtol)
            plots.append(_plot(md, first))
            d = b.finding(rule=RunDivergesFromBaseline.id, category="divergence" if not nanstep else "nan_inf",
                          severity="high", metric=md.metric, first_bad_step=first,
                          message=f"{md.metric} of the candidate leaves the baseline band from step {first}: "
                                  f"{dev.summary}", evidence=fid, confidence=0.8 if md.noise is not None else 0.7)
            loss_fail.append((md, d, "nan_inf" if nanstep else "divergence"))

    # -- 4. wall-clock and memory -------------------------------------------------------------------
    side_notes = _sides(w, sb[0], sc, sides)

    # -- the verdict --------------------------------------------------------------------------------
    hyper = [c for c in config_ids if c[0].group == "hyper"]
    verdict, category, first_bad = "pass", "healthy", None
    if end.crashed:
        verdict, category, first_bad = end.verdict, end.category, end.step
        causes.append(end.cause)  # type: ignore[arg-type]
    if loss_fail and not end.crashed:
        verdict, category = "real_regression", loss_fail[0][2]
        first_bad = min((m.diverge_step for m, _, _ in loss_fail if m.diverge_step is not None), default=None)
        if first_bad is None:
            first_bad = next(s for s, c in zip(loss_fail[0][0].steps, loss_fail[0][0].cand) if not np.isfinite(c))
        if hyper:
            causes.append(_config_cause(hyper, [d for _, d, _ in loss_fail]))
        for md, d, cat in loss_fail:
            causes.append(RootCause(
                issue=f"{md.metric} diverges from the baseline from step {b.findings[int(d[1:]) - 1].first_bad_step}",
                category=Category(cat), severity=Severity.HIGH, evidence=[d],
                fix=("restore the baseline's configuration first (see the configuration difference)" if hyper else
                     "find the change between the two runs (code, data, environment) with `trainaudit audit --good "
                     "--bad`"),
                expected_impact=f"{md.metric} back inside the baseline band",
                verify="rerun the candidate: the comparison passes", confidence=0.8 if md.noise is not None else 0.7))
        if any(m.noise is None for m, _, _ in loss_fail) and not hyper:
            needs.append("two or more baseline runs (--baseline) to measure the run-to-run noise band")
    elif not diffs and not end.crashed:
        verdict, category = "inconclusive", "healthy"
        needs.append("the two runs share no metric on common steps: give runs in comparable formats")
    elif end.undecided and verdict == "pass":
        verdict, category = "inconclusive", "healthy"
    needs += end.needs

    summary = _summary(verdict, end, configs, loss_fail, first_bad, diffs, side_notes)
    final = FinalAnswer(verdict=verdict, category=category, first_bad_step=first_bad, summary=summary,  # type: ignore[arg-type]
                        root_causes=causes, needs_more_data=needs)
    return b.build(final), plots, verdict == "pass"


@dataclass(slots=True)
class _End:
    crashed: bool = False
    verdict: str = "pass"
    category: str = "healthy"
    step: int | None = None
    cause: RootCause | None = None
    text: str = ""  # a sentence for the summary
    needs: list[str] = field(default_factory=list)
    undecided: bool = False  # shorter, and nothing tells a finished run from a killed one


def _ending(w: _Writer, sc: str, plan_b: Plan, plan_c: Plan, cand: Run) -> _End:
    """Whether the candidate died, and the sentence that says how it ended when it is shorter."""
    b = w.b
    out = _End()
    last_b, last_c = plan_b.last_step, plan_c.last_step
    fatal = [e for e in cand.events if e.kind in FATAL]
    shorter = last_b is not None and last_c is not None and last_c < last_b
    finished = plan_c.finished is not None or (plan_c.planned is not None and last_c is not None
                                               and last_c >= plan_c.planned)
    if not fatal and shorter and not finished and plan_c.planned is None:
        # nothing says how long the candidate meant to run, nor that it died: compared on the steps
        # both logged, and the answer says what would decide
        out.text = (f"The candidate ends at step {last_c} (the baseline at {last_b}) with no planned length, "
                    "end-of-training line or error in its files; compared on the steps both logged.")
        out.undecided = True
        out.needs.append("the candidate's planned length (max_steps / train_iters / the console with its "
                         "end-of-training line), to tell a finished run from a killed one")
        b.fact(sc, f"note: candidate's last logged step is {last_c}; the baseline's is {last_b}", step=last_c)
        return out
    if not fatal and (not shorter or finished):
        if shorter and last_c is not None:
            epochs = plan_c.epochs
            planned = (f"{plan_c.planned} steps" if plan_c.planned is not None
                       else f"{epochs.shown()} epochs" if epochs is not None else "its run")
            if plan_c.planned_from is not None:
                w.setting_fact(plan_c.planned_from, "candidate")
            if plan_c.finished is not None:
                w.setting_fact(plan_c.finished, "candidate")
            b.fact(sc, f"note: candidate planned {planned} and finished them at step {last_c}; the baseline goes to "
                       f"step {last_b}: compared on the steps both logged", step=last_c)
            out.text = f"The candidate planned {planned} and finished them; compared on steps 1..{last_c}."
        return out
    out.crashed = True
    infra = next((e for e in fatal if e.kind in INFRA), None)
    out.verdict, out.category = ("infrastructure_failure", "distributed_failure") if infra else ("crash", "crash")
    out.step = last_c
    ev = [b.fact(sc, f"candidate's last logged step is {last_c}"
                     + (f" (the baseline goes to {last_b})" if shorter else ""), step=last_c)]
    why = ""
    event = infra or (fatal[-1] if fatal else None)
    if event is not None:
        ev.append(_event_fact(w, event))
        why = f": {event.message.strip()[:160]} ({display_path(event.source)}:{event.line})"
    elif plan_c.planned is not None:
        if plan_c.planned_from is not None:
            ev.append(w.setting_fact(plan_c.planned_from, "candidate"))
        why = f" of the {plan_c.planned} it planned, with no end-of-training line and no error (killed or hung)"
    else:  # planned, shorter, no end line
        why = " before the end of its plan, with no end-of-training line and no error (killed or hung)"
    issue = f"the candidate run stopped at step {last_c}{why}"
    out.cause = RootCause(issue=issue, category=Category(out.category), severity=Severity.CRITICAL, evidence=ev,
                          fix="see why the candidate ended (`trainaudit diagnose` on its log)",
                          expected_impact="a complete run to compare", verify="the candidate reaches its planned step",
                          confidence=0.9 if event is not None else (0.75 if plan_c.planned is not None else 0.5))
    out.text = f"The candidate run stopped at step {last_c}{why}."
    return out


def _event_fact(w: _Writer, e: Event) -> str:
    sid = w.file_source(display_path(e.source), "log", "candidate")
    return w.b.fact(sid, f"candidate's log: {e.kind.value}", line=e.line or None, quote=(e.raw or e.message)[:300],
                    step=e.step)


def _nan_steps(md: MetricDiff) -> list[int]:
    """Steps where the candidate is NaN/Inf and the baseline finite."""
    return [s for s, c, bb in zip(md.steps, md.cand, md.base) if not np.isfinite(c) and np.isfinite(bb)]


def _comparison(w: _Writer, sb: str, sc: str, md: MetricDiff) -> list[str]:
    b = w.b
    fb = b.fact(sb, f"baseline {md.metric} on the steps both runs logged", metric=md.metric, steps=md.steps,
                values=md.base)
    fc = b.fact(sc, f"candidate {md.metric} on the same steps", metric=md.metric, steps=md.steps, values=md.cand)
    tol = repr(float(md.band.tol))
    sm_b = f"movavg({fb}, {md.band.window})" if md.band.window > 1 else fb
    sm_c = f"movavg({fc}, {md.band.window})" if md.band.window > 1 else fc
    close = f"isclose({sm_c}, {sm_b}, 0, {tol})" if md.band.absolute else f"isclose({sm_c}, {sm_b}, {tol}, 0)"
    cs = b.calc("n_steps: steps logged by both runs", f"len({fb})", [fb], unit="steps")
    unit = "absolute" if md.band.absolute else "relative"
    cn = b.calc(f"n_failing: steps beyond the {unit} band {md.band.tol:.3g} ({md.band.how})",
                f"count(1 - {close})", [fc, fb], unit="steps")
    rel = f"where(isfinite({fc} - {fb}), abs({fc} - {fb}) / abs({fb}), nan)"
    cm = b.calc("max_rel_err: max |c - b| / |b| (step by step)", f"nanmax({rel})", [fc, fb], unit="ratio")
    cd = b.calc("median_rel_err: median |c - b| / |b| (step by step)", f"nanmedian({rel})", [fc, fb], unit="ratio")
    n_fail = int(b.result(cn))
    allowed = 0 if md.noise is not None else int(len(md.steps) * ALLOWED_SHARE)
    passed = n_fail <= allowed and md.diverge_step is None
    dev = describe(md.steps, md.base, md.cand, tol=md.rtol)
    b.comparison(metric=md.metric, check="approximate", policy="run-vs-run", passed=passed,
                 rtol=0.0 if md.band.absolute else md.band.tol, atol=md.band.tol if md.band.absolute else 0.0,
                 n_steps=int(b.result(cs)), n_failing=n_fail, allowed_failing=allowed,
                 first_failing_step=md.first_failing,
                 max_rel_err=_opt(b.result(cm)), median_rel_err=_opt(b.result(cd)),
                 deviation=dev.to_dict(), evidence=[cs, cn, cm, cd])
    return [fb, fc, cn, cm]


def _plot(md: MetricDiff, first: int) -> PlotSpec:
    base = moving_average(np.asarray(md.base, float), md.band.window)
    lo = base - (md.band.tol if md.band.absolute else md.band.tol * np.abs(base))
    hi = base + (md.band.tol if md.band.absolute else md.band.tol * np.abs(base))
    return PlotSpec(md.metric, f"{md.metric}: candidate vs baseline",
                    [Curve("baseline", md.steps, md.base), Curve("candidate", md.steps, md.cand, "dashed")],
                    first_bad_step=first, band=PlotBand(f"baseline band ({md.band.kind}, {md.band.tol:.3g})",
                                                        md.steps, lo, hi),
                    panel=relative_panel(md.metric, md.steps, md.cand, md.base,
                                         0.0 if md.band.absolute else md.band.tol,
                                         md.band.tol if md.band.absolute else 0.0, first,
                                         actual_name="candidate", reference="baseline"))


def _config_finding(w: _Writer, cd: ConfigDiff, diverged: bool) -> list[str]:
    b = w.b
    ev: list[str] = []
    parts: list[str] = []
    if cd.base is not None and cd.cand is not None:
        ev += [w.setting_fact(cd.cand, "candidate"), w.setting_fact(cd.base, "baseline")]
        parts.append(f"{_label(cd.name)} {cd.cand.shown()} in the candidate ({cd.cand.where}) vs {cd.base.shown()} in "
                     f"the baseline ({cd.base.where})")
    first = None
    if cd.lr is not None:
        d = cd.lr
        first = d.first_step
        sb = w.file_source(d.base_path, "log", "baseline")
        sc = w.file_source(d.cand_path, "log", "candidate")
        fb = b.fact(sb, f"baseline's logged {d.metric} from step {d.first_step}", metric=d.metric, steps=d.steps,
                    values=d.base, line=d.base_line)
        fc = b.fact(sc, f"candidate's logged {d.metric} from step {d.first_step}", metric=d.metric, steps=d.steps,
                    values=d.cand, line=d.cand_line)
        ev += [fc, fb]
        factor = _factor(d)
        at = f"{d.cand[0]:g} vs {d.base[0]:g} at step {d.first_step}"
        if factor is not None:
            ev.append(b.calc(f"ratio of the logged {d.metric}, candidate / baseline, from step {d.first_step}",
                             f"median(where({fb} > 0, {fc} / {fb}, nan))", [fb, fc], unit="ratio"))
            parts.append(f"the logged {d.metric} is {_times(factor)} the baseline's from step {d.first_step} ({at}; "
                         f"{d.cand_path}:{d.cand_line} vs {d.base_path}:{d.base_line})")
        else:
            parts.append(f"the logged {d.metric} differs from step {d.first_step} ({at}; {d.cand_path}:{d.cand_line} "
                         f"vs {d.base_path}:{d.base_line})")
    severity = {"hyper": "high" if diverged else "medium", "length": "low", "version": "low", "seed": "info"}[cd.group]
    msg = f"configuration differs: {'; '.join(parts)}"
    d_id = b.finding(rule=RunConfigDiffers.id, category="divergence" if diverged and cd.group == "hyper" else "healthy",
                     severity=severity, metric=cd.lr.metric if cd.lr else None, first_bad_step=first, message=msg,
                     evidence=ev, confidence=0.9)
    return [d_id, *ev]


def _config_cause(hyper: list[tuple[ConfigDiff, str, list[str]]], loss_findings: list[str]) -> RootCause:
    b_ids = [d for _, d, _ in hyper]
    what = "; ".join(_short(cd) for cd, _, _ in hyper[:3])
    return RootCause(issue=f"the runs are configured differently: {what}", category=Category.DIVERGENCE,
                     severity=Severity.HIGH, evidence=[*b_ids, *loss_findings],
                     fix="confirm the configuration change is intended (then this is the expected effect and the "
                         "baseline must be refreshed); if it is not, run the candidate with the baseline's values",
                     expected_impact="the candidate's metrics back inside the baseline band",
                     verify="rerun the candidate with the baseline's configuration: the comparison passes",
                     confidence=0.85)


def _short(cd: ConfigDiff) -> str:
    if cd.base is not None and cd.cand is not None:
        text = f"{_label(cd.name)} {cd.cand.shown()} vs {cd.base.shown()} in the baseline"
        if cd.lr is not None and (f := _factor(cd.lr)) is not None:
            text += f" (logged {cd.lr.metric} {_times(f)} from step {cd.lr.first_step})"
        return text
    if cd.lr is not None:
        f = _factor(cd.lr)
        return (f"the logged {cd.lr.metric} is {_times(f)} the baseline's from step {cd.lr.first_step}" if f is not None
                else f"the logged {cd.lr.metric} differs from step {cd.lr.first_step} ({cd.lr.cand[0]:g} vs "
                     f"{cd.lr.base[0]:g})")
    return _label(cd.name)


def _sides(w: _Writer, sb: str, sc: str, sides: list[SideDiff]) -> list[str]:
    """Wall-clock and memory medians: facts and a note each; a low finding only beyond the band."""
    b = w.b
    beyond: list[str] = []
    for s in sides:
        what = s.kind.replace("_", "-")
        fb = b.fact(sb, f"baseline {s.metric} ({what})", metric=s.metric, steps=s.steps, values=s.base)
        fc = b.fact(sc, f"candidate {s.metric} ({what})", metric=s.metric, steps=s.steps, values=s.cand)
        cr = b.calc(f"ratio of medians of {s.metric}, candidate / baseline", f"median({fc}) / median({fb})", [fc, fb],
                    unit="ratio")
        ratio = b.result(cr)
        medians = f"medians {np.median(s.cand):.4g} vs {np.median(s.base):.4g} in the baseline ({_times(ratio)})"
        if not s.beyond:
            b.fact(sb, f"note: {s.metric} is {what}, not a correctness check: {medians}, inside {s.band_words}")
            continue
        beyond.append(f"{s.metric} {_times(ratio)}")
        b.finding(rule=RunDivergesFromBaseline.id,
                  category="throughput_regression" if s.kind == "wall_clock" else "memory_growth", severity="low",
                  metric=s.metric, first_bad_step=None,
                  message=f"{what} note, not a correctness check: {s.metric} {medians}, beyond {s.band_words}",
                  evidence=[fc, fb, cr], confidence=0.5)
    return beyond


def _summary(verdict: str, end: _End, configs: list[ConfigDiff], loss_fail: list[tuple[MetricDiff, str, str]],
             first_bad: int | None, diffs: list[MetricDiff], side_notes: list[str]) -> str:
    parts: list[str] = []
    hyper = [c for c in configs if c.group == "hyper"]
    if end.crashed:
        parts.append(end.text)
    if hyper:
        parts.append("The runs' configuration differs: " + "; ".join(_short(c) for c in hyper[:3])
                     + (f" and {len(hyper) - 3} more" if len(hyper) > 3 else "") + ".")
    if not end.crashed and end.text:
        parts.append(end.text)
    if loss_fail and not end.crashed:
        parts.append(f"The candidate's {loss_fail[0][0].metric} leaves the baseline band from step {first_bad}.")
    elif verdict == "pass":
        checked = ", ".join(dict.fromkeys(m.metric for m in diffs[:4]))
        parts.append(f"Every checked metric ({checked}) is inside its band." if checked else
                     "Nothing fails.")
    elif verdict == "inconclusive" and not diffs:
        parts.append("Nothing to compare.")
    others = [c for c in configs if c.group != "hyper"]
    if others:
        parts.append("Also different: " + "; ".join(_short(c) for c in others[:3]) + ".")
    if side_notes:
        parts.append("Wall-clock/memory (not a correctness check): " + ", ".join(side_notes[:3]) + ".")
    return " ".join(parts)


def _kind(run: Run) -> str:
    kinds = {s.kind.value for s in run.sources}
    for k in ("tensorboard", "golden_values", "metrics", "ci_log", "log"):
        if k in kinds:
            return k
    return "log"


def _opt(v: float) -> float | None:
    return v if np.isfinite(v) else None
