"""Turn a diagnosis into answer.json (facts quoting source lines, recomputable calculations,
findings, root causes) and the plot specs for the report."""

from __future__ import annotations

import contextvars
import re
import threading
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np

from trainaudit.diagnosis.engine import Diagnosis
from trainaudit.errors import InputError
from trainaudit.ingest.sources import STDIN, InputFile, expand_inputs, read_lines
from trainaudit.model import Run, Series, SourceKind
from trainaudit.safeio import open_input
from trainaudit.rules.base import Hit, PointRef
from trainaudit.series.roles import find_roles
from trainaudit.answer.builder import AnswerBuilder, sha256_of
from trainaudit.answer.charts import SMOOTHING, Curve, PlotSpec
from trainaudit.answer.schema import Answer, Coverage, Decision, DecisionReason, FinalAnswer, MetricCoverage, RootCause
from trainaudit.answer.paths import display_path

MAX_EXCERPT = 200  # values quoted in one fact; longer windows are evenly thinned
# Sources whose "line" is a record index, not a line of text: described, never quoted.
BINARY_KINDS = frozenset({SourceKind.TENSORBOARD})
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")  # control characters but the tab


def textual(quote: str | None) -> str | None:
    """``quote`` when it is text a report can show; None for bytes of a binary file (control
    characters, or what UTF-8 decoding had to replace)."""
    if quote is None or "\ufffd" in quote or _CONTROL.search(quote) is not None:
        return None
    return quote


def _thin(idx: np.ndarray) -> np.ndarray:
    if idx.size <= MAX_EXCERPT:
        return idx
    return idx[np.linspace(0, idx.size - 1, MAX_EXCERPT).astype(np.int64)]


class SourceHashes:
    """The sha256 of the files named in ``paths`` (not folders, not standard input), computed in
    a thread from the start: file reads and hashlib release the GIL for large buffers, so the hash
    is made beside the reading of the run instead of after it (a second pass over a 1 GB log).
    The thread runs in a copy of the caller's context, so what confines the caller's file reads
    confines its reads too."""

    def __init__(self, paths: list[str]) -> None:
        self._got: dict[Path, str] = {}
        files = [Path(p) for p in paths if p != STDIN and Path(p).is_file()]
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._hash, files),
                                        name="trainaudit-sha256", daemon=True)
        self._thread.start()

    def _hash(self, files: list[Path]) -> None:
        for f in files:
            try:
                self._got[f] = sha256_of(partial(open_input, f))
            except (InputError, OSError):  # build_answer hashes it itself
                continue

    def of(self, inp: InputFile) -> str | None:
        """The sha256 of ``inp``'s bytes where it is a plain file hashed here, else None."""
        self._thread.join()
        if inp.fs_path is None or inp.compressed or inp.max_bytes is not None or inp.line_bytes is not None:
            return None
        return self._got.get(inp.fs_path)


