"""What one synthetic training run produced: per-step records, eval records, markers, a crash.

Cases fill a :class:`RunLog` while they really train; writers (``writers.py``) turn it into the
files a framework would have written. Values are the measured ones (loss, grad norm, lr, wall
time, RSS); nothing is edited after the fact.
"""

from __future__ import annotations

import os
import re
import resource
import time
import traceback
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Marker:
    """Something that happened between logged steps (restart from a checkpoint, eval, save)."""

    kind: str  # "restart" | "save"
    after_record: int  # index into RunLog.records: the marker comes after this many records
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RunLog:
    """The run as it happened. ``records`` are train steps in the order they were logged (a
    restart re-logs steps); ``evals`` are validation results keyed by the step they follow."""

    step_unit: str = "step"  # "step" or "epoch"
    total_steps: int = 0
    batch_size: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    records: list[dict[str, float]] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    traceback: str | None = None  # formatted text of the exception that ended the run
    completed: bool = True
    t0: float = field(default_factory=time.perf_counter)

    def log(self, step: int, **metrics: float) -> None:
        """A train step; ``wall`` (seconds since the run started, pauses included) is added."""
        self.records.append({"step": step, **{k: float(v) for k, v in metrics.items()},
                             "wall": time.perf_counter() - self.t0})

    def log_eval(self, step: int, **metrics: float) -> None:
        self.evals.append({"step": step, **{k: float(v) for k, v in metrics.items()},
                           "wall": time.perf_counter() - self.t0})

    def mark(self, kind: str, **data: Any) -> None:
        self.markers.append(Marker(kind, len(self.records), dict(data)))

    def crashed(self, exc: BaseException) -> None:
        text = "".join(traceback.format_exception(exc))
        self.traceback = _neutral_paths(text)
        self.completed = False

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(steps, values) of a train metric in logged order (restarts keep their duplicates)."""
        pairs = [(int(r["step"]), r[metric]) for r in self.records if metric in r]
        return [p[0] for p in pairs], [p[1] for p in pairs]


class StepClock:
    """Wall time of one training step, measured with ``perf_counter``."""

    def __init__(self) -> None:
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux /proc; elsewhere the peak from rusage)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_FILE_RE = re.compile(r'File "([^"]+)"')


def _neutral_paths(text: str) -> str:
    """Frames keep their real module paths below ``site-packages`` / the package, but the prefix
    of this machine is replaced by a neutral one (no host path ends up in test data)."""

    def fix(m: re.Match[str]) -> str:
        path = m.group(1).replace("\\", "/")
        for marker, prefix in (("/site-packages/", "/opt/venv/lib/python3/site-packages/"),
                               ("/tools/synth/", "/home/user/project/synth/")):
            if marker in path:
                return f'File "{prefix}{path.split(marker, 1)[1]}"'
        return m.group(0)

    return _FILE_RE.sub(fix, text)
