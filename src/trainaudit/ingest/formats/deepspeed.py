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

Inside an HF Trainer log (the delegate :class:`~trainaudit.ingest.formats.hf.HFReader`, gated), the
log is read by segment shape (:mod:`~trainaudit.ingest.formats.shaped`): HF's tqdm redraws and train
dicts as HF reads them in bulk, and the engine's ``step=``/``skipped=``/``lr=[x]`` lines,
ThroughputTimer lines and ``OVERFLOW! ... reducing to`` lines of one shape with their numbers read
at once; the rest of a run of such lines (the order of the values, the steps the engine and HF
number, the events) is played line by line as :meth:`DeepSpeedReader.read_lines` plays it, without
decoding, matching or scanning a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from collections.abc import Iterator
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from trainaudit.ingest.base import Gate, LineReader, Priority, Sample, SpareNumbers, gate_pattern, registered_formats
from trainaudit.ingest.formats.generic import num
from trainaudit.ingest.formats.hf import HF_GATE_LITERALS, NUMBER_RE, RATE_KEY, HFReader, NumberedLines
from trainaudit.ingest.formats.shaped import (
    BLANK, OTHER, ROW, Chunk, chunk_numbers, RunValues, Shape, ShapeTable, Where, byte_offset, read_shaped, zeroed_pattern,
)
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.formats.text.lines import TextLogReader
from trainaudit.ingest.signatures import GRAD_OVERFLOW_RE, SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile, read_head
from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind, SourceKind

_N = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
OVERFLOW_RE = re.compile(
    r"\[(deepspeed|deepscale)\] OVERFLOW! Rank (\d+) Skipping step\.(?: Attempted loss scale: ([\d.]+),\s*"
    r"(?:reducing to ([\d.]+)|but hysteresis is (\d+)\. Reducing hysteresis to (\d+)))?")
# the fused optimizer's log_dist line; the unfused optimizer's older wording says "[deepspeed] fp16 dynamic
# loss scale overflow!" (deepspeed/runtime/fp16/unfused_optimizer.py, step)
FUSED_RE = re.compile(r"(?:Overflow detected\.|fp16 dynamic loss scale overflow!) Skipping step\. "
                      r"Attempted loss scale: ([\d.]+), reducing to ([\d.]+)")
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
ENGINE_GATE_RE = re.compile(ENGINE_GATE)
DS_HF_SHAPE = re.compile(zeroed_pattern(f"{ENGINE_GATE}|{HF_GATE_LITERALS}"))  # the gate in a line's shape
MAX_STEP_DIGITS = 15  # a step, rank or count read in bulk is exact as a float64
ENGINE_HINT_RE = re.compile(r"\[(?:deepspeed|deepscale)\]|DeepSpeed info: version=|\[Rank \d+\] step=\d+, skipped=")


def _is_engine_line(text: str) -> bool:
    return bool(OVERFLOW_RE.search(text) or FUSED_RE.search(text) or PROGRESS_RE.search(text)
                or TPUT_RE.search(text) or PIPE_RE.search(text) or MIN_SCALE_RE.search(text)
                or ENGINE_HINT_RE.search(text))


def _glued_before(text: str) -> str:
    """What an ``OVERFLOW!`` line has before the engine's tag: the training loop's own progress bar
    when the engine printed into it ("1/8614 [00:00<1:03:35, 2.26it/s, loss=265.25][deepscale]
    OVERFLOW! ..."), or nothing."""
    m = OVERFLOW_RE.search(text) if "OVERFLOW" in text else None
    return text[:m.start()] if m is not None and text[:m.start()].strip() else ""


def _beside_engine(text: str) -> str:
    """The part of a line that is not the engine's: the whole line, the loop's text an overflow is
    glued to, or nothing."""
    return text if not _is_engine_line(text) else _glued_before(text)


