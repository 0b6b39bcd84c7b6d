"""Per-rank logs of one job: the ranks that carry the metrics are read in full, the others skimmed.

``torchrun --tee 3`` and Slurm's per-task output write one log per rank, every line prefixed
``[rankN]:`` (https://pytorch.org/docs/stable/elastic/run.html, ``--tee`` and ``--log-dir``).
With hundreds of ranks the metric lines repeat on every rank (Megatron-LM prints the iteration
line on the last pipeline stage, torchtitan the all-reduced loss on each rank), while what tells
the ranks apart is rare: a traceback, an OOM, a NCCL watchdog timeout, a non-finite value, and
where each rank stopped. Reading every line of every rank costs the whole directory; skimming
costs one pass of C code per byte.

:func:`plan` picks, in a directory of at least :data:`SKIM_MIN_RANKS` per-rank logs of a format
whose records are single self-contained lines (:data:`SKIM_FORMATS`), one rank per format to read
in full (the lowest rank whose first lines log a loss) and skims the rest. :func:`skim` gives the
format and the error scanner (:class:`~trainaudit.ingest.signatures.SignatureScanner`) of a
skimmed log: its first :data:`HEAD_BYTES` and last :data:`TAIL_BYTES`, every line in which the
scanner may find something (:func:`~trainaudit.ingest.signatures.may_signal`), every line with a
non-finite number, every Megatron line counting NaN iterations, the last line of each block's
commonest line shapes (where the rank got to), and the lines of a record the scanner or the
format has open (a traceback's frames). The rest of its lines are counted, never
decoded. A line's digits do not change what those tests find, so each distinct digit-masked line
shape is tested once: the metric lines of a rank share a few shapes.

What a skimmed rank gives the run: its events, and its non-finite values (under the metric's
plain name, as a full read of a per-rank log gives them, so a NaN on any rank shows in the run's
curve, quoted from that rank's log). Its finite values are not added to the run; those of its
first and last lines are compared with the run's values at the same steps by :func:`describe`,
and the answer's source reference of every skimmed log says what was read of it, the last step
it reached and whether its values differ from the rank read in full.
"""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from trainaudit.ingest.base import LineReader, Reader
from trainaudit.ingest.signatures import SignatureScanner, may_signal
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import ANSI_RE, split_line, strip_prefixes
from trainaudit.model import Event, Run
from trainaudit.safeio import LIMITS

SKIM_MIN_RANKS = 8  # per-rank logs of one format from which all but one are skimmed (one node's worth)
# formats whose every record is one line that names its own step: a line read alone means what it
# means in the whole log (a Keras bar's step comes from its epoch header, an HF dict's from the bar)
SKIM_FORMATS = frozenset({"megatron", "torchtitan"})
HEAD_BYTES = 16 << 10  # read in full: the format's settings and the first steps, to compare
TAIL_BYTES = 8 << 10  # read in full: the last steps the rank reached
BLOCK = 8 << 20  # bytes skimmed at a time (a skim holds about four times this)
MAX_KEPT = 1024  # finite values a skimmed rank keeps to compare with the rank read in full
KEPT_BUDGET = 1 << 20  # and all skimmed ranks together (16 MiB): a folder of 100 000 ranks keeps 10 each
HEAD_LINES = 200  # lines of a log's head that must carry one rank's prefix
LAST_SHAPES = 3  # a block's commonest line shapes whose last line is read (the last step it reached)
FEW_SHAPES = 16  # line shapes to signal that are each looked for in the block; more: one pass over its lines
REL_TOL = 1e-6  # values printed from the same number agree to their printed digits

