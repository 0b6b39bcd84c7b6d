"""OpenMMLab text logs: MMEngine (mmdet 3.x, mmpretrain, xtuner...), mmcv 1.x ``TextLoggerHook``
(mmdet 2.x, mmcls 0.x) and mmdet 0.x.

::

    10/30 22:18:02 - mmengine - INFO - Epoch(train) [1][200/735]  lr: 1.9870e-04  eta: ...  loss: 2.7522
    2020-11-11 18:27:52,420 - mmdet - INFO - Epoch [1][2150/29317]\\tlr: 2.000e-02, eta: ..., loss: 1.0037
    2022-07-13 13:52:10,199 - mmcls - INFO - Epoch(val) [32][282]\\tmAP: 0.8237, CP: 0.6174, ...
    2024/05/22 11:05:26 - mmengine - INFO - bbox_mAP_copypaste: 0.753 0.985 0.880 -1.000 0.624 0.754

Step (the global iteration, as MMEngine's own ``scalars.json`` uses for training):
epoch-based training lines ``[e][i/n]`` -> ``(e - 1) * n + i``; iteration-based ``Iter(train)
[i/n]`` -> ``i``. Validation/test metrics (the end-of-evaluation line ``[e][n/n]`` or mmcv's
``Epoch(val) [e][n]``, and COCO ``*_copypaste`` lines) are put at the end of their epoch,
``e * iters_per_epoch``, once training lines have shown ``iters_per_epoch``; in a log without
training lines the step is the epoch itself (``meta['val_step_unit']`` says which). Validation
progress lines (``[e][i/n]`` with ``i < n``) carry only timing and are skipped. COCO's ``-1.000``
("no objects of that size") is kept as the value it is.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.formats.generic import num
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line
from trainaudit.model import SourceKind

# MMEngine: "Epoch(train)  [1][8600/8930]", "Epoch(val) [104][ 50/416]", "Iter(train) [  10/1000]".
MME_RE = re.compile(r"\b(Epoch|Iter)\((train|val|test)\)\s*(?:\[\s*(\d+)\])?\[\s*(\d+)/(\d+)\]\s+(.*)$")
# mmcv 1.x / mmdet 0.x: "Epoch [1][2150/29317]\t...", "Epoch(val) [32][282]\t...", "Iter [100/1000]\t...".
MMCV_RE = re.compile(r"\b(Epoch|Iter)(?:\((val|test)\))? \[(\d+)\](?:\[(\d+)(?:/(\d+))?\])?\s+(.*)$")
COPYPASTE_RE = re.compile(r"\b(\w+)_copypaste: ((?:\s*+[-+]?\d++(?:\.\d*+)?+){6}+)\s*+$")
COPYPASTE_SUFFIXES = ("", "_50", "_75", "_s", "_m", "_l")  # mmdet CocoMetric order
HEADER_RE = re.compile(r" - (mmengine|mmdet|mmcls|mmseg|mmpose|mmocr|mmaction|mmrotate|mmpretrain|mmdet3d|\w+) - "
                       r"(?:INFO|WARNING|ERROR|DEBUG) - ")
CHUNK_RE = re.compile(r",\s+|\s{2,}|\t")
PAIR_RE = re.compile(r"^([A-Za-z_][\w./\-@()]*): (\S+)$")
SKIP_KEYS = {"eta", "epoch", "iter"}


def _pairs(kv: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for chunk in CHUNK_RE.split(kv.strip()):
        m = PAIR_RE.match(chunk.strip())
        if m and m.group(1) not in SKIP_KEYS:
            v = num(m.group(2))
            if v is not None:
                out.append((m.group(1), v))
    return out


class MMEngineReader(LineReader):
    name = "mmengine"
    kind = SourceKind.LOG
    description = "MMEngine / mmcv 1.x / mmdetection text logs ('Epoch(train) [e][i/n]  k: v', 'Epoch [e][i/n]\\tk: v, ...')"

    def sniff(self, sample: Sample) -> float:
        n = sum(1 for ln in sample.lines if MME_RE.search(ln) or (MMCV_RE.search(ln) and ": " in ln))
        if n:
            return 0.9
        if any(HEADER_RE.search(ln) and " - mm" in ln for ln in sample.lines):
            return 0.5
        return 0.0

    def new_state(self) -> dict:
        return {"ipe": None, "val_epoch": None, "last_step": 0, "framework": None}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if state["framework"] is None:
            h = HEADER_RE.search(text)
            if h:
                state["framework"] = h.group(1)
                sink.meta("framework", h.group(1))
        m = MME_RE.search(text)
        if m and state["framework"] is None:
            state["framework"] = "mmengine"
            sink.meta("framework", "mmengine")
        if m:
            mode, phase = m.group(1), m.group(2)
            epoch = int(m.group(3)) if m.group(3) else None
            i: int | None = int(m.group(4))
            n: int | None = int(m.group(5))
            self._record(line, sink, state, mode, phase, epoch, i, n, m.group(6))
            return
        m = MMCV_RE.search(text)
        if m and ": " in m.group(6):
            if state["framework"] is None:  # mmdet 0.x logs have no logger-name column
                state["framework"] = "mmcv"
                sink.meta("framework", "mmcv")
            mode, phase = m.group(1), m.group(2) or "train"
            first = int(m.group(3))
            if mode == "Iter":  # "Iter [i/n]" has no epoch: the first bracket is the iteration
                self._record(line, sink, state, mode, phase, None, first, None, m.group(6))
                return
            i = int(m.group(4)) if m.group(4) else None
            n = int(m.group(5)) if m.group(5) else None
            if phase != "train" and n is None:
                n = i  # "Epoch(val) [32][282]": the whole evaluation, i.e. its end
            self._record(line, sink, state, mode, phase, first, i, n, m.group(6))
            return
        m = COPYPASTE_RE.search(text)
        if m:
            step = self._val_step(state, state["val_epoch"], sink)
            for suffix, raw in zip(COPYPASTE_SUFFIXES, m.group(2).split()):
                v = num(raw)
                if v is not None:
                    sink.add(f"{m.group(1)}{suffix}", step, v, line.no, line.rank)

    def finish(self, sink: Sink, state: dict) -> None:
        if state.get("texts"):
            sink.meta("step_text", state["texts"])

    def _val_step(self, state: dict, epoch: int | None, sink: Sink) -> int:
        if epoch is None:
            return state["last_step"]
        if state["ipe"]:
            sink.meta("val_step_unit", "iteration")
            return epoch * state["ipe"]
        sink.meta("val_step_unit", "epoch")
        return epoch

    def _record(self, line: Line, sink: Sink, state: dict, mode: str, phase: str, epoch: int | None,
                i: int | None, n: int | None, kv: str) -> None:
        if phase == "train":
            if i is None:
                return
            if mode == "Epoch" and epoch is not None and n:
                if state["ipe"] != n:
                    state["ipe"] = n
                    sink.meta("iters_per_epoch", n)
                step = (epoch - 1) * n + i
                if len(state.setdefault("texts", {})) < 200_000:
                    state["texts"][step] = f"epoch {epoch}, iter {i}/{n}"  # as the log prints it
            else:
                step = i
            state["last_step"] = step
            for key, v in _pairs(kv):
                sink.add(key, step, v, line.no, line.rank)
            return
        # validation / test
        state["val_epoch"] = epoch
        if i is not None and n is not None and i < n:
            return  # progress line: eta/time/memory of the evaluation loop only
        step = self._val_step(state, epoch, sink) if mode == "Epoch" else state["last_step"]
        for key, v in _pairs(kv):
            if key in ("time", "data_time", "memory"):
                key = f"{phase}/{key}"
            sink.add(key, step, v, line.no, line.rank)
