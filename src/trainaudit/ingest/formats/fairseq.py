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
"""

from __future__ import annotations

import re

from trainaudit.ingest.base import Gate, LineReader, Sample, gate_pattern
from trainaudit.ingest.formats.generic import num, parse_json_object
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.text import Line
from trainaudit.model import Event, EventKind, SourceKind

INNER_RE = re.compile(r"\bepoch (\d+):\s+(\d+) / (\d+) (\w+=.*)$")
# Linear: a field is never "epoch N" (that starts the next record), so the fields read from one "epoch"
# stop where the next one starts instead of every "epoch" reading to the end of the line.
PIPES_RE = re.compile(r"\bepoch (\d+) \| (?:valid on '([^']+)' subset \| )?"
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


class FairseqReader(LineReader):
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