# A non-finite number as Python, NumPy and C print it (nan, NaN, NAN, inf, -inf, Infinity), as a
# word of its own: not "info", "INFO", "inference" nor Megatron's "number of nan iterations:".
NONFINITE_RE = re.compile(r"(?<![A-Za-z_])(?:[Nn]a[Nn]|NAN|[Ii]nf(?:inity)?|INF)(?![A-Za-z_])(?! iterations)")
# Megatron-LM counts the iterations whose loss was NaN on every iteration line (training_log in
# megatron/training/training.py, "number of nan iterations:"): a count above 0 is a NaN step.
NAN_ITERATIONS_RE = re.compile(rb"nan iterations: *+[1-9]")
# The metrics whose values ranks share once reduced (the loss, the clipped gradient norm, accuracy):
# a rank's differing from the rank read in full is news. Times and throughput differ on every rank.
COMPARED_RE = re.compile(r"loss|norm|acc|perplexity|ppl", re.IGNORECASE)
_MASK_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def file_rank(head: bytes) -> int | None:
    """The launcher rank of a per-rank log: the one rank that the ``[rankN]:`` style prefixes of
    its first lines name, when at least half of them carry one (None: no rank, or several)."""
    text = head.decode("utf-8", "replace")
    ranks: set[int] = set()
    lines = prefixed = 0
    for raw in text.split("\n")[:HEAD_LINES]:
        raw = raw.rstrip("\r")
        if not raw.strip():
            continue
        lines += 1
        _, rank = strip_prefixes(raw)
        if rank is not None:
            prefixed += 1
            ranks.add(rank)
            if len(ranks) > 1:
                return None
    return ranks.pop() if ranks and 2 * prefixed >= lines else None


_LOSS_RE = re.compile(r"loss", re.IGNORECASE)
_NUMBERS_RE = re.compile(rb"[\d ]+")


@dataclass(frozen=True, slots=True)
class RankHead:
    """What the head of a per-rank log says: its rank, whether it logs a loss, and its shape (a
    digest of its name and head with every run of digits and blanks made one): the per-rank logs
    of one job differ in their numbers only, so one shape is one format."""

    rank: int
    logs_loss: bool
    shape: bytes


def rank_head(name: str, head: bytes) -> RankHead | None:
    """The :class:`RankHead` of a per-rank log's head (None: not one rank's log)."""
    rank = file_rank(head)
    if rank is None:
        return None
    digest = hashlib.blake2b(_NUMBERS_RE.sub(b"0", name.encode("utf-8", "replace")), digest_size=16)
    digest.update(b"\0")
    digest.update(_NUMBERS_RE.sub(b"0", head))
    return RankHead(rank, _LOSS_RE.search(head.decode("utf-8", "replace")) is not None, digest.digest())


def plan(inputs: list[tuple[InputFile, Reader, RankHead | None]]) -> dict[int, int]:
    """Which inputs to skim: index -> its rank. Per format of :data:`SKIM_FORMATS`, when at least
    :data:`SKIM_MIN_RANKS` plain files are logs of distinct single ranks, all ranks but one are
    skimmed: the one read in full (each of its logs, as a restart writes one more) is the lowest
    rank whose head logs a loss (else the lowest rank)."""
    groups: dict[str, list[tuple[int, int, bool]]] = {}
    for i, (inp, reader, head) in enumerate(inputs):
        if head is None or reader.name not in SKIM_FORMATS or not isinstance(reader, LineReader) \
                or inp.fs_path is None or inp.compressed or inp.skip is not None:
            continue
        groups.setdefault(reader.name, []).append((head.rank, i, head.logs_loss))
    out: dict[int, int] = {}
    for members in groups.values():
        if len({r for r, _, _ in members}) < SKIM_MIN_RANKS:
            continue
        members.sort()
        full = next((m for m in members if m[2]), members[0])
        out.update({i: r for r, i, _ in members if r != full[0]})  # every log of that rank (restarts too)
    return out


@dataclass(slots=True)
class Skim:
    """What skimming one rank's log found."""

    rank: int
    lines: int = 0  # physical lines in the log
    parsed: int = 0  # physical lines given to the format and the error scanner
    last_step: int | None = None
    nonfinite: int = 0  # non-finite values found (added to the run)
    events: int = 0
    values: dict[str, tuple[array[int], array[float]]] = field(default_factory=dict)  # kept to compare
    kept: int = 0
    keep: int = MAX_KEPT  # the most values it may keep