@dataclass(slots=True)
class EngineShape:
    """An engine line's shape read in bulk: ``what`` it is (``progress``: step, skipped, lr;
    ``tput``: step, micro step or none, then ``fields``; ``overflow``: rank, attempted, new, then
    the count of the bar before it when ``tag`` has one) and how to read its numbers (``keys``:
    their columns; ``bar`` is None: an engine line flushes no HF dict)."""

    what: str
    keys: tuple[str, ...]
    numbers: SpanNumbers
    fields: tuple[str, ...] = ()
    micro: bool = False
    tag: str = ""
    counted: bool = False
    bar: None = None


def _engine_shape(text: str) -> Shape:
    """What :meth:`DeepSpeedReader._engine` does with every segment of ``text``'s shape: a ``ROW``
    (:class:`EngineShape`) for a plain ``step=``/``skipped=`` line with one learning rate, a
    ThroughputTimer line of numbers, or an ``OVERFLOW! ... reducing to`` line; else ``OTHER``."""
    spans: list[tuple[int, int]] = []
    fields: list[str] = []
    micro = counted = False
    tag = ""
    if "OVERFLOW" in text or "Overflow detected" in text:
        m = OVERFLOW_RE.search(text)
        if m is None or m.group(4) is None or not all(NUMBER_RE.fullmatch(m.group(g)) for g in (3, 4)):
            return Shape(OTHER)
        what, tag, groups = "overflow", m.group(1), [m.group(g) for g in (2, 3, 4)]
        spans = [m.span(2), m.span(3), m.span(4)]
        bar = BAR_BEFORE_RE.search(text, 0, m.start())
        if bar is not None:
            counted = True
            spans.append(bar.span(1))
            groups.append(bar.group(1))
        ints = [groups[0]] + groups[3:]
    elif (m := PROGRESS_RE.search(text) if ", skipped=" in text else None) is not None:
        items = m.group(3).split(",")
        lr = items[0].strip() if len(items) == 1 else ""
        if NUMBER_RE.fullmatch(lr) is None:
            return Shape(OTHER)
        at = m.start(3) + items[0].index(lr)
        what, spans, ints = "progress", [m.span(1), m.span(2), (at, at + len(lr))], [m.group(1)]
    elif (m := TPUT_RE.search(text) if "SamplesPerSec=" in text else None) is not None:
        micro = m.group(3) is not None
        spans = [m.span(3), m.span(2)] if micro else [m.span(5)]
        ints = [m.group(3) if micro else m.group(5)]
        off = m.start(6)
        for f in TPUT_FIELD_RE.finditer(m.group(6)):
            if NUMBER_RE.fullmatch(f.group(2)) is None:
                return Shape(OTHER)
            fields.append(f.group(1))
            spans.append((off + f.start(2), off + f.end(2)))
        if len(set(fields)) != len(fields) or (micro and "micro_step" in fields) or not (micro or fields):
            return Shape(OTHER)
        what = "tput"
    else:
        return Shape(OTHER)
    if any(len(d) > MAX_STEP_DIGITS for d in ints):
        return Shape(OTHER)
    byte_spans = tuple((byte_offset(text, a), byte_offset(text, b)) for a, b in spans)
    numbers = SpanNumbers(text.encode("utf-8").decode("latin-1"), byte_spans)  # a character a byte
    keys = tuple(f"\x00ds{j}" for j in range(len(spans)))  # columns no HF dict key names
    return Shape(ROW, EngineShape(what, keys, numbers, tuple(fields), micro, tag, counted))


