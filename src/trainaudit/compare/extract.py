"""Turn any run trainaudit can read (TensorBoard files, a Megatron log, an actual-values JSON) into
actual values the way Megatron's extractor (``get_test_results_from_tensorboard_logs.py``) would:
only the golden metrics, ``round(x, 5)`` unless the golden metric is ``value_precision: full``,
steps ``1 <= step <= train_iters``. A Megatron stdout log prints iteration time in milliseconds
and on the first iteration of the process, TensorBoard in seconds and not on that iteration: the
conversion is done and reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from trainaudit.compare.cilog import CiGateReport
from trainaudit.ingest.golden import GoldenFile, GoldenMetric, load_golden, looks_like_golden
from trainaudit.errors import InputError
from trainaudit.model import Run, SourceKind
from trainaudit.ingest import load_run # heavy import only when needed

# Names a Megatron stdout log uses for the extractor's TensorBoard tags.
LOG_ALIASES: dict[str, str] = {"num zeros": "num-zeros", "elapsed time per iteration (ms)": "iteration-time"}
EXTRACTED = ("iteration-time", "mem-allocated-bytes", "mem-max-allocated-bytes", "lm loss", "num-zeros",
             "mtp_1 loss", "mtp_2 loss", "total loss")


@dataclass(slots=True)
class Actual:
    values: GoldenFile
    kind: str  # golden_values | tensorboard | log | metrics
    notes: list[str] = field(default_factory=list)
    nan_metrics: dict[str, int] = field(default_factory=dict)  # metric -> first step with a real NaN/Inf
    run: Run | None = None


def is_golden_json(path: str) -> bool:
    p = Path(path)
    if not p.is_file() or p.suffix.lower() != ".json":
        return False
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return looks_like_golden(f.read(4096))
    except OSError:
        return False


def load_actual(paths: list[str], golden: GoldenFile | None, train_iters: int | None,
                fmt: str | None = None) -> Actual:
    """Actual values for a golden comparison. A single golden-shaped JSON is read as is (values
    exactly as in the file); anything else goes through ``load_run`` and the extractor rules."""
    if len(paths) == 1 and fmt in (None, "golden_values") and is_golden_json(paths[0]):
        return Actual(load_golden(paths[0], strict=True), "golden_values")

    run, problems = load_run(paths, fmt)
    fatal = [p for p in problems if p.fatal]
    if fatal and not run.series:
        raise InputError(str(fatal[0]))
    return from_run(run, golden, train_iters, label=", ".join(paths))


def from_run(run: Run, golden: GoldenFile | None, train_iters: int | None, label: str) -> Actual:
    kinds = {s.kind for s in run.sources}
    is_log = SourceKind.TENSORBOARD not in kinds and SourceKind.GOLDEN_VALUES not in kinds
    kind = "tensorboard" if SourceKind.TENSORBOARD in kinds else ("golden_values" if not is_log else "log")
    out = Actual(GoldenFile(label, {}), kind, run=run)
    wanted = set(golden.metrics) if golden is not None else set(EXTRACTED)
    limit = train_iters or (run.meta.get("train_iters") if isinstance(run.meta.get("train_iters"), int) else None)
    for name, series in run.series.items():
        target = LOG_ALIASES.get(name, name) if is_log else name
        if target not in wanted or "@rank" in name:
            continue
        full = bool(golden and target in golden.metrics and golden.metrics[target].full_precision)
        steps, vals, lines = series.steps.tolist(), series.values.tolist(), series.lines.tolist()
        scale = 1.0
        if is_log and name == "elapsed time per iteration (ms)":
            scale = 1e-3
            if steps:
                # TensorBoard has no iteration-time for the first iteration of a process.
                steps, vals, lines = steps[1:], vals[1:], lines[1:]
                out.notes.append("iteration-time taken from the log's 'elapsed time per iteration (ms)', "
                                 "converted ms -> s, first logged iteration dropped (not written to TensorBoard)")
        keep = [i for i, st in enumerate(steps) if st >= 1 and (limit is None or st <= limit)]
        raw: list[float | int | str] = []
        for i in keep:
            v = vals[i] * scale
            if not math.isfinite(v):
                out.nan_metrics.setdefault(target, steps[i])
            raw.append(v if full or not math.isfinite(v) else round(v, 5))
        if not keep:
            continue
        ks = [steps[i] for i in keep]
        out.values.metrics[target] = GoldenMetric(target, ks[0], ks[-1], 1, ks, raw, [lines[i] for i in keep], full)
    if not full_note_done(out) and out.values.metrics:
        out.notes.append("values rounded to 5 decimals as Megatron's extractor does "
                         "(except metrics marked value_precision: full)")
    if is_log:
        for m in ("mem-allocated-bytes", "mem-max-allocated-bytes"):
            if m in wanted and m not in out.values.metrics:
                out.notes.append(f"{m}: a stdout log has no per-step TensorBoard memory; "
                                 "give the TensorBoard event files to check it")
    return out


def complete_from_reports(actual: Actual, golden: GoldenFile, metrics: list[str],
                          reports: list[CiGateReport]) -> list[str]:
    """Fill in, from the comparator's own output in a CI job log, what the actual run's files lack.

    A training log prints the loss and the iteration time but not every metric the gate checks
    (memory goes to TensorBoard only). The comparator logs ``Actual values: ...`` for a failing
    check, one value per golden step in the golden file's order (``common.py``: ``actual_values[m]
    .values.get(step, "nan") for step in golden_value.values``): those become the metric's values.
    A metric the job log reports as PASSED but that no file holds cannot be replayed: it is dropped
    from the checks, with a note. Returns ``metrics`` without the dropped ones."""
    have = actual.values.metrics
    kept = []
    for m in metrics:
        if m in have or m not in golden.metrics:
            kept.append(m)
            continue
        checks = [c for r in reports for c in r.checks if c.metric == m]
        g = golden.metrics[m]
        listed = next((c for c in checks if not c.passed and c.actual and not c.elided
                       and len(c.actual) == len(g.steps) and None not in c.actual), None)
        if listed is not None and listed.actual is not None:
            vals: list[float | int | str] = [v if v is not None and math.isfinite(v) else "nan" for v in listed.actual]
            have[m] = GoldenMetric(m, g.steps[0], g.steps[-1], g.step_interval, list(g.steps), vals,
                                   [listed.actual_line or 0] * len(vals), g.full_precision)
            actual.notes.append(f"{m}: values from the CI log's 'Actual values' line {listed.actual_line} "
                                "(the run's files do not hold this metric)")
            kept.append(m)
        elif checks and all(c.passed for c in checks):
            actual.notes.append(f"{m}: not in the run's files; the CI log reports it PASSED (line {checks[0].line}), "
                                "so it is left out of the replayed checks")
        else:
            kept.append(m)
    return kept


def full_note_done(a: Actual) -> bool:
    return any(n.startswith("values rounded") for n in a.notes)
