"""fairseq (and metaseq) training logs, in every ``--log-format``.

* simple (>=0.10 with ``<time> | INFO | train_inner | `` before it, or 0.6-0.9 with ``| ``)::

    epoch 001:   2800 / 160368 loss=9.255, ppl=611.12, ..., num_updates=2800, lr=2.8e-05, ...

* end-of-epoch and validation summaries (``key value`` between pipes)::

    | epoch 008 | loss 6.326 | nll_loss 5.193 | ... | num_updates 21896 | ...
    | epoch 008 | valid on 'valid' subset | valid_loss 6.43844 | ... | num_updates 21896 | best 6.43844

  The epoch summary of training is named ``train_<key>`` and a subset's summary
  ``<subset>_<key>`` (as fairseq's own JSON print form names them), so they never mix with the
  ``train_inner`` window averages.
* json (values are strings since 0.10, ``clip: "100%"``; metaseq behind a logging prefix): keys as
  written.
* tqdm (a bar per state, several glued on one physical line): the ``k=v`` postfix; a postfix cut by
  the terminal width (not closed by ``]`` or ``,``) loses its last, possibly truncated, pair.
* fp16 ``overflow detected, setting loss scale to: X``: a ``loss_scale`` event and a
  ``loss_scale`` value; ``Minimum loss scale reached (X)``: the ``loss_scale_min`` event comes from
  the shared error-signature scanner, as for every reader.

Step = ``num_updates`` (fairseq's global step). Lines without it take, in order: the last
``num_updates`` seen (summaries), ``(epoch - 1) * size + i`` (progress lines), the epoch. An
overflow notice is printed between logged updates; the k-th notice after the last logged
``num_updates`` N is put at N + k (``step_estimated`` in the event data). fairseq losses are
base 2 (``ppl = 2 ** loss``): values are kept as printed.

Pipe summaries of plain numbers are read by segment shape
(:mod:`~trainaudit.ingest.formats.shaped`), their numbers at once, and the lines without a record
skipped by shape; every other record goes through :meth:`FairseqReader.feed` as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from trainaudit.ingest.base import Gate, LineReader, Sample, gate_pattern
from trainaudit.ingest.formats.generic import num, parse_json_object
from trainaudit.ingest.formats.shaped import (
    DIGIT_RE, OTHER, QUIET, ROW, Chunk, RunValues, Shape, ShapedReader, ShapeTable, Where, byte_offset, zeroed_pattern,
)
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind, SourceKind

INNER_RE = re.compile(r"\bepoch (\d+):\s+(\d+) / (\d+) (\w+=.*)$")
# fairseq prints the epoch zero-padded to 3 digits ("epoch {:03d}", fairseq/logging/progress_bar.py): a hand-written
# loop's "step 10 | epoch 0 | loss 0.67" (NeMo Automodel's too) is no fairseq summary.
# Linear: a field is never "epoch N" (that starts the next record), so the fields read from one "epoch"
# stop where the next one starts instead of every "epoch" reading to the end of the line.
PIPES_RE = re.compile(r"\bepoch (\d{3,}) \| (?:valid on '([^']+)' subset \| )?"
                      r"((?!epoch \d)[\w/]++ \S++(?: \| (?!epoch \d)[\w/]++ \S++)*+)\s*+\|?\s*+$")
# the record runs to the line's end, so its first '{"epoch": ' is the only start worth trying
JSON_RE = re.compile(r'^(?>.*?(?=\{"epoch": ))(\{"epoch": .*\})\s*$')
# the elapsed<remaining part holds no "[": its scan stops at the next bar instead of the line's end
TQDM_RE = re.compile(r"epoch (\d+):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)\s*\[[^\[\],]*+"
                     r"(?:,\s*[\d.?]+\s*(?:it/s|s/it))?,\s*([^\]|]*)(\]?)")
OVERFLOW_RE = re.compile(r"overflow detected, (?:ignoring gradient, )?setting loss scale to: ([\d.eE+\-]+)")
TAG_RE = re.compile(r"\| (?:INFO|WARNING) \| (train_inner|train|valid|[\w.]+) \| ")
KV_RE = re.compile(r"(?<!\w)(\w++)=([^,\s]*)")
FAIRSEQ_KEYS = ("num_updates", "wps", "ups", "wpb", "bsz", "nll_loss", "gnorm")
NON_SERIES = {"epoch", "num_updates", "update"}
# Literals in every line ``feed`` acts on: each of its patterns holds "epoch" (simple, pipe, JSON and
# tqdm records) or "overflow" (the fp16 notice), and so does every line that names the framework.
FAIRSEQ_GATE = gate_pattern("epoch|overflow")
FAIRSEQ_GATE_SHAPE = re.compile(zeroed_pattern("epoch|overflow"))  # the gate in a line's shape
# a value read in bulk: float() reads it as num() does, and so does numpy's cast of its text
NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
MAX_DIGITS = 15  # an epoch or update count read in bulk is exact as a float64


@dataclass(slots=True)
class PipeShape:
    """A pipe summary's shape read in bulk: its numbers (column 0 the epoch), the column of
    ``num_updates`` (None: none), and each series with its column or its constant (a value
    without digits, "nan")."""

    numbers: SpanNumbers
    updates: int | None
    series: tuple[tuple[str, int | None, float], ...]


class FairseqReader(ShapedReader):
    name = "fairseq"
    kind = SourceKind.LOG
    description = "fairseq / metaseq logs: simple ('epoch 001:  450 / 1891 k=v'), pipe summaries, json, tqdm, overflow notices"
    gate = Gate(re.compile(FAIRSEQ_GATE), re.compile(FAIRSEQ_GATE.encode() + b"|\x1b"))

    def sniff(self, sample: Sample) -> float:
        n = 0
        for ln in sample.lines:
            if INNER_RE.search(ln) or PIPES_RE.search(ln) or TQDM_RE.search(ln) or OVERFLOW_RE.search(ln) or (JSON_RE.search(ln) and any(f'"{k}"' in ln for k in FAIRSEQ_KEYS)) or (TAG_RE.search(ln) and ("fairseq" in ln or "train_inner" in ln)):
                n += 1
        return 0.9 if n else 0.0

    def new_state(self) -> dict:
        return {"updates": None, "since": 0, "overflows": 0, "framework": False}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if not state["framework"] and ("epoch" in text or "overflow" in text):
            sink.meta("framework", "fairseq")
            state["framework"] = True
        if "overflow detected" in text:
            m = OVERFLOW_RE.search(text)
            if m:
                self._overflow(m, line, sink, state)
                return
        # Each search only where its pattern's literal is in the line (a pattern cannot match without
        # it): most lines the gate lets through are none of these records.
        m = JSON_RE.search(text) if '{"epoch": ' in text else None
        if m:
            obj = parse_json_object(m.group(1))
            if obj is not None:
                self._json(obj, line, sink, state)
                return
        if "epoch " in text:
            m = INNER_RE.search(text)
            if m and "%|" not in text:
                pairs = [(k, v) for k, v in KV_RE.findall(m.group(4))]
                fallback = (int(m.group(1)) - 1) * int(m.group(3)) + int(m.group(2))
                self._emit(pairs, "", fallback, line, sink, state)
                return
            m = PIPES_RE.search(text) if " | " in text else None
            if m:
                subset = m.group(2)
                pairs = [tuple(p.split(" ", 1)) for p in m.group(3).split(" | ")]
                prefix = f"{subset}_" if subset else "train_"
                self._emit(pairs, prefix, None, line, sink, state, epoch=int(m.group(1)))  # type: ignore[arg-type]
                return
        if "%|" not in text:
            return
        for bm in TQDM_RE.finditer(text):
            pairs = KV_RE.findall(bm.group(4))
            if not bm.group(5) and not bm.group(4).rstrip().endswith(",") and pairs:
                pairs = pairs[:-1]  # cut by the terminal width: the last value may be incomplete
            fallback = (int(bm.group(1)) - 1) * int(bm.group(3)) + int(bm.group(2))
            self._emit(pairs, "", fallback, line, sink, state)

    def _emit(self, pairs: list[tuple[str, str]], prefix: str, fallback: int | None, line: Line, sink: Sink,
              state: dict, epoch: int | None = None) -> None:
        values: list[tuple[str, float]] = []
        step: int | None = None
        for key, raw in pairs:
            v = num(raw)
            if v is None:
                continue
            if key == "num_updates":
                step = int(v)
                continue
            if key in NON_SERIES:
                continue
            if prefix and not key.startswith(prefix):
                key = prefix + key
            values.append((key, v))
        if step is not None:
            state["updates"], state["since"] = step, 0
        elif fallback is not None:
            step = fallback
        elif state["updates"] is not None:
            step = state["updates"]
        else:
            step = epoch or 0
        for key, v in values:
            sink.add(key, step, v, line.no, line.rank)

    def _json(self, obj: dict, line: Line, sink: Sink, state: dict) -> None:
        pairs = [(str(k), str(v)) for k, v in obj.items() if not isinstance(v, (dict, list, bool))]
        epoch = num(str(obj.get("epoch", "")))
        self._emit(pairs, "", None, line, sink, state, epoch=int(epoch) if epoch is not None else None)

    def _overflow(self, m: re.Match[str], line: Line, sink: Sink, state: dict) -> None:
        state["overflows"] += 1
        if state["updates"] is not None:
            state["since"] += 1
            step = state["updates"] + state["since"]
        else:
            step = state["overflows"]
        scale = num(m.group(1))
        if scale is not None:
            sink.add("loss_scale", step, scale, line.no, line.rank)
        sink.event(Event(EventKind.LOSS_SCALE, f"fairseq fp16 overflow: loss scale set to {m.group(1)}",
                         sink.source.path if sink.source else "", line.no, line.raw, step=step, rank=line.rank,
                         data={"new": scale, "step_estimated": True}))

    # -- bulk reading ---------------------------------------------------------------------------
    def read(self, inp: InputFile, sink: Sink) -> None:
        if self.gate is None:  # ungated (every line decoded): line by line
            LineReader.read(self, inp, sink)
            return
        super().read(inp, sink)

    def shape_table(self) -> ShapeTable:
        return ShapeTable(FAIRSEQ_GATE_SHAPE, self._classify)

    @staticmethod
    def _classify(text: str, quiet: bool, where: Where) -> Shape:
        """What :meth:`feed` does with every segment of ``text``'s shape: nothing (``QUIET``: no
        "epoch" nor "overflow", or no record but those words), a pipe summary of plain numbers
        (``ROW``, :class:`PipeShape`), else ``OTHER``."""
        if not where.plain:
            return Shape(OTHER)  # ANSI codes or a launcher prefix: the line reader's
        if quiet:
            return Shape(QUIET)
        if "overflow" in text or '{"epoch": ' in text:
            return Shape(OTHER)
        if "epoch " in text:
            m = INNER_RE.search(text)
            if m and "%|" not in text:
                return Shape(OTHER)
            m = PIPES_RE.search(text) if " | " in text else None
            if m:
                return FairseqReader._pipe_shape(text, m)
        if "%|" in text and TQDM_RE.search(text):
            return Shape(OTHER)
        return Shape(QUIET)  # "epoch" in no record: feed only names the framework by it

    @staticmethod
    def _pipe_shape(text: str, m: re.Match[str]) -> Shape:
        subset = m.group(2)
        if len(m.group(1)) > MAX_DIGITS or (subset is not None and DIGIT_RE.search(subset)):
            return Shape(OTHER)
        prefix = f"{subset}_" if subset else "train_"
        spans = [m.span(1)]
        updates: int | None = None
        series: list[tuple[str, int | None, float]] = []
        at = m.start(3)
        for part in m.group(3).split(" | "):
            key, raw = part.split(" ", 1)
            a = at + len(key) + 1
            at += len(part) + 3
            if DIGIT_RE.search(key):
                return Shape(OTHER)  # (a key's digits are not the shape's)
            if not DIGIT_RE.search(raw):
                v = num(raw)
                if v is None:
                    continue
                if key == "num_updates":
                    return Shape(OTHER)  # int(nan): the line reader's error
                if key in NON_SERIES:
                    continue
                series.append((key if key.startswith(prefix) else prefix + key, None, v))
                continue
            if NUMBER_RE.fullmatch(raw) is None:
                return Shape(OTHER)
            if key == "num_updates":
                if not raw.isdigit() or len(raw) > MAX_DIGITS:
                    return Shape(OTHER)
                updates = len(spans)  # the last one counts, as in _emit
            elif key in NON_SERIES:
                continue
            else:
                series.append((key if key.startswith(prefix) else prefix + key, len(spans), 0.0))
            spans.append((a, a + len(raw)))
        byte_spans = tuple((byte_offset(text, x), byte_offset(text, y)) for x, y in spans)
        numbers = SpanNumbers(text.encode("utf-8").decode("latin-1"), byte_spans)  # a character a byte
        return Shape(ROW, PipeShape(numbers, updates, tuple(series)))

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        """The pipe summaries of lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`_emit` writes
        them, once the line reader has named the framework."""
        if not state["framework"]:
            return start
        rows = start + np.flatnonzero(chunk.kind[start:stop] == ROW)
        if not rows.shape[0]:
            return stop
        sids = chunk.row[rows]
        values: dict[int, tuple[PipeShape, list[float]]] = {}
        for sid in np.unique(sids).tolist():
            info: PipeShape = table.shapes[sid].info
            sel = rows[sids == sid]
            got = info.numbers.read_at(chunk.lines.buf, chunk.row_at[sel]).tolist()
            values.update(zip(sel.tolist(), ((info, v) for v in got)))
        into = RunValues(sink)
        for i in rows.tolist():
            info, v = values[i]
            if info.updates is not None:
                step = int(v[info.updates])
                state["updates"], state["since"] = step, 0
            elif state["updates"] is not None:
                step = state["updates"]
            else:
                step = int(v[0]) or 0
            for name, col, const in info.series:
                into.add(name, step, v[col] if col is not None else const, base + i + 1)
        into.done()
        return stop