class DeepSpeedReader(LineReader):
    name = "deepspeed"
    kind = SourceKind.LOG
    priority = Priority.RUNTIME
    description = "DeepSpeed engine lines (overflow/loss scale, step/skipped/lr, ThroughputTimer) inside any training log"

    bulk: ClassVar[bool] = True  # read by shape inside a gated HF log (False: line by line; the tests compare)

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
        if self.bulk and isinstance(delegate, HFReader) and delegate.gate is not None:
            sink.meta("framework", f"deepspeed+{delegate.name}")
            mixed = _WithHF(self, delegate)

            def place(table: ShapeTable, chunk: Chunk, start: int, stop: int, base: int) -> int:
                return mixed.place(table, sink, state, chunk, start, stop, base)

            state = mixed.new_state()
            read_shaped(mixed, inp, sink, mixed.shape_table, state, place, prepare=mixed.prepare)
            return
        self.read_lines(inp, sink, delegate)

    def read_lines(self, inp: InputFile, sink: Sink, delegate: LineReader | None) -> None:
        """The log line by line: each line the engine's, else the delegate's."""
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
                # a hand-rolled loop's bar the overflow is glued to, first: its step is the one the overflow
                # follows (the HF Trainer's bar carries no metric; the engine reads its step itself)
                glued = _glued_before(line.text) if isinstance(delegate, TextLogReader) else ""
                if glued:
                    self._delegated(delegate, replace(line, text=glued), sink, state, dstate)  # type: ignore[arg-type]
                if not self._engine(line, sink, state) and delegate is not None:
                    self._delegated(delegate, line, sink, state, dstate)
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
        # Sniff the others on the non-DeepSpeed lines (and the text overflows are glued to) only:
        # "step=40, skipped=2" must not elect the generic key=value reader.
        sample = Sample(full.name, full.head, full.is_text, [t for ln in full.lines if (t := _beside_engine(ln))])
        best: LineReader | None = None
        score = 0.0
        for r in self.others:
            s = r.sniff(sample)
            if s > score:
                best, score = r, s  # type: ignore[assignment]
        if score >= 0.3:
            return best
        # no framework of its own: a hand-rolled loop prints the loss ("epoch 0 iter 10 loss 2.34", a tqdm
        # postfix "loss=nan"), read as any text log is, line by line as a growing log is (its step counter
        # decided after a few records, so the overflows between them count from the loop's own steps)
        text = TextLogReader()
        return text if sample.lines and text.sniff(sample) >= TextLogReader.FOUND else None

    def new_state(self) -> dict:
        return {"anchor": None, "since": 0, "overflows": 0, "breakdowns": 0, "scale": None, "pending": [],
                "iteration": None}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        self._engine(line, sink, state)

    def finish(self, sink: Sink, state: dict) -> None:
        self._settle(sink, state, len(state["pending"]))  # no step ever shown: by count

    def _delegated(self, delegate: LineReader, line: Line, sink: Sink, state: dict, dstate: dict) -> None:
        before = sink.last_step
        delegate.feed(line, sink, dstate)
        if sink.last_step is not None and sink.last_step != before:
            self._anchor(state, sink.last_step, sink)  # overflows count from the framework's own step

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
        if "Grad overflow on iteration" in text and (g := GRAD_OVERFLOW_RE.search(text)) is not None:
            # the fp16 optimizer's _update_scale names the iteration of the overflow its step line reports next
            state["iteration"] = int(g.group("step"))
            return True
        if "OVERFLOW" in text or "Overflow detected" in text or "scale overflow!" in text:
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
                # the optimizer's iteration only where the log shows no step of its own (it may count
                # optimizer steps where the log counts micro-steps)
                at, state["iteration"] = state["iteration"], None
                self._overflow(line, sink, state, {"attempted": attempted, "new": new}, new,
                               at if state["anchor"] is None else None)
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
        sink.event(Event(EventKind.LOSS_SCALE, overflow_message(data, attempted, new),
                         sink.source.path if sink.source else "", line.no, line.raw, step=step, rank=line.rank,
                         data=data))


def overflow_message(data: dict, attempted: float | None, new: float | None) -> str:
    """The message of an overflow event (``data``: its event data)."""
    if attempted is None:
        return "DeepSpeed overflow: step skipped"
    if "hysteresis" in data:
        return (f"DeepSpeed overflow at loss scale {attempted:g}: step skipped, hysteresis {data['hysteresis']} -> "
                f"{data['new_hysteresis']}")
    return f"DeepSpeed overflow: step skipped, loss scale {attempted:g} -> {new:g}" if new is not None \
        else f"DeepSpeed overflow at loss scale {attempted:g}: step skipped"


