"""Bulk parsing of Megatron iteration lines, a chunk of bytes at a time (numpy, no per-line Python).

A Megatron log is millions of lines with the same key sequence. From one real iteration line we
build a :class:`Template`: the head (timestamp, ``iteration N/ M``) as a byte pattern, then
``| key: `` literals with a number region between them. A chunk's lines are checked against it
with array operations (pipe positions, head and key bytes compared in bulk) and the values
parsed by :mod:`trainaudit.ingest.fastnum`. A line is accepted only if its bytes differ from the
template line's in digit positions, padding width and value text, which are exactly the
differences the line reader's regexes ignore, so accepted lines give the line reader's result.
Every other line (memory reports, timers, NaN-omitted losses, tracebacks, ANSI, CR, bad UTF-8)
is returned raw for the line reader.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.base import LineReader
from trainaudit.ingest.fastnum import PAD, Layout, padded, parse_regions
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.readers.megatron_line import FIELD_RE, ITER_RE, SKIP_KEYS, field_value, is_loss_key
from trainaudit.ingest.text import split_line, strip_prefixes
from trainaudit.safeio import LineCutter


RANK_PREFIX_RE = re.compile(r"^(?:\[(?:rank|default)(\d+)\]:[ ]?|(\d{1,5}): )")

# Head byte classes.
LIT, DIGIT, ITER, TOTAL, RANK = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Template:
    keys: tuple[str, ...]
    key_lits: tuple[bytes, ...]  # b"| key: "
    layouts: tuple[Layout | None, ...]
    head: bytes
    kinds: tuple[int, ...]
    loss_keys: frozenset[str]
    has_rank: bool

    @property
    def nfields(self) -> int:
        return len(self.keys)



def _usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask on Linux; macOS and Windows have no
    ``os.sched_getaffinity``)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1

def build_template(raw: bytes) -> Template | None:
    """A template from one physical line (no newline), or None if the line is not a plain,
    all-numeric Megatron iteration line."""
    raw = raw.rstrip(b"\r")
    if not raw or any(c < 32 or c > 126 for c in raw):
        return None
    text = raw.decode("ascii")
    body, rank = strip_prefixes(text)
    plen = len(text) - len(body)
    pm = RANK_PREFIX_RE.match(text)
    if plen and (pm is None or pm.end() != plen):
        return None
    it = ITER_RE.search(body)
    pipe0 = text.find("|")
    if it is None or pipe0 < 0 or plen + it.end() - 1 != pipe0:
        return None
    kw = plen + it.start() + len("iteration")
    if text[kw] != " ":
        return None
    kinds = [DIGIT if c.isdigit() else LIT for c in text[:pipe0]]
    for i in range(kw + 1, plen + it.end(1)):
        kinds[i] = ITER
    slash = text.index("/", plen + it.end(1))
    for i in range(slash + 1, plen + it.end(2)):
        kinds[i] = TOTAL
    if rank is not None and pm is not None:
        g = 1 if pm.group(1) is not None else 2
        for i in range(pm.start(g), pm.end(g)):
            kinds[i] = RANK
    if any(k == LIT and not text[i].isdigit() and text[i] not in "[]-:. /" and not text[i].isalpha()
           for i, k in enumerate(kinds)):
        return None
    parts = text[pipe0:].split("|")
    if parts[-1] != "" or len(parts) < 3:
        return None
    keys: list[str] = []
    lits: list[bytes] = []
    layouts: list[Layout | None] = []
    for seg in parts[1:-1]:
        key, sep, region = seg.partition(": ")
        if not sep or not key.startswith(" ") or not key[1:2].isalpha() or key != " " + key[1:].strip() or ":" in key:
            return None
        key = key[1:]
        if key in SKIP_KEYS or key.endswith("iteration") or key in keys or field_value(region.strip()) is None:
            return None
        keys.append(key)
        lits.append(f"|{seg[:len(seg) - len(region)]}".encode())
        layouts.append(Layout.of(region))
    # The line reader must see exactly these fields on this line.
    found = [(k.strip(), v) for k, v in FIELD_RE.findall(body)]
    if [k for k, _ in found] != keys:
        return None
    losses = frozenset(k for k in keys if is_loss_key(k))
    if not losses:
        return None
    return Template(tuple(keys), tuple(lits), tuple(layouts), raw[:pipe0], tuple(kinds), losses, rank is not None)


def find_template(head: bytes, max_lines: int = 32) -> Template | None:
    """The most common template among the first iteration lines of ``head``."""
    counts: dict[Template, int] = {}
    seen = 0
    for raw in head.split(b"\n")[:-1]:
        if b"iteration" not in raw or b"|" not in raw:
            continue
        tpl = build_template(raw)
        seen += 1
        if tpl is not None:
            counts[tpl] = counts.get(tpl, 0) + 1
        if seen >= max_lines:
            break
    if not counts:
        return None
    return max(counts, key=lambda t: counts[t])


@dataclass
class ChunkResult:
    """Template rows of one chunk (line indices relative to the chunk) and the raw other lines."""

    n_lines: int
    rows: NDArray[np.int64]
    steps: NDArray[np.int64]
    totals: NDArray[np.int64]
    ranks: NDArray[np.int64] | None
    values: NDArray[np.float64]  # (nfields, len(rows))
    other: list[tuple[int, bytes]] = field(default_factory=list)
    boundary: dict[int, bytes] = field(default_factory=dict)  # template rows right after other lines
    cut_lines: int = 0  # lines of the chunk longer than the input's line limit, cut to it


def _words(buf: NDArray[np.uint8]) -> NDArray[np.uint64]:
    """Every (unaligned) 8-byte little-endian word of ``buf``: word i is ``buf[i:i + 8]``."""
    return np.ndarray((buf.shape[0] - 7,), dtype="<u8", buffer=buf, strides=(1,))


def _equal_at(words: NDArray[np.uint64], pos: NDArray[np.int64], lit: bytes,
              mask: bytes | None = None) -> NDArray[np.bool_]:
    """Whether ``buf[pos:pos + len(lit)] == lit`` (only where ``mask`` bytes are 0xFF), 8 bytes a step."""
    n = len(lit)
    mask = mask if mask is not None else b"\xff" * n
    ok = np.ones(pos.shape[0], dtype=bool)
    if n < 8:  # widen to the left is not possible at a line start; pad on the right with ignored bytes
        lit, mask, n = lit + b"\0" * (8 - n), mask + b"\0" * (8 - n), 8
    idx = np.minimum(pos, words.shape[0] - n)
    for off in list(range(0, n - 7, 8)) + ([n - 8] if n % 8 else []):
        lw = int.from_bytes(lit[off:off + 8], "little")
        mw = int.from_bytes(mask[off:off + 8], "little")
        wv = words[idx + off]
        ok &= ((wv ^ np.uint64(lw)) & np.uint64(mw)) == 0
    return ok


def _int_region(buf: NDArray[np.uint8], ls: NDArray[np.int64], cols: NDArray[np.int64]
                ) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Head columns ``cols`` (contiguous) of each line: spaces then at least one digit -> value, valid."""
    n = ls.shape[0]
    val = np.zeros(n, dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    prev = np.zeros(n, dtype=bool)
    for j in cols:
        c = buf[ls + j]
        d = c - np.uint8(48)
        isd = d < 10
        ok &= (isd | ((c == 32) & ~prev))  # no space after a digit
        val = np.where(isd, val * 10 + d, val)
        prev = isd
    return val, ok & prev


def parse_chunk(data: bytes, tpl: Template) -> ChunkResult:
    nb = len(data)
    buf = padded(data)
    b = buf[PAD:PAD + nb]
    nl = np.flatnonzero(b == 10)
    ends = nl if nb and data[-1:] == b"\n" else np.append(nl, nb)
    starts = np.concatenate(([0], nl + 1))[: ends.shape[0]]
    n_lines = int(ends.shape[0])
    cr = (ends > starts) & (buf[ends + PAD - 1] == 13)
    eff = ends - cr
    pipes = np.flatnonzero(b == 124)
    k = tpl.nfields
    first = np.searchsorted(pipes, starts)
    last = np.searchsorted(pipes, eff)
    ci = np.flatnonzero(last - first == k + 1)
    p = pipes[first[ci][:, None] + np.arange(k + 1)] + PAD
    ls = starts[ci] + PAD
    lh = len(tpl.head)
    ok = (p[:, 0] - ls == lh) & (p[:, k] == eff[ci] + PAD - 1)
    # Head: literal bytes equal, digit positions digits, number regions spaces+digits.
    words = _words(buf)
    kinds = np.array(tpl.kinds)
    litmask = bytes(0xFF if kd == LIT else 0 for kd in tpl.kinds)
    ok &= _equal_at(words, ls, tpl.head, litmask)
    dig = np.flatnonzero(kinds == DIGIT)
    for j in dig:
        ok &= (buf[ls + j] - np.uint8(48)) < 10
    steps, good = _int_region(buf, ls, np.flatnonzero(kinds == ITER))
    ok &= good
    totals, good = _int_region(buf, ls, np.flatnonzero(kinds == TOTAL))
    ok &= good
    ranks = None
    if tpl.has_rank:
        rk = np.flatnonzero(kinds == RANK)
        ranks, good = _int_region(buf, ls, rk)
        ok &= good & ((buf[ls + rk[0]] - np.uint8(48)) < 10)
    values = np.empty((k, ci.shape[0]))
    for i, (klit, lay) in enumerate(zip(tpl.key_lits, tpl.layouts)):
        ok &= _equal_at(words, p[:, i], klit)
        vs, ve = p[:, i] + len(klit), p[:, i + 1]
        ok &= ve > vs
        v, vok = parse_regions(buf, vs, ve, lay)
        for r in np.flatnonzero(ok & ~vok):  # nan, long mantissas, other shapes: the line reader's own parse
            region = data[int(vs[r]) - PAD:int(ve[r]) - PAD]
            x = field_value(region.decode("ascii").strip()) if all(32 <= c <= 126 for c in region) else None
            if x is None:
                ok[r] = False
            else:
                v[r] = x
        values[i] = v
    rows = ci[ok]
    is_row = np.zeros(n_lines, dtype=bool)
    is_row[rows] = True
    other_idx = np.flatnonzero(~is_row & (ends > starts))
    other = [(int(j), data[int(starts[j]):int(ends[j])]) for j in other_idx]
    nxt = other_idx + 1
    nxt = nxt[(nxt < n_lines)]
    nxt = nxt[is_row[nxt]]
    boundary = {int(j): data[int(starts[j]):int(ends[j])] for j in nxt}
    return ChunkResult(n_lines, rows.astype(np.int64), steps[ok], totals[ok],
                       None if ranks is None else ranks[ok], values[:, ok], other, boundary)


# -- driving a whole input -------------------------------------------------------------------

CHUNK_SIZE = 16 << 20
POOL_MIN_SIZE = 96 << 20  # below this a process pool costs more than it saves
MAX_PENDING = 3  # chunks in flight per worker pool: bounds memory whatever the file size


def _read_range(path: str, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _cut(data: bytes, line_bytes: int | None) -> tuple[bytes, int]:
    """``data`` (whole lines from a line start) with lines longer than ``line_bytes`` cut as the
    stream of every other line reader cuts them (``safeio.LineCutter``), and how many were cut."""
    if line_bytes is None or len(data) <= line_bytes:  # no line can be longer: nothing to scan
        return data, 0
    cutter = LineCutter(line_bytes)
    return cutter.cut(data), cutter.cut_lines


def _work(path: str, offset: int, length: int, tpl: Template, line_bytes: int | None = None) -> ChunkResult:
    data, cut = _cut(_read_range(path, offset, length), line_bytes)
    res = parse_chunk(data, tpl)
    res.cut_lines = cut
    return res


def file_ranges(path: str, size: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """Newline-aligned (offset, length) ranges covering the file."""
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            end = pos + chunk_size
            if end >= size:
                end = size
            else:
                f.seek(end)
                f.readline()
                end = f.tell()
            yield pos, end - pos
            pos = end


def stream_chunks(stream: BinaryIO, chunk_size: int) -> Iterator[bytes]:
    """Newline-aligned chunks of a stream (the last one may lack its newline)."""
    carry = b""
    while True:
        block = stream.read(chunk_size)
        if not block:
            if carry:
                yield carry
            return
        data = carry + block
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        carry = data[cut:]
        yield data[:cut]


class Replay:
    """Feeds chunk results to a sink in line order, exactly as the line reader would have.

    Template rows are emitted in bulk (``add_many``) and lazily: only before an other line that
    may add to the same metrics, or at the end of the chunk, so per-metric order is kept. The
    other lines go through the reader's ``feed`` and the signature scanner one by one, with
    ``sink.last_step`` set as the line reader would have left it (events default to it)."""

    def __init__(self, reader: LineReader, tpl: Template, sink: Sink, scanner: SignatureScanner, state: dict) -> None:
        self.reader, self.tpl, self.sink, self.scanner, self.state = reader, tpl, sink, scanner, state
        self.keyset = set(tpl.keys)
        self.line_mode = False
        self.iter_re = ITER_RE

    def line(self, no: int, raw: bytes) -> None:
        for ln in split_line(no, raw):
            self.reader.feed(ln, self.sink, self.state)
            for ev in self.scanner.feed(ln):
                self.sink.event(ev)

    def lines(self, data: bytes, base: int, start: int = 0) -> None:
        parts = data.split(b"\n")
        if data.endswith(b"\n"):
            parts.pop()
        for i in range(start, len(parts)):
            if parts[i]:
                self.line(base + i + 1, parts[i])

    def _seen(self, res: ChunkResult) -> None:
        # What the line reader's state would hold after a template row.
        if "train_iters" not in self.state:
            self.state["train_iters"] = int(res.totals[0])
            self.sink.meta("train_iters", int(res.totals[0]))
        self.state["loss_keys"].update(self.tpl.loss_keys)

    def chunk(self, res: ChunkResult, base: int) -> int | None:
        """Replay one chunk; returns the chunk line index from which the rest must be read line by
        line (an other line introduced a loss key the template lacks), else None."""
        rows, steps, sink = res.rows, res.steps, self.sink
        emitted = 0

        def emit(upto: int) -> None:
            nonlocal emitted
            if upto <= emitted:
                return
            sl = slice(emitted, upto)
            st, ln, vals = steps[sl], rows[sl] + base + 1, res.values[:, sl]
            if res.ranks is None:
                groups: list[tuple[int | None, Any]] = [(None, slice(None))]
            else:
                rk = res.ranks[sl]
                uniq, first = np.unique(rk, return_index=True)
                groups = [(int(r), rk == r) for r in uniq[np.argsort(first)]]
            for r, sel in groups:
                for i, key in enumerate(self.tpl.keys):
                    sink.add_many(sink.metric_for(key, r), st[sel], vals[i, sel], ln[sel])
            sink.last_step = int(st[-1])
            emitted = upto

        last_other = -1
        after_other: int | None = None
        for j, raw in res.other:
            q = int(np.searchsorted(rows, j))
            if q > 0 and rows[q - 1] > last_other:
                self._seen(res)
                sink.last_step = int(steps[q - 1])
            lines = split_line(base + j + 1, raw)
            if any(self.iter_re.search(ln.text) for ln in lines):
                emit(q)
            for ln in lines:
                self.reader.feed(ln, sink, self.state)
                for ev in self.scanner.feed(ln):
                    sink.event(ev)
            last_other, after_other = j, sink.last_step
            if not self.state["loss_keys"] <= self.keyset:
                emit(q)
                return j + 1
            nxt = res.boundary.get(j + 1)
            if nxt is not None:  # the scanner sees the line that ends a block of other lines
                self._seen(res)
                sink.last_step = int(steps[q])
                for ln in split_line(base + j + 2, nxt):
                    for ev in self.scanner.feed(ln):
                        sink.event(ev)
        if rows.shape[0]:
            self._seen(res)
            emit(rows.shape[0])
            if last_other > rows[-1]:
                sink.last_step = after_other
        return None


def read_fast(reader: LineReader, tpl: Template, inp: InputFile, sink: Sink, scanner: SignatureScanner,
              state: dict, chunk_size: int = CHUNK_SIZE, workers: int | None = None) -> None:
    replay = Replay(reader, tpl, sink, scanner, state)
    base = 0
    if inp.fs_path is not None and not inp.compressed:
        path = str(inp.fs_path)
        ranges = file_ranges(path, inp.size, chunk_size)
        nproc = workers if workers is not None else min(2, _usable_cpus())
        # Read from the file directly, not through inp.open(): long lines are cut here as the stream
        # would have cut them (inp.line_bytes), counted for the input's report.
        limit, cut = inp.line_bytes, 0
        if nproc > 1 and inp.size >= POOL_MIN_SIZE:
            results = _pooled(path, ranges, tpl, nproc, limit)
        else:
            results = ((off, ln, _work(path, off, ln, tpl, limit)) for off, ln in ranges)
        for off, length, res in results:
            cut += res.cut_lines
            if replay.line_mode:
                replay.lines(_cut(_read_range(path, off, length), limit)[0], base)
            else:
                resume = replay.chunk(res, base)
                if resume is not None:
                    replay.line_mode = True
                    replay.lines(_cut(_read_range(path, off, length), limit)[0], base, resume)
            base += res.n_lines
        inp.cut_lines = max(inp.cut_lines, cut)
        return
    with inp.open() as stream:
        for data in stream_chunks(stream, chunk_size):
            n = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
            if replay.line_mode:
                replay.lines(data, base)
            else:
                resume = replay.chunk(parse_chunk(data, tpl), base)
                if resume is not None:
                    replay.line_mode = True
                    replay.lines(data, base, resume)
            base += n


def _pooled(path: str, ranges: Iterator[tuple[int, int]], tpl: Template, nproc: int, line_bytes: int | None = None
            ) -> Iterator[tuple[int, int, ChunkResult]]:
    """Parse ranges in worker processes, in order, with a bounded number in flight."""
    ctx = mp.get_context("fork")
    with ctx.Pool(nproc) as pool:
        pending: deque[tuple[int, int, Any]] = deque()
        for off, length in ranges:
            pending.append((off, length, pool.apply_async(_work, (path, off, length, tpl, line_bytes))))
            if len(pending) >= nproc * MAX_PENDING:
                o, n, job = pending.popleft()
                yield o, n, job.get()
        while pending:
            o, n, job = pending.popleft()
            yield o, n, job.get()
