"""Monitor outputs: an append-only JSONL file (whole lines, written per batch of steps and
flushed at least every ``flush_s`` seconds, so ``watch`` sees a run within about a second and
a crash inside the monitor's ``with`` block loses nothing) and, when asked, TensorBoard scalars."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    # JSON has no NaN/Inf: write them as the strings every trainaudit reader parses as numbers
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


class JsonlWriter:
    """Whole lines only; flushed at most every ``flush_s`` seconds (a flush per step costs a
    syscall), at once for anything that is not a step record, and on close."""

    def __init__(self, path: Path, flush_s: float = 0.5) -> None:
        self.path = path
        self.flush_s = flush_s
        self._fh = path.open("a", encoding="utf-8")
        self._last = time.monotonic()
        self._encode = json.JSONEncoder(default=str).encode  # one encoder, not one per record

    def _line(self, record: dict[str, Any]) -> str:
        line = self._encode(record)
        if "NaN" in line or "Infinity" in line:  # rare: redo with JSON-valid spellings
            line = json.dumps({k: _clean(v) for k, v in record.items()}, default=str)
        return line

    def write(self, record: dict[str, Any]) -> None:
        self.write_many([record])

    def write_many(self, records: list[dict[str, Any]]) -> None:
        """Several records with one write call (the monitor's batch of steps)."""
        if self._fh.closed or not records:
            return
        line = self._line
        self._fh.write("".join([line(r) + "\n" for r in records]))
        now = time.monotonic()
        if now - self._last >= self.flush_s or any(r.get("type") != "step" for r in records):
            self._fh.flush()
            self._last = now

    def close(self) -> None:
        self._fh.close()


class TensorBoardWriter:
    """Scalars of each step record under their own names (needs the ``tensorboard`` package)."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: optional dependency

        self._w = SummaryWriter(log_dir=str(log_dir))

    def write(self, step: int, record: dict[str, Any]) -> None:
        for k, v in record.items():
            if k not in ("type", "step") and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._w.add_scalar(k, float(v), step)

    def close(self) -> None:
        self._w.close()