def build_answer(paths: list[str], run: Run, diag: Diagnosis, *, hash_sources: bool = True,
                 hashes: SourceHashes | None = None) -> Answer:
    b = AnswerBuilder("diagnose")
    inputs: dict[str, InputFile] = {}
    try:
        inputs = {i.display: i for i in expand_inputs(paths)}
    except Exception:
        inputs = {}
    sid: dict[str, str] = {}
    for src in run.sources:
        inp = inputs.get(src.path)
        sha = None
        if hash_sources and inp is not None:
            try:
                sha = (hashes.of(inp) if hashes is not None else None) or sha256_of(inp.open)
            except OSError:
                sha = None
        kind = "archive_member" if "!" in src.path else src.kind.value
        how = "; ".join(filter(None, [f"read as {src.format}" if src.format else "", src.note]))
        sid[src.path] = b.source(display_path(src.path), kind, sha256=sha, description=how)

    # Collect every line to quote, then read each source once.
    binary = {s.path for s in run.sources if s.kind in BINARY_KINDS}
    points = {id(h): [*h.points, *filter(None, [_backing_point(run, h)])] for h in diag.hits}
    wanted: dict[str, set[int]] = defaultdict(set)
    for ps in [*points.values(), *(st.cause_points for st in diag.stories)]:
        for p in ps:
            line = int(p.series.lines[p.index])
            path = run.source_path(p.series, p.index)
            if line and path not in binary:
                wanted[path].add(line)
    quotes: dict[str, dict[int, str]] = {}
    for path, lines in wanted.items():
        inp = inputs.get(path)
        if inp is None:
            continue
        try:
            quotes[path] = read_lines(inp, lines)
        except OSError:
            quotes[path] = {}

    def point_fact(p: PointRef) -> str:
        s = p.series
        path = run.source_path(s, p.index)
        line = int(s.lines[p.index])
        src_id = sid.get(path) or b.source(display_path(path), "log")
        kw: dict = {}
        if p.indices is not None:
            idx = _thin(np.asarray(p.indices, dtype=np.int64))
            kw = {"steps": s.steps[idx].tolist(), "values": s.values[idx].tolist()}
        statement = p.statement
        if path in binary:  # described by its record, not quoted: the bytes are not text
            statement += f" (record {line} of the event file)" if line else ""
            line = 0
        return b.fact(src_id, statement, metric=s.name, step=p.step,
                      value=None if p.indices is not None else p.value, line=line or None,
                      quote=textual(quotes.get(path, {}).get(line)), **kw)

    finding_ids: dict[int, str] = {}
    evidence_of: dict[int, list[str]] = {}
    for h in diag.hits:
        ids: dict[str, str] = {}
        for p in points[id(h)]:
            ids[p.key] = point_fact(p)
        for e in h.events:
            event = e.event
            src_id = sid.get(event.source) or b.source(display_path(event.source), "log")
            ids[e.key] = b.fact(src_id, f"{e.statement}: {event.message}", step=event.step, value=e.value,
                                unit=e.unit, line=event.line or None, quote=textual(event.raw))
        for c in h.calcs:
            formula = c.formula
            for k, v in ids.items():
                formula = formula.replace("{" + k + "}", v)
            ins = [v for k, v in ids.items() if "{" + k + "}" in c.formula]
            ids[c.key] = b.calc(c.description, formula, ins, unit=c.unit)
        ev_ids = list(ids.values())
        evidence_of[id(h)] = ev_ids
        finding_ids[id(h)] = b.finding(rule=h.rule, category=h.category, severity=h.severity, metric=h.metric,
                                       first_bad_step=h.first_bad_step, last_step=h.last_step, message=h.message,
                                       evidence=ev_ids, confidence=h.confidence)

    roots = []
    for st in diag.stories:
        ev: list[str] = [point_fact(p) for p in st.cause_points]  # the hyper-parameter the issue names
        for h in st.hits:
            ev.append(finding_ids[id(h)])
            ev.extend(evidence_of[id(h)][:4])
        roots.append(RootCause(issue=st.issue[:1000], category=st.category, severity=st.severity,  # type: ignore[arg-type]
                               evidence=ev, fix=st.fix, expected_impact=st.expected_impact, verify=st.verify,
                               confidence=st.confidence))
    final = FinalAnswer(verdict=diag.verdict, category=diag.category, first_bad_step=diag.first_bad_step,  # type: ignore[arg-type]
                        summary=diag.summary, root_causes=roots, quick_fixes=diag.quick_fixes,
                        needs_more_data=diag.needs_more_data, coverage=_coverage(diag, sid), decision=_decision(diag))
    return b.build(final)


def _decision(diag: Diagnosis) -> Decision | None:
    if not diag.probabilities or not diag.runner_up:
        return None
    p = diag.probabilities
    return Decision(category=diag.category, probability=min(max(p.get(diag.category, 0.0), 0.0), 1.0),
                    runner_up=diag.runner_up, runner_up_probability=min(max(p.get(diag.runner_up, 0.0), 0.0), 1.0),
                    reasons=[DecisionReason(feature=f, log_odds=v) for f, v in diag.reasons],
                    confidence=diag.confidence)


def _coverage(diag: Diagnosis, sid: dict[str, str]) -> Coverage | None:
    c = diag.coverage
    if c is None:
        return None
    return Coverage(metrics={name: MetricCoverage(points=m.points, first_step=m.first_step, last_step=m.last_step,
                                                 read_points=m.read)
                             for name, m in c.metrics.items()},
                    events=c.events, rules_run=c.rules_run, rules_skipped=c.rules_skipped,
                    skimmed=[sid[p] for p in c.skimmed if p in sid])


