"""PyTorch Lightning: the TQDM progress bar on stdout, and CSVLogger ``metrics.csv``.

Progress bar (reader ``lightning``)::

    Epoch 0:  92%|█████▉   | 932/1016 [00:33<00:03, 27.70it/s, loss=0.223, v_num=77, acc=0.875]

Only ``Epoch N`` bars carry training metrics (their postfix, and their speed, read as ``it/s`` as every
tqdm bar's is: ``s/it`` inverted); ``Validation/Sanity Checking/
Testing/Predicting DataLoader`` bars are ignored as metrics. Lightning pads postfix numbers, so a
NaN prints as ``nan.0``, inf as ``inf.0`` and -inf as ``-inf.``; all become NaN/Inf values.

Step derivation: the bar counts batches within an epoch (``n/total``), so the global step is
``offset(epoch) + n``. ``offset`` is ``epoch * total`` when the bar's total is known (it is the
same every epoch); when the total is ``?`` (iterable datasets) it is the sum of the last ``n``
of every earlier epoch seen in the file. In Lightning 1.x the total also counted the epoch's
validation batches, so this is the bar position, not strictly the optimizer step; the CSV
logger's ``step`` column is the optimizer step when available.

RichProgressBar (Lightning's default bar whenever ``rich`` is installed)::

    Epoch 39/39 ━━━━━━━━━━━━━━━ 4/4 0:00:00 • 0:00:00 801.66it/s v_num: 0.000
                                                               train_loss: 0.000
                                                               val_loss: 1.994

Columns as ``RichProgressBar.configure_columns`` and ``MetricsTextColumn`` render them
(lightning/pytorch/callbacks/progress/rich_progress.py): description, bar, ``n/total`` (``--`` when
unknown), ``elapsed • remaining``, ``it/s``, then ``name: value`` items (``.3f``) that Rich wraps
onto indented lines at the console width (80 columns when stdout is not a terminal). Written to
a file, Rich's live display only prints its last state when it stops, so ``python train.py >
out.log`` holds one bar, at the end of the fit; a terminal capture holds every redraw. The step
is derived as for the TQDM bar.

CSVLogger (reader ``lightning_csv``): ``epoch,step,train_loss,val_loss`` with sparse rows (empty
cell = not logged; train and val rows share a step) and either a sorted (2.x) or insertion-order
(older) header. Every column except ``step`` becomes a metric; ``epoch`` is kept as a metric.

What the script prints itself between the bar's redraws (``step 145 | epoch 0 | loss nan``) is read
as the format-agnostic extractor reads a line, and kept where the print carries its own step or
iteration counter, at that counter: the bar shows its postfix only at redraws (a NaN or the last
batch before a crash can fall between two), and the counter is the step as the script counts it.
Prints without such a counter, counted in epochs or in batches of an epoch, or whose counter goes
back (it restarts each epoch), are left out: their steps would not be the bar's.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample, fallback_format
from trainaudit.ingest.extract import OUTER_RANK, Table, counter_rank, record_of, speed_pair
from trainaudit.ingest.formats.hf import NUMBER_RE
from trainaudit.ingest.formats.shaped import (
    DIGIT_RE, OTHER, QUIET, ROW, Chunk, chunk_numbers, Columns, Shape, ShapeTable, ShapedReader, Where, byte_offset, digits_at,
)
from trainaudit.ingest.formats import shaped
from trainaudit.ingest.formats.text.bulk import SpanNumbers
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import Event, EventKind, SourceKind

BAR_RE = re.compile(
    r"(?<![^|\r])(?P<desc>[^|\r]*?)(?!(?<=\s)\s):?\s*+(?<!\d)(?P<pct>\d++)%(?:\|[^|]*\||\s)\s*(?P<n>\d+)/(?P<total>\d+|\?)\s*"
    r"\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+)(?:,\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it))?"
    r"(?:,\s*(?P<postfix>[^\]]*))?\]?"
)
EPOCH_DESC_RE = re.compile(r"^\s*Epoch (\d+)\s*$")
OTHER_DESC_RE = re.compile(r"^\s*(Validation|Sanity Checking|Testing|Predicting)(?: DataLoader \d+)?\s*$")
# A key starts at the first letter of its run of name characters (possessive: "=" ends the run).
POSTFIX_ITEM_RE = re.compile(r"(?<![\w/.\-])(?:(?![A-Za-z_])[\w/.\-])*+([A-Za-z_][\w/.\-]*+)=([^,\]]+)")
# Lightning messages about non-finite values and the end of fit (lightning 2.x source).
NONFINITE_RES = [
    re.compile(r"The loss returned in `training_step` is (\S+?)\.?$"),
    re.compile(r"Monitored metric (\S+) = (\S+) is not finite"),
]
FIT_STOPPED_RE = re.compile(r"`Trainer\.fit` stopped: (.*)$")
META_ITEMS = {"v_num"}
RATE = speed_pair("it/s", 1.0).key  # the name every tqdm bar's speed is read under
RICH_BAR_RE = re.compile(
    r"^\s*+Epoch (?P<epoch>\d{1,9})(?:/\d{1,9})? [━╸╺\- ]*+(?P<n>\d{1,12})/(?P<total>\d{1,12}|--) "
    r"++(?:-|\d{1,9} days?, )?[\d:-]{4,12} • (?:-|\d{1,9} days?, )?[\d:-]{4,12}(?: ++[\d.]{1,20}it/s)?(?P<metrics>.*)$"
)
RICH_ITEM_RE = re.compile(r"(?<!\S)([^\s:]++): ++(\S++)")
# Lightning's banner and model summary (ModelSummary / RichModelSummary): printed at the start of
# every fit, whatever the bar; their numbers are no training metrics.
SUMMARY_RE = re.compile(r"^(?:GPU available: |TPU available: |HPU available: |Total estimated model params size \(MB\))")
# the model summary's table rows: RichModelSummary's box-drawn rows, ModelSummary's "0 | net | Sequential | 5.8 K"
# (lightning/pytorch/utilities/model_summary): a layer's index is no step
# and its counts ("Trainable params: 5.8 K", "Modules in train mode: 6", "Total FLOPs: 0")
SUMMARY_ROW_RE = re.compile(r"^\s*+(?:[┃│┏┡┗└┣├]|\d++ *+\| *+\S|(?:Non-trainable|Trainable|Total) params|Modules in|Total FLOPs)")
# any other progress bar (Rich's "Sanity Checking ━━╺━ 1/2 0:00:00 • 0:00:00 0.00it/s", tqdm's "0/? [00:00<?, ?it/s]")
PROGRESS_RE = re.compile(r"[━╸╺]|(?:\d|\?)(?:it/s|s/it)\b")


def parse_bar_number(text: str) -> float | None:
    """Postfix numbers: ``0.223``, ``1.63e+6``, and Lightning's padded ``nan.0``/``inf.0``/``-inf.``."""
    t = text.strip()
    v = parse_number(t)
    if v is not None:
        return v
    low = t.lower().rstrip("0").rstrip(".")
    if low in ("nan", "inf", "-inf", "+inf"):
        return parse_number(low)
    return None