class _WithHF(LineReader):
    """The engine and its HF delegate as one line reader for :func:`read_shaped` (state: the
    engine's under ``ds``, HF's under ``hf``), with the table's look at a new shape and the
    placing of a run of lines without ``OTHER``."""

    gate = DS_GATES["hf"]  # (no ``name``: not a format of its own)
    fast: ClassVar[bool] = True  # runs placed with arrays where they can be (False: a line at a time; the tests compare)

    def __init__(self, engine: DeepSpeedReader, hf: HFReader) -> None:
        self.engine, self.hf = engine, hf

    def sniff(self, sample: Sample) -> float:
        return 0.0  # never asked: DeepSpeedReader reads with it

    def new_state(self) -> dict:
        return {"ds": self.engine.new_state(), "hf": self.hf.new_state()}

    def awaits(self, state: dict) -> bool:
        return self.hf.awaits(state["hf"])

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        if not self.engine._engine(line, sink, state["ds"]):
            self.engine._delegated(self.hf, line, sink, state["ds"], state["hf"])

    def finish(self, sink: Sink, state: dict) -> None:
        self.hf.finish(sink, state["hf"])
        self.engine.finish(sink, state["ds"])

    def classify(self, text: str, quiet: bool, where: Where) -> Shape:
        if not where.plain:
            return Shape(OTHER)  # ANSI codes or a launcher prefix: the line reader's
        if ENGINE_GATE_RE.search(text) is not None:
            return _engine_shape(text)
        return self.hf._classify(text, quiet, where, ("train", "eval"))

    def place(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
              base: int) -> int:
        """Lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`feed` reads them: with arrays where
        :meth:`_bulk` can, else a line at a time (:meth:`_lines`). A dict still waiting for its bar
        when the run starts is flushed line by line first."""
        shown = np.flatnonzero(chunk.kind[start:stop] != BLANK) + start
        if not shown.shape[0]:
            return stop
        got = chunk_numbers(table, chunk, "deepspeed", NumberedLines)
        if not self.fast:
            self._lines(table, sink, state, chunk, got, shown.tolist(), base)
            return stop
        engine, what = self._codes(table)
        flushes = ~engine[chunk.first[shown]]  # a line that flushes a waiting dict: its first segment is not the engine's
        code = np.where(chunk.kind[shown] == ROW, what[chunk.row[shown]], _NONE)
        k = 0
        if state["hf"]["pending"] is not None:
            at = np.flatnonzero(flushes & (code != _DICT))  # the first line after which no dict waits
            k = int(at[0]) + 1 if at.shape[0] else shown.shape[0]
            self._lines(table, sink, state, chunk, got, shown[:k].tolist(), base)
        if k < shown.shape[0] and not self._bulk(table, sink, state, chunk, got, shown[k:], flushes[k:], code[k:],
                                                 base):
            self._lines(table, sink, state, chunk, got, shown[k:].tolist(), base)
        return stop

    @staticmethod
    def _codes(table: ShapeTable) -> tuple[NDArray[np.bool_], NDArray[np.int8]]:
        """For each shape of ``table``: whether it is an engine line's, and what its ``ROW`` is."""
        got = table.memo.get("deepspeed")
        if got is None or got[1].shape[0] != len(table.shapes):
            engine = np.array([isinstance(s.info, EngineShape) for s in table.shapes], dtype=bool)
            what = np.array([_WHAT[s.info.what] if isinstance(s.info, EngineShape) else _NONE if s.kind != ROW
                             else _DICT if s.info.kind == "train" else _EVAL for s in table.shapes], dtype=np.int8)
            got = table.memo["deepspeed"] = (engine, what)
        return got  # type: ignore[no-any-return]

    def shape_table(self) -> ShapeTable:
        return ShapeTable(DS_HF_SHAPE, self.classify)

    def prepare(self, table: ShapeTable, chunk: Chunk) -> None:
        """The chunk's numbers read at once (in a worker process, for a large file)."""
        chunk_numbers(table, chunk, "deepspeed", NumberedLines)

    def _lines(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, got: NumberedLines, shown: list[int],
               base: int) -> None:
        """The non-blank lines ``shown`` as :meth:`feed` reads them, a line at a time but with the
        numbers read at once: an HF train dict waits for the first non-blank segment of the next
        line that the engine does not take (its bar's count numbers it), and every value goes to
        the sink in the line reader's order."""
        shapes = table.shapes
        ds, hs = state["ds"], state["hf"]
        sink = into = RunValues(sink)
        engine, hf = self.engine, self.hf
        first, row, kind = chunk.first, chunk.row, chunk.kind
        counts, totals, widths = got.counts, got.totals, got.widths
        columns = got.columns
        for i in shown:
            if hs["pending"] is not None and not isinstance(shapes[int(first[i])].info, EngineShape):
                before = sink.last_step
                w = int(widths[i])
                hf._flush(sink, hs, int(counts[i]) if w else None, str(int(totals[i])).zfill(w) if w else None,
                          got.rate_at(i, base) if w else None)
                if sink.last_step is not None and sink.last_step != before:
                    engine._anchor(ds, sink.last_step, sink)
            if kind[i] != ROW:
                continue
            info = shapes[int(row[i])].info
            no = base + i + 1
            if not isinstance(info, EngineShape):
                if info.kind == "train":  # a train dict without a step: it waits for the next bar
                    HFReader.wait(chunk, got, hs, i, base)
                    continue
                before = sink.last_step  # an eval dict: at HF's last step
                hf._write({key: float(columns[key][0][i]) for key in info.keys}, info.kind, hs["last_step"],
                          Line(no, "", None, ""), sink, hs)
                if sink.last_step is not None and sink.last_step != before:
                    engine._anchor(ds, sink.last_step, sink)
                continue
            v = [float(columns[key][0][i]) for key in info.keys]
            if info.what == "progress":
                step = int(v[0])
                engine._anchor(ds, step, sink)
                sink.add("skipped", step, v[1], no, None)
                sink.add("lr", step, v[2], no, None)
            elif info.what == "tput":
                step = int(v[0])
                if info.micro:
                    sink.add("micro_step", step, v[1], no, None)
                    v = v[1:]
                engine._anchor(ds, step, sink)
                for key, x in zip(info.fields, v[1:]):
                    sink.add(key, step, x, no, None)
            else:
                data: dict = {"tag": info.tag, "rank": int(v[0]), "attempted": v[1], "new": v[2]}
                raw = chunk.lines[i].decode("utf-8").rstrip("\r\n")
                engine._overflow(Line(no, "", None, raw), sink, ds, data, v[2], int(v[3]) + 1 if info.counted else None)
        into.done()

    def _bulk(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, got: NumberedLines,
              shown: NDArray[np.int64], flushes: NDArray[np.bool_], code: NDArray[np.int8], base: int) -> bool:
        """The non-blank lines ``shown`` (no dict waiting before them) placed with arrays, as
        :meth:`_lines` places them; False, with nothing placed, where they are not as assumed here.

        What :meth:`_lines` does in order is a list of actions: a dict flushed by a line's bar,
        then the engine's record of the line. Flushes, ``step=`` and ThroughputTimer lines anchor
        the overflow count; an overflow glued to a bar is one step past the bar, any other is
        ``since`` steps past the last anchor. A flush anchors only where it moves the last step
        written, which holds when the step written before it differs from its own: every action
        writes a value at its step, so that is checked on the steps found assuming it (where it
        fails, the run is read line by line). Overflows before any anchor, and a metric that HF's
        dicts and the engine both write, are left to :meth:`_lines` too."""
        ds, hs = state["ds"], state["hf"]
        if ds["pending"]:
            return False
        shapes = table.shapes
        m = shown.shape[0]
        pos = np.arange(m)
        fpos = pos[flushes]
        dpos = pos[code == _DICT]
        nxt = np.searchsorted(fpos, dpos, side="right")
        waits = None
        if dpos.shape[0] and nxt[-1] >= fpos.shape[0]:  # the last dict waits for a line past the run
            waits = int(shown[dpos[-1]])
            dpos, nxt = dpos[:-1], nxt[:-1]
        fpos = fpos[nxt]
        rows, bars = shown[dpos], shown[fpos]
        nf = rows.shape[0]
        numbered = dict(hs)  # HF's state once the dicts are numbered
        hsteps = HFReader.bar_steps(numbered, got.counts[bars], got.totals[bars], got.widths[bars]) if nf \
            else np.empty(0, dtype=np.int64)
        vpos = pos[code == _EVAL]  # eval dicts, at HF's last step
        vrows = shown[vpos]
        hf_keys = {key for s in np.unique(chunk.row[np.concatenate([rows, vrows])]).tolist() for key in shapes[s].info.keys}
        if RATE_KEY in hf_keys:
            return False
        # the engine's rows, a group per shape: its rows (indices into epos) and their numbers
        epos = pos[(code >= _PROGRESS) & (code != _EVAL)]
        erows = shown[epos]
        esid = chunk.row[erows]
        estep = np.zeros(erows.shape[0], dtype=np.int64)
        counted = np.zeros(erows.shape[0], dtype=bool)
        groups: list[tuple[EngineShape, NDArray[np.int64], NDArray[np.float64]]] = []
        for s in np.unique(esid).tolist():
            info = shapes[s].info
            sel = np.flatnonzero(esid == s)
            v = np.stack([got.columns[key][0][erows[sel]] for key in info.keys], axis=1)
            groups.append((info, sel, v))
            if info.what != "overflow":
                estep[sel] = v[:, 0].astype(np.int64)
            elif info.counted:
                estep[sel] = v[:, 3].astype(np.int64) + 1
                counted[sel] = True
            names = ({"skipped", "lr"} if info.what == "progress" else {"loss scale"} if info.what == "overflow"
                     else {*info.fields, "micro_step"})
            if names & hf_keys or (nf and RATE_KEY in names):
                return False
        # the actions in order: a line's flush (2 * position) before its engine record (2 * position + 1)
        order = np.argsort(np.concatenate([fpos * 2, epos * 2 + 1, vpos * 2 + 1]), kind="stable")
        n, ne = order.shape[0], epos.shape[0]
        act = np.empty(n, dtype=np.int64)
        act[order] = np.arange(n)  # each flush's, then each engine row's, then each eval dict's action
        typ = np.concatenate([np.zeros(nf, dtype=np.int8), code[epos], code[vpos]])[order]
        step = np.concatenate([hsteps, estep, np.zeros(vpos.shape[0], dtype=np.int64)])[order]
        loose = np.concatenate([np.zeros(nf, dtype=bool), (code[epos] == _OVERFLOW) & ~counted,
                                np.zeros(vpos.shape[0], dtype=bool)])[order]
        if vpos.shape[0]:  # an eval dict is written at the step of the last dict flushed before it
            evals = typ == _EVAL
            last_flush = np.maximum.accumulate(np.where(typ == 0, np.arange(n), -1))[evals]
            step[evals] = np.where(last_flush >= 0, step[last_flush], hs["last_step"])
        since = np.cumsum(loose)
        anchoring = typ != _OVERFLOW
        flushed = np.flatnonzero((typ == 0) | (typ == _EVAL))  # HF's writes: they anchor where they move the last step
        first = sink.last_step if sink.last_step is not None else _NO_STEP
        for _ in range(_ROUNDS):
            got_steps = _overflow_steps(step, loose, anchoring, since, ds["anchor"], ds["since"])
            if got_steps is None:
                return False
            before = np.concatenate([[first], got_steps[:-1]])[flushed]
            wrong = anchoring[flushed] != (before != got_steps[flushed])
            if not wrong.any():
                step = got_steps
                break
            anchoring[flushed[wrong]] = ~anchoring[flushed[wrong]]
        else:
            return False
        anchors = np.flatnonzero(anchoring)
        # nothing refused: place it
        into = _Parts(sink)
        if vpos.shape[0] and "framework" not in hs:
            hs["framework"] = True
            sink.meta("framework", "hf")
        if nf:
            hs.update((key, numbered[key]) for key in ("n_train", "last_step", "interval", "bar_total"))
            self.hf._rows(got, into, hs, rows, bars, base, hsteps)
        if waits is not None:
            HFReader.wait(chunk, got, hs, waits, base)
        dict_lines, bar_lines = rows + base + 1, bars + base + 1
        parts: dict[str, list[tuple[int, int, NDArray[np.int64], NDArray[np.int64], NDArray[np.float64],
                                    NDArray[np.int64]]]] = {}
        for sub, (metric, st, vs, ln) in enumerate(into.parts):  # each metric once, in the order HF writes them
            acts = act[np.searchsorted(bar_lines if metric == RATE_KEY else dict_lines, ln)]
            parts[metric] = [(int(acts[0]), sub, acts, st, vs, ln)]
        for s in np.unique(chunk.row[vrows]).tolist():
            sel = np.flatnonzero(chunk.row[vrows] == s)
            acts = act[nf + ne + sel]
            for sub, key in enumerate(shapes[s].info.keys):
                parts.setdefault(key, []).append((int(acts[0]), sub, acts, step[acts], got.columns[key][0][vrows[sel]],
                                                  vrows[sel] + base + 1))
        if vpos.shape[0] and "epoch" in got.columns:
            # the eval dicts' epochs, as HFReader._write records them (in the order they come)
            values, has = got.columns["epoch"]
            at = np.flatnonzero(has[vrows])
            HFReader.evaluated(hs, step[act[nf + ne + at]].tolist(), values[vrows[at]].tolist())
        overflows: list[tuple[NDArray[np.int64], str, NDArray[np.float64], NDArray[np.int64]]] = []
        for info, sel, v in groups:
            acts = act[nf + sel]
            at = step[acts]
            lines = erows[sel] + base + 1
            if info.what == "progress":
                columns = [("skipped", v[:, 1]), ("lr", v[:, 2])]
            elif info.what == "tput":
                columns = ([("micro_step", v[:, 1])] if info.micro else []) + \
                    [(key, v[:, j]) for j, key in enumerate(info.fields, 2 if info.micro else 1)]
            else:
                columns = [("loss scale", v[:, 2])]
                overflows.append((acts, info.tag, v, erows[sel]))
            for sub, (metric, values) in enumerate(columns):
                parts.setdefault(metric, []).append((int(acts[0]), sub, acts, at, values, lines))
        merged = sorted(((metric, _merged(got_parts)) for metric, got_parts in parts.items()), key=lambda p: p[1][:2])
        for metric, (_, _, _, st, vs, ln) in merged:  # each metric in the order of its first value
            sink.add_many(metric, st, vs, ln)
        if n:
            sink.last_step = int(step[-1])
        if anchors.shape[0]:
            ds["anchor"], ds["since"] = int(step[anchors[-1]]), int(since[-1] - since[anchors[-1]])
        elif n:
            ds["since"] += int(since[-1])
        self._events(sink, ds, chunk, base, overflows, step)
        return True

    @staticmethod
    def _events(sink: Sink, ds: dict, chunk: Chunk, base: int,
                overflows: list[tuple[NDArray[np.int64], str, NDArray[np.float64], NDArray[np.int64]]],
                step: NDArray[np.int64]) -> None:
        """The overflow events of a run placed by :meth:`_bulk`, in line order, as
        :meth:`DeepSpeedReader._emit` writes them (``overflows``: a group per shape, with its actions,
        tag, numbers and lines)."""
        if not overflows:
            return
        acts = np.concatenate([g[0] for g in overflows])
        order = np.argsort(acts, kind="stable")
        tags = np.concatenate([np.full(g[0].shape[0], k) for k, g in enumerate(overflows)])[order].tolist()
        v = np.concatenate([g[2][:, :3] for g in overflows])[order]
        lines = np.concatenate([g[3] for g in overflows])[order].tolist()
        src = sink.source.path if sink.source else ""
        at = step[acts[order]].tolist()
        data_of = chunk.lines.data
        starts, ends = chunk.lines.starts[lines].tolist(), chunk.lines.ends[lines].tolist()
        tags = [overflows[k][1] for k in tags]

        def build() -> Iterator[Event]:
            kind = EventKind.LOSS_SCALE
            messages: dict[tuple[float, float], str] = {}
            for k, (rank, attempted, new) in enumerate(v.tolist()):
                data: dict = {"tag": tags[k], "rank": int(rank), "attempted": attempted, "new": new,
                              "step_estimated": True}
                if attempted == new:
                    data["at_minimum"] = True  # "Attempted loss scale: 1, reducing to 1": the scaler's floor
                msg = messages.get((attempted, new))
                if msg is None:
                    msg = messages[(attempted, new)] = overflow_message(data, attempted, new)
                yield Event(kind, msg, src, base + lines[k] + 1, data_of[starts[k]:ends[k]].decode("utf-8").rstrip("\r\n"),
                            at[k], None, data)

        sink.events(EventKind.LOSS_SCALE, len(lines), build)
        ds["overflows"] += len(lines)
        ds["scale"] = float(v[-1, 2])


