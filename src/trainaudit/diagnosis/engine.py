"""Combine rule hits into root causes ("stories") and a verdict.

Findings are grouped by what explains what, then ordered by severity and by what came first:

- numerics: a grad-norm spike before a loss spike before NaN is one story; an lr jump shortly
  before the first symptom is its likely cause; anything after a loss-scale collapse is
  ``loss_scale_collapse``;
- infrastructure: hardware faults explain OOMs, crashes and NCCL timeouts; an OOM explains the
  NCCL aborts of the other ranks; the rank that failed first is the root; a crash no category
  names, after a serious numeric story, is that story's end;
- not learning: lr 0 or vanishing gradients explain a flat loss;
- memory growth explains a later OOM; stalls and stragglers explain throughput loss.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from trainaudit.answer.schema import FATAL_CATEGORIES, SEVERITY_ORDER, Category
from trainaudit.diagnosis.coverage import Coverage
from trainaudit.rules.base import Hit, PointRef

# Stories by kind of category. Within the same step, the numeric category that explains the
# others comes first; among fatal ones, the hardware explains the rest, an OOM explains the other
# ranks' collective timeouts.
NUMERIC = (Category.LOSS_SCALE_COLLAPSE, Category.GRAD_EXPLOSION, Category.DIVERGENCE, Category.LOSS_SPIKE,
           Category.NAN_INF)
_NUMERIC_TIE = {c: i for i, c in enumerate(NUMERIC)}
_FATAL_ORDER = {c: i for i, c in enumerate((Category.HARDWARE_FAULT, Category.OOM, Category.DISTRIBUTED_FAILURE,
                                            Category.CRASH))}
# what a chain of numeric symptoms came to, most final first
_SENTENCE_END = re.compile(r"(?<=[a-z0-9)])\. (?=[A-Z])")  # not after "e.g" or "i.e"
_OUTCOME = [Category.NAN_INF, Category.DIVERGENCE, Category.LOSS_SPIKE, Category.GRAD_EXPLOSION]
NOT_LEARNING = (Category.PLATEAU, Category.GRAD_VANISHING)
PERFORMANCE = (Category.THROUGHPUT_REGRESSION, Category.DATA_PIPELINE)


@dataclass
class Story:
    category: str
    severity: str
    hits: list[Hit]  # primary first
    issue: str
    first_bad_step: int | None
    confidence: float
    fix: str = ""
    expected_impact: str = ""
    verify: str = ""
    needs_more_data: list[str] = field(default_factory=list)
    fatal: bool = False
    # a logged hyper-parameter that explains the story (``lr_jump``, ``lr_too_high``...), and the
    # logged values its root cause cites for it
    named_cause: str = ""
    cause_points: list[PointRef] = field(default_factory=list)


@dataclass
class Diagnosis:
    verdict: str
    category: str
    first_bad_step: int | None
    stories: list[Story]
    hits: list[Hit]
    summary: str
    needs_more_data: list[str] = field(default_factory=list)
    quick_fixes: list[str] = field(default_factory=list)
    coverage: Coverage | None = None
    # the fitted decision: probability of each category, how sure the answer is of its category,
    # and why it chose what it chose
    probabilities: dict[str, float] = field(default_factory=dict)
    confidence: float = 0.0
    runner_up: str = ""
    reasons: list[tuple[str, float]] = field(default_factory=list)  # (feature in words, log-odds)


def _sev(h: Hit | Story) -> int:
    return SEVERITY_ORDER[h.severity]


def _step(h: Hit) -> float:
    return math.inf if h.first_bad_step is None else float(h.first_bad_step)


def starts_with(step: float, first: float) -> bool:
    """Whether a finding from ``step`` starts with a symptom first seen at ``first``: no later than
    max(10 steps, 5 %) after it (the onsets of two signals of one incident differ by a few logged points)."""
    return step <= first + max(10.0, 0.05 * first)


def _story(category: str, hits: list[Hit], issue: str, n_loss: int) -> Story:
    hits = sorted(hits, key=lambda h: (h.precursor, -_sev(h), _step(h)))
    primary = next((h for h in hits if not h.precursor), hits[0])
    sev = max((h.severity for h in hits), key=SEVERITY_ORDER.__getitem__)
    conf = max(h.confidence for h in hits if not h.precursor) if any(not h.precursor for h in hits) else primary.confidence
    first = min((h.first_bad_step for h in hits if h.first_bad_step is not None and not h.precursor), default=None)
    if first is None:
        first = primary.first_bad_step
    g = primary.advice
    st = Story(category=category, severity=sev, hits=hits, issue=issue, first_bad_step=first, confidence=conf,
               fix=g.fix, expected_impact=g.impact, verify=g.verify, fatal=any(h.fatal for h in hits))
    for h in hits:
        for need in (*h.by.needs_more_data, *h.needs):
            if need not in st.needs_more_data:
                st.needs_more_data.append(need)
    if category in (*NUMERIC, *NOT_LEARNING, Category.OVERFITTING) and 0 < n_loss < 20:
        st.confidence *= 0.8
        st.needs_more_data.append("a longer stretch of the log: fewer than 20 logged training-loss points")
    return st


def _incidents(num: list[Hit]) -> list[list[Hit]]:
    """Split numeric hits into incidents: symptoms that start after the previous incident ended
    (plus a small gap) are a separate story; each precursor joins the incident it precedes."""
    symptoms = sorted((h for h in num if not h.precursor), key=_step)
    groups: list[list[Hit]] = []
    end = -math.inf
    for h in symptoms:
        gap = max(10.0, 0.01 * _step(h))
        if groups and _step(h) <= end + gap:
            groups[-1].append(h)
        else:
            groups.append([h])
            end = -math.inf
        last = h.last_step if h.last_step is not None else h.first_bad_step
        end = max(end, float(last) if last is not None else _step(h))
    for p in (h for h in num if h.precursor):
        target = next((g for g in groups if _step(p) <= _step(g[0]) + max(10.0, 0.01 * _step(g[0]))
                       and _step(g[0]) - _step(p) <= max(50.0, 0.05 * _step(g[0]))), None)
        if target is not None:
            target.append(p)
        else:
            groups.append([p])  # a cause with no symptom after it (e.g. an lr jump the run absorbed)
    return groups


def _numeric_story(num: list[Hit], n_loss_points: int, has: set[str]) -> Story:
    symptoms = [h for h in num if not h.precursor]
    if not symptoms:
        return _story(num[0].category, num, num[0].message, n_loss_points)
    first = min(_step(h) for h in symptoms)
    # precursors (an lr jump, a grad-norm spike) at or shortly before the first symptom are its likely cause,
    # unless a symptom names its own (the monitor traced the first NaN to the input batch)
    near = max(50.0, 0.05 * max(first, 1.0))
    causes = sorted((h for h in symptoms if h.cause and _step(h) <= first), key=_step) or \
        sorted((h for h in num if h.precursor and h.cause and -near <= _step(h) - first <= 3), key=_step)
    external = [c for c in causes if c.category not in {h.category for h in symptoms}]
    if any(h.category == Category.LOSS_SCALE_COLLAPSE for h in symptoms):
        cat = Category.LOSS_SCALE_COLLAPSE
    elif external:
        # a cause of another kind (an lr jump) explains the whole chain: the story is named by
        # what the run came to (a NaN, else a divergence, a spike, exploding gradients)
        cat = min({h.category for h in symptoms}, key=_OUTCOME.index)
    else:
        # the earliest symptom; ties (same step) go to the one that explains the others
        cat = min((h for h in symptoms if _step(h) == first), key=lambda h: _NUMERIC_TIE[h.category]).category
        # a spike the run does not survive (a NaN follows in the same incident) is a NaN story
        if cat == Category.LOSS_SPIKE and any(h.category == Category.NAN_INF for h in symptoms):
            cat = Category.NAN_INF
        # a finding that explains this kind of symptom and starts with it is the story (sustained
        # gradient growth explains the divergence it starts with)
        for h in sorted(symptoms, key=_step):
            if cat in h.by.explains and starts_with(_step(h), first):
                cat = h.category
                break
    prim = min((h for h in symptoms if h.category == cat), key=_step)
    parts = [prim.message]
    for h in sorted(symptoms, key=_step):
        if h is not prim:
            parts.append(f"then: {h.message}" if _step(h) >= _step(prim) else f"before it: {h.message}")
    issue = "; ".join(parts)
    if causes:
        issue = "; ".join(h.cause for h in causes if h.cause) + ". " + issue
    st = _story(cat, [prim] + [h for h in num if h is not prim], issue, n_loss_points)
    st.first_bad_step = min((h.first_bad_step for h in symptoms if h.first_bad_step is not None), default=None)
    if causes:
        cause_step = max(h.first_bad_step for h in causes if h.first_bad_step is not None) \
            if any(h.first_bad_step is not None for h in causes) else None
        if cause_step is not None and st.first_bad_step is not None and st.first_bad_step < cause_step:
            st.first_bad_step = cause_step  # a symptom cannot precede its cause
        lead = causes[-1].advice
        st.fix = lead.fix + " Then: " + st.fix[0].lower() + st.fix[1:]
        st.confidence = min(0.97, st.confidence + 0.05)
    if "grad_norm" not in has:
        st.needs_more_data.append("log the gradient norm (to see whether gradients blew up first)")
        st.confidence *= 0.9
    if "lr" not in has:
        st.needs_more_data.append("log the learning rate (to rule out a schedule change)")
    return st


def diagnose(hits: list[Hit], *, n_loss_points: int = 0, has: set[str] | None = None) -> Diagnosis:
    """``has``: roles that the run logs (``grad_norm``, ``lr``, ``val_loss``, ``loss_scale``...),
    used to say what data would settle a story."""
    has = has or set()
    real = [h for h in hits if h.severity != "info"]
    stories: list[Story] = []
    used: set[int] = set()

    def take(pred) -> list[Hit]:  # type: ignore[no-untyped-def]
        out = [h for h in real if id(h) not in used and pred(h)]
        used.update(id(h) for h in out)
        return out

    # -- infrastructure ----------------------------------------------------------------------
    infra = take(lambda h: h.category in FATAL_CATEGORIES and h.fatal)
    if infra:
        infra.sort(key=lambda h: (_FATAL_ORDER[h.category], _step(h)))
        root = infra[0]
        mem = take(lambda h: h.category == Category.MEMORY_GROWTH) if root.category == Category.OOM else []
        issue = root.message
        if root.category == Category.OOM and root.data.get("fragmentation"):
            issue = "CUDA OOM caused by allocator fragmentation: " + root.message
        rest = infra[1:]
        if any(h.category == Category.DISTRIBUTED_FAILURE for h in rest) and root.category != Category.DISTRIBUTED_FAILURE:
            issue += "; the collective timeouts / aborts of the other ranks are consequences"
        if mem:
            issue += f"; memory grew steadily before it ({mem[0].message})"
        st = _story(root.category, [root, *rest, *mem], issue, n_loss_points)
        st.hits.remove(root)
        st.hits.insert(0, root)
        st.first_bad_step = root.first_bad_step if root.first_bad_step is not None else st.first_bad_step
        if root.category == Category.OOM and root.data.get("fragmentation"):
            st.fix = ("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the reserved-but-unallocated memory "
                      "exceeds the request: fragmentation); if it still fails, reduce the micro-batch.")
        if root.category == Category.DISTRIBUTED_FAILURE and root.data.get("root_rank") is None:
            st.confidence *= 0.85
        stories.append(st)

    # -- numerics: one story per incident (symptoms that overlap in time), precursors attached
    num = take(lambda h: h.category in NUMERIC or h.precursor)
    # consequences join the story they follow (zero gradients after a loss-scale collapse)
    present = {h.category for h in num}
    num += take(lambda h: bool(h.by.follows & present))
    for group in _incidents(num):
        stories.append(_numeric_story(group, n_loss_points, has))

    # -- not learning ---------------------------------------------------------------------------
    flat = take(lambda h: h.category in NOT_LEARNING)
    if flat:
        # a finding that explains a flat loss (vanishing gradients, lr 0) leads the story;
        # among those, a category of its own (vanishing gradients) names it
        explaining = [h for h in flat if Category.PLATEAU in h.by.explains]
        lead = min(explaining or flat, key=lambda h: (h.category == Category.PLATEAU, _step(h)))
        cat = lead.category
        issue = lead.message + "".join(f"; {h.message}" for h in flat if h is not lead)
        st = _story(cat, [lead] + [h for h in flat if h is not lead], issue, n_loss_points)
        st.first_bad_step = min((h.first_bad_step for h in flat if h.first_bad_step is not None), default=None)
        if cat == Category.PLATEAU and not any(h.data.get("uniform") for h in flat):
            st.needs_more_data.append("the number of classes / vocabulary size (to compare the loss with ln(C))")
        if "grad_norm" not in has:
            st.needs_more_data.append("log the gradient norm (per layer for vanishing gradients)")
        stories.append(st)

    # -- the rest: one story per category ------------------------------------------------------
    perf = take(lambda h: h.category in PERFORMANCE)
    if perf:
        # what explains the others leads (steps that wait for data explain the throughput lost)
        lead = max(perf, key=lambda h: (any(o.category in h.by.explains for o in perf), _sev(h), -_step(h)))
        stories.append(_story(lead.category, [lead] + [h for h in perf if h is not lead],
                              "; ".join(h.message for h in [lead] + [h for h in perf if h is not lead]), n_loss_points))
    for h in take(lambda _h: True):
        stories.append(_story(h.category, [h], h.message, n_loss_points))

    _crash_as_consequence(stories)
    stories.sort(key=lambda s: (-_sev(s), math.inf if s.first_bad_step is None else s.first_bad_step))
    for s in stories:
        s.confidence = round(min(max(s.confidence, 0.05), 0.99), 3)
    return conclude(stories, hits)


def _crash_as_consequence(stories: list[Story]) -> None:
    """A run that dies of an error no category names (``crash``) after a serious numeric story (gradients
    exploding, the loss turning NaN) died of that story: the crash joins it as its end, the run still
    counts as crashed, and the numeric story is the root cause (an assertion on a gradient that is
    inf, a NaN check that raises)."""
    crash = next((s for s in stories if s.category == Category.CRASH and s.fatal), None)
    if crash is None:
        return
    end = math.inf if crash.first_bad_step is None else crash.first_bad_step
    cause = min((s for s in stories if s.category in NUMERIC and _sev(s) >= SEVERITY_ORDER["high"]
                 and (s.first_bad_step is None or s.first_bad_step <= end)),
                key=lambda s: math.inf if s.first_bad_step is None else s.first_bad_step, default=None)
    if cause is None:
        return
    stories.remove(crash)
    cause.hits.extend(crash.hits)
    cause.fatal = True
    cause.severity = max(cause.severity, crash.severity, key=SEVERITY_ORDER.__getitem__)
    cause.issue += f"; then the run died ({crash.hits[0].message})"


def conclude(stories: list[Story], hits: list[Hit]) -> Diagnosis:
    """The verdict, summary and quick fixes of ``stories``, the first of which is the primary."""
    fatal = any(s.fatal for s in stories)
    if not stories:
        verdict, category, first = "healthy", "healthy", None
        summary = "No finding above info: the run looks healthy" + (
            f" ({sum(1 for h in hits if h.severity == 'info')} informational note(s))." if hits else ".")
    else:
        p = stories[0]
        verdict = "crash" if fatal else "unhealthy"
        category, first = p.category, p.first_bad_step
        # the step the category's own evidence shows first (NaN values from the first NaN, not from
        # the grad-norm spike that preceded them), and the story's earlier first sign beside it
        own = [h.first_bad_step for h in p.hits if h.category == category and h.first_bad_step is not None]
        shown = min(own) if own else first
        where = f" from step {shown}" if shown is not None else ""
        if shown is not None and first is not None and first < shown:
            where += f" (first sign at step {first})"
        summary = f"{'The run crashed' if fatal else 'The run is unhealthy'}: {_CATEGORY_WORDS.get(category, category.replace('_', ' '))}{where}. {_sentence(p.issue)}"
        if len(stories) > 1:
            summary += f" {len(stories) - 1} further problem(s): " + ", ".join(s.category for s in stories[1:4]) + "."
    needs: list[str] = []
    for s in stories:
        for n in s.needs_more_data:
            if n not in needs:
                needs.append(n)
    quick = []
    for s in stories[:3]:
        q = _SENTENCE_END.split(s.fix)[0].rstrip(".") + "."  # first sentence ("e.g. x" stays)
        if q not in quick:
            quick.append(q)
    return Diagnosis(verdict=verdict, category=category, first_bad_step=first, stories=stories, hits=hits,
                     summary=summary, needs_more_data=needs, quick_fixes=quick)


# How a category reads in a summary sentence (the rest read fine with "_" as a space).
_CATEGORY_WORDS = {"nan_inf": "NaN/Inf values", "oom": "out of memory", "grad_explosion": "exploding gradients",
                   "grad_vanishing": "vanishing gradients", "loss_scale_collapse": "loss-scale collapse",
                   "distributed_failure": "distributed failure", "data_pipeline": "data-pipeline problem"}


def _sentence(text: str) -> str:
    """The issue as a sentence, whole (a summary that stops mid-sentence hides the number it was
    about to give)."""
    text = text.strip()
    return text[0].upper() + text[1:] + ("" if text.endswith(".") else ".")
