"""Ultralytics YOLO: ``results.csv`` and the console table.

``results.csv`` (``ultralytics/engine/trainer.py`` ``save_metrics``): one row per epoch. 8.3+
writes it unpadded with a cumulative ``time`` column and a 1-based epoch; 8.0.x right-pads every
cell to 23 characters, has no ``time`` and a 0-based epoch. Step = the epoch as written (so the
two eras differ by one; columns are matched by name, never by position).

Console (``progress_string`` header, then one tqdm bar per epoch)::

          Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size
        70/1000      6.73G      1.081     0.4706      1.084         10        640: 100%|...| 16/16 [...]
                     Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|...
                       all        722       1444      0.989       0.99      0.993      0.681

YOLOv5's console has the same layout under ``Epoch gpu_mem box obj cls total targets img_size`` (the
losses named ``box_loss`` ... ``total_loss`` here) and a validation header with ``Targets``; YOLOv6's
has no memory column: ``Epoch iou_loss l1_loss obj_loss cls_loss``. A row above the first header (a
paste cut just below one) is named by the header that follows it.

YOLOv5 / YOLOv7 ``results.txt`` (their ``train.py``, before results.csv): no header, one row per
epoch, the console's training columns then the validation's seven::

     4/19  22.1G  0.03463  0.01642  0.009719  0.06077  135  640  0  0  0  0  0.09495  0.09118  0.03496

``s + '%10.4g' * 7 % results``: epoch/last epoch, GPU memory, box, obj, cls and total loss, targets, image
size, then P, R, mAP@.5, mAP@.5:.95 and the validation box, obj and cls losses, named as the same
script's TensorBoard tags (the total as ``train/total_loss``). Step = the epoch as printed (0-based).

Step = the printed epoch (1-based). A row seen without its header (a log cut at the top) is
named by the detect/segment/pose trainers' column layout of the same width. Columns are named after the header (``GPU_mem`` in GB); the
``all`` row of the validation that follows becomes ``metrics/precision(B)``, ``metrics/recall(B)``,
``metrics/mAP50(B)``, ``metrics/mAP50-95(B)`` (``(M)`` for Mask, ``(P)`` for Pose) at that epoch,
as results.csv names them. ``meta['num_classes']`` comes from ``Overriding model.yaml nc=A with
nc=B`` when the log has it.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.extract import seconds, speed_pair
from trainaudit.ingest.formats.generic import num
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line
from trainaudit.model import SourceKind

CSV_MARKERS = ("train/box_loss", "train/loss", "metrics/mAP50(B)", "metrics/accuracy_top1", "lr/pg0")
# the console header: "Epoch GPU_mem ..." (YOLOv8), "Epoch gpu_mem box obj cls total targets img_size" (YOLOv5),
# "Epoch iou_loss l1_loss obj_loss cls_loss" (YOLOv6, no memory column); the rest, word by word
HEADER_RE = re.compile(r"^\s*+Epoch((?:\s++[A-Za-z]\w*+)++)\s*+$")
# a header word of YOLOv5's console that names a loss without saying so
V5_LOSSES = {"box": "box_loss", "obj": "obj_loss", "cls": "cls_loss", "total": "total_loss"}
ROW_RE = re.compile(r"^\s*(\d+)/(\d+)\s+(\S+)\s+(.*?)(?::\s*\d+%.*)?$")
# the validation header: "Instances" (YOLOv8), "Targets" or "Labels" (YOLOv5 with "P R mAP@.5 mAP@.5:.95")
VAL_HEADER_RE = re.compile(r"^\s*Class\s+Images\s+(?:Instances|Targets|Labels)\s+(.*?)(?::\s*\d+%.*)?$")
CLS_VAL_HEADER_RE = re.compile(r"^\s*classes\s+top1_acc\s+top5_acc")
ALL_RE = re.compile(r"^\s*all\s+(.*\S)\s*$")
NC_RE = re.compile(r"Overriding model\.yaml nc=\d+ with nc=(\d+)")
# A console row even without its header (a log cut at the top): "21/55  9.95G  -0.2338 ... 640: 100%|".
BARE_ROW_RE = re.compile(r"^\s*\d+/\d+\s+[\d.]+[GM]\s+(?:-?[\d.]+(?:e[-+]?\d+)?\s+|nan\s+|inf\s+)+\d+:\s*\d+%")
# A results.txt row: epoch/last, GPU memory, then 13 numbers (a paste may bold some: "**0.5574**")
_CELL = r"\*{0,2}(?:-?\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf)\*{0,2}"
RESULTS_ROW_RE = re.compile(r"^\s*(\d+)/(\d+)\s+(\d+(?:\.\d+)?[GM]?)((?:\s+" + _CELL + r"){13})\s*$")
RESULTS_COLS = ["train/box_loss", "train/obj_loss", "train/cls_loss", "train/total_loss", "targets", "img_size", "metrics/precision", "metrics/recall",
                "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss", "val/obj_loss", "val/cls_loss"]
# Without a header the columns follow from their count (detect, segment, pose trainers' loss names).
DEFAULT_COLS = {
    6: ["GPU_mem", "box_loss", "cls_loss", "dfl_loss", "Instances", "Size"],
    7: ["GPU_mem", "box_loss", "seg_loss", "cls_loss", "dfl_loss", "Instances", "Size"],
    8: ["GPU_mem", "box_loss", "pose_loss", "kobj_loss", "cls_loss", "dfl_loss", "Instances", "Size"],
}
# the training bar's end: "[06:06<00:00,  6.11s/it]": the epoch's duration and tqdm's speed
TQDM_END_RE = re.compile(r"\[(\d{1,4}:\d\d(?::\d\d)?)<[\d:?]{1,12},\s{0,4}([\d.]{1,12})(it/s|s/it)\]")
GROUP_TOKEN_RE = re.compile(r"^(\w+)\((\S+)$")  # "Box(P" in a validation header
GROUP_NAMES = {"P": "precision", "R": "recall", "mAP50": "mAP50", "mAP50-95": "mAP50-95", "mAP@.5": "mAP50",
               "mAP@.5:.95": "mAP50-95"}


def _csv_header(text: str) -> list[str] | None:
    cells = [c.strip() for c in text.split(",")]
    if cells and cells[0] == "epoch" and any(m in cells for m in CSV_MARKERS):
        return cells
    return None


def _header(text: str) -> list[str] | None:
    """The console header's column names after ``Epoch``: one with a GPU memory column, or losses only."""
    m = HEADER_RE.match(text)
    if m is None:
        return None
    words = m.group(1).split()
    if words[0].lower() == "gpu_mem":
        return ["GPU_mem", *(V5_LOSSES.get(w, w) for w in words[1:])]
    return words if len(words) >= 2 and all(w.endswith("_loss") for w in words) else None


