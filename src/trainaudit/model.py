"""The data model every stage shares: a run is metric series plus events, all with provenance.

A value or event always remembers where it came from (source path as the user gave it, or
``archive.zip!member``, and the 1-based line number), so a report can quote the line it rests on.
Series are numpy-backed; the raw text of a value's line is not stored but re-read on demand
(``trainaudit.ingest.sources.read_lines``), which keeps a 1M-step run small in memory.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


class SourceKind(str, enum.Enum):
    """What a source is; the values are the ``kind`` of answer.json's ``source_refs`` (docs/answer.md)."""

    LOG = "log"
    METRICS = "metrics"
    TENSORBOARD = "tensorboard"
    GOLDEN_VALUES = "golden_values"
    CONFIG = "config"
    CI_LOG = "ci_log"


@dataclass(slots=True)
class Source:
    """One readable input: a file, or a member of an archive (``path`` is ``archive!member``)."""

    path: str
    format: str = ""
    kind: SourceKind = SourceKind.LOG
    size: int = 0
    note: str = ""  # how it was read, when not line by line in full (a skimmed per-rank log)


class EventKind(str, enum.Enum):
    """Typed things that happen in a run, as opposed to per-step numbers."""

    OOM = "oom"  # CUDA out of memory (device)
    HOST_OOM = "host_oom"  # kernel OOM killer / SIGKILL of a worker
    SIGNAL = "signal"  # a worker died of a signal (SIGSEGV, SIGABRT, SIGBUS, ...)
    NCCL_TIMEOUT = "nccl_timeout"  # watchdog / collective timeout
    DISTRIBUTED_ERROR = "distributed_error"  # c10d store errors, DistBackendError, rendezvous
    ELASTIC_FAILURE = "elastic_failure"  # torch.distributed.elastic summary: rank, exit code
    XID = "xid"  # NVIDIA Xid from the kernel log
    ECC = "ecc"  # ECC error
    GPU_LOST = "gpu_lost"  # GPU fell off the bus
    NAN_CHECK = "nan_check"  # a framework's NaN/Inf check fired
    MISSING_METRIC = "missing_metric"  # a metric the line normally carries is absent (Megatron NaN loss)
    LOSS_SCALE = "loss_scale"  # fp16 overflow: loss scale reduced / step skipped
    LOSS_SCALE_MIN = "loss_scale_min"  # loss scale cannot go lower: run exits
    TRACEBACK = "traceback"  # a Python exception with its frames
    ERROR = "error"  # any other fatal-looking line
    WARNING = "warning"
    PHASE = "phase"  # training started / finished / checkpoint saved / exiting
    GATE = "gate"  # a CI gate's own output (golden-value comparator lines)
    SAMPLES = "samples"  # what the model generated, as the log prints it (summary of the samples seen)


@dataclass(slots=True)
class Event:
    kind: EventKind
    message: str
    source: str
    line: int
    raw: str
    step: int | None = None
    rank: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "source": self.source,
            "line": self.line,
            "step": self.step,
            "rank": self.rank,
            "data": self.data,
            "raw": self.raw,
        }


# what a reader puts before the name of a metric it read on a line of an evaluation ("Validation:
# loss = 2.1" gives "val loss"), so that the metric is told from the training metric of the same name
EVAL_PREFIX = "val "
# the names a log gives an evaluation's data set ("val_loss", "eval/loss", "Test set: ...", "dev = 0.61")
EVAL_NAMES = ("validation", "valid", "val", "evaluation", "eval", "testing", "test", "dev")
# the names the text reader gives values a log prints without a name: the one number after the counters
# ("epoch 3: 93.90"), the one value beside a step in a headerless row ("76930 2.6496577"), and the columns of a
# headerless table ("col1", "col2", ...)
UNNAMED = "unnamed"
UNNAMED_VALUE = "value"


def column_name(k: int) -> str:
    """The name of a headerless table's ``k``-th column (1-based)."""
    return f"col{k}"


def unnamed(name: str) -> bool:
    """Whether ``name`` is one the text reader gave a value the log printed without a name."""
    return name in (UNNAMED, UNNAMED_VALUE) or (name.startswith("col") and name[3:].isdigit())


# the key of Run.meta under which a reader's sink lists the series it thinned while read, each with the
# points and non-finite values read (Run.read_counts)
THINNED = "thinned"
# the key of Run.meta under which a sink that keeps the first and last events of each kind, and counts
# those between, lists what it left out: kind -> [count, first step, last step, first line, last line]
EVENTS_LEFT_OUT = "events_left_out"
# the run's metadata key of the one total a text log's step counter prints beside it ("Step 380000/1000000")
STEP_TOTAL = "step_total"


@dataclass(slots=True)
class Series:
    """One metric over steps, sorted by step. ``src`` indexes ``Run.sources``; ``lines`` are 1-based
    (0 when a format has no lines, e.g. a TensorBoard record)."""

    name: str
    steps: NDArray[np.int64]
    values: NDArray[np.float64]
    lines: NDArray[np.int64]
    src: NDArray[np.int16]

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    def finite(self) -> Series:
        keep = np.isfinite(self.values)
        return self.take(keep)

    def take(self, index: NDArray[Any]) -> Series:
        return Series(self.name, self.steps[index], self.values[index], self.lines[index], self.src[index])

    def value_at(self, step: int) -> float | None:
        i = int(np.searchsorted(self.steps, step))
        if i < len(self) and int(self.steps[i]) == step:
            return float(self.values[i])
        return None


@dataclass(slots=True)
class Run:
    """Everything known about one training run, possibly assembled from several sources."""

    sources: list[Source] = field(default_factory=list)
    series: dict[str, Series] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def metric(self, name: str) -> Series | None:
        return self.series.get(name)

    def left_out(self, *kinds: EventKind) -> int:
        """Events of ``kinds`` (all kinds when none) counted but not kept: the middle of a run of more
        like events than a reader's sink keeps (``EVENTS_LEFT_OUT``)."""
        runs = self.meta.get(EVENTS_LEFT_OUT, {})
        return sum(int(r[0]) for k, r in runs.items() if not kinds or k in {x.value for x in kinds})

    def n_events(self, *kinds: EventKind) -> int:
        """Events of ``kinds`` (all kinds when none) read, those kept and those left out."""
        kept = len(self.events) if not kinds else sum(1 for e in self.events if e.kind in kinds)
        return kept + self.left_out(*kinds)

    def read_counts(self, name: str) -> tuple[int, int] | None:
        """(points, non-finite values) read of a series thinned while read (too long to hold: the
        series holds fewer of them), None for a series held whole."""
        got = self.meta.get(THINNED, {}).get(name)
        return (int(got[0]), int(got[1])) if got is not None else None

    def source_path(self, series: Series, index: int) -> str:
        return self.sources[int(series.src[index])].path

    @property
    def frameworks(self) -> list[str]:
        return sorted({s.format for s in self.sources if s.format})
