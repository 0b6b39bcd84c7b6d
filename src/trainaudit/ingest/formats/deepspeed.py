"""DeepSpeed engine lines, and whatever training log they are embedded in.

DeepSpeed is a runtime, not a logging format: its lines sit inside another framework's stdout
(HF Trainer dicts, Megatron-DeepSpeed ``iteration`` lines, tqdm bars). This reader parses the
engine's own lines and hands every other line to the best other line reader for the same file
(chosen by sniffing the same head), so a mixed log yields both sets. To make that richest
reading win detection, ``sniff`` scores as high as the best other format whenever DeepSpeed
engine lines are present (at least 0.85), and the format's priority (``RUNTIME``) wins the tie.

Lines parsed (deepspeedai/DeepSpeed ``runtime/fp16/loss_scaler.py``, ``runtime/engine.py``,
``utils/timer.py``; old ZeRO stage2/3 code):

* ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: X, reducing to Y`` (also
  ``[deepscale]`` with float scales, the hysteresis variant, and the fused optimizer's
  ``Overflow detected. Skipping step. ...``): a ``loss_scale`` event with
  ``{attempted, new, rank, hysteresis, new_hysteresis}`` and a ``loss scale`` value (the scale in
  force after the line).
* ``step=40, skipped=2, lr=[5e-05], mom=[...]``: ``skipped`` (cumulative) and ``lr`` (param group 0;
  other groups as ``lr[i]`` when they differ).
* ThroughputTimer, three eras: ``0/10, SamplesPerSec=...``, ``0/40, ..., MemAllocated=0.26GB,
  MaxMemAllocated=9.02GB``, ``epoch=0/micro_step=34/global_step=34, RunningAvgSamplesPerSec=...,
  CurrSamplesPerSec=..., ...``: series under DeepSpeed's own names, memory in GB.
* ``wall_clock_breakdown``: ``time (ms) | forward_microstep: 652.42 | ...`` -> ``<timer> (ms)``.
* PipelineEngine: ``steps: N loss: X iter time (s): T samples/sec: S``.
* ``Current loss scale already at minimum``: a ``loss_scale_min`` event, unless the shared error
  signature scanner already emits it for every text log (checked at import).

Step of an overflow: the engine's step counter is printed only every ``steps_per_print`` steps
(``step=N`` lines, ThroughputTimer ``global_step``). Every overflow line is one skipped optimizer
step, and the engine still counts skipped steps, so the k-th overflow after the last known step N
is at step N + k. With no step line yet, an overflow glued to a tqdm bar ``n/total [...]`` (the
HF Trainer's optimizer-step bar) is at step n + 1; an overflow before any step at all (a paste that
starts mid-run) waits for the first step the log shows: the m overflows before a bar showing n
(or a first step line n) are at steps n - m + 1 .. n, each skipped step being counted by the bar.
A log that never shows a step numbers them by count (1-based).
Such steps are marked ``step_estimated`` in the event data. Timer breakdown lines take the last
known step the same way.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import Gate, LineReader, Priority, Sample, SpareNumbers, gate_pattern, registered_formats
from trainaudit.ingest.formats.generic import num
from trainaudit.ingest.formats.hf import HF_GATE_LITERALS
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile, read_head
from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind, SourceKind

_N = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
OVERFLOW_RE = re.compile(
    r"\[(deepspeed|deepscale)\] OVERFLOW! Rank (\d+) Skipping step\.(?: Attempted loss scale: ([\d.]+),\s*"
    r"(?:reducing to ([\d.]+)|but hysteresis is (\d+)\. Reducing hysteresis to (\d+)))?")
FUSED_RE = re.compile(r"Overflow detected\. Skipping step\. Attempted loss scale: ([\d.]+), reducing to ([\d.]+)")
PROGRESS_RE = re.compile(r"\bstep=(\d+), skipped=(\d+), lr=\[([^\[\]]*+)\]")  # a flat list
TPUT_RE = re.compile(
    r"(?:epoch=(\d+)/micro_step=(\d+)/global_step=(\d+)|(?<![\w/])(\d+)/(\d+)), "
    r"((?:RunningAvgSamplesPerSec|SamplesPerSec)=.*)$")
TPUT_FIELD_RE = re.compile(r"(?<!\w)(\w++)=(" + _N + r")(GB)?")
BREAKDOWN_RE = re.compile(r"time \(ms\) \| (.*)$")
BREAKDOWN_FIELD_RE = re.compile(r"(?<![\w\-])([\w\-]++): (" + _N + r")")
# The fields between the loss and the iteration time are bounded and never cross the next "steps:": each
# "steps:" of a line that repeats it then looks only as far as the next one, not to the end of the line.
PIPE_RE = re.compile(r"\bsteps: (\d+) loss: (\S+) (?:((?:(?!steps: ).){0,1000}?) )?iter time \(s\): (\S+) "
                     r"samples/sec: (\S+)")
# "name: value" inside those fields; a name starts where its run of non-blanks does.
PIPE_FIELD_RE = re.compile(r"(?<!\S)(\S+): (\S+)")
# The tqdm bar an OVERFLOW line is glued to: "  1%|...| 6/1184 [00:21<1:09:10,  3.52s/it][2021-...".
# Brackets do not nest in the bar or the tags after it, so each scan stops at the next "[".
BAR_BEFORE_RE = re.compile(r"(?<!\d)(\d++)/\d++ \[[\d:]++<[\d:?]++[^\[\]]*+\]\s*+(?:\[[^\[\]]*+\]\s*+)*+$")
MIN_SCALE_RE = re.compile(r"Current loss scale already at minimum")
# Literals in every line ``_engine`` reads (a needle of each pattern above), for the line gate
ENGINE_GATE = (r"OVERFLOW|Overflow detected|step=|SamplesPerSec=|time \(ms\) \||steps: |Current loss scale"
               r"|\[deepspeed\]|\[deepscale\]|DeepSpeed info: version=")
_DS_ALONE, _DS_HF = gate_pattern(ENGINE_GATE), gate_pattern(f"{ENGINE_GATE}|{HF_GATE_LITERALS}")
# The gate by delegate: the engine's literals and the delegate's (a delegate without a gate: no gate)
DS_GATES: dict[str | None, Gate] = {
    None: Gate(re.compile(_DS_ALONE), re.compile(_DS_ALONE.encode() + b"|\x1b")),
    "hf": Gate(re.compile(_DS_HF), re.compile(_DS_HF.encode() + b"|\x1b")),
}
ENGINE_HINT_RE = re.compile(r"\[(?:deepspeed|deepscale)\]|DeepSpeed info: version=|\[Rank \d+\] step=\d+, skipped=")


def _is_engine_line(text: str) -> bool:
    return bool(OVERFLOW_RE.search(text) or FUSED_RE.search(text) or PROGRESS_RE.search(text)
                or TPUT_RE.search(text) or PIPE_RE.search(text) or MIN_SCALE_RE.search(text)
                or ENGINE_HINT_RE.search(text))


class DeepSpeedReader(LineReader):
    name = "deepspeed"
    kind = SourceKind.LOG
    priority = Priority.RUNTIME
    description = "DeepSpeed engine lines (overflow/loss scale, step/skipped/lr, ThroughputTimer) inside any training log"

    def __init__(self) -> None:
        self._others: list[LineReader] | None = None

    @property
    def others(self) -> list[LineReader]:
        """The formats whose lines DeepSpeed's are interleaved with: every registered line format of
        one framework (a CSV table, JSON lines or text in general is not a log DeepSpeed prints into)."""
        if self._others is None:
            self._others = [c() for c in registered_formats()
                            if issubclass(c, LineReader) and c.priority is Priority.SPECIFIC]
        return self._others

    def sniff(self, sample: Sample) -> float:
        n = sum(1 for ln in sample.lines if _is_engine_line(ln) and not ln.lstrip().startswith("#"))
        if n == 0:
            return 0.0
        strong = sum(1 for ln in sample.lines if OVERFLOW_RE.search(ln) or PROGRESS_RE.search(ln)
                     or TPUT_RE.search(ln) or FUSED_RE.search(ln) or PIPE_RE.search(ln))
        if strong == 0:
            return 0.3
        best_other = max((r.sniff(sample) for r in self.others), default=0.0)
        return min(0.99, max(0.85, best_other))

    # -- reading ----------------------------------------------------------------------------
    def read(self, inp: InputFile, sink: Sink) -> None:
        delegate = self._delegate(inp)
        scanner = SignatureScanner(inp.display)
        state = self.new_state()
        dstate = delegate.new_state() if delegate else {}
        if delegate is not None:
            sink.meta("framework", f"deepspeed+{delegate.name}")
        else:
            sink.meta("framework", "deepspeed")
        spare = SpareNumbers(sink)
        gate = DS_GATES.get(delegate.name if delegate is not None else None)
        with inp.open() as stream:
            for line in self.lines(stream, scanner, spare, gate,
                                   awaits=lambda: delegate is not None and delegate.awaits(dstate)):
                if not self._engine(line, sink, state) and delegate is not None:
                    before = sink.last_step
                    delegate.feed(line, sink, dstate)
                    if sink.last_step is not None and sink.last_step != before:
                        self._anchor(state, sink.last_step, sink)  # overflows count from the framework's own step
                events = scanner.feed(line)
                for ev in events:
                    sink.event(ev)
                spare.line(line, events, scanner.busy)
        for ev in scanner.finish():
            sink.event(ev)
        if delegate is not None:
            delegate.finish(sink, dstate)
        self.finish(sink, state)
        spare.end(inp)

    def _delegate(self, inp: InputFile) -> LineReader | None:
        full = Sample.from_head(inp.name, read_head(inp))
        # Sniff the others on the non-DeepSpeed lines only: "step=40, skipped=2" must not elect
        # the generic key=value reader.
        sample = Sample(full.name, full.head, full.is_text, [ln for ln in full.lines if not _is_engine_line(ln)])
        best: LineReader | None = None
        score = 0.0
        for r in self.others:
            s = r.sniff(sample)
            if s > score:
                best, score = r, s  # type: ignore[assignment]
        return best if score >= 0.3 else None

    def new_state(self) -> dict:
        return {"anchor": None, "since": 0, "overflows": 0, "breakdowns": 0, "scale": None, "pending": []}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        self._engine(line, sink, state)

    def finish(self, sink: Sink, state: dict) -> None:
        self._settle(sink, state, len(state["pending"]))  # no step ever shown: by count

    def _anchor(self, state: dict, step: int, sink: Sink | None = None) -> None:
        state["anchor"], state["since"] = step, 0
        if sink is not None:
            self._settle(sink, state, step)

    def _settle(self, sink: Sink, state: dict, last: int) -> None:
        """Write the overflows seen before any step, the last of them at step ``last``."""
        pending, state["pending"] = state["pending"], []
        for i, (line, data, new) in enumerate(pending):
            self._emit(line, sink, state, data, new, max(1, last - len(pending) + 1 + i))

    def _engine(self, line: Line, sink: Sink, state: dict) -> bool:
        """Handle one DeepSpeed line; False if the line is not DeepSpeed's."""
        text = line.text
        if "OVERFLOW" in text or "Overflow detected" in text:
            m = OVERFLOW_RE.search(text)
            if m:
                attempted = num(m.group(3)) if m.group(3) else None
                data: dict = {"tag": m.group(1), "rank": int(m.group(2)), "attempted": attempted}
                new: float | None = None
                if m.group(4):
                    new = num(m.group(4))
                elif m.group(5):
                    data["hysteresis"] = int(m.group(5))
                    data["new_hysteresis"] = int(m.group(6))
                    new = attempted  # hysteresis absorbs the overflow: the scale stays
                data["new"] = new
                bar = BAR_BEFORE_RE.search(text, 0, m.start())
                self._overflow(line, sink, state, data, new, int(bar.group(1)) + 1 if bar else None)
                return True
            m = FUSED_RE.search(text)
            if m:
                attempted, new = num(m.group(1)), num(m.group(2))
                self._overflow(line, sink, state, {"attempted": attempted, "new": new}, new)
                return True
        # Each search below only where its pattern's literal is in the line (a pattern cannot match
        # without it): most lines of a DeepSpeed run are none of these, and five searches cost more.
        m = PROGRESS_RE.search(text) if ", skipped=" in text else None
        if m:
            step = int(m.group(1))
            self._anchor(state, step, sink)
            sink.add("skipped", step, float(m.group(2)), line.no, line.rank)
            lrs = [num(x) for x in m.group(3).split(",") if x.strip()]
            for i, lr in enumerate(lrs):
                if lr is None:
                    continue
                if i == 0:
                    sink.add("lr", step, lr, line.no, line.rank)
                elif lr != lrs[0]:
                    sink.add(f"lr[{i}]", step, lr, line.no, line.rank)
            return True
        m = TPUT_RE.search(text) if "SamplesPerSec=" in text else None
        if m:
            if m.group(3) is not None:
                step = int(m.group(3))
                sink.add("micro_step", step, float(m.group(2)), line.no, line.rank)
            else:
                step = int(m.group(5))
            self._anchor(state, step, sink)
            for key, raw, _gb in TPUT_FIELD_RE.findall(m.group(6)):
                v = num(raw)
                if v is not None:
                    sink.add(key, step, v, line.no, line.rank)
            return True
        m = PIPE_RE.search(text) if "iter time (s): " in text else None
        if m:
            step = int(m.group(1))
            self._anchor(state, step, sink)
            loss = num(m.group(2))
            if loss is not None:
                sink.add("loss", step, loss, line.no, line.rank)
            for key, raw in PIPE_FIELD_RE.findall(m.group(3) or ""):
                v = num(raw)
                if v is not None:
                    sink.add(key, step, v, line.no, line.rank)
            for key, raw in (("iter time (s)", m.group(4)), ("samples/sec", m.group(5))):
                v = num(raw)
                if v is not None:
                    sink.add(key, step, v, line.no, line.rank)
            return True
        m = BREAKDOWN_RE.search(text) if "time (ms) | " in text else None
        if m and "iteration" not in text:
            state["breakdowns"] += 1
            step = state["anchor"] if state["anchor"] is not None else state["breakdowns"]
            for key, raw in BREAKDOWN_FIELD_RE.findall(m.group(1)):
                v = num(raw)
                if v is not None:
                    sink.add(f"{key} (ms)", step, v, line.no, line.rank)
            return True
        if "Current loss scale already at minimum" in text and MIN_SCALE_RE.search(text):
            return True  # the event itself comes from the shared signature scanner
        return bool(ENGINE_HINT_RE.search(text))

    def _overflow(self, line: Line, sink: Sink, state: dict, data: dict, new: float | None,
                  bar_step: int | None = None) -> None:
        state["overflows"] += 1
        if bar_step is not None:  # the progress bar on the same line says where the run is
            self._settle(sink, state, bar_step - 1)
            step = bar_step
        elif state["anchor"] is not None:
            state["since"] += 1
            step = state["anchor"] + state["since"]
        else:
            state["pending"].append((line, data, new))  # its step is known once the log shows one
            return
        self._emit(line, sink, state, data, new, step)

    def _emit(self, line: Line, sink: Sink, state: dict, data: dict, new: float | None, step: int) -> None:
        data["step_estimated"] = True
        attempted = data.get("attempted")
        if attempted is not None and new is not None and attempted == new and "hysteresis" not in data:
            data["at_minimum"] = True  # "Attempted loss scale: 1, reducing to 1": the scaler's floor
        if new is not None:
            state["scale"] = new
            sink.add("loss scale", step, new, line.no, line.rank)
        if attempted is None:
            msg = "DeepSpeed overflow: step skipped"
        elif "hysteresis" in data:
            msg = f"DeepSpeed overflow at loss scale {attempted:g}: step skipped, hysteresis {data['hysteresis']} -> {data['new_hysteresis']}"
        else:
            msg = f"DeepSpeed overflow: step skipped, loss scale {attempted:g} -> {new:g}" if new is not None \
                else f"DeepSpeed overflow at loss scale {attempted:g}: step skipped"
        sink.event(Event(EventKind.LOSS_SCALE, msg, sink.source.path if sink.source else "", line.no, line.raw,
                         step=step, rank=line.rank, data=data))