def _backing_point(run: Run, h: Hit) -> PointRef | None:
    """A finding's step must belong to a source it quotes. When none of its own points and events
    is at its first bad step (an error in a stderr file without steps, placed after the last
    step another file logged), the value logged at that step is quoted too, so the report says
    which file the step comes from."""
    step = h.first_bad_step
    if step is None or any(p.step == step for p in h.points) or any(e.event.step == step for e in h.events):
        return None
    for s in run.series.values():
        i = int(np.searchsorted(s.steps, step))
        if i < len(s) and int(s.steps[i]) == step:
            return PointRef("at_step", s, i, f"{s.name} at step {step}, the step this finding is placed at (the last "
                                             "one logged before what it reports)")
    return None


def plot_specs(run: Run, diag: Diagnosis, max_points: int = 20000) -> list[PlotSpec]:
    """One plot per metric with a finding above info, first bad step and causes marked."""
    specs: list[PlotSpec] = []
    done: set[str] = set()
    roles = find_roles(run)
    markers_all = [(int(h.first_bad_step), f"{h.rule}") for h in diag.hits
                   if h.precursor and h.first_bad_step is not None and h.severity != "info"]
    for h in sorted(diag.hits, key=lambda x: x.severity == "info"):
        metric = h.metric
        if metric is None or metric in done or metric not in run.series or h.severity == "info":
            continue
        done.add(metric)
        s = run.series[metric]
        idx = _plot_index(s, max_points)
        fin = s.values[np.isfinite(s.values)]
        logy = bool(fin.size and np.all(fin > 0) and fin.max() / max(fin.min(), 1e-300) >= 1e2)  # two decades
        curves = [Curve(metric, s.steps[idx], s.values[idx])]
        # train and validation loss on one axis: overfitting shows as the gap between them
        other = None
        if h.category == "overfitting":
            other = run.series.get(next((p.series.name for p in h.points if p.key == "t_end"), ""), None)
        if other is None and metric in (roles.names.get("loss"), roles.names.get("val_loss")):
            other = roles.get(run, "val_loss" if metric == roles.names.get("loss") else "loss")
        if other is not None and other.name != metric:
            oi = _plot_index(other, max_points)
            curves.append(Curve(other.name, other.steps[oi], other.values[oi], style="dashed"))
            logy = False  # two curves, one scale: y_axis picks it from both
        lr = roles.get(run, "lr")
        right = []
        # the learning rate beside what it drives (a loss, a grad norm), not beside step times
        if lr is not None and len(lr) and metric in {roles.names.get(r) for r in ("loss", "val_loss", "grad_norm")}:
            li = _plot_index(lr, max_points)
            right.append(Curve(lr.name, lr.steps[li], lr.values[li]))
        markers = [(st, lab) for st, lab in markers_all if lab != h.rule]
        # every chart marks the first bad step the headline gives; the finding's own start beside it
        first = diag.first_bad_step if diag.first_bad_step is not None else h.first_bad_step
        if h.first_bad_step is not None and h.first_bad_step != first:
            markers.append((int(h.first_bad_step), f"{h.rule} from step {h.first_bad_step}"))
        specs.append(PlotSpec(metric=metric, title=f"{metric}: {h.category.replace('_', ' ')} ({h.rule})", curves=curves,
                              first_bad_step=first, markers=markers, logy=logy, right=right,
                              right_label="learning rate" if right else "",
                              smoothing=0.0 if metric == roles.names.get("lr") else SMOOTHING,
                              ylabel="loss" if other is not None and "loss" in metric.lower() else None))
    return specs


def _plot_index(s: Series, max_points: int) -> np.ndarray:
    """Indices of the points a plot draws: at most ``max_points`` evenly spread, and every
    non-finite one."""
    idx = np.arange(len(s))
    if idx.size > max_points:
        keep = ~np.isfinite(s.values)  # the union of both, in order (np.unique of them, in linear time)
        keep[np.linspace(0, len(s) - 1, max_points).astype(np.int64)] = True
        idx = np.flatnonzero(keep).astype(np.int64, copy=False)
    return idx
