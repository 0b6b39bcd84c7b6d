"""TFRecord framing, CRC-32C and the few protobuf messages of a TensorBoard event file.

Hand-written on purpose: reading scalars must not need TensorFlow or the ``protobuf`` package
(both heavy, and ``tensorboard``'s own TF-free fallback checks CRCs in pure Python), and a
direct walk over the handful of fields we need (Event.step/wall_time/summary, Summary.Value
tag/simple_value/tensor/metadata) is much faster than building full message objects as
``EventAccumulator`` does. Field numbers are from tensorboard's ``compat/proto`` (event.proto,
summary.proto, tensor.proto, tensor_shape.proto).

Framing of every record (tensorboard ``summary/writer/record_writer.py``)::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
# TensorBoard's own writer keeps records small (a scalar is ~40 bytes; images and histograms a few
# MB); a record above this is a corrupt or forged length.
MAX_RECORD = 256 << 20
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
CHUNK = 1 << 22  # read 4 MiB at a time: constant memory whatever the file size


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


def _crc32c_py(data: bytes) -> int:
    """Pure-Python CRC-32C (Castagnoli); only used when ``google-crc32c`` is not installed."""
    table = _TABLE
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE = _crc32c_table()

crc32c: Callable[[bytes], int]
try:
    import google_crc32c

    if google_crc32c.implementation == "c":
        crc32c = google_crc32c.value
        CRC_IMPLEMENTATION = "google-crc32c (C)"
    else:  # its own pure-Python fallback is no faster than ours
        crc32c = _crc32c_py
        CRC_IMPLEMENTATION = "pure Python"
except ImportError:  # pragma: no cover - exercised only without the optional wheel
    crc32c = _crc32c_py
    CRC_IMPLEMENTATION = "pure Python"


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordError(Exception):
    """A damaged record: ``index`` is the 1-based number of the bad record, ``offset`` its byte."""

    def __init__(self, index: int, offset: int, reason: str) -> None:
        super().__init__(f"record {index} at byte {offset}: {reason}")
        self.index = index
        self.offset = offset
        self.reason = reason


def looks_like_tfrecord(head: bytes) -> bool:
    """True when the first 12 bytes are a record header whose length CRC matches."""
    if len(head) < 12:
        return False
    length, crc = _HEADER.unpack_from(head, 0)
    return masked_crc32c(head[:8]) == crc and length < (1 << 31)


def iter_records(stream: BinaryIO, *, verify: bool = True) -> Iterator[bytes]:
    """Yield the data of every record in order. A bad CRC or a record cut short raises
    :class:`RecordError` after the good records before it were yielded."""
    buf = b""
    pos = 0
    offset = 0  # file offset of buf[0]
    index = 0
    eof = False
    unpack = _HEADER.unpack_from
    unpack_u32 = _U32.unpack_from
    crc = crc32c
    delta = _MASK_DELTA
    while True:
        size = len(buf)
        if size - pos < 12:
            if not eof:
                more = stream.read(CHUNK)
                eof = not more
                buf = buf[pos:] + more
                offset += pos
                pos = 0
                continue
            if size - pos == 0:
                return
            raise RecordError(index + 1, offset + pos, f"truncated header ({size - pos} of 12 bytes; file cut short)")
        index += 1
        length, len_crc = unpack(buf, pos)
        # Masked CRC inlined (this loop runs once per scalar): rotate right 15, add a constant.
        if verify:
            c = crc(buf[pos:pos + 8])
            if (((c >> 15) | (c << 17)) + delta) & 0xFFFFFFFF != len_crc:
                raise RecordError(index, offset + pos, "bad CRC of the length field (corrupt data)")
        if length > MAX_RECORD:
            # Checked before reading: a forged length (with its CRC) would otherwise be allocated.
            raise RecordError(index, offset + pos, f"record of {length} bytes (over the {MAX_RECORD >> 20} MiB "
                                                   "limit; corrupt or not an event file)")
        end = pos + 12 + length + 4
        if end > size:
            while end > len(buf) and not eof:
                more = stream.read(max(CHUNK, end - len(buf)))
                eof = not more
                buf = buf[pos:] + more
                offset += pos
                end -= pos
                pos = 0
            if end > len(buf):
                raise RecordError(index, offset + pos, f"truncated record (needs {length + 16} bytes, "
                                                       f"{len(buf) - pos} left; file cut short)")
        data = buf[pos + 12:end - 4]
        if verify:
            c = crc(data)
            if (((c >> 15) | (c << 17)) + delta) & 0xFFFFFFFF != unpack_u32(buf, end - 4)[0]:
                raise RecordError(index, offset + pos, "bad CRC of the record data (corrupt data)")
        pos = end
        yield data


class ScalarColumns:
    """Per-tag columns filled by :class:`ScalarScanner` (steps, values, 1-based record index)."""

    __slots__ = ("lines", "steps", "values")

    def __init__(self) -> None:
        self.steps = array("q")
        self.values = array("d")
        self.lines = array("q")


class ScalarScanner:
    """Frames and CRC-checks records like :func:`iter_records`, and decodes in the same loop the
    record every v1 writer (torch, Megatron, HF...) emits per scalar::

        Event{wall_time=1, [step=2], summary=5{value=1{tag=1, simple_value=2}}}   (short lengths)

    straight into ``columns`` (keyed by tag bytes), without building objects. Any other record is
    yielded as ``(index, data)`` for :func:`decode_event`; ``(index, None)`` is yielded every
    ``flush_every`` scalars so the caller can hand columns on and keep memory constant. That fused
    loop is what makes scalar extraction several times faster than EventAccumulator."""

    def __init__(self, flush_every: int = 1 << 17) -> None:
        self.columns: dict[bytes, ScalarColumns] = {}
        self.first_wall: float | None = None
        self.last_wall: float | None = None
        self.flush_every = flush_every

    def records(self, stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
        cols = self.columns
        unpack_f32 = _F32.unpack_from
        pending = 0
        first: bytes | None = None  # first and last fast records since the last sync (wall times)
        last: bytes | None = None
        for index, data in enumerate(iter_records(stream), 1):
            n = len(data)
            # wall_time, optional step, then summary/value/tag with single-byte lengths that all
            # end exactly at the record's end and a simple_value last: otherwise the generic path.
            if n >= 20 and n < 0x80 and data[0] == 0x09:
                i = 9
                step = 0
                if data[9] == 0x10:
                    b = data[10]
                    if b < 0x80:
                        step = b
                        i = 11
                    else:
                        step, i = varint(data, 10)
                        if step >= (1 << 63):
                            step -= 1 << 64
                if (i + 6 <= n and data[i] == 0x2A and data[i + 1] == n - i - 2 and data[i + 2] == 0x0A
                        and data[i + 3] == n - i - 4 and data[i + 4] == 0x0A):
                    j = i + 6 + data[i + 5]
                    if j + 5 == n and data[j] == 0x15:
                        tag = data[i + 6:j]
                        c = cols.get(tag)
                        if c is None:
                            c = cols[tag] = ScalarColumns()
                        c.steps.append(step)
                        c.values.append(unpack_f32(data, j + 1)[0])
                        c.lines.append(index)
                        if first is None:
                            first = data
                        last = data
                        pending += 1
                        if pending >= self.flush_every:
                            self._sync(first, last)
                            last = None
                            pending = 0
                            yield index, None
                        continue
            if last is not None:
                self._sync(first, last)
                last = None
            yield index, data
        if last is not None:
            self._sync(first, last)

    def _sync(self, first: bytes | None, last: bytes) -> None:
        if self.first_wall is None and first is not None:
            self.note_wall(_F64.unpack_from(first, 1)[0])
        self.note_wall(_F64.unpack_from(last, 1)[0])

    def note_wall(self, wall_time: float) -> None:
        if wall_time:
            if self.first_wall is None:
                self.first_wall = wall_time
            self.last_wall = wall_time


# -- minimal protobuf ---------------------------------------------------------------------------

class ProtoError(Exception):
    """Bytes that are not the protobuf message we expect."""


def varint(buf: bytes, i: int) -> tuple[int, int]:
    x = buf[i]
    i += 1
    if x < 0x80:
        return x, i
    result = x & 0x7F
    shift = 7
    while True:
        x = buf[i]
        i += 1
        result |= (x & 0x7F) << shift
        if x < 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ProtoError("varint too long")


def skip_field(buf: bytes, i: int, wire: int) -> int:
    if wire == 0:
        return varint(buf, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        n, i = varint(buf, i)
        return i + n
    if wire == 5:
        return i + 4
    raise ProtoError(f"unsupported wire type {wire}")


def _packed_varints(buf: bytes) -> list[int]:
    out = []
    i = 0
    while i < len(buf):
        v, i = varint(buf, i)
        out.append(v)
    return out


# TensorProto dtype enum values (tensorflow/core/framework/types.proto).
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_INT64, DT_BOOL = 1, 2, 3, 4, 5, 6, 9, 10
DT_BFLOAT16, DT_HALF = 14, 19
_CONTENT_DTYPES = {DT_FLOAT: "<f4", DT_DOUBLE: "<f8", DT_INT32: "<i4", DT_UINT8: "u1", DT_INT16: "<i2",
                   DT_INT8: "i1", DT_INT64: "<i8", DT_BOOL: "u1", DT_HALF: "<f2"}


def _to_signed64(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


def _bf16(bits: list[int] | np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def tensor_scalar(buf: bytes) -> tuple[float | None, int]:
    """Decode a TensorProto; return (first value as float or None, rank). Rank -1 = unknown."""
    dtype = 0
    rank = 0
    content = b""
    vals: list[float] | None = None
    halfs: list[int] | None = None
    i, n = 0, len(buf)
    while i < n:
        key, i = varint(buf, i)
        fno, wire = key >> 3, key & 7
        if fno == 1 and wire == 0:
            dtype, i = varint(buf, i)
        elif fno == 2 and wire == 2:  # TensorShapeProto: count dims (field 2), unknown_rank = 3
            ln, i = varint(buf, i)
            rank = _shape_rank(buf[i:i + ln])
            i += ln
        elif fno == 4 and wire == 2:
            ln, i = varint(buf, i)
            content = buf[i:i + ln]
            i += ln
        elif fno in (5, 6, 7, 10, 11, 13) and wire == 2:  # packed repeated values
            ln, i = varint(buf, i)
            part = buf[i:i + ln]
            i += ln
            if fno == 5:
                vals = list(np.frombuffer(part, "<f4").astype(np.float64))
            elif fno == 6:
                vals = list(np.frombuffer(part, "<f8"))
            elif fno == 13:
                halfs = _packed_varints(part)
            else:
                ints = _packed_varints(part)
                vals = [float(_to_signed64(v)) for v in ints]
        elif fno in (5, 6, 7, 10, 11, 13):  # unpacked single value (older writers)
            if wire == 5:
                vals = [_F32.unpack_from(buf, i)[0]]
                i += 4
            elif wire == 1:
                vals = [_F64.unpack_from(buf, i)[0]]
                i += 8
            elif wire == 0:
                v, i = varint(buf, i)
                if fno == 13:
                    halfs = [v]
                else:
                    vals = [float(_to_signed64(v))]
            else:
                i = skip_field(buf, i, wire)
        else:
            i = skip_field(buf, i, wire)
    if halfs:
        if dtype == DT_BFLOAT16:
            return float(_bf16(halfs)[0]), rank
        return float(np.asarray(halfs, dtype=np.uint16).view(np.float16)[0]), rank
    if vals:
        return float(vals[0]), rank
    if content:
        if dtype == DT_BFLOAT16 and len(content) >= 2:
            return float(_bf16(np.frombuffer(content[:2], "<u2"))[0]), rank
        np_dtype = _CONTENT_DTYPES.get(dtype)
        if np_dtype is not None:
            arr = np.frombuffer(content, np_dtype)
            if arr.size:
                return float(arr[0]), rank
    return None, rank


def _shape_rank(buf: bytes) -> int:
    rank = 0
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        fno, wire = key >> 3, key & 7
        if fno == 2:
            rank += 1
        elif fno == 3 and wire == 0:
            v, i = varint(buf, i)
            if v:
                return -1
            continue
        i = skip_field(buf, i, wire)
    return rank


def plugin_name(buf: bytes) -> str:
    """SummaryMetadata.plugin_data(1).plugin_name(1)."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        if key == 0x0A:  # field 1, length-delimited
            ln, i = varint(buf, i)
            pd = buf[i:i + ln]
            j = 0
            while j < len(pd):
                k2, j = varint(pd, j)
                if k2 == 0x0A:
                    l2, j = varint(pd, j)
                    return pd[j:j + l2].decode("utf-8", "replace")
                j = skip_field(pd, j, k2 & 7)
            return ""
        i = skip_field(buf, i, key & 7)
    return ""


