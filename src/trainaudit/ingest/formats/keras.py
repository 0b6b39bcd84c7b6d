"""Keras ``fit()`` output (Keras 3 ``━`` bars, tf.keras ``[====]`` bars, verbose=2 lines) and the
CSVLogger file.

Stdout (reader ``keras``): the step is the epoch (1-based, from the ``Epoch a/b`` header). An
epoch's values are those of its *final* bar state (``n >= total``, or an ``Unknown`` target
without an ETA); in-progress states (``n < total``, ``ETA:``) are running averages and are not
epoch values. Without ``Epoch`` headers (docs excerpts), final bars that carry metrics are
numbered 1, 2, ... in order. Bars without metrics (``predict()``) are ignored.

``TerminateOnNaN`` prints ``Batch 3: Invalid loss, terminating training`` (often glued to the bar,
no newline): a ``nan_check`` event. So is the first in-progress bar whose running value of a metric
is NaN/Inf (a running average is non-finite once one batch was). An epoch that never reached its
final bar state is reported as a ``phase`` event (``interrupted``) carrying the last in-progress
values.

CSVLogger (reader ``keras_csv``): ``epoch,<sorted metric names>``; missing values are ``NA``.
The step is the file's own ``epoch`` column, which is 0-based (the screen shows epoch+1).

``History.history`` saved as JSON (reader ``keras_history``, ``json.dump(history.history, f)``): an
object of metric name -> list of per-epoch values; the step is the epoch, 1-based as the screen
shows it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.formats.hf import NUMBER_RE
from trainaudit.ingest.formats.lightning import csv_header, read_csv_rows
from trainaudit.ingest.formats.shaped import (
    DIGIT_RE, OTHER, QUIET, ROW, Chunk, Columns, Shape, ShapeTable, ShapedReader, Where, byte_offset, digits_at,
)
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, json_number, parse_number
from trainaudit.model import Event, EventKind, SourceKind
from trainaudit.safeio import load_json

NUM = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|inf|Inf|Infinity)"
EPOCH_RE = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
BAR_RE = re.compile(
    r"^\s*(?P<n>\d+)/(?P<total>\d+|Unknown)\s+(?P<bar>\[[=>.]*\]\s*-\s*|━+\s*|-\s*)"
    r"(?:ETA: (?P<eta>[\d:]+s?)|(?P<elapsed>\d+(?:\.\d+)?(?:m?s|us|h|m)(?:\s*\d+s)?))?"
)
# a name abbreviated with a period keeps the word after it ("- loss: 678.7651 - val. loss: 91479.6172", a Keras 0.x
# era progress line; "Val. Loss" is as common in hand-written loops)
METRIC_RE = re.compile(r"-\s*([A-Za-z_][\w/.]*(?:(?<=\.) [A-Za-z_]\w*)?): (" + NUM + r")")
TERMINATE_RE = re.compile(r"Batch (\d+): Invalid loss, terminating training")
MAX_FINITE = 300  # digits of a value without exponent: no more can reach 1.8e308 (float's overflow to inf)
CSV_EXCLUDE = ("train/box_loss", "metrics/mAP50(B)")  # Ultralytics results.csv also starts with epoch


def _running_epoch(state: dict) -> int:
    """The epoch an in-progress bar belongs to: the header's, or the next one when that epoch's
    final bar was already seen (header lost) or when there are no headers at all."""
    epoch = state["epoch"] if state["epoch"] is not None else state["epochs_seen"]
    if state["done"] == epoch or state["epoch"] is None:
        epoch += 1
    return int(epoch)


@dataclass(slots=True)
class _BarShape:
    """A bar segment's shape: whether it is final (None: when its count reaches its total, whose
    spans it then gives), its metrics (keys, how to read their values) and its total as printed."""

    final: bool | None
    n: tuple[int, int]
    total: tuple[int, int] | None
    total_text: str | None  # "Unknown"
    keys: tuple[str, ...]
    numbers: SpanNumbers
    nonfinite: bool = False  # an in-progress bar with a NaN/Inf value (spelled without digits: in every segment)


def _after_validation(state: dict, keys: list[tuple[str, ...]]) -> int:
    """How many of an epoch's final bars (their keys, in order) are its training's: up to the first with
    validation metrics. fit() prints those at the epoch's end, so a final bar after it and before the next
    header is evaluate()'s on the test set ("1/1 - loss: 34.6546", then "Test loss: 34.65")."""
    if state["validated"] == state["epoch"]:
        return 0
    for i, ks in enumerate(keys):
        if any(k.startswith("val_") for k in ks):
            state["validated"] = state["epoch"]
            return i + 1
    return len(keys)


