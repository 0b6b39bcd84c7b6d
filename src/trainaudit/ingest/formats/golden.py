"""Megatron-LM golden-values / actual-values JSON read as a run (one series per metric).

The legacy ``"nan"`` placeholder becomes NaN here (a run has no value at that step); the
comparator itself (``trainaudit.compare.megatron``) keeps Megatron's own mapping to inf.
"""

from __future__ import annotations

import math

from trainaudit.ingest.golden import load_golden, looks_like_golden
from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.model import SourceKind


class GoldenValuesReader(Reader):
    name = "golden_values"
    kind = SourceKind.GOLDEN_VALUES
    description = "Megatron-LM golden/actual values JSON ({metric: {start_step, end_step, step_interval, values}})"

    def sniff(self, sample: Sample) -> float:
        if not sample.is_text:
            return 0.0
        return 0.95 if looks_like_golden(sample.head.decode("utf-8", "replace")) else 0.0

    def read(self, inp: InputFile, sink: Sink) -> None:
        with inp.open() as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{inp.display}: not UTF-8 text") from None
        golden = load_golden(inp.display, text)
        sink.meta("framework", "megatron")
        for m in golden.metrics.values():
            sink.meta(f"golden.{m.name}.step_interval", m.step_interval)
            vals = [math.nan if isinstance(v, str) else float(v) for v in m.raw]
            sink.add_many(m.name, m.steps, vals, m.lines)