@dataclass(slots=True)
class SummaryValue:
    """One Summary.Value, decoded only as far as scalars need."""

    tag: str
    simple_value: float | None = None
    tensor: bytes | None = None
    plugin: str | None = None


@dataclass(slots=True)
class EventRecord:
    wall_time: float = 0.0
    step: int = 0
    values: list[SummaryValue] = field(default_factory=list)
    file_version: str | None = None
    session_status: int | None = None  # SessionLog.status: 1 START, 2 STOP, 3 CHECKPOINT


def decode_event(buf: bytes) -> EventRecord:
    """Decode the fields of ``tensorboard.Event`` we use; other fields are skipped."""
    ev = EventRecord()
    i, n = 0, len(buf)
    try:
        while i < n:
            key = buf[i]
            if key < 0x80:
                i += 1
            else:
                key, i = varint(buf, i)
            if key == 0x09:  # wall_time, double
                ev.wall_time = _F64.unpack_from(buf, i)[0]
                i += 8
            elif key == 0x10:  # step, int64 (absent when 0)
                v, i = varint(buf, i)
                ev.step = _to_signed64(v)
            elif key == 0x2A:  # summary
                ln, i = varint(buf, i)
                _decode_summary(buf, i, i + ln, ev.values)
                i += ln
            elif key == 0x1A:  # file_version
                ln, i = varint(buf, i)
                ev.file_version = buf[i:i + ln].decode("utf-8", "replace")
                i += ln
            elif key == 0x3A:  # session_log
                ln, i = varint(buf, i)
                sub = buf[i:i + ln]
                i += ln
                ev.session_status = 0
                j = 0
                while j < len(sub):
                    k2, j = varint(sub, j)
                    if k2 == 0x08:
                        ev.session_status, j = varint(sub, j)
                    else:
                        j = skip_field(sub, j, k2 & 7)
            else:
                i = skip_field(buf, i, key & 7)
        if i != n:
            raise ProtoError("field runs past the end of the record")
    except (IndexError, struct.error) as exc:
        raise ProtoError(f"malformed Event ({exc})") from None
    return ev


def _decode_summary(buf: bytes, i: int, end: int, out: list[SummaryValue]) -> None:
    while i < end:
        key, i = varint(buf, i)
        if key != 0x0A:  # Summary.value = 1
            i = skip_field(buf, i, key & 7)
            continue
        ln, i = varint(buf, i)
        vend = i + ln
        if vend > end:
            raise ProtoError("Summary.Value runs past its parent")
        sv = SummaryValue("")
        while i < vend:
            k = buf[i]
            if k < 0x80:
                i += 1
            else:
                k, i = varint(buf, i)
            if k == 0x0A:  # tag
                ln2, i = varint(buf, i)
                sv.tag = buf[i:i + ln2].decode("utf-8", "replace")
                i += ln2
            elif k == 0x15:  # simple_value, float32
                sv.simple_value = _F32.unpack_from(buf, i)[0]
                i += 4
            elif k == 0x42:  # tensor
                ln2, i = varint(buf, i)
                sv.tensor = buf[i:i + ln2]
                i += ln2
            elif k == 0x4A:  # metadata
                ln2, i = varint(buf, i)
                sv.plugin = plugin_name(buf[i:i + ln2])
                i += ln2
            else:
                i = skip_field(buf, i, k & 7)
        out.append(sv)
