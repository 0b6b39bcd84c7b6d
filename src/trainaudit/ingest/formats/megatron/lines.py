"""Megatron-LM, Megatron-DeepSpeed, Megatron-Bridge and nanotron iteration lines.

``iteration 43/ 100 | consumed samples: 5504 | ... | lm loss: 1.825991E+00 | ... |``

Megatron drops a NaN loss from the line instead of printing ``nan`` (``training_log`` in
megatron/training/training.py prints a loss only ``if avg >= 0.0``, false for NaN): a loss key
seen on earlier lines and absent on this one becomes a NaN value at this step plus a
``missing_metric`` event, never silence.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from trainaudit.ingest.base import LineReader, Sample, SpareNumbers
from trainaudit.ingest.formats.megatron import bulk as fast
from trainaudit.ingest.formats.megatron.grammar import CONTINUED_RE, FIELD_RE, ITER_RE, SKIP_KEYS, field_value, is_loss_key
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import Event, EventKind, SourceKind

MEMORY_RE = re.compile(r"\(after (\d+) iterations\) memory \(MB\)(.*)")
# evaluate_and_print_results (megatron/training/training.py): " validation loss at iteration 1000 |
# lm loss value: 6.439325E+00 | lm loss PPL: 6.259840E+02 |"; the evaluation at the end of training
# ("at the end of training for val data") has no iteration and is left to the generic events
VALIDATION_RE = re.compile(r"validation(?: [\w-]{1,40})? loss at iteration (\d{1,12})[^|]{0,80}\|")
PHASE_RE = re.compile(r"^\[(after training is done|exiting program[^\]]*|before the start of training step|"
                      r"after model, optimizer, and learning rate scheduler are built)\] datetime: (.*)$")
EXIT_ITER_RE = re.compile(r"exiting program at iteration (\d+)")
WORLD_RE = re.compile(r"using world size: (\d+)")
VOCAB_RE = re.compile(r"padded vocab \(size: (\d+)\)")
ARG_RE = re.compile(r"^\s{2}(train_iters|log_interval|seq_length|global_batch_size|micro_batch_size|lr|"
                    r"min_lr|lr_warmup_iters|clip_grad|fp16|bf16|loss_scale|vocab_size)\s\.+\s(\S+)\s*$")


@dataclass
class _Open:
    """The iteration line read last, while the lines after it may be its wrapped rest."""

    step: int
    seen: set[str]
    line: Line
    last: int


class MegatronReader(LineReader):
    name = "megatron"
    kind = SourceKind.LOG
    description = ("Megatron-LM / Megatron-DeepSpeed / Megatron-Bridge / nanotron stdout ('iteration N/ M | key: value |', "
                   "'validation loss at iteration N | lm loss value: X |')")

    def __init__(self, fast: bool = True, chunk_size: int | None = None, workers: int | None = None) -> None:
        # fast=False keeps the plain line-by-line path (the reference semantics of the fast one).
        self.fast = fast
        self.chunk_size = chunk_size
        self.workers = workers

    def read(self, inp: InputFile, sink: Sink) -> None:
        """Bulk path (``megatron_fast``) when the log's iteration lines share one layout; the line
        path otherwise. Both give the same series, events and meta."""
        tpl = None
        if self.fast:
            with inp.open() as f:
                tpl = fast.find_template(f.read(1 << 20))
        if tpl is None:
            super().read(inp, sink)
            return
        scanner = SignatureScanner(inp.display)
        state = self.new_state()
        spare = SpareNumbers(sink, along=False)  # a template is an iteration line: found nothing is rare
        fast.read_fast(self, tpl, inp, sink, scanner, state, self.chunk_size or fast.CHUNK_SIZE, self.workers)
        for ev in scanner.finish():
            sink.event(ev)
        self.finish(sink, state)
        spare.end(inp)

    def sniff(self, sample: Sample) -> float:
        n = self.count_matches(sample, ITER_RE)
        if n == 0:
            return 0.0
        return 0.9 if any(FIELD_RE.search(ln) for ln in sample.lines if ITER_RE.search(ln)) else 0.3

    def new_state(self) -> dict:
        return {"loss_keys": set(), "open": None}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        m = ITER_RE.search(text)
        if m is None:
            if self._continues(line, sink, state):
                return
            self._close(sink, state)
            self._other(line, sink, state)
            return
        self._close(sink, state)
        step = int(m.group(1))
        if "train_iters" not in state:
            state["train_iters"] = int(m.group(2))
            sink.meta("train_iters", int(m.group(2)))
        seen = self._fields(text, step, line, sink)
        state["open"] = _Open(step, seen, line, line.no)
        if any(is_loss_key(k) for k in seen):
            self._close(sink, state)  # a whole line: its missing losses are known now

    def finish(self, sink: Sink, state: dict) -> None:
        self._close(sink, state)

    @staticmethod
    def _fields(text: str, step: int, line: Line, sink: Sink) -> set[str]:
        seen: set[str] = set()
        for key, raw in FIELD_RE.findall(text):
            key = key.strip()
            if key in SKIP_KEYS or key.endswith("iteration"):
                continue
            v = field_value(raw)
            if v is None:
                continue
            seen.add(key)
            sink.add(key, step, v, line.no, line.rank)
        return seen

    def _continues(self, line: Line, sink: Sink, state: dict) -> bool:
        """An iteration line wrapped over several lines as pasted ("iteration 5/50 | elapsed time per
        iteration: 21392.5 ms |" then "loss scale: 1.0 | grad norm: nan |"): the fields of the line
        right after it are the iteration's."""
        opened: _Open | None = state["open"]
        if opened is None or line.no != opened.last + 1 or CONTINUED_RE.match(line.text) is None:
            return False
        opened.seen |= self._fields(line.text, opened.step, line, sink)
        opened.last = line.no
        return True

    @staticmethod
    def _close(sink: Sink, state: dict) -> None:
        """The losses an iteration's line(s) left out: Megatron omits a NaN loss."""
        opened: _Open | None = state["open"]
        if opened is None:
            return
        state["open"] = None
        step, seen, line = opened.step, opened.seen, opened.line
        losses: set[str] = state["loss_keys"]
        for key in seen:
            if is_loss_key(key):
                losses.add(key)
        missing = sorted(k for k in losses if k not in seen)
        for key in missing:
            sink.add(key, step, math.nan, line.no, line.rank)
        if missing or not any(is_loss_key(k) for k in seen):
            names = ", ".join(missing) if missing else "loss"
            sink.event(Event(EventKind.MISSING_METRIC,
                             f"iteration {step}: {names} absent from the line (Megatron omits a NaN/Inf loss)",
                             sink.source.path if sink.source else "", line.no, line.raw, step=step, rank=line.rank,
                             data={"metrics": missing or ["loss"], "assumed_nan": True}))

    def _other(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        src = sink.source.path if sink.source else ""
        m = VALIDATION_RE.search(text)
        if m:
            step = int(m.group(1))
            for key, raw in FIELD_RE.findall(text[m.end():]):
                v = field_value(raw)
                if v is not None:  # "lm loss value" -> "validation lm loss", "lm loss PPL" -> "validation lm loss PPL"
                    sink.add(f"validation {key.strip().removesuffix(' value')}", step, v, line.no, line.rank)
            return
        m = MEMORY_RE.search(text)
        if m:
            step = int(m.group(1))
            for key, raw in FIELD_RE.findall(m.group(2)):
                v = field_value(raw)
                if v is not None:
                    sink.add(f"mem {key.strip()} (MB)", step, v, line.no, line.rank)
            return
        m = PHASE_RE.search(text)
        if m:
            phase = m.group(1)
            data: dict = {"phase": phase, "time": m.group(2).strip()}
            it = EXIT_ITER_RE.search(phase)
            if it:
                data["iteration"] = int(it.group(1))
            if phase == "after training is done" or phase.startswith("exiting program"):
                data["completed"] = True
            sink.event(Event(EventKind.PHASE, phase, src, line.no, line.raw, rank=line.rank, data=data))
            return
        for pat, key in ((WORLD_RE, "world_size"), (VOCAB_RE, "vocab_size")):
            m = pat.search(text)
            if m:
                sink.meta(key, int(m.group(1)))
                return
        m = ARG_RE.match(text)
        if m:
            v = parse_number(m.group(2))
            sink.meta(f"config.{m.group(1)}", v if v is not None else m.group(2))