def _val_names(header: str) -> list[str]:
    """'Box(P R mAP50 mAP50-95)' -> results.csv names, in order."""
    names: list[str] = []
    letter = "B"
    for tok in header.split():
        m = GROUP_TOKEN_RE.match(tok)
        if m:
            letter = m.group(1)[0].upper()
            tok = m.group(2)
        tok = tok.rstrip("):")
        names.append(f"metrics/{GROUP_NAMES.get(tok, tok)}({letter})")
    return names


class UltralyticsReader(LineReader):
    name = "ultralytics"
    kind = SourceKind.METRICS
    description = "Ultralytics YOLO results.csv (8.0.x padded and 8.3+), console epoch table (YOLOv5, v6, v8), YOLOv5/v7 results.txt"

    def sniff(self, sample: Sample) -> float:
        first = next((ln for ln in sample.lines if ln.strip()), "")
        if _csv_header(first):
            return 0.95
        if any(_header(ln) for ln in sample.lines):
            return 0.9
        if any(BARE_ROW_RE.match(ln) or RESULTS_ROW_RE.match(ln) for ln in sample.lines):
            return 0.8
        return 0.0

    def new_state(self) -> dict:
        return {"csv": None, "cols": None, "epoch": None, "val": None, "framework": False, "before": None}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if not state["framework"]:
            sink.meta("framework", "ultralytics")
            state["framework"] = True
        if state["csv"] is None and state["cols"] is None:
            header = _csv_header(text)
            if header:
                state["csv"] = header
                return
        if state["csv"] is not None:
            self._csv_row(text, line, sink, state)
            return
        self._console(text, line, sink, state)

    def _csv_row(self, text: str, line: Line, sink: Sink, state: dict) -> None:
        header: list[str] = state["csv"]
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != len(header):
            return
        if cells == header:
            return  # header repeated after a resume
        epoch = num(cells[0])
        if epoch is None:
            return
        step = int(epoch)
        for name, cell in zip(header[1:], cells[1:]):
            v = num(cell)
            if v is not None:
                sink.add(name, step, v, line.no, line.rank)

    def _console(self, text: str, line: Line, sink: Sink, state: dict) -> None:
        m = NC_RE.search(text)
        if m:
            sink.meta("num_classes", int(m.group(1)))
            return
        header = _header(text)
        if header:
            first = state["cols"] is None
            state["cols"] = header
            before = state["before"]
            if first and before is not None:
                # the epoch row above the first header (a paste cut just after a header): named by it
                state["before"] = None
                self._console(before.text, before, sink, state)
            return
        m = VAL_HEADER_RE.match(text)
        if m:
            state["val"] = _val_names(m.group(1))
            return
        if CLS_VAL_HEADER_RE.match(text):
            state["val"] = ["metrics/accuracy_top1", "metrics/accuracy_top5"]
            return
        m = ALL_RE.match(text)
        if m and state["val"] and state["epoch"] is not None:
            cells = m.group(1).split()
            names: list[str] = state["val"]
            cells = cells[-len(names):]  # detection rows lead with Images and Instances counts
            for name, cell in zip(names, cells):
                v = num(cell)
                if v is not None:
                    sink.add(name, state["epoch"], v, line.no, line.rank)
            return
        r = RESULTS_ROW_RE.match(text) if state["cols"] is None else None
        if r is not None:
            epoch = int(r.group(1))
            state["epoch"] = epoch
            mem = num(r.group(3), units=True)
            if mem is not None:
                sink.add("GPU_mem", epoch, mem, line.no, line.rank)
            for name, cell in zip(RESULTS_COLS, r.group(4).split()):
                v = num(cell.strip("*"))
                if v is not None:
                    sink.add(name, epoch, v, line.no, line.rank)
            return
        m = ROW_RE.match(text)
        if not m:
            return
        cells = [m.group(3), *m.group(4).split()]
        cols: list[str] | None = state["cols"]
        if cols is None:
            if not BARE_ROW_RE.match(text):
                state["before"] = line
                return
            cols = DEFAULT_COLS.get(len(cells))
            if cols is None:
                return
        epoch = int(m.group(1))
        state["epoch"] = epoch
        for name, cell in zip(cols, cells):
            v = num(cell, units=True)
            if v is not None:
                sink.add(name, epoch, v, line.no, line.rank)
        t = TQDM_END_RE.search(text)
        if t is not None:
            speed = speed_pair(t.group(3), float(t.group(2)))  # tqdm turns to s/it past a second
            sink.add(speed.key, epoch, speed.value, line.no, line.rank)
            secs = seconds(t.group(1))
            if secs is not None:
                sink.add("epoch_time", epoch, secs, line.no, line.rank)