class _SkimSink(Sink):
    """What the format reads from a skimmed log: non-finite values, events and metadata go on to
    the run's sink; finite values are kept (up to the skim's ``keep``) to be compared."""

    def __init__(self, real: Sink, found: Skim) -> None:
        super().__init__()
        self.real, self.found = real, found
        self.source = real.source

    def add(self, metric: str, step: int, value: float, line: int, rank: int | None = None) -> None:
        self.last_step = step
        f = self.found
        f.last_step = step if f.last_step is None else max(f.last_step, step)
        if not math.isfinite(value):
            f.nonfinite += 1
            self.real.add(metric, step, value, line, rank)
        elif f.kept < f.keep:
            steps, values = f.values.setdefault(metric, (array("q"), array("d")))
            steps.append(step)
            values.append(value)
            f.kept += 1

    def add_many(self, metric: str, steps: ArrayLike, values: ArrayLike, lines: ArrayLike) -> None:
        for s, v, ln in zip(np.asarray(steps).tolist(), np.asarray(values).tolist(), np.asarray(lines).tolist()):
            self.add(metric, int(s), float(v), int(ln))

    def write_event(self, ev: Event) -> None:
        self.found.events += 1
        self.real.event(ev)

    def write_meta(self, key: str, value: Any) -> None:
        self.real.meta(key, value)


def _signals(shape: bytes) -> bool:
    text = shape.decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    return may_signal(text) or NONFINITE_RE.search(text) is not None