class KerasReader(ShapedReader):
    name = "keras"
    kind = SourceKind.LOG
    description = "Keras fit() stdout: 'Epoch 1/15' headers, progress bars and verbose=2 epoch lines"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text and b"\b" in sample.head:
            # Keras writes "\b" * width before every redraw, even into files; so many backspaces
            # make the generic text check call the file binary. Judge it without them.
            sample = Sample.from_head(sample.name, sample.head.replace(b"\b", b""))
            if not sample.is_text:
                return 0.0
        headers = bars = 0
        for ln in sample.lines:
            ln = ln.replace("\b", "")
            if EPOCH_RE.match(ln):
                headers += 1
            elif BAR_RE.match(ln) and (METRIC_RE.search(ln) or "━" in ln or "/step" in ln):
                bars += 1
        if bars:
            return 0.85
        # "Epoch 3/10" alone is printed by many hand-written loops too: below the generic extractor
        # when that reads the file's numbers
        return 0.12 if headers else 0.0


    def new_state(self) -> dict:
        return {"epoch": None, "epochs_seen": 0, "pending": None, "done": None, "framework": False,
                "nan_seen": False, "validated": None}

    def shape_table(self) -> ShapeTable:
        return ShapeTable(None, self._classify, one_row=False)

    @staticmethod
    def _classify(text: str, quiet: bool, where: Where) -> Shape:
        """What :meth:`feed` does with a segment (see :class:`ShapeTable`), for every segment of its
        shape: ``ROW`` for a bar with metrics (its backspaces after them), ``QUIET`` for a segment it
        does nothing with, else ``OTHER`` (an epoch header, TerminateOnNaN)."""
        if not where.plain:
            return Shape(OTHER)  # ANSI codes or a launcher prefix: the line reader's
        t = text.replace("\b", "")
        if TERMINATE_RE.search(t) or EPOCH_RE.match(t):
            return Shape(OTHER)
        b = BAR_RE.match(t)
        if b is None:
            return Shape(QUIET)
        keys: list[str] = []
        spans: list[tuple[int, int]] = []
        values: list[float] = []
        for m in METRIC_RE.finditer(t, b.end()):
            v = parse_number(m.group(2))
            if v is None:
                continue
            if DIGIT_RE.search(m.group(2)) and NUMBER_RE.fullmatch(m.group(2)) is None:
                return Shape(OTHER)
            keys.append(m.group(1))
            values.append(v)
            spans.append(m.span(2))
        if not keys:
            return Shape(QUIET)  # predict()/evaluate() bars without metrics
        back = text.find("\b")
        if len(set(keys)) != len(keys) or (back >= 0 and back < spans[-1][1]) or not b.group("n").isascii():
            return Shape(OTHER)  # (offsets in the text are the segment's up to its first backspace)
        total = b.group("total")
        final: bool | None = False if b.group("eta") is not None else (True if total == "Unknown" else None)
        if final is not True and any(len(t[a:e]) > MAX_FINITE or "e" in t[a:e].lower()
                                     or (not math.isfinite(v) and DIGIT_RE.search(t[a:e]))
                                     for v, (a, e) in zip(values, spans)):
            # a running value that may be NaN/Inf (an exponent, hundreds of digits): the line reader's,
            # which may say so the first time
            return Shape(OTHER)
        nonfinite = final is not True and not all(math.isfinite(v) for v in values)
        numbers = SpanNumbers(text.encode("utf-8").decode("latin-1"),
                              tuple((byte_offset(text, a), byte_offset(text, e)) for a, e in spans))
        for j in numbers.const:
            numbers.const[j] = values[j]
        return Shape(ROW, _BarShape(final, (byte_offset(text, b.start("n")), byte_offset(text, b.end("n"))),
                                    None if total == "Unknown" else (byte_offset(text, b.start("total")),
                                                                     byte_offset(text, b.end("total"))),
                                    total if total == "Unknown" else None, tuple(keys), numbers, nonfinite))

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        """The bars of lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`feed` reads them: the
        final ones write their values at the epoch, the last in-progress one is left pending."""
        sid, at, seg_line, _ = chunk.segments
        lo, hi = (int(x) for x in np.searchsorted(seg_line, [start, stop]))
        if hi <= lo:
            return stop
        info: list[Any] = [s.info for s in table.shapes]
        buf = chunk.lines.buf
        k = hi - lo
        s_sid, s_at = sid[lo:hi], at[lo:hi]
        final = np.zeros(k, dtype=bool)
        for s in np.unique(s_sid).tolist():
            shape: _BarShape = info[s]
            sel = s_sid == s
            if shape.final is not None:
                final[sel] = shape.final
            else:
                assert shape.total is not None
                n = digits_at(buf, s_at[sel] + shape.n[0], shape.n[1] - shape.n[0])
                total = digits_at(buf, s_at[sel] + shape.total[0], shape.total[1] - shape.total[0])
                final[sel] = n >= total
        if not state["nan_seen"]:
            # the first in-progress bar with a NaN/Inf value is the line reader's (it says so): the
            # lines before it here, that line and the rest of the run line by line
            odd = np.fromiter((getattr(x, "nonfinite", False) for x in info), dtype=bool, count=len(info))[s_sid] & ~final
            if odd.any():
                first_odd = int(seg_line[lo + int(np.argmax(odd))])
                cut = int(np.searchsorted(seg_line[lo:hi], first_odd))  # the segments of the lines before it
                if cut == 0:
                    return first_odd
                hi, stop = lo + cut, first_odd
                s_sid, s_at, final = s_sid[:cut], s_at[:cut], final[:cut]
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "keras")
        done = np.flatnonzero(final)
        if done.shape[0] and state["epoch"] is not None:
            done = done[:_after_validation(state, [info[int(x)].keys for x in s_sid[done]])]
        if done.shape[0]:
            if state["epoch"] is None:
                steps = state["epochs_seen"] + 1 + np.arange(done.shape[0], dtype=np.int64)
                state["epochs_seen"] += int(done.shape[0])
            else:
                steps = np.full(done.shape[0], int(state["epoch"]), dtype=np.int64)
            line_nos = seg_line[lo:hi][done] + base + 1
            d_sid = s_sid[done]
            columns = Columns(done.shape[0])
            shapes, first = np.unique(d_sid, return_index=True)
            for s in shapes[np.argsort(first)].tolist():
                sel = np.flatnonzero(d_sid == s)
                values = info[s].numbers.read_at(buf, s_at[done[sel]])
                for c, key in enumerate(info[s].keys):
                    columns.put(key, sel, values[:, c])
            for key, (values, has) in columns.items():
                sink.add_many(key, steps[has], values[has], line_nos[has])
            sink.last_step = int(steps[-1])
            state["done"] = int(steps[-1])
        if final[-1]:
            state["pending"] = None
        else:
            # the last in-progress bar, as feed keeps it (its line, its running values)
            last = hi - 1
            shape = info[int(sid[last])]
            a = int(at[last])
            values = shape.numbers.read_at(buf, np.array([a], dtype=np.int64))[0].tolist()
            no = int(seg_line[last])
            raw = chunk.lines[no].decode("utf-8").rstrip("\r\n")
            line = Line(base + no + 1, chunk.lines.data[a:].split(b"\r", 1)[0].split(b"\n", 1)[0].decode("utf-8"),
                        None, raw)
            count = int(chunk.lines.data[a + shape.n[0]:a + shape.n[1]])
            of = shape.total_text if shape.total is None else \
                chunk.lines.data[a + shape.total[0]:a + shape.total[1]].decode("ascii")
            state["pending"] = {"line": line, "values": list(zip(shape.keys, values)), "n": count, "total": of}
        return stop

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text.replace("\b", "") if "\b" in line.text else line.text
        src = sink.source.path if sink.source else ""
        t = TERMINATE_RE.search(text)
        if t:
            batch = int(t.group(1))
            sink.event(Event(EventKind.NAN_CHECK, f"TerminateOnNaN: batch {batch} had an invalid (NaN/Inf) loss",
                             src, line.no, line.raw, step=_running_epoch(state), rank=line.rank,
                             data={"batch": batch, "epoch": _running_epoch(state)}))
            sink.meta("step_text", {_running_epoch(state): f"epoch {_running_epoch(state)}, batch {batch}"})
            text = text[: t.start()]  # what precedes the message is the bar it was glued to
            state["nan_seen"] = True  # said already, by Keras itself
        m = EPOCH_RE.match(text)
        if m:
            self._close_epoch(sink, state, src)
            state["epoch"] = int(m.group(1))
            if not state["framework"]:
                state["framework"] = True
                sink.meta("framework", "keras")
                sink.meta("keras.epochs", int(m.group(2)))
            return
        b = BAR_RE.match(text)
        if b is None:
            return
        metrics = [(k, parse_number(v)) for k, v in METRIC_RE.findall(text[b.end():])]
        values = [(k, v) for k, v in metrics if v is not None]
        n, total = int(b.group("n")), b.group("total")
        # n past the total: Keras 1's fit_generator when the generator overshoots samples_per_epoch
        final = b.group("eta") is None and (total == "Unknown" or n >= int(total))
        if not values:
            return  # predict()/evaluate() bars without metrics
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "keras")
        if not final:
            state["pending"] = {"line": line, "values": values, "n": n, "total": total}
            bad = sorted(k for k, v in values if not math.isfinite(v))
            if bad and not state["nan_seen"]:
                # a running average turns NaN/Inf only when a batch's value did: the paste may end
                # before the epoch does, with no epoch value to show it
                state["nan_seen"] = True
                epoch = _running_epoch(state)
                sink.event(Event(EventKind.NAN_CHECK, f"the running {', '.join(bad)} of epoch {epoch} is non-finite "
                                 f"from batch {n}/{total}: a batch before it produced a NaN/Inf", src, line.no,
                                 line.raw, step=epoch, rank=line.rank,
                                 data={"batch": n, "epoch": epoch, "metrics": bad}))
                # where the log shows it: the epoch is the step, the bar's count says how far into it
                sink.meta("step_text", {epoch: f"epoch {epoch}, batch {n}/{total}"})
            return
        if state["epoch"] is None:
            state["epochs_seen"] += 1  # no headers: number the final bars themselves
            step = state["epochs_seen"]
        else:
            step = state["epoch"]
            if not _after_validation(state, [tuple(k for k, _ in values)]):
                return  # an evaluate() bar after the epoch's end
        for key, v in values:
            sink.add(key, step, v, line.no, line.rank)
        state["pending"] = None
        state["done"] = step

    def _close_epoch(self, sink: Sink, state: dict, src: str) -> None:
        """An in-progress bar that never reached its final state: the epoch was interrupted."""
        pending = state["pending"]
        state["pending"] = None
        if pending is None:
            return
        line: Line = pending["line"]
        vals = dict(pending["values"])
        epoch = _running_epoch(state)
        nonfinite = sorted(k for k, v in vals.items() if not math.isfinite(v))
        sink.event(Event(EventKind.PHASE,
                         f"epoch {epoch} interrupted at batch "
                         f"{pending['n']}/{pending['total']}", src, line.no, line.raw, step=epoch, rank=line.rank,
                         data={"phase": "epoch interrupted", "interrupted": True, "batch": pending["n"],
                               "total": pending["total"], "running_values": vals,
                               "nonfinite_metrics": nonfinite}))

    def finish(self, sink: Sink, state: dict) -> None:
        self._close_epoch(sink, state, sink.source.path if sink.source else "")


