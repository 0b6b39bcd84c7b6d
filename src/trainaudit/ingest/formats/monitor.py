"""The JSONL file written by ``trainaudit.monitor`` (first record ``{"trainaudit_monitor": 1, ...}``).

Step records become series under their own names (``loss``, ``grad_norm``, ``grad_norm/<module>``,
``update_ratio/<module>`` ...); the first-NaN record becomes a NaN-check event naming the module,
alerts become warnings, and the end record is the completion marker (``completed`` in its data).
"""

from __future__ import annotations


from trainaudit.errors import InputError
from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, json_number
from trainaudit.model import Event, EventKind, SourceKind
from trainaudit.safeio import load_json

MARKER = '"trainaudit_monitor"'


class MonitorReader(LineReader):
    name = "trainaudit-monitor"
    kind = SourceKind.METRICS
    description = "trainaudit.monitor JSONL (step records, first NaN/Inf origin, alerts, end marker)"

    def sniff(self, sample: Sample) -> float:
        first = next((ln for ln in sample.lines if ln.strip()), "")
        return 0.95 if first.lstrip().startswith("{") and MARKER in first else 0.0

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        try:
            rec = load_json(line.text, "")
        except InputError:
            return
        if not isinstance(rec, dict):
            return
        kind = rec.get("type")
        step = rec.get("step")
        step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None
        if kind == "step" and step is not None:
            for k, v in rec.items():
                if k in ("type", "step"):
                    continue
                x = json_number(v)
                if x is not None:
                    sink.add(k, step, x, line.no, line.rank)
        elif kind == "start":
            sink.meta("framework", "trainaudit-monitor")
            for k in ("model", "params", "trainable_params", "every", "max_steps", "train_iters"):
                if k in rec:
                    sink.meta(k, rec[k])
        elif kind == "nonfinite":
            sink.event(Event(EventKind.NAN_CHECK, f"first NaN/Inf ({rec.get('phase')}): {rec.get('detail')}",
                             sink.source.path if sink.source else "", line.no, line.text, step, line.rank,
                             {k: v for k, v in rec.items() if k not in ("type", "step")}))
        elif kind == "alert":
            sink.event(Event(EventKind.WARNING, f"{rec.get('rule')}: {rec.get('message')}",
                             sink.source.path if sink.source else "", line.no, line.text, step, line.rank,
                             {"rule": rec.get("rule"), "category": rec.get("category"), "severity": rec.get("severity"),
                              # files of earlier monitors name the first bad step "since"
                              "first_bad_step": rec.get("first_bad_step", rec.get("since")),
                              "metric": rec.get("metric")}))
        elif kind == "end":
            status = str(rec.get("status", ""))
            sink.event(Event(EventKind.PHASE, f"monitor end: {status}", sink.source.path if sink.source else "",
                             line.no, line.text, step, line.rank,
                             {"completed": bool(rec.get("completed")), "status": status}))
