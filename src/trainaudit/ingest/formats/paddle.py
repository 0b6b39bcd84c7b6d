"""PaddlePaddle's high-level API (``paddle.Model.fit``): the progress lines of its ProgBarLogger.

``Epoch 1/2``, then ``step 100/938 - loss: 1.4635 - acc_top1: 0.9650 - acc_top2: 0.9898 - 15ms/step``
(``verbose=2``; ``verbose=1`` redraws the same line with a ``[====>...]`` bar and an ``ETA``), and
after each epoch's training ``Eval begin...``, the evaluation's lines in the same layout and
``Eval samples: 10000``. Formats from paddle/hapi/callbacks.py (ProgBarLogger) and
paddle/hapi/progressbar.py (ProgressBar.update) in https://github.com/PaddlePaddle/Paddle.

The step in a line counts batches within the epoch, so the run's step is the steps of the epochs
before plus the line's. An evaluation's lines are running values over the evaluation set: its last
line holds the evaluation's result, recorded as ``eval/<name>`` at the last training step.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import Event, EventKind, SourceKind

STEP_RE = re.compile(r"^step +(\d{1,18})(?:/(\d{1,18}))?(?: \[[=>.]*\])?(?= - |$)")
EPOCH_RE = re.compile(r"^Epoch (\d{1,18})/(\d{1,18})$")
FIELD_RE = re.compile(r"^([A-Za-z_][\w./\[\]()-]*): (\S+(?: \S+)*)$")
RATE_RE = re.compile(r"^(\d{1,18})(s|ms|us)/step$")
SAMPLES_RE = re.compile(r"^Eval samples: (\d{1,18})$")
CKPT_RE = re.compile(r"^save checkpoint at (\S+)$")
RATE_UNIT = {"s": 1e3, "ms": 1.0, "us": 1e-3}


def fields(rest: str) -> dict[str, float]:
    """The ``name: value`` fields of a line after its step counter (a field of several values, as a
    list of losses prints, gives ``name`` and ``name[1]``...), and the time per step in ms."""
    out: dict[str, float] = {}
    for part in rest.split(" - ")[1:]:
        part = part.strip()
        m = RATE_RE.match(part)
        if m:
            out["time_per_step_ms"] = int(m.group(1)) * RATE_UNIT[m.group(2)]
            continue
        m = FIELD_RE.match(part)
        if m is None or m.group(1) == "ETA":
            continue
        for i, raw in enumerate(m.group(2).split(" ")):
            v = parse_number(raw)
            if v is not None:
                out[m.group(1) if i == 0 else f"{m.group(1)}[{i}]"] = v
    return out


class PaddleReader(LineReader):
    name = "paddle"
    kind = SourceKind.LOG
    description = ("PaddlePaddle paddle.Model.fit() progress (ProgBarLogger): 'Epoch e/E', "
                   "'step n/N - loss: x - acc: y - 15ms/step', evaluations after 'Eval begin...'")

    def sniff(self, sample: Sample) -> float:
        steps = [ln for ln in sample.lines if STEP_RE.match(ln) and RATE_RE.match(ln.rsplit(" - ", 1)[-1].strip())]
        if not steps:
            return 0.0
        marks = any(EPOCH_RE.match(ln) or ln.startswith("Eval begin...") for ln in sample.lines)
        return 0.9 if marks else 0.6

    def new_state(self) -> dict:
        # offset: the steps of the finished epochs; last: the epoch's last step counter
        return {"offset": 0, "last": 0, "epoch": None, "eval": None, "eval_line": 0}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text.replace("\b", "").strip()
        m = STEP_RE.match(text)
        if m:
            values = fields(text[m.end():])
            if state["eval"] is not None:
                state["eval"], state["eval_line"] = values, line.no  # running values: the last one counts
                return
            n = int(m.group(1))
            if n < state["last"]:  # a new epoch without its header (another fit() call)
                state["offset"] += state["last"]
            state["last"] = n
            step = state["offset"] + n
            for key, v in values.items():
                sink.add(key, step, v, line.no, line.rank)
            return
        if text.startswith("Eval begin..."):
            self._flush(sink, state)
            state["eval"] = {}
            return
        m = EPOCH_RE.match(text)
        if m:
            self._flush(sink, state)
            state["offset"] += state["last"]
            state["last"] = 0
            state["epoch"] = int(m.group(1))
            sink.meta("epochs", int(m.group(2)))
            return
        m = SAMPLES_RE.match(text)
        if m:
            sink.meta("eval_samples", int(m.group(1)))
            self._flush(sink, state)
            return
        m = CKPT_RE.match(text)
        if m:
            src = sink.source.path if sink.source else ""
            sink.event(Event(EventKind.PHASE, f"checkpoint saved at {m.group(1)}", src, line.no, line.raw,
                             step=state["offset"] + state["last"], rank=line.rank,
                             data={"phase": "checkpoint", "path": m.group(1)}))

    def finish(self, sink: Sink, state: dict) -> None:
        self._flush(sink, state)

    @staticmethod
    def _flush(sink: Sink, state: dict) -> None:
        """An evaluation's result: its last line's values, at the last training step."""
        values = state["eval"]
        state["eval"] = None
        if values:
            step = state["offset"] + state["last"]
            for key, v in values.items():
                if key != "time_per_step_ms":
                    sink.add(f"eval/{key}", step, v, state["eval_line"])