class KerasCSVReader(Reader):
    name = "keras_csv"
    kind = SourceKind.METRICS
    description = "Keras CSVLogger file (epoch, sorted metric columns; NA = missing)"

    def sniff(self, sample: Sample) -> float:
        cols = csv_header(sample)
        if cols is None or cols[0] != "epoch" or "step" in cols or len(cols) < 2:
            return 0.0
        if any(c in CSV_EXCLUDE for c in cols):
            return 0.0
        if cols[1:] != sorted(cols[1:]):
            # CSVLogger writes "epoch" and then the logs' keys sorted (keras/src/callbacks/csv_logger.py,
            # https://github.com/keras-team/keras): another table with an epoch column is generic CSV
            return 0.0
        if any(c == "loss" or c.endswith("loss") for c in cols[1:]):
            return 0.6
        return 0.35

    def read(self, inp: InputFile, sink: Sink) -> None:
        sink.meta("framework", "keras")
        sink.meta("keras_csv.epoch_base", 0)
        for line_no, header, row in read_csv_rows(inp):
            if header[0] != "epoch":
                raise InputError(f"{inp.display}: CSV without a leading 'epoch' column (not a Keras CSVLogger file)")
            ep = parse_number(row[0]) if row else None
            if ep is None or not math.isfinite(ep):
                continue
            step = int(ep)
            for name, cell in zip(header[1:], row[1:]):
                cell = cell.strip()
                if not cell or cell == "NA":
                    continue
                v = parse_number(cell)
                if v is not None:
                    sink.add(name, step, v, line_no)