@dataclass(slots=True)
class _BarShape:
    """An epoch bar segment's shape: the spans of its epoch, count and total, its postfix's numeric
    keys (with how to read them) and the span of its ``v_num``."""

    epoch: tuple[int, int]
    n: tuple[int, int]
    total: tuple[int, int]
    keys: tuple[str, ...]
    numbers: SpanNumbers
    meta: tuple[tuple[str, int, int], ...]


class LightningReader(ShapedReader):
    name = "lightning"
    kind = SourceKind.LOG
    description = "PyTorch Lightning TQDM progress bar stdout ('Epoch 0:  92%|...| 932/1016 [..., loss=0.223]')"

    def sniff(self, sample: Sample) -> float:
        n = summary = 0
        for ln in sample.lines:
            if "Epoch" in ln and RICH_BAR_RE.match(ln):
                n += 1
                continue
            m = BAR_RE.search(ln)
            if m and EPOCH_DESC_RE.match(m.group("desc")):
                n += 1
            elif SUMMARY_RE.match(ln):
                summary += 1
        if n:
            return 0.85
        # The Rich bar is printed once, when the fit ends: the head of a long log may only hold
        # Lightning's banner and model summary.
        return 0.5 if summary >= 2 else 0.0


    # a line is an epoch of redraws: a chunk of a few lines holds hundreds of bar shapes, whose
    # numbers are read once a chunk, so larger chunks (a few of these lines each) pay
    chunk_size = shaped.CHUNK_SIZE * 4

    def shape_table(self) -> ShapeTable:
        return ShapeTable(None, self._classify, one_row=False)

    def read(self, inp: InputFile, sink: Sink) -> None:
        before = sink.n_values
        super().read(inp, sink)
        if sink.n_values == before:
            # claimed by its banner, but no bar held a value (enable_progress_bar=False, or a run
            # that died before its first batch): what the script printed itself is read as any log
            fallback_format().read_numbers(inp, sink)

    def new_state(self) -> dict:
        return {"epoch": None, "offset": 0, "last_n": 0, "total": None, "framework": False, "rich": None,
                "print_table": Table(), "print_step": -1}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        rich = state["rich"]
        if rich is not None:
            if text[:1].isspace() and text.strip() and "Epoch" not in text:
                rich[3].append(text)  # the bar's metrics, wrapped by Rich onto an indented line
                return
            self._rich_metrics(rich, sink)
            state["rich"] = None
        if "Epoch" in text and "•" in text:
            rm = RICH_BAR_RE.match(text)
            if rm is not None:
                step = self._at(int(rm.group("epoch")), int(rm.group("n")),
                                int(rm.group("total")) if rm.group("total") != "--" else None, line, sink, state)
                if step is not None:
                    state["rich"] = (step, line.no, line.rank, [rm.group("metrics")])
                return
        if "%" in text:
            m = BAR_RE.search(text)
            if m is not None:
                self._bar(m, line, sink, state)
                rest = text[m.end():]  # a print glued to the redraw before it (no newline from the bar)
                if state["print_step"] is not None and _printed(rest):
                    self._print(rest, line, sink, state)
                return
        self._message(line, sink, state)

    def finish(self, sink: Sink, state: dict) -> None:
        if state["rich"] is not None:
            self._rich_metrics(state["rich"], sink)
            state["rich"] = None

    @staticmethod
    def _rich_metrics(rich: tuple[int, int, int | None, list[str]], sink: Sink) -> None:
        step, no, rank, parts = rich
        for key, raw in RICH_ITEM_RE.findall(" ".join(p.strip() for p in parts)):
            if key in META_ITEMS:
                sink.meta(f"lightning.{key}", raw)
                continue
            v = parse_bar_number(raw)
            if v is not None:
                sink.add(key, step, v, no, rank)

    def _bar(self, m: re.Match[str], line: Line, sink: Sink, state: dict) -> None:
        desc = m.group("desc")
        em = EPOCH_DESC_RE.match(desc)
        if em is None:
            return  # validation / sanity / test bars: progress only, no training metrics
        total = int(m.group("total")) if m.group("total") != "?" else None
        step = self._at(int(em.group(1)), int(m.group("n")), total, line, sink, state)
        if step is None:
            return
        rate = parse_number(m.group("rate") or "")
        if rate is not None:
            # the bar's speed (tqdm's moving average), as every tqdm bar is read: "s/it" inverted to "it/s"
            speed = speed_pair(m.group("unit"), rate)
            sink.add(speed.key, step, speed.value, line.no, line.rank)
        postfix = m.group("postfix")
        if not postfix:
            return
        for key, raw in POSTFIX_ITEM_RE.findall(postfix):
            if key in META_ITEMS:
                sink.meta(f"lightning.{key}", raw.strip())
                continue
            v = parse_bar_number(raw)
            if v is not None:
                sink.add(key, step, v, line.no, line.rank)

    @staticmethod
    def _at(epoch: int, n: int, total: int | None, line: Line, sink: Sink, state: dict) -> int | None:
        """The step of an epoch bar at batch ``n`` (None before the epoch's first batch); records the epoch."""
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "lightning")
        if epoch != state["epoch"]:
            if total is not None:
                state["offset"] = epoch * total
            elif state["epoch"] is not None:
                state["offset"] += state["last_n"]
            state["epoch"] = epoch
            state["last_n"] = 0
        if total is not None and state["total"] is None:
            state["total"] = total
            sink.meta("lightning.batches_per_epoch", total)
        state["last_n"] = max(state["last_n"], n)
        if n == 0:
            # no batch of this epoch has run: at the start, or when Lightning 2.x resets the bar
            # after an epoch (still "Epoch k: 0/N" with the epoch's last postfix values)
            return None
        step: int = state["offset"] + n
        sink.add("epoch", step, float(epoch), line.no, line.rank)
        return step

    # -- bulk reading ---------------------------------------------------------------------------
    @staticmethod
    def _classify(text: str, quiet: bool, where: Where) -> Shape:
        """What :meth:`feed` does with a segment (see :class:`ShapeTable`) while no Rich bar is
        open, for every segment of its shape: ``ROW`` for a TQDM epoch bar of a known total whose
        postfix holds numbers (and ``v_num``), ``QUIET`` for a segment it does nothing with (another
        bar, a message none of its patterns finds), else ``OTHER``."""
        if not where.plain:
            return Shape(OTHER)  # ANSI codes or a launcher prefix: the line reader's
        if "Epoch" in text and "•" in text and RICH_BAR_RE.match(text):
            return Shape(OTHER)
        m = BAR_RE.search(text) if "%" in text else None
        if m is None:
            quiet_message = not any(p.search(text) for p in (*NONFINITE_RES, FIT_STOPPED_RE)) and not _printed(text)
            return Shape(QUIET if quiet_message else OTHER)
        if _printed(text[m.end():]):
            return Shape(OTHER)  # a print glued to the redraw: the line reader's
        em = EPOCH_DESC_RE.match(m.group("desc"))
        if em is None:
            return Shape(QUIET)  # validation / sanity / test bars: progress only
        if m.group("total") == "?" or not (em.group(1) + m.group("n") + m.group("total")).isascii():
            return Shape(OTHER)
        keys: list[str] = []
        spans: list[tuple[int, int]] = []
        meta: list[tuple[str, int, int]] = []
        values: list[float] = []
        rate = m.group("rate")
        if rate is not None and rate != "?":
            v = parse_number(rate)
            if m.group("unit") != "it/s" or v is None or NUMBER_RE.fullmatch(rate) is None:
                return Shape(OTHER)  # seconds an iteration: the line reader inverts it
            keys.append(RATE)
            values.append(v)
            spans.append((byte_offset(text, m.start("rate")), byte_offset(text, m.end("rate"))))
        postfix = m.group("postfix")
        at = m.start("postfix")
        for item in POSTFIX_ITEM_RE.finditer(postfix or ""):
            key, raw = item.group(1), item.group(2)
            a = at + item.start(2) + len(raw) - len(raw.lstrip())
            b = at + item.end(2) - (len(raw) - len(raw.rstrip()))
            if key in META_ITEMS:
                meta.append((key, byte_offset(text, a), byte_offset(text, b)))
                continue
            v = parse_bar_number(raw)
            if v is None:
                if DIGIT_RE.search(raw):
                    return Shape(OTHER)  # a number of another spelling on another line of the shape
                continue
            token = raw.strip()
            if DIGIT_RE.search(token) and NUMBER_RE.fullmatch(token) is None:
                return Shape(OTHER)
            keys.append(key)
            values.append(v)
            spans.append((byte_offset(text, a), byte_offset(text, b)))
        if len(set(keys)) != len(keys):
            return Shape(OTHER)
        numbers = SpanNumbers(text.encode("utf-8").decode("latin-1"), tuple(spans))  # a character a byte
        for j in numbers.const:
            numbers.const[j] = values[j]  # "nan.0", "inf": as parse_bar_number reads them
        e0 = m.start("desc") + em.start(1)
        return Shape(ROW, _BarShape((byte_offset(text, e0), byte_offset(text, e0 + len(em.group(1)))),
                                    (byte_offset(text, m.start("n")), byte_offset(text, m.end("n"))),
                                    (byte_offset(text, m.start("total")), byte_offset(text, m.end("total"))),
                                    tuple(keys), numbers, tuple(meta)))

    def read_chunk(self, chunk: Chunk, info: list[Any]) -> _Bars:
        return _Bars(chunk, info)

    def place_run(self, table: ShapeTable, sink: Sink, state: dict, chunk: Chunk, start: int, stop: int,
                  base: int) -> int:
        """The epoch bars of lines ``start`` to ``stop`` (no ``OTHER``) as :meth:`feed` reads them,
        each at ``offset(epoch) + n``; with a Rich bar open, the lines are the line reader's."""
        if state["rich"] is not None:
            return start
        got = chunk_numbers(table, chunk, self.name, self.read_chunk)
        seg_line = chunk.segments[2]
        lo, hi = np.searchsorted(seg_line, [start, stop])
        if hi <= lo:
            return stop
        e, n, t = got.epoch[lo:hi], got.n[lo:hi], got.total[lo:hi]
        if not state["framework"]:
            state["framework"] = True
            sink.meta("framework", "lightning")
        prev = state["epoch"]
        change = np.empty(e.shape[0], dtype=bool)
        change[0] = prev is None or int(e[0]) != prev
        change[1:] = e[1:] != e[:-1]
        at = np.maximum.accumulate(np.where(change, np.arange(e.shape[0]), -1))
        offset = np.where(at >= 0, e[np.maximum(at, 0)] * t[np.maximum(at, 0)], state["offset"])
        if state["total"] is None:
            state["total"] = int(t[0])
            sink.meta("lightning.batches_per_epoch", int(t[0]))
        changes = np.flatnonzero(change)
        if changes.shape[0]:
            state["last_n"] = int(n[int(changes[-1]):].max())
        else:
            state["last_n"] = max(state["last_n"], int(n.max()))
        state["epoch"], state["offset"] = int(e[-1]), int(offset[-1])
        keep = n != 0  # before the epoch's first batch: no step, no value
        if not keep.any():
            return stop
        steps = (offset + n)[keep]
        line_nos = seg_line[lo:hi][keep] + base + 1
        sink.add_many("epoch", steps, e[keep].astype(np.float64), line_nos)
        sel = np.flatnonzero(keep) + lo
        for key in got.order(sel):
            values, has = got.columns[key]
            h = has[sel]
            sink.add_many(key, steps[h], values[sel][h], line_nos[h])
        first = int(sel[0])
        for key, (a, b) in got.meta_of(first).items():
            sink.meta(f"lightning.{key}", chunk.lines.data[a:b].decode("utf-8").strip())
        sink.last_step = int(steps[-1])
        return stop

    def _message(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        src = sink.source.path if sink.source else ""
        for pat in NONFINITE_RES:
            m = pat.search(text)
            if m:
                sink.event(Event(EventKind.NAN_CHECK, text.strip(), src, line.no, line.raw, rank=line.rank,
                                 data={"groups": list(m.groups())}))
                return
        m = FIT_STOPPED_RE.search(text)
        if m:
            sink.event(Event(EventKind.PHASE, text.strip(), src, line.no, line.raw, rank=line.rank,
                             data={"phase": "fit stopped", "reason": m.group(1).strip(), "completed": True}))
            return
        if state["print_step"] is not None and _printed(text):
            self._print(text, line, sink, state)

    @staticmethod
    def _print(text: str, line: Line, sink: Sink, state: dict) -> None:
        """What the script printed on ``line``: its metrics at its own step counter (see the module's doc)."""
        rec = record_of(text, line.no, line.rank, state["print_table"])
        if rec is None or not rec.metrics:
            return
        ranked = [(r, k) for k in rec.counters if (r := counter_rank(k)) is not None]
        if not ranked:
            return
        rank, key = min(ranked)
        v = rec.counters[key]
        if rank >= OUTER_RANK or not math.isfinite(v) or v != int(v):
            return
        if v < state["print_step"]:
            state["print_step"] = None  # a counter that restarts: not the run's step; no print is read after
            return
        state["print_step"] = step = int(v)
        for name, value in rec.metrics.items():
            sink.add(name, step, value, line.no, line.rank)


def _printed(text: str) -> bool:
    """Whether text that is no bar and no Lightning message may be a print of the script's own
    metrics: it has a number, starts at the line's start (a traceback's lines are indented) and is
    not Lightning's banner, model summary or another progress bar."""
    return (DIGIT_RE.search(text) is not None and not text[:1].isspace() and SUMMARY_RE.match(text) is None
            and SUMMARY_ROW_RE.match(text) is None and PROGRESS_RE.search(text) is None)


class _Bars:
    """A chunk's epoch bars read at once (a row a ``ROW`` segment, in order): epoch, count, total,
    and each postfix key's values (``has`` where the segment's postfix holds the key)."""

    def __init__(self, chunk: Chunk, info: list[Any]) -> None:
        sid, at, _, _ = chunk.segments
        buf = chunk.lines.buf
        k = sid.shape[0]
        self.sid, self.at = sid, at
        # what the methods below need of the chunk's shapes (not every shape's info: a chunk read
        # in a worker process comes back with what it keeps)
        self.keys: dict[int, tuple[str, ...]] = {}
        self.meta: dict[int, tuple[tuple[str, int, int], ...]] = {}
        self.epoch = np.zeros(k, dtype=np.int64)
        self.n = np.zeros(k, dtype=np.int64)
        self.total = np.zeros(k, dtype=np.int64)
        self.columns = Columns(k)
        for s in np.unique(sid).tolist():
            sel = np.flatnonzero(sid == s)
            shape: _BarShape = info[s]
            self.keys[s], self.meta[s] = shape.keys, shape.meta
            where = at[sel]
            for out, (a, b) in ((self.epoch, shape.epoch), (self.n, shape.n), (self.total, shape.total)):
                out[sel] = digits_at(buf, where + a, b - a)
            values = shape.numbers.read_at(buf, where)
            for c, key in enumerate(shape.keys):
                self.columns.put(key, sel, values[:, c])

    def order(self, sel: NDArray[np.int64]) -> list[str]:
        """The postfix keys of the segments ``sel`` in the order they first come."""
        shapes = self.sid[sel]
        _, first = np.unique(shapes, return_index=True)
        out: list[str] = []
        for k in np.sort(first).tolist():
            out += [key for key in self.keys[int(shapes[k])] if key not in out]
        return out

    def meta_of(self, i: int) -> dict[str, tuple[int, int]]:
        """Where in the chunk the meta items of segment ``i`` stand."""
        at = int(self.at[i])
        return {key: (at + a, at + b) for key, a, b in self.meta[int(self.sid[i])]}


# -- CSV loggers (shared with keras_csv) ----------------------------------------------------------

def csv_header(sample: Sample) -> list[str] | None:
    """The first line of a small CSV as column names, or None if it does not look like one."""
    if not sample.is_text or not sample.lines:
        return None
    first = sample.lines[0].strip().lstrip("\ufeff")
    if "," not in first or first.startswith("#"):
        return None
    cols = [c.strip() for c in first.split(",")]
    if any(not c or parse_number(c) is not None for c in cols):
        return None
    return cols


def read_csv_rows(inp: InputFile):  # type: ignore[no-untyped-def]
    """Yield (line_no, header, row) for a CSV file, streamed; line_no is the physical line of the
    row (rows never contain quoted newlines in these loggers)."""
    with inp.open() as stream:
        text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="")
        reader = csv.reader(text)
        header: list[str] | None = None
        for row in _guarded(reader, inp.display):
            if header is None:
                if not row or not any(c.strip() for c in row):
                    continue
                header = [c.strip().lstrip("\ufeff") for c in row]
                continue
            if not row:
                continue
            yield reader.line_num, header, row
        if header is None:
            raise InputError(f"{inp.display}: CSV file without a header row")


