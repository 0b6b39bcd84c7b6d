"""What the fitted decision looks at: a fixed, named feature vector for every category a run could
be filed under, built from the rules' findings (grouped into stories by the engine), the run's
coverage (what was logged, how many points) and a few short-log statistics that are valid at
n = 3 to 10 points.

One row per category of :data:`CLASSES`. Features named ``h:...`` describe the run as a whole and
are set on the ``healthy`` row only (they say how much evidence a "healthy" answer stands on);
``bias:<cat>`` and ``story:<cat>`` are one-hot per category; the rest are shared by every
category and describe that category's story, when there is one.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from trainaudit.answer.schema import SEVERITY_ORDER, Category
from trainaudit.diagnosis.coverage import Coverage
from trainaudit.diagnosis.engine import Diagnosis, Story, starts_with
from trainaudit.model import EventKind, Run
from trainaudit.rules.base import Context
from trainaudit.rules.numerics import skip_rate
from trainaudit.series.stats import monotone_tail

CLASSES: tuple[str, ...] = tuple(c.value for c in Category)
HEALTHY = Category.HEALTHY.value

SHARED = ("story", "story_confidence", "story_severity", "engine_primary", "earliest", "fatal", "hits",
          "rules", "message_evidence", "series_evidence", "short_log", "tiny_log", "no_loss", "alone", "other_stories", "info_hits",
          "pattern", "sibling", "sibling_short", "explained")
RUN = ("h:loss_points", "h:no_loss", "h:few_points", "h:events", "h:errors", "h:metrics", "h:validation",
       "h:grad_norm", "h:stories", "h:max_story_confidence", "h:max_story_severity", "h:info_hits", "h:patterns",
       "h:val_rise")
FEATURES: tuple[str, ...] = (*SHARED, *RUN, *(f"bias:{c}" for c in CLASSES),
                             *(f"story:{c}" for c in CLASSES if c != HEALTHY))
SHORT = 20  # fewer logged training-loss points than this is a short log
# families of categories whose members the rules can confuse with each other
_FAMILY: dict[str, str] = {
    **{c.value: "numeric" for c in (Category.NAN_INF, Category.DIVERGENCE, Category.LOSS_SPIKE,
                                     Category.LOSS_SCALE_COLLAPSE, Category.GRAD_EXPLOSION)},
    **{c.value: "fatal" for c in (Category.OOM, Category.DISTRIBUTED_FAILURE, Category.HARDWARE_FAULT,
                                   Category.CRASH, Category.DATA_PIPELINE)},
    **{c.value: "learning" for c in (Category.PLATEAU, Category.GRAD_VANISHING, Category.OVERFITTING,
                                      Category.MODE_COLLAPSE)},
    **{c.value: "resources" for c in (Category.MEMORY_GROWTH, Category.THROUGHPUT_REGRESSION)},
}


# -- short-log patterns: each is plain at a handful of points and points at one category ---------
def _steps_up(v: np.ndarray, factor: float) -> bool:
    """Whether, at some 1 <= i < len(v) - 1, every value from i on is at least ``factor`` times the
    (positive) median of the values before i."""
    if len(v) < 3:
        return False
    after = np.minimum.accumulate(v[::-1])[::-1][1:-1]  # min(v[i:]), i = 1 .. n-2
    # the median is at least the smallest value before i: only where that bound allows it can the
    # median qualify (in a healthy series: nowhere)
    maybe = np.flatnonzero(after >= factor * np.minimum.accumulate(v)[:-2]) + 1
    if maybe.size <= 64:
        return any((m := float(np.median(v[:i]))) > 0 and float(after[i - 1]) >= factor * m for i in maybe.tolist())
    # many candidates: the running median of the prefix, with two heaps (lower half negated)
    low: list[float] = []
    high: list[float] = []
    todo = set(maybe.tolist())
    for i in range(1, int(maybe[-1]) + 1):
        x = float(v[i - 1])
        if low and x > -low[0]:
            heapq.heappush(high, x)
        else:
            heapq.heappush(low, -x)
        if len(low) > len(high) + 1:
            heapq.heappush(high, -heapq.heappop(low))
        elif len(high) > len(low):
            heapq.heappush(low, -heapq.heappop(high))
        if i in todo:
            m = -low[0] if len(low) > len(high) else (-low[0] + high[0]) / 2
            if m > 0 and float(after[i - 1]) >= factor * m:
                return True
    return False


def patterns(run: Run, ctx: Context) -> dict[str, float]:
    """Category -> strength (0..1) of a short-log pattern that points at it."""
    out: dict[str, float] = {}
    val = ctx.series("val_loss", finite=True)
    loss = ctx.series("loss", finite=True)
    if val is not None and len(val) >= 4:
        rising = monotone_tail(val.values, +1)
        train_falls = True  # over the evaluations where validation rose
        if rising >= 3 and loss is not None and len(loss) >= 3:
            i = min(int(np.searchsorted(loss.steps, val.steps[-rising - 1])), len(loss) - 1)
            train_falls = float(loss.values[-1]) <= float(loss.values[i])
        if rising >= 3 and train_falls:
            out[Category.OVERFITTING.value] = min(1.0, rising / 5)
        # or the validation loss ends above its (earlier) minimum while the training loss went on
        # falling a fifth or more since: a widening gap no rule made a finding of
        j = int(np.argmin(val.values))
        lo = float(val.values[j])
        if loss is not None and len(loss) >= 3 and j < len(val) - 1 and lo > 0:
            i = min(int(np.searchsorted(loss.steps, val.steps[j])), len(loss) - 1)
            t_at, t_end = float(loss.values[i]), float(loss.values[-1])
            rise = float(val.values[-1]) / lo - 1
            if rise >= 0.02 and t_at > 0 and t_end <= 0.8 * t_at:
                out[Category.OVERFITTING.value] = max(out.get(Category.OVERFITTING.value, 0.0), min(1.0, rise / 0.1))
    scale_events = run.n_events(EventKind.LOSS_SCALE)
    if scale_events >= 3:
        out[Category.LOSS_SCALE_COLLAPSE.value] = min(1.0, scale_events / 10)
    skipped = ctx.series("skipped", finite=True)
    if skipped is not None and len(skipped) >= 3 and skip_rate(skipped) >= 0.5:
        out[Category.LOSS_SCALE_COLLAPSE.value] = 1.0
    gn = ctx.series("grad_norm", finite=True)
    if gn is not None and len(gn) >= 4 and _steps_up(np.abs(gn.values), 10.0):
        out[Category.GRAD_EXPLOSION.value] = 1.0
    data, step = ctx.series("data_time", finite=True), ctx.series("step_time", finite=True)
    if data is not None and step is not None and len(data) >= 3 and len(step) >= 3:
        sd, ss = float(np.median(data.values)), float(np.median(step.values))
        if ss > 0 and sd / ss >= 0.5:
            out[Category.DATA_PIPELINE.value] = min(1.0, sd / ss)
    mem = ctx.series("memory", finite=True)
    if mem is not None and len(mem) >= 5 and monotone_tail(mem.values, +1) == len(mem) - 1 \
            and float(mem.values[-1]) > 1.05 * float(mem.values[0]):
        out[Category.MEMORY_GROWTH.value] = 1.0
    return out


def val_rise(ctx: Context) -> float:
    """How far the validation loss ends above its best (the median of its last three points over its
    minimum before them, relative), 0 without one: a run called healthy while it does is less sure."""
    val = ctx.series("val_loss", finite=True)
    if val is None or len(val) < 4:
        return 0.0
    best = float(np.min(val.values[:-1]))
    end = float(np.median(val.values[-3:]))
    return max(0.0, end / best - 1) if best > 0 else 0.0


# -- the feature matrix ----------------------------------------------------------------------
def _log(x: float, top: float) -> float:
    return min(1.0, math.log1p(max(x, 0.0)) / math.log1p(top))


def _explained(st: Story, stories: list[Story]) -> bool:
    """Whether another story holds a finding whose rule explains ``st``'s kind of symptom and that starts with
    it (a leak that starts where the steps slow down explains the slowdown)."""
    if st.first_bad_step is None:
        return False
    return any(o is not st and h.first_bad_step is not None and starts_with(h.first_bad_step, st.first_bad_step)
               and st.category in h.by.explains for o in stories for h in o.hits)


def matrix(engine: Diagnosis, cov: Coverage, pats: dict[str, float], n_errors: int, rise: float) -> np.ndarray:
    """(len(CLASSES), len(FEATURES)) for one run."""
    col = {f: i for i, f in enumerate(FEATURES)}
    x = np.zeros((len(CLASSES), len(FEATURES)))
    stories: dict[str, Story] = {}
    for s in engine.stories:
        stories.setdefault(s.category, s)
    firsts = [s.first_bad_step for s in engine.stories if s.first_bad_step is not None]
    earliest = min(firsts) if firsts else None
    info: dict[str, int] = {}
    for h in engine.hits:
        if h.severity == "info":
            info[h.category] = info.get(h.category, 0) + 1
    short = 0 < cov.loss_points < SHORT
    for k, cat in enumerate(CLASSES):
        row = x[k]
        row[col[f"bias:{cat}"]] = 1.0
        if cat == HEALTHY:
            continue
        row[col["info_hits"]] = _log(info.get(cat, 0), 10)
        row[col["pattern"]] = pats.get(cat, 0.0)
        st = stories.get(cat)
        if st is None:
            # a story of a related kind (a NaN story when the label says exploding gradients): the
            # rules may have named the wrong member of the family
            sib = any(_FAMILY.get(o) == _FAMILY.get(cat) for o in stories) and cat in _FAMILY
            row[col["sibling"]] = float(sib)
            row[col["sibling_short"]] = float(sib and (short or cov.loss_points == 0))
            continue
        row[col["story"]] = 1.0
        row[col[f"story:{cat}"]] = 1.0
        row[col["story_confidence"]] = st.confidence
        row[col["story_severity"]] = SEVERITY_ORDER[st.severity] / 4
        row[col["engine_primary"]] = float(engine.stories[0] is st)
        row[col["earliest"]] = float(st.first_bad_step is not None and st.first_bad_step == earliest)
        row[col["fatal"]] = float(st.fatal)
        row[col["hits"]] = _log(len(st.hits), 10)
        row[col["rules"]] = _log(len({h.rule for h in st.hits}) - 1, 5)
        row[col["message_evidence"]] = float(any(h.events for h in st.hits))
        row[col["series_evidence"]] = float(any(h.points for h in st.hits))
        row[col["short_log"]] = float(short)
        row[col["tiny_log"]] = float(0 < cov.loss_points < 5)
        row[col["no_loss"]] = float(cov.loss_points == 0)
        row[col["alone"]] = float(len(engine.stories) == 1)
        row[col["other_stories"]] = _log(len(engine.stories) - 1, 5)
        row[col["explained"]] = float(_explained(st, engine.stories))
    h = x[CLASSES.index(HEALTHY)]
    points = max((m.points for m in cov.metrics.values()), default=0)
    h[col["h:loss_points"]] = _log(cov.loss_points, 1000)
    h[col["h:no_loss"]] = float(cov.loss_points == 0)
    h[col["h:few_points"]] = float(points < 10)
    h[col["h:events"]] = _log(cov.events, 100)
    h[col["h:errors"]] = _log(n_errors, 10)
    h[col["h:metrics"]] = _log(len(cov.metrics), 20)
    h[col["h:validation"]] = float("val_loss" in cov.roles or "val_acc" in cov.roles)
    h[col["h:grad_norm"]] = float("grad_norm" in cov.roles)
    h[col["h:stories"]] = _log(len(engine.stories), 5)
    h[col["h:max_story_confidence"]] = max((s.confidence for s in engine.stories), default=0.0)
    h[col["h:max_story_severity"]] = max((SEVERITY_ORDER[s.severity] for s in engine.stories), default=0) / 4
    h[col["h:info_hits"]] = _log(sum(info.values()), 10)
    h[col["h:patterns"]] = min(1.0, sum(pats.values()))
    h[col["h:val_rise"]] = min(1.0, rise / 0.2)
    return x


# -- how sure: features of a decision, for the model of whether it is right -----------------------
CONFIDENCE_FEATURES: tuple[str, ...] = (
    "bias", "p", "margin", "answer:healthy", "answer:crash", "answer:numeric", "answer:fatal", "answer:learning",
    "answer:resources", "story_confidence", "alone", "message_evidence", "fatal", "short_log", "tiny_log",
    "no_loss", "h:loss_points", "h:few_points", "h:validation", "h:grad_norm", "h:stories", "healthy_despite_patterns",
    "healthy_val_risen")


def confidence_vector(x: np.ndarray, p: np.ndarray, best: int, runner: int) -> np.ndarray:
    col = {f: i for i, f in enumerate(FEATURES)}
    row, h = x[best], x[CLASSES.index(HEALTHY)]
    cat = CLASSES[best]
    v = {"bias": 1.0, "p": float(p[best]), "margin": float(p[best] - p[runner]),
         "answer:healthy": float(cat == HEALTHY),
         # "crash" is the category of a fatal error no other category explains: its own reliability
         "answer:crash": float(cat == Category.CRASH.value)}
    for fam in ("numeric", "fatal", "learning", "resources"):
        v[f"answer:{fam}"] = float(_FAMILY.get(cat) == fam)
    for f in ("story_confidence", "alone", "message_evidence", "fatal", "short_log", "tiny_log", "no_loss"):
        v[f] = float(row[col[f]])
    for f in ("h:loss_points", "h:few_points", "h:validation", "h:grad_norm", "h:stories"):
        v[f] = float(h[col[f]])
    # a "healthy" answer while a short-log pattern points at a problem no rule made a finding of
    v["healthy_despite_patterns"] = float(h[col["h:patterns"]]) if cat == HEALTHY else 0.0
    # a "healthy" answer while the validation loss ends above its best
    v["healthy_val_risen"] = float(h[col["h:val_rise"]]) if cat == HEALTHY else 0.0
    return np.array([v[f] for f in CONFIDENCE_FEATURES])