_NONE, _DICT, _PROGRESS, _TPUT, _OVERFLOW, _EVAL = 0, 1, 2, 3, 4, 5  # what a line's ROW is (_WithHF._codes)
_WHAT = {"progress": _PROGRESS, "tput": _TPUT, "overflow": _OVERFLOW}
_NO_STEP = -(1 << 62)  # no step written yet (a step is never this)
_ROUNDS = 8  # at most so many corrections of which flushes anchor (then the run is read line by line)


def _overflow_steps(step: NDArray[np.int64], loose: NDArray[np.bool_], anchoring: NDArray[np.bool_],
                    since: NDArray[np.int64], anchor: int | None, since0: int) -> NDArray[np.int64] | None:
    """``step`` with the steps of the ``loose`` overflows (those not glued to a bar) filled in:
    each ``since`` overflows past the last ``anchoring`` action (``since``: the running count of
    loose overflows), or past ``anchor`` and ``since0`` (the state before the run); None where
    one comes before any anchor at all."""
    out = step.copy()
    if not out.shape[0]:
        return out
    last = np.maximum.accumulate(np.where(anchoring, np.arange(out.shape[0]), -1))
    early = loose & (last < 0)
    if early.any():
        if anchor is None:
            return None
        out[early] = anchor + since0 + since[early]
    late = loose & (last >= 0)
    out[late] = out[last[late]] + since[late] - since[last[late]]
    return out
Part = tuple[int, int, NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]


def _merged(parts: list[Part]) -> Part:
    """One metric's parts (first action, its place among the values of that action, each value's
    action, steps, values, lines) as one, in the order of the actions."""
    if len(parts) == 1:
        return parts[0]
    first = min(parts, key=lambda p: p[:2])
    acts = np.concatenate([p[2] for p in parts])
    order = np.argsort(acts, kind="stable")
    return (first[0], first[1], acts[order], np.concatenate([p[3] for p in parts])[order],
            np.concatenate([p[4] for p in parts])[order], np.concatenate([p[5] for p in parts])[order])


class _Parts(RunValues):
    """What :meth:`HFReader._rows` hands over, kept as it comes (metric, steps, values, lines);
    events and metadata passed on."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.parts: list[tuple[str, NDArray[np.int64], NDArray[np.float64], NDArray[np.int64]]] = []

    def add_many(self, metric: str, steps: ArrayLike, values: ArrayLike, lines: ArrayLike) -> None:
        self.parts.append((metric, np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64),
                           np.asarray(lines, dtype=np.int64)))
