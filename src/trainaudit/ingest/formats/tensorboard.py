"""TensorBoard event files (``events.out.tfevents.*``), read without TensorFlow.

Scalars written by ``torch.utils.tensorboard`` / Megatron / HF / Lightning (``simple_value``)
and by TF2 / Keras / tensorboardX (rank-0 ``tensor`` values, plugin ``scalars``) become series
named by their tag, at the event's step; the line column is the 1-based record index.
Histograms, images, text and hparams are skipped. See :mod:`trainaudit.ingest.tfrecord` for why
the framing and protobuf decoding are hand-written.

Several runs in one directory (Keras ``train/`` + ``validation/``, fairseq ``train/``,
``valid/``) reuse the same tags; when an event file sits in a folder named like a data split,
that folder is prefixed (``validation/epoch_loss``) so the curves do not overwrite each other.

A record with a bad CRC or cut short stops reading that file: the good records before it are
handed to the sink first, then an :class:`InputError` says where the damage is.
"""

from __future__ import annotations

import posixpath

from trainaudit.errors import InputError
from trainaudit.ingest.base import Reader, Sample
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.tfrecord import (ProtoError, RecordError, ScalarColumns, ScalarScanner, decode_event,
                                        looks_like_tfrecord, tensor_scalar)
from trainaudit.model import Event, EventKind, SourceKind

FILE_PREFIX = "events.out.tfevents."
SPLIT_DIRS = {"train", "training", "train_inner", "valid", "validation", "val", "eval", "test"}
NON_SCALAR_PLUGINS = {"histograms", "images", "audio", "text", "hparams", "pr_curves", "mesh",
                      "graph_run_metadata", "custom_scalars", "projector"}
FLUSH_RECORDS = 1 << 17  # hand values to the sink in batches: constant memory on huge files
SESSION_STATUS = {1: "START", 2: "STOP", 3: "CHECKPOINT"}


def split_prefix(display: str) -> str:
    """``validation/`` when the event file's folder is a data-split folder, else ``""``."""
    member = display.rsplit("!", 1)[-1]
    parent = posixpath.basename(posixpath.dirname(member.replace("\\", "/")))
    return f"{parent}/" if parent.lower() in SPLIT_DIRS else ""


class TensorBoardReader(Reader):
    name = "tensorboard"
    kind = SourceKind.TENSORBOARD
    description = "TensorBoard event files (events.out.tfevents.*), scalars from any writer, no TensorFlow needed"

    def sniff(self, sample: Sample) -> float:
        if sample.name.startswith(FILE_PREFIX):
            return 0.95
        if not sample.is_text and looks_like_tfrecord(sample.head):
            return 0.9
        return 0.0

    def read(self, inp: InputFile, sink: Sink) -> None:
        prefix = split_prefix(inp.display)
        scanner = ScalarScanner(FLUSH_RECORDS)
        cols = scanner.columns  # simple_value scalars land here directly; others are added below
        plugins: dict[str, str] = {}
        index = 0
        try:
            with inp.open() as stream:
                for index, data in scanner.records(stream):
                    if data is None:
                        _flush(sink, cols, prefix)
                        continue
                    try:
                        ev = decode_event(data)
                    except ProtoError as exc:
                        raise RecordError(index, -1, f"not a TensorBoard Event ({exc})") from None
                    scanner.note_wall(ev.wall_time)
                    if ev.session_status:
                        self._session(ev.session_status, ev.step, index, inp, sink, cols, prefix)
                    for sv in ev.values:
                        value = sv.simple_value
                        if value is None:
                            if sv.plugin is not None:
                                plugins[sv.tag] = sv.plugin
                            if sv.tensor is None or plugins.get(sv.tag) in NON_SCALAR_PLUGINS:
                                continue
                            try:
                                value, rank = tensor_scalar(sv.tensor)
                            except (ProtoError, IndexError, ValueError) as exc:
                                raise RecordError(index, -1, f"malformed tensor for tag {sv.tag!r} ({exc})") from None
                            if value is None or (rank != 0 and plugins.get(sv.tag) != "scalars"):
                                continue
                        key = sv.tag.encode("utf-8")
                        c = cols.get(key)
                        if c is None:
                            c = cols[key] = ScalarColumns()
                        c.steps.append(ev.step)
                        c.values.append(value)
                        c.lines.append(index)
        except RecordError as exc:
            _flush(sink, cols, prefix)  # keep everything before the damage
            where = f"record {exc.index}" + (f" at byte {exc.offset}" if exc.offset >= 0 else "")
            raise InputError(f"{inp.display}: {where}: {exc.reason}; the {exc.index - 1} records "
                             "before it were read") from None
        _flush(sink, cols, prefix)
        if scanner.first_wall is not None:
            sink.meta("tensorboard.wall_time_start", scanner.first_wall)
            sink.meta("tensorboard.wall_time_end", scanner.last_wall)

    @staticmethod
    def _session(status: int, step: int, index: int, inp: InputFile, sink: Sink,
                 cols: dict[bytes, ScalarColumns], prefix: str) -> None:
        # Values before a restart marker must reach the sink first, so event order matches data order.
        _flush(sink, cols, prefix)
        name = SESSION_STATUS.get(status, f"status {status}")
        sink.event(Event(EventKind.PHASE, f"TensorBoard SessionLog {name} at step {step}", inp.display, index,
                         f"SessionLog(status={name})", step=step, data={"phase": f"session_{name.lower()}"}))


def _flush(sink: Sink, cols: dict[bytes, ScalarColumns], prefix: str) -> None:
    for tag, c in cols.items():
        if len(c.steps):
            sink.add_many(prefix + tag.decode("utf-8", "replace"), c.steps, c.values, c.lines)
    cols.clear()