def _guarded(reader, display: str):  # type: ignore[no-untyped-def]
    """csv.Error (a NUL byte, an over-long field) becomes one clear input error."""
    try:
        yield from reader
    except csv.Error as exc:
        raise InputError(f"{display}: malformed CSV at line {reader.line_num} ({exc})") from None


class LightningCSVReader(Reader):
    name = "lightning_csv"
    kind = SourceKind.METRICS
    description = "PyTorch Lightning CSVLogger metrics.csv (epoch, step and sparse metric columns)"

    def sniff(self, sample: Sample) -> float:
        cols = csv_header(sample)
        if cols is None or "step" not in cols or "epoch" not in cols:
            return 0.0
        if len(cols) < 3:
            return 0.0
        return 0.9 if sample.name == "metrics.csv" else 0.7

    def read(self, inp: InputFile, sink: Sink) -> None:
        sink.meta("framework", "lightning")
        bad = 0
        for line_no, header, row in read_csv_rows(inp):
            if "step" not in header:
                raise InputError(f"{inp.display}: CSV header has no 'step' column (not a Lightning metrics.csv)")
            si = header.index("step")
            step_v = parse_number(row[si]) if si < len(row) else None
            if step_v is None or not math.isfinite(step_v):
                bad += 1  # a row cut short by a crash, or a stray line
                continue
            step = int(step_v)
            for i, cell in enumerate(row[: len(header)]):
                if i == si or not cell.strip():
                    continue
                v = parse_number(cell)
                if v is not None:
                    sink.add(header[i], step, v, line_no)
        if bad:
            sink.meta("lightning_csv.rows_without_step", bad)
