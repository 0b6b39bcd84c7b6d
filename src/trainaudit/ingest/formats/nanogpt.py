"""nanoGPT ``train.py`` stdout, and llm.c's ``step N/M: train loss X`` lines.

nanoGPT (karpathy/nanoGPT ``train.py``)::

    iter 36298: loss 5.8465, time 148.74ms, mfu 0.01%          -> loss, time_ms, mfu (percent)
    step 3000: train loss 4.0390, val loss 4.0427                -> train/loss, val/loss (W&B names)

The step is ``iter_num``. ``mfu -100.00%`` is nanoGPT's "not measured yet" sentinel for the first
iterations of every (re)start, not a value, so it is skipped. ``loss nan`` becomes NaN.
``saving checkpoint to DIR`` is a phase event.

llm.c (``train_gpt2.cu`` printf ``step %4d/%d: train loss %f (%f ms, %d tok/s)``, and the CPU
``train_gpt2.c`` ``step %d: train loss %f (took %f ms)``): these carry no ``val loss`` on the
same line; they give ``loss``, ``time_ms`` and ``tok/s``. Only these two printf templates are
supported.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import Event, EventKind, SourceKind

# Digits possessive: "\d+\.?\d*" could split a run of digits in as many ways as it is long, and
# does when what follows fails ("loss 111...1" without ", time").
NUM = r"[-+]?(?:(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?|nan|NaN|inf|Inf|-nan)"
ITER_RE = re.compile(r"\biter (\d+): loss (" + NUM + r"), time ([\d.]+)ms(?:, mfu (-?[\d.]+)%)?")
EVAL_RE = re.compile(r"\bstep (\d+): train loss (" + NUM + r"), val loss (" + NUM + r")")
LLMC_RE = re.compile(r"\bstep\s+(\d+)(?:/(\d+))?: train loss (" + NUM + r")(?![\d.,])(.*)$")
LLMC_MS_RE = re.compile(r"\(?(?:took )?(?<![\d.])([\d.]++) ms")
LLMC_TOKS_RE = re.compile(r"(?<!\d)(\d++) tok/s")
CKPT_RE = re.compile(r"\bsaving checkpoint to (\S+)")
MFU_SENTINEL = -100.0


class NanoGPTReader(LineReader):
    name = "nanogpt"
    kind = SourceKind.LOG
    description = "nanoGPT train.py ('iter N: loss X, time Yms, mfu Z%', 'step N: train loss X, val loss Y') and llm.c"

    def sniff(self, sample: Sample) -> float:
        n = sum(1 for ln in sample.lines if ITER_RE.search(ln) or EVAL_RE.search(ln) or LLMC_RE.search(ln))
        if n == 0:
            return 0.0
        return 0.85 if n >= 2 else 0.6

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if "loss" in text:
            m = ITER_RE.search(text)
            if m:
                self._framework(sink, state, "nanogpt")
                step = int(m.group(1))
                self._add(sink, "loss", step, m.group(2), line)
                self._add(sink, "time_ms", step, m.group(3), line)
                if m.group(4) is not None:
                    mfu = parse_number(m.group(4))
                    if mfu is not None and mfu != MFU_SENTINEL:
                        sink.add("mfu", step, mfu, line.no, line.rank)
                return
            m = EVAL_RE.search(text)
            if m:
                self._framework(sink, state, "nanogpt")
                step = int(m.group(1))
                self._add(sink, "train/loss", step, m.group(2), line)
                self._add(sink, "val/loss", step, m.group(3), line)
                return
            m = LLMC_RE.search(text)
            if m:
                self._framework(sink, state, "llm.c")
                step = int(m.group(1))
                if m.group(2) and "llmc_total" not in state:
                    state["llmc_total"] = int(m.group(2))
                    sink.meta("num_iterations", int(m.group(2)))
                self._add(sink, "loss", step, m.group(3), line)
                rest = m.group(4)
                ms = LLMC_MS_RE.search(rest)
                if ms:
                    self._add(sink, "time_ms", step, ms.group(1), line)
                toks = LLMC_TOKS_RE.search(rest)
                if toks:
                    self._add(sink, "tok/s", step, toks.group(1), line)
                return
        m = CKPT_RE.search(text)
        if m:
            src = sink.source.path if sink.source else ""
            sink.event(Event(EventKind.PHASE, f"checkpoint saved to {m.group(1)}", src, line.no, line.raw,
                             rank=line.rank, data={"phase": "checkpoint saved", "path": m.group(1)}))

    @staticmethod
    def _framework(sink: Sink, state: dict, name: str) -> None:
        if "framework" not in state:
            state["framework"] = name
            sink.meta("framework", name)

    @staticmethod
    def _add(sink: Sink, metric: str, step: int, raw: str, line: Line) -> None:
        v = parse_number(raw)
        if v is not None:
            sink.add(metric, step, v, line.no, line.rank)
