"""spaCy's ``spacy train`` console table (``console_logger`` in spacy/training/loggers.py)::

    E    #       LOSS TOK2VEC  LOSS NER  ENTS_F  ENTS_P  ENTS_R  SCORE
    ---  ------  ------------  --------  ------  ------  ------  ------
      0       0          0.00      7.90    0.00    0.00    0.00    0.00
      0     200         20.35    899.06   31.30   35.10   28.24    0.31

``E`` is the epoch and ``#`` the optimizer step: the step of the run. A ``LOSS <component>`` column is the
component's loss summed over the updates since the row before (the training loop resets it after each
evaluation, spacy/training/loop.py), read under its own name. The row at step 0 sums one update where
every later row sums the evaluation interval's, so its losses are left out. The other columns are the
evaluation's scores on the development set, read as ``val <name>``.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line, parse_number
from trainaudit.model import EVAL_PREFIX, SourceKind

HEADER_RE = re.compile(r"^\s*E\s+#\s+(?:LOSS \S+\s+)*\S.*\bSCORE\s*$")
ROW_RE = re.compile(r"^\s*(\d{1,9})\s+(\d{1,12})((?:\s+\S+){1,40})\s*$")
_CELL_GAP_RE = re.compile(r"\s{2,}")


class SpacyReader(LineReader):
    name = "spacy"
    kind = SourceKind.LOG
    description = "spaCy 'spacy train' console table ('E  #  LOSS <component> ... SCORE' and its rows)"

    def sniff(self, sample: Sample) -> float:
        return 0.9 if any(HEADER_RE.match(ln) for ln in sample.lines) else 0.0

    def new_state(self) -> dict:
        return {"columns": None}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        if HEADER_RE.match(text):
            # names may hold one space ("LOSS NER"): cells are parted by two spaces or more
            state["columns"] = [c for c in _CELL_GAP_RE.split(text.strip()) if c][2:]
            if "framework" not in state:
                state["framework"] = True
                sink.meta("framework", "spacy")
            return
        columns = state["columns"]
        m = ROW_RE.match(text) if columns else None
        if m is None:
            return
        cells = m.group(3).split()
        if len(cells) != len(columns):
            return
        step = int(m.group(2))
        for name, raw in zip(columns, cells):
            v = parse_number(raw)
            if v is None:
                continue
            if name.startswith("LOSS "):
                if step > 0:  # the row at step 0 sums one update, the others an evaluation interval
                    sink.add(name, step, v, line.no, line.rank)
            else:
                sink.add(EVAL_PREFIX + name, step, v, line.no, line.rank)
