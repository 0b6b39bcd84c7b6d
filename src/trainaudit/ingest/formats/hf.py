"""HF Trainer stdout dicts (and TRL / axolotl / ms-swift) plus ``trainer_state.json``.

Stdout (reader ``hf``): ``ProgressCallback``/``PrinterCallback`` print the logs dict's ``repr``:
``{'loss': 10.5949, 'grad_norm': nan, 'learning_rate': 4.58e-05, 'epoch': 0.25}``. It is not a
Python literal (bare ``nan``/``inf``), transformers 5.x quotes every float (``'loss': '2.345'``),
ms-swift adds string fields (``'global_step/max_steps': '5/3766'``), and quoted copies may lose
the leading ``{``. We therefore tokenise ``'key': value`` pairs ourselves instead of ``ast``.

Step numbering (the printed dict carries no step):
- a dict with a ``step`` key, or ms-swift's ``global_step/max_steps``, gives the step itself;
- otherwise a *train* dict (no ``eval_``/``test_`` keys, not the end-of-training summary) gets
  the count of the training progress bar printed right after it: ``ProgressCallback.on_log``
  prints the dict with ``tqdm.write``, which redraws the bar at its current count, the global step
  (https://github.com/huggingface/transformers/blob/main/src/transformers/trainer_callback.py,
  https://github.com/tqdm/tqdm/blob/master/tqdm/std.py ``external_write_mode``);
- without such a bar, the previous train dict's step plus the interval seen between bar counts,
  or, when no bar was ever read, the 1-based index of train dicts seen so far in this file;
- eval dicts and the end-of-training summary (``train_runtime``...) get the step of the last
  train dict (0 before the first one).
The index is not the optimizer step unless ``logging_steps=1``; ``trainer_state.json`` (reader
``hf_trainer_state``) has the real ``step`` of every entry. A train dict is therefore written when
the next line comes (or at the end of the file).

The bar that numbers a train dict also gives its speed: its rate (``541.72it/s``, or ``1.24s/it``
inverted) is the ``it/s`` series at the dict's step, when the bar's count is that step. tqdm's rate
is a moving average (``smoothing``), so TA406 counts a slowdown in it from a larger ratio.

Every numeric key is kept under its own name, ``epoch`` included (it is fractional and monotone).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from trainaudit.errors import InputError
from trainaudit.ingest.base import Gate, LineReader, Reader, Sample, gate_pattern
from trainaudit.ingest.extract import _ZERO_BYTES
from trainaudit.ingest.formats.shaped import (
    BLANK, DIGIT_RE, OTHER, QUIET, ROW, Chunk, chunk_numbers, Columns, Shape, ShapeTable, ShapedReader, Where, byte_offset, digits_at,
    zeroed_pattern,
)
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, json_number, parse_number
from trainaudit.model import Event, EventKind, SourceKind
from trainaudit.safeio import load_json

# A dict repr at the end of a segment; the leading "{" is optional (lost in quoted copies).
# Linear: the dict is the last brace-free stretch of the line, so a match starts only where such a
# stretch starts, checks once that the stretch ends the line with "}", then takes its first 'key':
# (a key holding a brace is not read; no logger of these formats prints one).
DICT_RE = re.compile(r"(?<![^{}\n])(?=[^{}\n]*+\}\s*+$)[^{}\n]*?('[^'{}\n]++'\s*+:\s*+[^{}\n]*+)\}\s*+$")
# The items of a dict repr, comma by comma: a quoted string is one piece whatever it holds (commas
# too), and one that is never closed runs to the end. Every character is read once, so a body of any
# shape costs linear time; a pattern searched for "'key': value" anywhere would instead rescan an
# unclosed string's rest from every quote before it.
ITEM_RE = re.compile(r"""(?:'(?:[^'\\]++|\\.?)*+'?|"(?:[^"\\]++|\\.?)*+"?|[^,'"]++)*+""")
# One 'key': value item (stripped); values are quoted strings or bare tokens (no quote: "tensor(2.3"
# of "tensor(2.3, device='cuda:0')"). Anchored: an item holds one pair or none.
PAIR_RE = re.compile(
    r"""\A(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*:\s*"""
    r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|(?:[^\S,]*+[^\s,'"]++)++|[^\S,])\s*+\Z"""
)
# the dict that ends a line feed reads: tqdm's redraws between two dicts are not read, but for the
# one right after a train dict (HFReader.awaits)
HF_GATE_LITERALS = r"\}"
HF_GATE = gate_pattern(HF_GATE_LITERALS)
HF_GATE_SHAPE = re.compile(zeroed_pattern(HF_GATE_LITERALS))  # the gate in a line's shape
HF_KEYS = ("'loss'", "'learning_rate'", "'epoch'", "'eval_", "'train_runtime'", "'grad_norm'")
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second")
SWIFT_STEP_KEY = "global_step/max_steps"
# tqdm's count and total: "  2%|2         | 5/200 [00:00<00:00, 541.72it/s]"
BAR_RE = re.compile(r"\|\s*+(\d{1,12})/(\d{1,12}) \[")
# and its rate, after the elapsed and remaining times ("1.24s/it" once a step takes over a second)
RATE_RE = re.compile(r"\| *+\d{1,12}/\d{1,12} \[[\d:]{1,12}<[\d:?]{1,12}, *+(\d{1,9}(?:\.\d{1,9})?)(it/s|s/it)\b")
RATE_KEY = "it/s"


def bar_rate(text: str) -> float | None:
    """The training bar's rate in iterations per second, or None (no bar, or "?it/s")."""
    m = RATE_RE.search(text) if "/" in text else None
    if m is None:
        return None
    return _per_second(float(m.group(1)), m.group(2) == "it/s")


def _per_second(v: float, per_second: bool) -> float | None:
    if not per_second:
        return 1.0 / v if v > 0 else None
    return v


_SLOW = (-1, -1, False)  # a segment whose rate is searched every time (its bytes are not plain UTF-8 digits)


def _rate_span(text: str) -> tuple[int, int, bool] | None:
    """Where :func:`bar_rate` reads the rate in the UTF-8 bytes of ``text`` (start, end, in it/s), None
    where it reads none. Segments whose bytes differ only in ASCII digits give the same: no part of
    RATE_RE but ``\\d`` tells one ASCII digit from another (and ``\\d`` takes them all)."""
    m = RATE_RE.search(text) if "/" in text else None
    if m is None:
        return None
    if "\ufffd" in text or not m.group(1).isascii():
        return _SLOW
    a = len(text[:m.start(1)].encode("utf-8"))
    return a, a + len(m.group(1)), m.group(2) == "it/s"
# a value a row of a shape is read with in bulk: float() reads it, and so does numpy's cast of its text
NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
MAX_TEXTS = 200_000  # steps whose epoch is kept as the step's text
STATE_META_KEYS = ("max_steps", "num_train_epochs", "logging_steps", "eval_steps", "save_steps",
                   "train_batch_size", "global_step", "epoch", "best_metric", "best_model_checkpoint",
                   "best_global_step", "total_flos", "num_input_tokens_seen")


def parse_log_dict(body: str) -> dict[str, float | str]:
    """``'k': v, ...`` -> {k: float or original string}. Bare nan/inf become floats; quoted
    numerics (transformers 5.x) become floats; True/False/None and other text stay strings."""
    out: dict[str, float | str] = {}
    pos = 0
    while pos <= len(body):
        item = ITEM_RE.match(body, pos)  # matches everywhere (every part is optional)
        end = item.end() if item is not None else len(body)
        m = PAIR_RE.match(body[pos:end].strip())
        pos = end + 1
        if m is None:
            continue
        key = m.group(1) if m.group(1) is not None else m.group(2)
        raw = m.group(3).strip()
        quoted = raw[:1] in ("'", '"')
        text = raw[1:-1] if quoted else raw
        if not quoted and text in ("True", "False", "None"):
            out[key] = text
            continue
        v = parse_number(text)
        out[key] = v if v is not None else text
    return out


def log_dict_spans(body: str) -> list[tuple[str, int, int]]:
    """The keys of ``body`` as :func:`parse_log_dict` reads them, each with the span of its value's
    text (quotes left out) in ``body``."""
    out: list[tuple[str, int, int]] = []
    pos = 0
    while pos <= len(body):
        item = ITEM_RE.match(body, pos)
        end = item.end() if item is not None else len(body)
        piece = body[pos:end]
        m = PAIR_RE.match(piece.strip())
        if m is not None:
            at = pos + len(piece) - len(piece.lstrip())
            raw = m.group(3)
            a = at + m.start(3) + len(raw) - len(raw.lstrip())
            b = at + m.end(3) - (len(raw) - len(raw.rstrip()))
            if raw.strip()[:1] in ("'", '"'):
                a, b = a + 1, b - 1
            out.append((m.group(1) if m.group(1) is not None else m.group(2), a, b))
        pos = end + 1
    return out


@dataclass(slots=True)
class DictLineShape:
    """An HF log line's shape: the spans of the count and total of the progress bar in its first
    non-blank segment (None: no bar there) and, for a train dict read in bulk, its keys and how to
    read their values."""

    bar: tuple[int, int, int, int] | None
    keys: tuple[str, ...] = ()
    numbers: SpanNumbers | None = None
    kind: str = "train"  # the dict's kind (_dict_kind)


class NumberedLines:
    """A chunk's numbers read at once: for each line, the count, total and total's width (0: none)
    of the bar in its first non-blank segment and, for each key of a train dict read in bulk, the
    value in the line's dict (a column a key, ``has`` where the line's dict holds it)."""

    def __init__(self, chunk: Chunk, info: list[Any]) -> None:
        n = chunk.kind.shape[0]
        buf = chunk.lines.buf
        self.chunk = chunk
        self.counts = np.zeros(n, dtype=np.int64)
        self.totals = np.zeros(n, dtype=np.int64)
        self.widths = np.zeros(n, dtype=np.int64)
        read = np.flatnonzero((chunk.kind == QUIET) | (chunk.kind == ROW))
        fsid = chunk.first[read]
        for s in np.unique(fsid).tolist():
            bar = info[s].bar
            if bar is None:
                continue
            sel = read[fsid == s]
            at = chunk.first_at[sel]
            self.counts[sel] = digits_at(buf, at + bar[0], bar[1] - bar[0])
            self.totals[sel] = digits_at(buf, at + bar[2], bar[3] - bar[2])
            self.widths[sel] = bar[3] - bar[2]
        rows = np.flatnonzero(chunk.kind == ROW)
        self.row_shape = chunk.row
        self.columns = Columns(n)
        keys: dict[int, tuple[str, ...]] = {}
        rsid = chunk.row[rows]
        for s in np.unique(rsid).tolist():
            sel = rows[rsid == s]
            values = info[s].numbers.read_at(buf, chunk.row_at[sel])
            keys[s] = info[s].keys
            for c, key in enumerate(info[s].keys):
                self.columns.put(key, sel, values[:, c])
        self._keys = keys
        self._rates: dict[bytes, tuple[int, int, bool] | None] = {}

    def rate_at(self, i: int, base: int) -> tuple[float, int] | None:
        """The bar's rate in the first non-blank segment of line ``i`` (value, 1-based line number
        with the chunk's ``base``), as :meth:`HFReader.feed` reads it."""
        c = self.chunk
        at = int(c.first_at[i] - c.lines.starts[i])
        segment = c.lines[i][at:].split(b"\r", 1)[0]
        key = segment.translate(_ZERO_BYTES)  # the rate's place, found once per segment with its digits zeroed
        if key in self._rates:
            span = self._rates[key]
        else:
            span = self._rates[key] = _rate_span(segment.decode("utf-8", "replace"))
        if span is None:
            return None
        if span is _SLOW:
            rate = bar_rate(segment.decode("utf-8", "replace"))
        else:
            rate = _per_second(float(segment[span[0]:span[1]]), span[2])
        return None if rate is None else (rate, base + i + 1)

    def rates_at(self, lines: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """:meth:`rate_at` of each of ``lines`` (values, and where there is one), read at once for
        the lines whose first non-blank segment is of one shape: its digits zeroed, that segment
        is the shape's key, so the rate stands at the same bytes in each."""
        c = self.chunk
        out = np.full(lines.shape[0], np.nan)
        has = np.zeros(lines.shape[0], dtype=bool)
        sid = c.first[lines]
        for s in np.unique(sid).tolist():
            sel = np.flatnonzero(sid == s)
            k = int(sel[0])
            got = self.rate_at(int(lines[k]), 0)  # finds the span of this shape's rate
            at = int(c.first_at[lines[k]] - c.lines.starts[lines[k]])
            span = self._rates.get(c.lines[int(lines[k])][at:].split(b"\r", 1)[0].translate(_ZERO_BYTES))
            if span is None or span is _SLOW or got is None:
                for j in sel.tolist():
                    r = self.rate_at(int(lines[j]), 0)
                    if r is not None:
                        out[j], has[j] = r[0], True
                continue
            a, b, per_second = span
            texts = c.lines.buf[c.first_at[lines[sel]][:, None] + np.arange(a, b)].view(f"S{b - a}").ravel()
            v = texts.astype(np.float64)  # float() of each (digits and a point only: RATE_RE)
            if not per_second:
                ok = v > 0
                v = np.divide(1.0, v, out=np.full_like(v, np.nan), where=ok)
                sel = sel[ok]
                v = v[ok]
            out[sel], has[sel] = v, True
        return out, has

    def keys_of(self, line: int) -> tuple[str, ...]:
        """The keys of the dict of a ``ROW`` line, in its order."""
        return self._keys[int(self.row_shape[line])]


def _dict_kind(keys: list[str]) -> str:
    if any(k.startswith(("eval_", "test_")) for k in keys):
        return "eval"
    if any(k in SUMMARY_KEYS for k in keys):
        return "summary"
    return "train"


class HFReader(ShapedReader):
    name = "hf"
    kind = SourceKind.LOG
    description = "HF Trainer / TRL / axolotl / ms-swift stdout log dicts ({'loss': ..., 'epoch': ...})"
    gate = Gate(re.compile(HF_GATE), re.compile(HF_GATE.encode() + b"|\x1b"))

    def sniff(self, sample: Sample) -> float:
        n = 0
        for ln in sample.lines:
            if DICT_RE.search(ln) and any(k in ln for k in HF_KEYS):
                n += 1
        if n == 0:
            return 0.0
        return 0.85 if n >= 2 else 0.7

    def new_state(self) -> dict:
        return {"n_train": 0, "last_step": 0, "texts": {}, "evaluated": {}, "pending": None, "interval": 0,
                "bar_total": None}

    def awaits(self, state: dict) -> bool:
        # a train dict waits for the bar tqdm redraws right after it: its count is the dict's step
        return state["pending"] is not None

    def finish(self, sink: Sink, state: dict) -> None:
        self._flush(sink, state, None, None)
        texts: dict[int, str] = state["texts"]
        for step, epoch in state["evaluated"].items():
            # an evaluation prints its own epoch (8.0 where the train dict at the same step said 7.98):
            # a finding on the evaluation's metric is at that epoch as the log prints it
            said, own = texts.get(step), f"epoch {epoch:g}"
            if len(texts) < MAX_TEXTS or said is not None:
                texts[step] = own if said in (None, own) else f"{said}, evaluation at {own}"
        if texts:
            sink.meta("step_text", texts)  # the step is the dict's number; the log prints the epoch

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        if state["pending"] is not None:
            bar = BAR_RE.search(line.text) if "/" in line.text and "[" in line.text else None
            if bar is not None or line.text.strip():
                rate = None if bar is None else bar_rate(line.text)
                self._flush(sink, state, None if bar is None else int(bar.group(1)), None if bar is None else bar.group(2),
                            None if rate is None else (rate, line.no))
        if "'" not in line.text or not line.text.rstrip().endswith("}"):
            return
        m = DICT_RE.search(line.text)
        if m is None:
            return
        logs = parse_log_dict(m.group(1))
        if not logs or not any(isinstance(v, float) for v in logs.values()):
            return
        keys = list(logs)
        kind = _dict_kind(keys)
        step = self._explicit_step(logs, sink)
        if kind == "train":
            state["n_train"] += 1
            if step is None:  # numbered by the bar that follows it
                state["pending"] = (logs, line)
                return
            state["last_step"] = step
        elif step is None:
            step = state["last_step"]
        self._write(logs, kind, step, line, sink, state)

    def _flush(self, sink: Sink, state: dict, count: int | None, total: str | None,
               rate: tuple[float, int] | None = None) -> None:
        """Write the pending train dict at the count of the bar that follows it (``total``: the
        bar's total as printed; None: no bar), and that bar's rate (value, line) at the same step
        when the count is the dict's step: the training bar's speed at each logging step."""
        pending, state["pending"] = state["pending"], None
        if pending is None:
            return
        logs, line = pending
        step = self._step(state, count, total)
        epoch = logs.get("epoch")
        if isinstance(epoch, float) and len(state["texts"]) < MAX_TEXTS:
            state["texts"][step] = f"epoch {epoch:g}"
        self._write(logs, "train", step, line, sink, state)
        if rate is not None and step == count:
            sink.add(RATE_KEY, step, rate[0], rate[1], line.rank)

    @staticmethod
    def _step(state: dict, count: int | None, total: str | None) -> int:
        """The step of the train dict flushed now: the bar's count (a count that moves forward on
        the training bar), else one interval after the previous train dict."""
        last = state["last_step"]
        step = None
        if count is not None and state["bar_total"] in (None, total) and count > last:
            step = count
            if state["n_train"] > 1:
                state["interval"] = step - last
            state["bar_total"] = total
        if step is None:
            step = last + state["interval"] if state["interval"] else state["n_train"]
        state["last_step"] = step
        return step

    # -- bulk reading ---------------------------------------------------------------------------
    def read(self, inp: InputFile, sink: Sink) -> None:
        if self.gate is None:  # ungated (every line decoded): line by line, as before the gate
            LineReader.read(self, inp, sink)
            return
        super().read(inp, sink)

    def shape_table(self) -> ShapeTable:
        return ShapeTable(HF_GATE_SHAPE, self._classify)

    @staticmethod
    def _classify(text: str, quiet: bool, where: Where, kinds: tuple[str, ...] = ("train",)) -> Shape:
        """What :meth:`feed` does with a carriage-return segment (see :class:`ShapeTable`), for every
        segment of its shape: ``QUIET`` (the gate finds nothing in it) or ``ROW`` (a train dict of
        numbers without a step: it waits for the next line's bar; or a dict of another of ``kinds``
        without a step), with the bar it holds (read when it is its line's first non-blank segment),
        else ``OTHER``."""
        if not where.plain:
            return Shape(OTHER)  # ANSI codes or a launcher prefix: the line reader's
        m = BAR_RE.search(text) if "/" in text and "[" in text else None
        bar: tuple[int, int, int, int] | None = None
        if m is not None:
            if not (m.group(1) + m.group(2)).isascii():
                return Shape(OTHER)
            bar = (byte_offset(text, m.start(1)), byte_offset(text, m.end(1)), byte_offset(text, m.start(2)),
                   byte_offset(text, m.end(2)))
        if quiet:
            return Shape(QUIET, DictLineShape(bar))
        if "'" not in text or not text.rstrip().endswith("}"):
            return Shape(OTHER)
        d = DICT_RE.search(text)
        if d is None:
            return Shape(OTHER)
        logs = parse_log_dict(d.group(1))
        kind = _dict_kind(list(logs)) if logs else ""
        if (not logs or not all(isinstance(v, float) for v in logs.values()) or kind not in kinds
                or "step" in logs or SWIFT_STEP_KEY in logs):
            return Shape(OTHER)
        spans = log_dict_spans(d.group(1))
        keys = tuple(key for key, _, _ in spans)
        if len(set(keys)) != len(keys) or set(keys) != set(logs):
            return Shape(OTHER)
        for _, a, b in spans:
            value = d.group(1)[a:b]
            if DIGIT_RE.search(value) and NUMBER_RE.fullmatch(value) is None:
                return Shape(OTHER)
        off = d.start(1)
        byte_spans = tuple((byte_offset(text, off + a), byte_offset(text, off + b)) for _, a, b in spans)
        numbers = SpanNumbers(text.encode("utf-8").decode("latin-1"), byte_spans)  # a character a byte
        for j in numbers.const:
            numbers.const[j] = float(logs[keys[j]])  # "nan", "inf": as parse_number reads them
        return Shape(ROW, DictLineShape(bar, keys, numbers, kind))

    def read_chunk(self, chunk: Chunk, info: list[Any]) -> NumberedLines:
        return NumberedLines(chunk, info)

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        """The lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`feed` reads them: each train
        dict is written at the count of the bar in the first non-blank segment of the next
        non-blank line; the last one, when that line is past ``stop``, is left pending as
        :meth:`feed` leaves it."""
        idx = np.arange(start, stop)
        kinds = chunk.kind[start:stop]
        shown = idx[kinds != BLANK]
        if not shown.shape[0]:
            return stop
        got = chunk_numbers(table, chunk, self.name, self.read_chunk)
        if state["pending"] is not None:
            f = int(shown[0])
            w = int(got.widths[f])
            self._flush(sink, state, int(got.counts[f]) if w else None, str(int(got.totals[f])).zfill(w) if w else None,
                        got.rate_at(f, base) if w else None)
        rows = idx[kinds == ROW]
        if not rows.shape[0]:
            return stop
        nxt = np.searchsorted(shown, rows, side="right")
        last = None
        if nxt[-1] >= shown.shape[0]:  # the last dict waits for a line past the run
            last = int(rows[-1])
            rows, nxt = rows[:-1], nxt[:-1]
        if rows.shape[0]:
            self._rows(got, sink, state, rows, shown[nxt], base)
        if last is not None:
            self.wait(chunk, got, state, last, base)
        return stop

    @staticmethod
    def wait(chunk: Chunk, got: NumberedLines, state: dict, i: int, base: int) -> None:
        """The train dict of ``ROW`` line ``i`` left waiting for the next bar, as :meth:`feed` leaves it."""
        state["n_train"] += 1
        logs: dict[str, float | str] = {key: float(got.columns[key][0][i]) for key in got.keys_of(i)}
        raw = chunk.lines[i].decode("utf-8").rstrip("\r\n")
        at = int(chunk.row_at[i] - chunk.lines.starts[i])
        text = chunk.lines[i][at:].split(b"\r", 1)[0].decode("utf-8")
        state["pending"] = (logs, Line(base + i + 1, text, None, raw))

    @classmethod
    def bar_steps(cls, state: dict, counts: NDArray[np.int64], totals: NDArray[np.int64],
                  widths: NDArray[np.int64]) -> NDArray[np.int64]:
        """The steps of train dicts flushed one after the other by bars of these counts, totals and
        totals' widths (0: no bar), as :meth:`_step` numbers them (``n_train`` counted here too):
        each stretch of dicts at their bars' counts at once, the others one by one."""
        n = counts.shape[0]
        steps = np.empty(n, dtype=np.int64)
        k = 0
        while k < n:
            m = cls._at_counts(state, counts[k:], totals[k:], widths[k:])
            if m:
                n0, last = state["n_train"], state["last_step"]
                steps[k:k + m] = counts[k:k + m]
                if m >= 2:
                    state["interval"] = int(counts[k + m - 1] - counts[k + m - 2])
                elif n0 >= 1:
                    state["interval"] = int(counts[k]) - last
                state["n_train"], state["last_step"] = n0 + m, int(counts[k + m - 1])
                state["bar_total"] = str(int(totals[k])).zfill(int(widths[k]))
                k += m
                continue
            c, t, w = int(counts[k]), int(totals[k]), int(widths[k])
            state["n_train"] += 1
            steps[k] = cls._step(state, c if w else None, str(t).zfill(w) if w else None)
            k += 1
        return steps

    @staticmethod
    def _at_counts(state: dict, counts: NDArray[np.int64], totals: NDArray[np.int64], widths: NDArray[np.int64]) -> int:
        """How many of the first dicts :meth:`_step` numbers at their bars' counts: bars of the
        training bar's total, counts going up from past the last step."""
        w, t = int(widths[0]), int(totals[0])
        if not w or state["bar_total"] not in (None, str(t).zfill(w)) or counts[0] <= state["last_step"]:
            return 0
        odd = np.flatnonzero((widths != w) | (totals != t))
        down = np.flatnonzero(np.diff(counts) <= 0) + 1
        return min(int(odd[0]) if odd.shape[0] else counts.shape[0], int(down[0]) if down.shape[0] else counts.shape[0])

    def _rows(self, got: NumberedLines, sink: Sink, state: dict, rows: NDArray[np.int64], bars: NDArray[np.int64],
              base: int, steps: NDArray[np.int64] | None = None) -> None:
        """Train dicts at lines ``rows``, each flushed by the bar of line ``bars`` (same order);
        ``steps``: their steps where :meth:`bar_steps` has numbered them already."""
        n = rows.shape[0]
        counts, widths = got.counts[bars], got.widths[bars]
        if steps is None:
            steps = self.bar_steps(state, counts, got.totals[bars], widths)
        if "framework" not in state:
            state["framework"] = True
            sink.meta("framework", "hf")
        line_nos = rows + base + 1
        # the bar rates of the dicts whose step is their bar's count, as :meth:`_flush` writes them
        rated = np.flatnonzero((widths != 0) & (steps == counts))
        rate, has_rate = got.rates_at(bars[rated])
        rated = rated[has_rate]
        first_rate = int(rated[0]) if rated.shape[0] else n
        # the keys in the order they first come: a row's keys in its dict's order, then its bar's rate
        shapes = got.row_shape[rows]
        firsts = [0] if bool((shapes == shapes[0]).all()) else np.sort(np.unique(shapes, return_index=True)[1]).tolist()
        order: list[str] = []
        for k in firsts:
            if k > first_rate and RATE_KEY not in order:
                order.append(RATE_KEY)
            order += [key for key in got.keys_of(int(rows[k])) if key not in order]
        if rated.shape[0] and RATE_KEY not in order:
            order.append(RATE_KEY)
        for key in order:
            if key == RATE_KEY:
                sink.add_many(RATE_KEY, steps[rated], rate[has_rate], bars[rated] + base + 1)
                continue
            values, has = got.columns[key]
            h = has[rows]
            if h.all():
                sink.add_many(key, steps, values[rows], line_nos)
            else:
                sink.add_many(key, steps[h], values[rows][h], line_nos[h])
        sink.last_step = int(steps[-1])
        if "epoch" in got.columns:
            texts = state["texts"]
            values, has = got.columns["epoch"]
            h = has[rows]
            pairs = zip(steps[h].tolist(), values[rows][h].tolist())
            if len(texts) + n < MAX_TEXTS:
                texts.update((s, f"epoch {e:g}") for s, e in pairs)
            else:
                for s, e in pairs:
                    if len(texts) < MAX_TEXTS:
                        texts[s] = f"epoch {e:g}"

    def _write(self, logs: dict[str, float | str], kind: str, step: int, line: Line, sink: Sink, state: dict) -> None:
        if "framework" not in state:
            state["framework"] = True
            sink.meta("framework", "hf")
        epoch = logs.get("epoch")
        if kind == "eval" and isinstance(epoch, float):
            self.evaluated(state, [step], [epoch])
        for key, v in logs.items():
            if key == "step" or not isinstance(v, float):
                continue
            sink.add(key, step, v, line.no, line.rank)
        if kind == "summary":
            src = sink.source.path if sink.source else ""
            sink.event(Event(EventKind.PHASE, "training finished (HF Trainer end-of-training summary)", src,
                             line.no, line.raw, step=step, rank=line.rank,
                             data={"phase": "training finished", "completed": True,
                                   **{k: v for k, v in logs.items() if isinstance(v, float)}}))

    @staticmethod
    def evaluated(state: dict, steps: list[int], epochs: list[float]) -> None:
        """Record the epochs eval dicts print at their steps (bounded; :meth:`finish` adds them to the steps' text)."""
        got: dict[int, float] = state["evaluated"]
        for step, epoch in zip(steps, epochs):
            if len(got) >= MAX_TEXTS:
                return
            got[int(step)] = float(epoch)

    @staticmethod
    def _explicit_step(logs: dict[str, float | str], sink: Sink) -> int | None:
        v = logs.get("step")
        if isinstance(v, float) and math.isfinite(v):
            return int(v)
        swift = logs.get(SWIFT_STEP_KEY)
        if isinstance(swift, str) and "/" in swift:
            cur, _, total = swift.partition("/")
            if cur.strip().isdigit():
                if total.strip().isdigit():
                    sink.meta("max_steps", int(total))
                return int(cur)
        return None


class HFTrainerStateReader(Reader):
    name = "hf_trainer_state"
    kind = SourceKind.METRICS
    description = "HF Trainer trainer_state.json (log_history entries with their global step)"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text:
            return 0.0
        head = sample.head.lstrip()
        if not head.startswith(b"{"):
            return 0.0
        if b'"log_history"' in sample.head:
            return 0.95
        return 0.6 if sample.name == "trainer_state.json" else 0.0

    def read(self, inp: InputFile, sink: Sink) -> None:
        with inp.open() as stream:
            text = stream.read().decode("utf-8", "replace")
        # Python's json accepts the NaN/Infinity that json.dumps writes
        state = load_json(text, inp.display, invalid="invalid trainer_state.json")
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise InputError(f"{inp.display}: JSON without a log_history list (not a trainer_state.json)")
        sink.meta("framework", "hf")
        for key in STATE_META_KEYS:
            if key in state and state[key] is not None:
                sink.meta(key, state[key])
        key_lines = _entry_key_lines(text, history)
        last_step = 0
        for i, entry in enumerate(history):
            if not isinstance(entry, dict):
                continue
            step_v = entry.get("step")
            step = int(step_v) if isinstance(step_v, (int, float)) and math.isfinite(step_v) else last_step
            last_step = step
            lines = key_lines[i] if i < len(key_lines) else {}
            for key, v in entry.items():
                if key == "step":
                    continue
                num = json_number(v)
                if num is not None:
                    sink.add(key, step, num, lines.get(key, lines.get("step", 0)))
            if any(k in entry for k in SUMMARY_KEYS):
                line_no = lines.get("step", 0)
                sink.event(Event(EventKind.PHASE, "training finished (log_history end-of-training summary)",
                                 inp.display, line_no, _line_text(text, line_no), step=step,
                                 data={"phase": "training finished", "completed": True}))
        gs, ms = state.get("global_step"), state.get("max_steps")
        if isinstance(gs, int) and isinstance(ms, int) and ms > 0:
            line_no = _first_line_of(text, '"global_step"')
            done = gs >= ms
            sink.event(Event(EventKind.PHASE, f"checkpoint state at global step {gs} of max_steps {ms}"
                             + (" (training complete)" if done else " (training incomplete)"),
                             inp.display, line_no, _line_text(text, line_no), step=gs,
                             data={"phase": "trainer_state", "global_step": gs, "max_steps": ms,
                                   "completed": done}))


def _line_no(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _first_line_of(text: str, needle: str) -> int:
    pos = text.find(needle)
    return _line_no(text, pos) if pos >= 0 else 0


def _line_text(text: str, line_no: int) -> str:
    if line_no <= 0:
        return ""
    lines = text.split("\n", line_no)
    return lines[line_no - 1].rstrip("\r") if len(lines) >= line_no else ""


# A JSON key: its opening quote is never escaped (see PAIR_RE), so a run of escaped quotes is read once.
KEY_RE = re.compile(r'(?<!\\)"((?:[^"\\]|\\.)*)"\s*:')


def _entry_key_lines(text: str, history: list[Any]) -> list[dict[str, int]]:
    """Line number of every key of every log_history entry. Entries are flat objects, so the
    i-th ``{`` ... ``}`` after ``"log_history"`` is the i-th entry; counting newlines
    incrementally keeps this linear in the file size."""
    start = text.find('"log_history"')
    if start < 0:
        return []
    pos = text.find("[", start)
    out: list[dict[str, int]] = []
    line = _line_no(text, pos)
    cursor = pos
    for _ in history:
        a = text.find("{", pos)
        b = text.find("}", a)
        if a < 0 or b < 0:
            break
        keys: dict[str, int] = {}
        for m in KEY_RE.finditer(text, a, b):
            line += text.count("\n", cursor, m.start())
            cursor = m.start()
            keys.setdefault(m.group(1), line)
        out.append(keys)
        pos = b + 1
    return out
