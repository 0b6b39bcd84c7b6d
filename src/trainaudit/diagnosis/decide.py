"""The decision: which category is primary, whether the run is healthy, unhealthy or cannot be
decided, and how sure that is.

The rules find the evidence and the engine groups it into stories; the fitted model
(:mod:`trainaudit.diagnosis.model`) weighs every category of the run and names the primary one.
It can only name a category that has a story (an answer always rests on findings) or
``healthy``. A run is called healthy only when the coverage holds enough to say so; otherwise the
verdict is ``inconclusive`` and ``needs_more_data`` names what would decide it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from trainaudit.answer.schema import Severity
from trainaudit.diagnosis.coverage import Coverage, coverage_of
from trainaudit.diagnosis.engine import Diagnosis, Story, conclude, diagnose
from trainaudit.diagnosis.features import CLASSES, HEALTHY, confidence_vector, matrix, patterns, val_rise
from trainaudit.diagnosis.hyper import name_causes
from trainaudit.diagnosis.model import Model, shipped
from trainaudit.model import EventKind, Run
from trainaudit.rules import Config, Context, run_rules_covered

CONFIDENT = 0.8  # at or above: the answer stands; below: it says what would decide it
HEALTHY_POINTS = 10  # training-loss points below which "healthy" cannot be claimed

# What separates a category from the others, said as the data that would show it.
DECIDES: dict[str, str] = {
    "healthy": "the whole log from the first step to the last (a healthy run needs the training loss over the run)",
    "nan_inf": "the lines around the first NaN/Inf (loss, grad norm and loss scale at those steps)",
    "divergence": "the training loss over a longer stretch, with the learning rate at each step",
    "loss_spike": "the loss at every step around the spike and whether the run recovered after it",
    "loss_scale_collapse": "the loss-scale / overflow lines (the scale at every step) and the precision settings",
    "plateau": "the loss a sane learning rate reaches on the same model, and the learning rate logged",
    "overfitting": "validation loss at every evaluation, next to the training loss",
    "grad_explosion": "the gradient norm at every step (and per layer)",
    "grad_vanishing": "the gradient norm per layer",
    "oom": "the full error text of the failing rank (the CUDA out-of-memory message)",
    "memory_growth": "allocated memory at every step over a longer stretch",
    "distributed_failure": "the logs of every rank, and which rank failed first",
    "throughput_regression": "step time or throughput at every step, and a baseline run's",
    "golden_mismatch": "the golden values and the actual values with the gate's tolerances",
    "mode_collapse": "samples the model generated, or the diversity metric over time",
    "data_pipeline": "data-loading time next to step time",
    "hardware_fault": "the kernel log (dmesg: Xid / ECC lines) of the node",
    "crash": "the whole traceback",
}

# How a feature reads in the answer's reasoning.
WORDS: dict[str, str] = {
    "story": "a finding of this category", "story_confidence": "the findings' confidence",
    "story_severity": "their severity", "engine_primary": "it explains the other findings",
    "earliest": "it shows first", "fatal": "the run died of it", "hits": "several findings",
    "rules": "several rules agree", "message_evidence": "a message with a known meaning",
    "series_evidence": "the metric values show it", "short_log": "a short log", "tiny_log": "fewer than 5 loss points",
    "alone": "the only finding", "no_loss": "no training loss",
    "other_stories": "other problems in the run", "info_hits": "informational notes of this kind",
    "pattern": "a short-log pattern of this kind", "sibling": "a finding of a related kind",
    "sibling_short": "a finding of a related kind in a short log", "h:loss_points": "many training-loss points",
    "h:no_loss": "no training loss", "h:few_points": "few points in every metric", "h:events": "events read",
    "h:errors": "error lines", "h:metrics": "many metrics", "h:validation": "validation metrics logged",
    "h:grad_norm": "grad norm logged", "h:stories": "findings", "h:max_story_confidence": "a confident finding",
    "h:max_story_severity": "a severe finding", "h:info_hits": "informational notes",
    "h:patterns": "short-log patterns", "h:val_rise": "the validation loss ends above its best",
}


def _word(feature: str) -> str:
    if feature.startswith("bias:"):
        return f"how often {feature[5:]} is the answer"
    if feature.startswith("story:"):
        return f"how often a {feature[6:]} finding is right"
    return WORDS.get(feature, feature)


@dataclass
class Analysis:
    """Everything the decision needs about one run, computed once (the evaluation refits the
    model many times over the same analyses)."""

    engine: Diagnosis
    x: np.ndarray
    coverage: Coverage


def analyse(run: Run, config: Config | None = None) -> Analysis:
    done = run_rules_covered(run, config)
    ctx = Context.of(run)
    cov = coverage_of(run, ctx, done.ran, done.skipped)
    engine = diagnose(done.hits, n_loss_points=cov.loss_points, has=set(ctx.roles.names))
    errors = run.n_events(EventKind.ERROR, EventKind.TRACEBACK)
    x = matrix(engine, cov, patterns(run, ctx), errors, val_rise(ctx))
    # after the features: naming the learning rate changes what a root cause says, not the decision
    name_causes(run, ctx, engine.stories)
    return Analysis(engine, x, cov)


def _not_enough(cov: Coverage) -> list[str]:
    """What is missing before a run can be called healthy (empty: the coverage is enough)."""
    if cov.loss_points == 0:
        return ["the training loss: no metric read as the training loss (paste the log lines that print it, "
                "or the metrics file)"]
    if cov.loss_points < HEALTHY_POINTS:
        return [f"more of the log: the training loss has {cov.loss_points} point(s); at least {HEALTHY_POINTS} "
                "are needed to call the run healthy"]
    return []


def decide(a: Analysis, model: Model | None = None) -> Diagnosis:
    model = model or shipped()
    p = model.probabilities(a.x)
    prob = {c: float(p[i]) for i, c in enumerate(CLASSES)}
    engine = a.engine
    by_cat: dict[str, Story] = {}
    for s in engine.stories:
        by_cat.setdefault(s.category, s)
    best = max([HEALTHY, *by_cat], key=lambda c: (prob[c], c == HEALTHY))
    runner = max((c for c in CLASSES if c != best), key=lambda c: prob[c])
    i, j = CLASSES.index(best), CLASSES.index(runner)
    sure = model.sureness(confidence_vector(a.x, p, i, j), prob[best])
    reasons = [(_word(f), round(v, 3)) for f, v in model.reasons(a.x, i, j)]
    unsure = [f"what would decide between {best} and {runner}: {DECIDES[runner]}"] if sure < CONFIDENT else []

    if best == HEALTHY:
        # the findings are weighed as not a problem: they stay in the report as notes
        hits = [h if h.severity == "info" else dataclasses.replace(
            h, severity=Severity.INFO, message=h.message + " (weighed as within normal for this run by the fitted decision)")
            for h in engine.hits]
        d = conclude([], hits)
        if engine.stories:
            d.summary += (f" The rules' {len(engine.stories)} finding(s) ("
                          + ", ".join(st.category for st in engine.stories[:3]) + ") are weighed as normal.")
        missing = _not_enough(a.coverage)
        if missing:
            sure = min(sure, CONFIDENT / 2)  # too little evidence to stand on, whatever the model says
            d.verdict = "inconclusive"
            d.summary = ("Not enough to decide: no finding, but the log is too thin to call the run healthy. "
                         + missing[0][0].upper() + missing[0][1:] + ".")
        # too thin a log: what is missing decides it, not a runner-up the model can barely tell apart
        d.needs_more_data = missing or unsure
    else:
        # copies: an analysis is decided again by other models (the evaluation's folds)
        stories = [dataclasses.replace(s, needs_more_data=list(s.needs_more_data)) for s in engine.stories]
        primary = next(s for s in stories if s.category == best)
        stories.remove(primary)
        stories.insert(0, primary)
        for s in stories:
            s.confidence = round(min(max(prob[s.category], 0.01), 0.99), 3)
        primary.confidence = round(min(max(sure, 0.01), 0.99), 3)
        d = conclude(stories, engine.hits)
        d.needs_more_data = [*unsure, *(n for n in d.needs_more_data if n not in unsure)]
    d.coverage = a.coverage
    d.probabilities = {c: round(v, 4) for c, v in prob.items()}
    d.confidence = round(min(max(sure, 0.01), 0.99), 3)
    d.runner_up = runner
    d.reasons = reasons
    return d
