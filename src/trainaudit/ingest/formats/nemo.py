"""NeMo stdout: NeMo 2 ``ProgressPrinter`` lines and NeMo 1.x Lightning tqdm postfixes.

NeMo 2::

    Training epoch 0, iteration 120/149 | lr: 3e-05 | ... | global_step: 120 | reduced_train_loss: 1.233 | ...

Step = the ``global_step`` field; without it, ``epoch * (total + 1) + iteration`` (the printed
iteration is 0-based within the epoch and ``total`` is ``len - 1``). Values are printed with
``{:.4}`` (``nan`` stays ``nan``).

NeMo 1.x (Lightning ``TQDMProgressBar``)::

    Epoch 0:   1%|   | 795/77225 [9:07:58<878:01:48, 41.36s/it, loss=3.1, v_num=, reduced_train_loss=3.090, global_step=794.0, ...]

tqdm rounds postfix numbers to 3 significant digits, so ``global_step=3.2e+4`` has lost its
precision. Step = ``global_step`` when printed exactly; when it is rounded, the bar counter plus
the offset ``global_step - n`` last seen exactly in the same epoch (else the rounded value).

NeMo 2 with Megatron-Bridge prints Megatron ``iteration N/ M |`` lines: those are the megatron
reader's, and this reader does not claim them.
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import LineReader, Sample
from trainaudit.ingest.formats.generic import num
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line
from trainaudit.model import SourceKind

NEMO2_RE = re.compile(r"(?:^|\s)(Training|Validation|Testing|Sanity checking Validation) epoch (\d+), "
                      r"iteration (\d+)/(-?\d+)((?: \| [^|:]+: [^|]*)*)\s*$")
# Linear forms of "^\s*([^|:]+): ([^|]*?)\s*$": the key after its leading blanks (or the last blank
# of a key of blanks), the value word by word without its trailing blanks.
FIELD_RE = re.compile(r"^(?:\s*+(?=[^\s|:])|\s*(?=\s:))([^|:]++): ((?:\s*+[^\s|]++)*+)\s*+$")
# A tqdm state with a postfix: "Epoch 3:  12%|...| 95/772 [00:10<01:10, 9.50it/s, k=v, ...]".
BAR_RE = re.compile(r"Epoch (\d+):\s*\d+%[^\d]*?(\d+)/(\d+|\?)\s*\[[^\],]*(?:,\s*[\d.?]+\s*(?:it/s|s/it))?,?\s*([^\]]*)\]?")
POSTFIX_RE = re.compile(r"(?<![\w ./\-])(?:(?![A-Za-z_])[\w ./\-])*+([A-Za-z_][\w ./\-]*+)=([^,\]]*)")
NEMO1_KEYS = ("reduced_train_loss", "global_step", "consumed_samples")
SKIP = {"v_num", "global_step"}


class NemoReader(LineReader):
    name = "nemo"
    kind = SourceKind.LOG
    description = "NeMo 2 ProgressPrinter ('Training epoch E, iteration I/N | k: v |') and NeMo 1.x tqdm postfix"

    def sniff(self, sample: Sample) -> float:
        n2 = self.count_matches(sample, NEMO2_RE)
        if n2:
            return 0.92
        n1 = sum(1 for ln in sample.lines if BAR_RE.search(ln) and any(f"{k}=" in ln for k in NEMO1_KEYS))
        # 0.92: above Lightning's plain progress bar, which shares the tqdm layout.
        return 0.92 if n1 else 0.0

    def new_state(self) -> dict:
        return {"offset": None, "offset_epoch": None, "framework_done": False}

    def feed(self, line: Line, sink: Sink, state: dict) -> None:
        text = line.text
        m = NEMO2_RE.search(text)
        if m:
            self._nemo2(m, line, sink, state)
            return
        if "=" in text and "Epoch" in text:
            for bm in BAR_RE.finditer(text):
                self._nemo1(bm, line, sink, state)

    def _framework(self, sink: Sink, state: dict, which: str) -> None:
        if not state["framework_done"]:
            sink.meta("framework", which)
            state["framework_done"] = True

    def _nemo2(self, m: re.Match[str], line: Line, sink: Sink, state: dict) -> None:
        phase, epoch, it, total = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        if phase != "Training":
            return  # validation/test lines carry only their own progress counter
        self._framework(sink, state, "nemo2")
        fields: list[tuple[str, float]] = []
        step: int | None = None
        for part in m.group(5).split(" | "):
            fm = FIELD_RE.match(part)
            if fm is None:
                continue
            key, raw = fm.group(1).strip(), fm.group(2)
            v = num(raw)
            if v is None:
                continue
            if key == "global_step":
                step = int(v)
                continue
            fields.append((key, v))
        if step is None:
            step = epoch * (total + 1) + it if total >= 0 else it
        for key, v in fields:
            sink.add(key, step, v, line.no, line.rank)

    def _nemo1(self, m: re.Match[str], line: Line, sink: Sink, state: dict) -> None:
        epoch, n = int(m.group(1)), int(m.group(2))
        pairs: list[tuple[str, str]] = [(k.strip(), v.strip()) for k, v in POSTFIX_RE.findall(m.group(4))]
        if not pairs:
            return
        self._framework(sink, state, "nemo1")
        gs_raw = next((v for k, v in pairs if k == "global_step"), None)
        gs = num(gs_raw) if gs_raw else None
        if gs is not None and "e" not in gs_raw.lower():  # type: ignore[union-attr]
            step = int(gs)
            state["offset"], state["offset_epoch"] = step - n, epoch
        elif state["offset"] is not None and state["offset_epoch"] == epoch:
            step = n + state["offset"]
        elif gs is not None:
            step = round(gs)
        else:
            step = n
        for key, raw in pairs:
            if key in SKIP:
                continue
            v = num(raw)
            if v is not None:
                sink.add(key, step, v, line.no, line.rank)