def keep_per_rank(n: int) -> int:
    """Values each of ``n`` skimmed ranks may keep to compare (:data:`MAX_KEPT`, less past
    :data:`KEPT_BUDGET` in all)."""
    return min(MAX_KEPT, KEPT_BUDGET // max(1, n))


def skim(inp: InputFile, reader: LineReader, sink: Sink, rank: int, keep: int = MAX_KEPT) -> Skim:
    """Skim one rank's log into ``sink`` (see the module's docstring for what is read), keeping
    up to ``keep`` of its finite values to compare."""
    found = Skim(rank, keep=keep)
    proxy = _SkimSink(sink, found)
    scanner = SignatureScanner(inp.display)
    state = reader.new_state()
    size = inp.size
    inp.line_bytes = LIMITS.line_bytes  # the stream cuts longer lines: a block always holds a newline
    offset = 0  # of the block's first byte in the file
    base = 0  # physical lines before the block
    rest = b""

    def busy() -> bool:
        return scanner.busy or reader.awaits(state)

    def feed(chunk: bytes, at: int, no: int) -> int:
        """Read the line at byte ``at`` of ``chunk``, physical line ``no``; return where the next starts."""
        nl = chunk.find(b"\n", at)
        stop = len(chunk) if nl < 0 else nl + 1
        found.parsed += 1
        for line in split_line(no, chunk[at:stop]):
            reader.feed(line, proxy, state)
            for ev in scanner.feed(line):
                proxy.event(ev)
        return stop

    with inp.open() as stream:
        while True:
            block = stream.read(BLOCK)
            data = rest + block if rest else block
            end = data.rfind(b"\n") + 1 if block else len(data)
            if not end:
                rest = data
                if block:
                    continue
                break
            chunk, rest = data[:end], data[end:]
            at, no = 0, base  # the next line not read yet, and the physical lines before it
            while at < end and busy():  # a record open at the end of the block before
                at = feed(chunk, at, no + 1)
                no += 1
            for start in _wanted(chunk, offset, size):
                if start < at:
                    continue
                no += chunk.count(b"\n", at, start)
                at = feed(chunk, start, no + 1)
                no += 1
                while at < end and busy():
                    at = feed(chunk, at, no + 1)
                    no += 1
            base = no + chunk.count(b"\n", at, end)
            offset += end
            if not block:
                break
    found.lines = base
    for ev in scanner.finish():
        proxy.event(ev)
    reader.finish(proxy, state)
    return found


def _line_start(chunk: bytes, at: int) -> int:
    return chunk.rfind(b"\n", 0, at) + 1


def _last_of(masked: bytes, shapes: list[bytes], end: int) -> list[int]:
    """Where the last line of each of ``shapes`` that ends before ``end`` starts, in ``masked``."""
    out = []
    for shape in shapes:
        at = masked.rfind(b"\n" + shape + b"\n", 0, end) + 1
        if at or masked.startswith(shape + b"\n"):
            out.append(at)
    return out


def _wanted(chunk: bytes, offset: int, size: int) -> list[int]:
    """Where the lines of ``chunk`` (whole lines, at ``offset`` in a file of ``size`` bytes) that
    are to be read start: head, tail, lines that may signal or hold a non-finite number, NaN counts."""
    n = len(chunk)
    out: set[int] = set()
    if offset < HEAD_BYTES:
        at = 0
        stop = min(n, HEAD_BYTES - offset)
        while at < stop:
            out.add(at)
            nl = chunk.find(b"\n", at)
            at = n if nl < 0 else nl + 1
    tail_at = size - TAIL_BYTES - offset
    if tail_at < n:
        at = _line_start(chunk, max(0, tail_at))
        while at < n:
            out.add(at)
            nl = chunk.find(b"\n", at)
            at = n if nl < 0 else nl + 1
    masked = chunk.translate(_MASK_DIGITS)
    lines = masked.split(b"\n")
    shapes = Counter(lines)
    # the block's commonest shapes are its metric lines: the last of them says where the rank got
    # to (even when what it printed last, a dump of C++ frames, is longer than the tail), and the one
    # before a line that signals gives that line's step, as in a full read
    tops = [shape for shape, _ in shapes.most_common(LAST_SHAPES) if shape]
    out.update(_last_of(masked, tops, n))
    hits = {shape for shape in shapes if shape and _signals(shape)}
    signal: set[int] = set()
    if len(hits) <= FEW_SHAPES:
        for shape in hits:  # every line of that shape: it starts the chunk or follows a newline, and ends at one
            at = 0
            while (hit := masked.find(shape, at)) >= 0:
                at = hit + 1
                after = hit + len(shape)
                if (hit == 0 or masked[hit - 1] == 10) and (after == n or masked[after] == 10):
                    signal.add(hit)
    else:  # many shapes (a log of errors): one pass over the lines
        at = 0
        for shape in lines:
            if shape in hits:
                signal.add(at)
            at += len(shape) + 1
    signal.update(_line_start(chunk, m.start()) for m in NAN_ITERATIONS_RE.finditer(chunk))
    out |= signal
    for at in signal:
        out.update(_last_of(masked, tops, at))
    return sorted(out)


def describe(found: Skim, run: Run) -> tuple[str, list[str]]:
    """What was read of a skimmed log, for its source reference, and the metrics whose values there
    differ from the run's (the rank read in full) at the same steps."""
    differ: list[str] = []
    compared = 0
    for metric, values in sorted(found.values.items()):
        if not COMPARED_RE.search(metric):
            continue
        s = run.series.get(metric)
        if s is None or not len(s):
            continue
        steps = np.frombuffer(values[0], dtype=np.int64)
        vals = np.frombuffer(values[1], dtype=np.float64)
        idx = np.searchsorted(s.steps, steps)
        ok = idx < len(s)
        ok[ok] = s.steps[idx[ok]] == steps[ok]
        if not ok.any():
            continue
        theirs = s.values[idx[ok]]
        mine = vals[ok]
        compared += int(ok.sum())
        if not np.allclose(mine, theirs, rtol=REL_TOL, atol=0.0, equal_nan=True):
            differ.append(metric)
    note = (f"rank {found.rank}, skimmed: its first {HEAD_BYTES >> 10} KiB and last {TAIL_BYTES >> 10} KiB read "
            f"in full, its other lines ({found.lines} in all, {found.parsed} read) scanned for errors, "
            f"tracebacks, timeouts and non-finite values; last step {found.last_step}; "
            f"{found.nonfinite} non-finite value(s), {found.events} event(s)")
    if differ:
        note += f"; its {', '.join(differ[:4])} differ from the run's at the steps compared"
    elif compared:
        note += f"; its values equal the run's at the {compared} steps compared"
    return note, differ