# "loss": [ or "val_accuracy": [ : a metric's list of per-epoch values in a History dump
_HISTORY_KEY_RE = re.compile(rb'"(?:val_)?(?:loss|acc|accuracy)"\s*:\s*\[')


class KerasHistoryReader(Reader):
    name = "keras_history"
    kind = SourceKind.METRICS
    description = "Keras History.history saved as JSON (metric name -> list of per-epoch values)"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text or not sample.head.lstrip().startswith(b"{") or b'"log_history"' in sample.head:
            return 0.0
        return 0.6 if _HISTORY_KEY_RE.search(sample.head) else 0.0

    def read(self, inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            text = stream.read().decode("utf-8", "replace")
        history = load_json(text, inp.display, invalid="invalid Keras history JSON")
        lists = {k: v for k, v in history.items() if isinstance(v, list)} if isinstance(history, dict) else {}
        if not lists:
            raise InputError(f"{inp.display}: JSON without lists of per-epoch values (not a Keras History dump)")
        sink.meta("framework", "keras")
        lines = _value_lines(text)
        for key, values in lists.items():
            at = lines.get(key, [])
            for i, v in enumerate(values):
                num = json_number(v)
                if num is not None:
                    sink.add(key, i + 1, num, at[i] if i < len(at) else 0)


_LIST_RE = re.compile(r'"((?:[^"\\\n]|\\.){1,200})"\s*:\s*\[([^\[\]]*+)\]')


def _value_lines(text: str) -> dict[str, list[int]]:
    """The 1-based line of each value of each top-level list of numbers."""
    out: dict[str, list[int]] = {}
    pos, line0 = 0, 1  # lines counted once over the text, not from its start for every key
    for m in _LIST_RE.finditer(text):
        line0 += text.count("\n", pos, m.start(2))
        pos, line = m.start(2), line0
        at: list[int] = []
        for cell in m.group(2).split(","):
            lead = len(cell) - len(cell.lstrip())
            at.append(line + cell.count("\n", 0, lead))
            line += cell.count("\n")
        out.setdefault(m.group(1), at)
    return out
