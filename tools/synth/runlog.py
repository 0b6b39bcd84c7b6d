"""What one synthetic training run produced: per-step records, eval records, markers, a crash.

Cases fill a :class:`RunLog` while they really train; writers (``writers.py``) turn it into the
files a framework would have written. Values are the measured ones (loss, grad norm, lr, RSS);
nothing is edited after the fact. Time is the exception: it is modelled (:class:`ModelClock`), so
that what the timing rules judge does not depend on how fast or how busy the machine is.
"""

from __future__ import annotations

import math
import os
import re
import resource
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np


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
    clock: ModelClock = field(default_factory=lambda: ModelClock())

    def log(self, step: int, **metrics: float) -> None:
        """A train step; ``wall`` (seconds since the run started on its clock, pauses included) is added."""
        self.records.append({"step": step, **{k: float(v) for k, v in metrics.items()}, "wall": self.clock.now})

    def log_eval(self, step: int, **metrics: float) -> None:
        self.evals.append({"step": step, **{k: float(v) for k, v in metrics.items()}, "wall": self.clock.now})

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


class ModelClock:
    """The run's clock: advanced by a modelled cost per step instead of read from the machine.

    The training is real; its timings are not measured, because a measured step time of a
    1 ms CPU step is mostly the machine's load (a busy CI host made a healthy run's eval pause
    leak into its step times, and a leaking run's slower allocations read as a throughput
    regression). A step costs ``step_s`` times a seeded log-normal jitter of ``jitter`` (real step
    times scatter a few percent around their median), plus whatever a fault adds; the same run
    gives the same times on every machine.
    """

    def __init__(self, step_s: float = 0.001, jitter: float = 0.03, seed: int = 0) -> None:
        self.step_s = step_s
        self.jitter = jitter
        self.now = 0.0
        self._rng = np.random.default_rng(seed)

    def step(self, extra_s: float = 0.0) -> float:
        """One training step: advance the clock by its modelled duration and return it."""
        seconds = self.step_s * math.exp(self.jitter * float(self._rng.standard_normal())) + extra_s
        self.now += seconds
        return seconds

    def data(self, extra_s: float = 0.0) -> float:
        """The loader's share of a step: a tenth of the modelled step, jittered, plus what a fault adds
        (the caller adds it to the step's time)."""
        return 0.1 * self.step_s * math.exp(self.jitter * float(self._rng.standard_normal())) + extra_s

    def advance(self, seconds: float) -> None:
        """Time spent outside the training steps (evaluation, a restart)."""
        self.now += seconds


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
