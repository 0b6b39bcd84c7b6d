"""Stream series rows to CSV, JSONL or Parquet in constant memory (``trainaudit parse -o``).

Long format, one row per value: ``source, format, line, step, metric, value``. JSONL also gets
one row per event (``{"event": kind, ...}``), since events carry no single number.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path
from typing import IO, Any

import numpy as np

from trainaudit.answer.paths import printable_name
from trainaudit.redact import csv_cell, json_text, mask_secrets
from trainaudit.errors import InputError
from trainaudit.ingest.sink import Sink
from trainaudit.model import Event, Source
from trainaudit.outdir import OutDir

COLUMNS = ["source", "format", "line", "step", "metric", "value"]


def _json_value(v: float) -> float | str:
    # JSON has no NaN/Inf: write them as strings so the file stays valid JSON.
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


class RowWriter(Sink):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        suffix = out.suffix.lower()
        if suffix not in (".csv", ".jsonl", ".parquet"):
            raise InputError(f"-o {out}: output must end in .csv, .jsonl or .parquet")
        self.kind = suffix[1:]
        self._fh: IO[str] | None = None
        self._csv: Any = None
        self._pq: Any = None
        self._pa: Any = None
        self._files = contextlib.ExitStack()
        if self.kind == "parquet":
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError:
                raise InputError("-o *.parquet needs pyarrow: pip install 'trainaudit[parquet]'") from None
            self._pa = pa
            schema = pa.schema([("source", pa.string()), ("format", pa.string()), ("line", pa.int64()),
                                ("step", pa.int64()), ("metric", pa.string()), ("value", pa.float64())])
            self._pq = pq.ParquetWriter(self._target(), schema)
            self._schema = schema
        else:
            self._fh = io.TextIOWrapper(self._target(), encoding="utf-8", newline="")
            if self.kind == "csv":
                self._csv = csv.writer(self._fh)
                self._csv.writerow(COLUMNS)

    def _target(self) -> IO[bytes]:
        """The output file, written as every output is (never through a link, renamed into place
        when closed); rows stream in."""
        folder = self._files.enter_context(OutDir.open(self.out.parent))
        return self._files.enter_context(folder.create(self.out.name))

    def begin(self, source: Source) -> None:
        super().begin(source)

    def write_values(self, metric: str, steps: np.ndarray, values: np.ndarray, lines: np.ndarray) -> None:
        assert self.source is not None
        src, fmt = printable_name(self.source.path), self.source.format
        if self.kind == "csv":
            src, fmt, metric = csv_cell(src), csv_cell(fmt), csv_cell(metric)
        else:
            src, fmt, metric = mask_secrets(src), mask_secrets(fmt), mask_secrets(metric)
        if self.kind == "parquet":
            n = steps.shape[0]
            pa = self._pa
            table = pa.table({"source": pa.array([src] * n), "format": pa.array([fmt] * n),
                              "line": pa.array(lines), "step": pa.array(steps), "metric": pa.array([metric] * n),
                              "value": pa.array(values)}, schema=self._schema)
            self._pq.write_table(table)
        elif self.kind == "csv":
            self._csv.writerows((src, fmt, int(ln), int(s), metric, repr(float(v)))
                                for s, v, ln in zip(steps.tolist(), values.tolist(), lines.tolist()))
        else:
            assert self._fh is not None
            w = self._fh.write
            for s, v, ln in zip(steps.tolist(), values.tolist(), lines.tolist()):
                w(json.dumps({"source": src, "format": fmt, "line": ln, "step": s, "metric": metric,
                              "value": _json_value(v)}) + "\n")

    def write_event(self, ev: Event) -> None:
        if self.kind == "jsonl" and self._fh is not None:
            row = {"event": ev.kind.value, "source": printable_name(ev.source), "format": self.source.format if self.source else "",
                   "line": ev.line, "step": ev.step, "rank": ev.rank, "message": ev.message, "data": ev.data}
            self._fh.write(json_text(json.loads(json.dumps(row, default=str))) + "\n")

    def close(self) -> None:
        if self._pq is not None:
            self._pq.close()
        if self._fh is not None:
            self._fh.close()
        self._files.close()
