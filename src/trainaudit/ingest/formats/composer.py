"""Composer ``ConsoleLogger`` records and llm-foundry's python logging lines.

A Composer record spans several lines: a progress header, then one indented item per metric
(``\\t `` tab + space in real output, spaces in copied docs)::

    [batch=1/100]:
    \\t Train LanguageCrossEntropy: 10.9736
    \\t Train loss/train/total: 10.9736

The record is buffered until the first line that is not an item, then emitted. Step: the
record's ``Train time/batch`` value when logged, else the header's ``batch=N``; for
``[epoch=E][batch=b/n]`` headers (``max_duration`` in epochs, ``b`` counts within the epoch)
``(E-1)*n + b``; other units (``token=``, ``sample=``...) use ``time/batch`` or the header value.
Eval records (``[Eval batch=b/n] Eval on X data``) get the last training step; eval items whose
name does not say "eval" are stored as ``eval/<name>``.

Composer prints floats with 4 decimals (``nan``/``inf`` as such), strings quoted; tensors and dicts
that are not scalars are skipped.

llm-foundry logging: ``<asctime>: rank<R>[<pid>][<thread>]: <LEVEL>: <logger>: <message>``;
``Run name: X`` and ``Setting seed to N`` go to meta.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import SourceKind

HEADER_RE = re.compile(
    r"^\s*(?:\[epoch=(?P<epoch>\d+)\])?\[(?P<unit>batch|ba|sample|token|iteration|epoch|dur|duration|second)"
    r"=(?P<cur>\d+)(?:/(?P<total>\d+))?\]:\s*$"
)
EVAL_HEADER_RE = re.compile(r"^\s*\[Eval batch=(\d+)/(\d+)\] Eval on (\S+) data")
ITEM_RE = re.compile(r"^\t? *(Train|Eval) ([^:]+): (.*)$")
FOUNDRY_RE = re.compile(r"^(\d{4}-\d\d-\d\d [\d:,.]+): rank(\d+)\[(\d+)\]\[([^\]]+)\]: (\w+): ([\w.]+): (.*)$")
RUN_NAME_RE = re.compile(r"^Run name: (\S+)")
SEED_RE = re.compile(r"^Setting seed to (\d+)")


class ComposerReader(LineReader):
    name = "composer"
    kind = SourceKind.LOG
    description = "Composer / llm-foundry console records ('[batch=N/T]:' + indented 'Train <name>: <value>')"

    def sniff(self, sample: Sample) -> float:
        headers = items = foundry = 0
        for ln in sample.lines:
            if HEADER_RE.match(ln) or EVAL_HEADER_RE.match(ln):
                headers += 1
            elif ITEM_RE.match(ln):
                items += 1
            elif FOUNDRY_RE.match(ln):
                foundry += 1
        if headers and items:
            return 0.9
        if foundry:
            return 0.5
        return 0.3 if headers else 0.0

    def new_state(self) -> dict:
        return {"record": None, "last_step": 0, "framework": False}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        rec = state["record"]
        if rec is not None:
            m = ITEM_RE.match(text)
            if m:
                rec["items"].append((m.group(1), m.group(2).strip(), m.group(3), line))
                return
            self._flush(sink, state)
        m = HEADER_RE.match(text)
        if m:
            self._framework(sink, state)
            state["record"] = {"eval": False, "header": m, "line": line, "items": []}
            return
        m = EVAL_HEADER_RE.match(text)
        if m:
            self._framework(sink, state)
            state["record"] = {"eval": True, "header": m, "line": line, "items": []}
            return
        m = FOUNDRY_RE.match(text)
        if m:
            self._framework(sink, state)
            msg = m.group(7)
            rn = RUN_NAME_RE.match(msg)
            if rn:
                sink.meta("run_name", rn.group(1))
            sd = SEED_RE.match(msg)
            if sd:
                sink.meta("seed", int(sd.group(1)))

    def finish(self, sink: Sink, state: dict) -> None:
        self._flush(sink, state)

    @staticmethod
    def _framework(sink: Sink, state: dict) -> None:
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "composer")

    def _flush(self, sink: Sink, state: dict) -> None:
        rec = state["record"]
        state["record"] = None
        if rec is None or not rec["items"]:
            return
        values: list[tuple[str, str, float, Line]] = []
        for phase, key, raw, line in rec["items"]:
            raw = raw.strip()
            if raw[:1] in ("'", '"') and raw[-1:] == raw[:1]:
                raw = raw[1:-1]
            v = parse_number(raw)
            if v is not None:
                values.append((phase, key, v, line))
        if rec["eval"]:
            step = state["last_step"]
        else:
            step = self._train_step(rec, values)
            state["last_step"] = step
        for phase, key, v, line in values:
            name = key
            if phase == "Eval" and "eval" not in key.lower():
                name = f"eval/{key}"
            sink.add(name, step, v, line.no, line.rank)

    @staticmethod
    def _train_step(rec: dict, values: list[tuple[str, str, float, Line]]) -> int:
        for _phase, key, v, _line in values:
            if key == "time/batch" and v == v:
                return int(v)
        h: re.Match[str] = rec["header"]
        cur = int(h.group("cur"))
        if h.group("epoch") is not None and h.group("unit") in ("batch", "ba") and h.group("total"):
            return (int(h.group("epoch")) - 1) * int(h.group("total")) + cur
        return cur
