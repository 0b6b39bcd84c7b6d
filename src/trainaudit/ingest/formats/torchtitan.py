"""torchtitan metric lines (``torchtitan/components/metrics.py``, ``MetricsProcessor.log``)::

    [rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: 14  loss:  3.24405  grad_norm:  0.8319
        memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%

Metric names are the printed ones, with the units that the printed value carries: ``loss``,
``grad_norm``, ``memory(GiB)`` and ``memory(%)`` (peak reserved memory, one field printed as
``9.46GiB(64.99%)``), ``tps`` (``wps`` before 2025-03), ``tflops``, ``mfu(%)``. ``mfu: N/A`` (FP8)
is not a value and is skipped. Validation lines (``validate step: N ...``) go to
``validate/<name>``. The ANSI colours torchtitan prints even into files are removed by the line
cleaner; ``7,282`` thousands separators are parsed.

Without a rank filter every rank prints the same step (``--tee`` without ``--local-ranks-filter``);
with ``[rankN]:`` prefixes those become ``<metric>@rankN`` series (sink), and without prefixes a
repeated step on consecutive metric lines is a duplicate: the first copy is kept and the number of
copies goes to meta ``torchtitan.lines_per_step``.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import SourceKind

STEP_RE = re.compile(r"\b(validate )?step:\s*(\d+)\s+loss:")
FIELD_RE = re.compile(r"(?<![a-z_])([a-z_]++):\s*+(\S+)")
MEM_RE = re.compile(r"^([\d.]+)GiB\(([\d.]+)%\)$")
TITAN_RE = re.compile(r"\[titan\]")
RENAME = {"mfu": "mfu(%)"}


class TorchtitanReader(LineReader):
    name = "torchtitan"
    kind = SourceKind.LOG
    description = "torchtitan '[titan] ... step: N  loss: X  grad_norm: Y  memory: ZGiB(P%)  tps: T' lines"

    def sniff(self, sample: Sample) -> float:
        steps = titan = 0
        for ln in sample.lines:
            if STEP_RE.search(ln) and "memory:" in ln:
                steps += 1
            elif TITAN_RE.search(ln):
                titan += 1
        if steps:
            return 0.9
        return 0.5 if titan else 0.0

    def new_state(self) -> dict:
        return {"last": None, "copies": 1, "max_copies": 1, "framework": False}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        m = STEP_RE.search(text)
        if m is None:
            if not state["framework"] and TITAN_RE.search(text):
                state["framework"] = True
                sink.meta("framework", "torchtitan")
            return
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "torchtitan")
        validate = m.group(1) is not None
        step = int(m.group(2))
        key = (line.rank, validate, step)
        if key == state["last"]:
            state["copies"] += 1
            state["max_copies"] = max(state["max_copies"], state["copies"])
            return
        state["last"], state["copies"] = key, 1
        prefix = "validate/" if validate else ""
        for name, raw in FIELD_RE.findall(text[m.end() - len("loss:"):]):
            if name == "step":
                continue
            mem = MEM_RE.match(raw)
            if mem:
                sink.add(f"{prefix}{name}(GiB)", step, float(mem.group(1)), line.no, line.rank)
                sink.add(f"{prefix}{name}(%)", step, float(mem.group(2)), line.no, line.rank)
                continue
            v = parse_number(raw.rstrip("%"))
            if v is None:
                continue  # "mfu: N/A"
            sink.add(prefix + RENAME.get(name, name), step, v, line.no, line.rank)

    def finish(self, sink: Sink, state: dict) -> None:
        if state["max_copies"] > 1:
            sink.meta("torchtitan.lines_per_step", state["max_copies"])
