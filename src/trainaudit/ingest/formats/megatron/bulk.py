"""Bulk parsing of Megatron iteration lines, a chunk of bytes at a time (numpy, no per-line Python).

A Megatron log is millions of lines with the same key sequence. From one real iteration line we
build a :class:`Template`: the head (timestamp, ``iteration N/ M``) as a byte pattern, then
``| key: `` literals with a number region between them. A chunk's lines are checked against it
with array operations (pipe positions, head and key bytes compared in bulk) and the values
parsed by :mod:`trainaudit.ingest.fastnum`. A line is accepted only if its bytes differ from the
template line's in digit positions, padding width and value text, which are exactly the
differences the line reader's regexes ignore, so accepted lines give the line reader's result.

A run that breaks prints its iteration lines with another key sequence: Megatron leaves a NaN loss
out of the line (``training_log()`` prints a loss only when ``avg > 0.0``). So a chunk may hold
several templates: the one from the file's head, and those a worker finds among the iteration
lines the first one did not take (at most :data:`MAX_TEMPLATES` a chunk). What the line reader
does for a line without a loss it has seen (a NaN value and a ``missing_metric`` event) is
replayed from the rows, in line order. Every other line (memory reports, timers, tracebacks,
ANSI, CR, bad UTF-8) is returned raw for the line reader.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from trainaudit.ingest.base import LineReader
from trainaudit.ingest.chunks import (
    POOL_MIN_SIZE,
    OrderedWorkers,
    count_lines,
    cut_long_lines,
    file_ranges,
    in_order,
    read_range,
    reread_range,
    stream_chunks,
    usable_cpus,
)
from trainaudit.ingest.fastnum import PAD, Layout, padded, parse_regions
from trainaudit.ingest.formats.megatron.grammar import (
    CONTINUED_RE,
    FIELD_RE,
    ITER_RE,
    SKIP_KEYS,
    field_value,
    is_loss_key,
)
from trainaudit.ingest.signatures import SignatureScanner
from trainaudit.ingest.sink import Sink
from trainaudit.ingest.sources import InputFile
from trainaudit.ingest.text import Line, split_line, strip_prefixes
from trainaudit.model import Event, EventKind

RANK_PREFIX_RE = re.compile(r"^(?:\[(?:rank|default)(\d+)\]:[ ]?|(\d{1,5}): )")
# a line a worker may build another template from (the same test as ITER_RE, on bytes)
ITER_BYTES_RE = re.compile(rb"\biteration:?\s+\d+\s*/\s*\d+\s*\|")
MAX_TEMPLATES = 4  # per chunk, the head's included: a NaN run adds one, a restart with other keys one more
MAX_TRIES = 16  # lines a worker tries to build a template from, per chunk

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
    # the region of each key whose template value fits no layout (``nan``), else b"": rows with
    # the same bytes there have the same value, no per-row parse needed
    consts: tuple[bytes, ...] = ()

    @property
    def nfields(self) -> int:
        return len(self.keys)



def build_template(raw: bytes, need_loss: bool = True) -> Template | None:
    """A template from one physical line (no newline), or None if the line is not a plain,
    all-numeric Megatron iteration line (with a loss field unless ``need_loss`` is False: the
    lines of a NaN run have none)."""
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
    consts: list[bytes] = []
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
        consts.append(region.encode() if layouts[-1] is None else b"")
    # The line reader must see exactly these fields on this line.
    found = [(k.strip(), v) for k, v in FIELD_RE.findall(body)]
    if [k for k, _ in found] != keys:
        return None
    losses = frozenset(k for k in keys if is_loss_key(k))
    if need_loss and not losses:
        return None
    if not _scanner_inert(body, rank, text):
        return None  # rows are not shown to the signature scanner: it must have nothing to say of them
    return Template(tuple(keys), tuple(lits), tuple(layouts), raw[:pipe0], tuple(kinds), losses, rank is not None,
                    tuple(consts))


def _scanner_inert(body: str, rank: int | None, text: str) -> bool:
    """The signature scanner finds nothing in the line and keeps no state from it."""
    scanner = SignatureScanner("")
    return not scanner.feed(Line(1, body, rank, text)) and not scanner.busy and not scanner.finish()


def find_template(head: bytes, max_lines: int = 32) -> Template | None:
    """The most common template among the first iteration lines of ``head`` (lines without a loss
    count too: a run can be failing from its first line)."""
    counts: dict[Template, int] = {}
    seen = 0
    lines = head.split(b"\n")[:-1]
    for no, raw in enumerate(lines):
        if b"iteration" not in raw or b"|" not in raw:
            continue
        if no + 1 < len(lines) and CONTINUED_RE.match(lines[no + 1].decode("utf-8", "replace").rstrip("\r")):
            return None  # iteration lines wrapped as pasted: the line path joins them
        tpl = build_template(raw, need_loss=False)
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
    """Template rows of one chunk (line indices relative to the chunk, in line order) and the raw
    other lines. ``values[i]`` holds ``keys[i]`` on the rows whose template has it (the first
    template's keys come first)."""

    n_lines: int
    rows: NDArray[np.int64]
    steps: NDArray[np.int64]
    totals: NDArray[np.int64]
    ranks: NDArray[np.int64] | None  # -1: a row without a launcher rank
    values: NDArray[np.float64]  # (len(keys), len(rows))
    other: list[tuple[int, bytes]] = field(default_factory=list)
    boundary: dict[int, bytes] = field(default_factory=dict)  # template rows right after other lines
    templates: tuple[Template, ...] = ()
    tids: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # template per row
    keys: tuple[str, ...] = ()
    spans: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))  # row bytes
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


@dataclass
class _Lines:
    """The line and pipe positions of one chunk, shared by the templates matched against it."""

    data: bytes
    buf: NDArray[np.uint8]
    words: NDArray[np.uint64]
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    eff: NDArray[np.int64]  # line ends without a closing CR
    pipes: NDArray[np.int64]
    first: NDArray[np.int64]  # index in pipes of each line's first pipe
    last: NDArray[np.int64]


@dataclass
class _Match:
    lines: NDArray[np.int64]
    steps: NDArray[np.int64]
    totals: NDArray[np.int64]
    ranks: NDArray[np.int64] | None
    values: NDArray[np.float64]  # (nfields, len(lines))


def _match(c: _Lines, tpl: Template, cand: NDArray[np.int64]) -> _Match:
    """The lines among ``cand`` that fit ``tpl``, with their numbers."""
    buf, data, words = c.buf, c.data, c.words
    k = tpl.nfields
    ci = cand[c.last[cand] - c.first[cand] == k + 1]
    p = c.pipes[c.first[ci][:, None] + np.arange(k + 1)] + PAD
    ls = c.starts[ci] + PAD
    lh = len(tpl.head)
    ok = (p[:, 0] - ls == lh) & (p[:, k] == c.eff[ci] + PAD - 1)
    # Head: literal bytes equal, digit positions digits, number regions spaces+digits.
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
    for i, (klit, lay, const) in enumerate(zip(tpl.key_lits, tpl.layouts, tpl.consts)):
        ok &= _equal_at(words, p[:, i], klit)
        vs, ve = p[:, i] + len(klit), p[:, i + 1]
        ok &= ve > vs
        if const:  # the template's own text (a NaN run's ``grad norm: nan``), compared in bulk
            vok = (ve - vs == len(const)) & _equal_at(words, vs, const)
            v = np.full(vs.shape[0], field_value(const.decode("ascii").strip()))
        else:
            v, vok = parse_regions(buf, vs, ve, lay)
        for r in np.flatnonzero(ok & ~vok):  # nan, long mantissas, other shapes: the line reader's own parse
            region = data[int(vs[r]) - PAD:int(ve[r]) - PAD]
            x = field_value(region.decode("ascii").strip()) if all(32 <= c <= 126 for c in region) else None
            if x is None:
                ok[r] = False
            else:
                v[r] = x
        values[i] = v
    return _Match(ci[ok], steps[ok], totals[ok], None if ranks is None else ranks[ok], values[:, ok])


def _discover(c: _Lines, taken: NDArray[np.bool_], tried: set[int], known: list[Template]) -> Template | None:
    """A new template from the first untaken iteration lines not tried yet (bounded per chunk)."""
    for jj in np.flatnonzero(~taken & (c.last - c.first >= 2)):
        if len(tried) >= MAX_TRIES:
            return None
        j = int(jj)
        if j in tried:
            continue
        raw = c.data[int(c.starts[j]):int(c.ends[j])]
        if ITER_BYTES_RE.search(raw) is None:
            continue
        tried.add(j)
        tpl = build_template(raw, need_loss=False)
        if tpl is not None and tpl not in known:
            return tpl
    return None


def parse_chunk(data: bytes, tpl: Template, discover: bool = True) -> ChunkResult:
    """The rows of ``tpl`` in ``data``, and (``discover``) of the templates built from iteration
    lines it did not take."""
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
    c = _Lines(data, buf, _words(buf), starts, ends, eff, pipes, np.searchsorted(pipes, starts),
               np.searchsorted(pipes, eff))
    templates = [tpl]
    matches = [_match(c, tpl, np.arange(n_lines))]
    is_row = np.zeros(n_lines, dtype=bool)
    is_row[matches[0].lines] = True
    tried: set[int] = set()
    while discover and len(templates) < MAX_TEMPLATES:
        new = _discover(c, is_row, tried, templates)
        if new is None:
            break
        m = _match(c, new, np.flatnonzero(~is_row))
        if m.lines.shape[0]:
            templates.append(new)
            matches.append(m)
            is_row[m.lines] = True
    keys: list[str] = []
    for t in templates:
        keys += [key for key in t.keys if key not in keys]
    rows = np.concatenate([m.lines for m in matches])
    order = np.argsort(rows, kind="stable")
    tids = np.concatenate([np.full(m.lines.shape[0], i, dtype=np.int64) for i, m in enumerate(matches)])[order]
    values = np.full((len(keys), rows.shape[0]), np.nan)
    at = 0
    for t, m in zip(templates, matches):
        n = m.lines.shape[0]
        for i, key in enumerate(t.keys):
            values[keys.index(key), at:at + n] = m.values[i]
        at += n
    ranks = None
    if any(t.has_rank for t in templates):
        ranks = np.concatenate([m.ranks if m.ranks is not None else np.full(m.lines.shape[0], -1, dtype=np.int64)
                                for m in matches])[order]
    rows = rows[order]
    other_idx = np.flatnonzero(~is_row & (ends > starts))
    other = [(int(j), data[int(starts[j]):int(ends[j])]) for j in other_idx]
    nxt = other_idx + 1
    nxt = nxt[(nxt < n_lines)]
    nxt = nxt[is_row[nxt]]
    boundary = {int(j): data[int(starts[j]):int(ends[j])] for j in nxt}
    return ChunkResult(n_lines, rows.astype(np.int64), np.concatenate([m.steps for m in matches])[order],
                       np.concatenate([m.totals for m in matches])[order], ranks, values[:, order], other, boundary,
                       tuple(templates), tids, tuple(keys), np.stack([starts[rows], eff[rows]], axis=1))


# -- driving a whole input -------------------------------------------------------------------

CHUNK_SIZE = 16 << 20


def _same(data: bytes) -> bytes:
    return data


def _work(path: str, offset: int, length: int, tpl: Template, line_bytes: int | None = None) -> ChunkResult:
    data, cut = cut_long_lines(read_range(path, offset, length), line_bytes)
    res = parse_chunk(data, tpl)
    res.cut_lines = cut
    return res


class Replay:
    """Feeds chunk results to a sink in line order, exactly as the line reader would have.

    Template rows are emitted in bulk (``add_many``) and lazily: only before an other line that
    may add to the same metrics, or at the end of the chunk, so per-metric order is kept. What a
    row does to the reader's state (the loss keys seen, ``train_iters``) and the ``missing_metric``
    events of rows without a loss seen before are played eagerly, row by row where there is an
    event, before each other line. The other lines go through the reader's ``feed`` and the
    signature scanner one by one, with ``sink.last_step`` set as the line reader would have left it
    (events default to it)."""

    def __init__(self, reader: LineReader, tpl: Template, sink: Sink, scanner: SignatureScanner, state: dict) -> None:
        self.reader, self.tpl, self.sink, self.scanner, self.state = reader, tpl, sink, scanner, state
        self.iter_re = ITER_RE

    def chunk(self, res: ChunkResult, base: int, data: Callable[[], bytes]) -> None:
        """Replay one chunk; ``data`` gives the chunk's bytes (read only for the text of events)."""
        rows, steps, sink = res.rows, res.steps, self.sink
        play = _Play(self, res, base, data)
        last_other = -1
        after_other: int | None = None
        for j, raw in res.other:
            q = int(np.searchsorted(rows, j))
            if q > 0 and rows[q - 1] > last_other:
                play.walk(q)
                sink.last_step = int(steps[q - 1])
            lines = split_line(base + j + 1, raw)
            if any(self.iter_re.search(ln.text) for ln in lines):
                play.emit(q)
            for ln in lines:
                self.reader.feed(ln, sink, self.state)
                for ev in self.scanner.feed(ln):
                    sink.event(ev)
            last_other, after_other = j, sink.last_step
            nxt = res.boundary.get(j + 1)
            if nxt is not None:  # the scanner sees the line that ends a block of other lines
                play.walk(q + 1)
                sink.last_step = int(steps[q])
                for ln in split_line(base + j + 2, nxt):
                    for ev in self.scanner.feed(ln):
                        sink.event(ev)
        if rows.shape[0]:
            play.walk(rows.shape[0])
            play.emit(rows.shape[0])
            if last_other > rows[-1]:
                sink.last_step = after_other


class _Play:
    """One chunk's rows as the line reader would have read them. ``walk(q)`` plays rows ``< q``
    on the state and the events; ``emit(q)`` hands their values to the sink. For each walked run
    of rows it keeps which loss keys each template's rows miss (the line reader adds NaN for those)."""

    def __init__(self, replay: Replay, res: ChunkResult, base: int, data: Callable[[], bytes]) -> None:
        self.r, self.res, self.base, self.data = replay, res, base, data
        self.walked = 0
        self.emitted = 0
        self.missing: list[tuple[int, int, dict[int, list[str]]]] = []  # (lo, hi, template -> missing keys)
        self.text: str | None = None

    def walk(self, q: int) -> None:
        lo = self.walked
        if q <= lo:
            return
        res, state = self.res, self.r.state
        if "train_iters" not in state:
            state["train_iters"] = int(res.totals[lo])
            self.r.sink.meta("train_iters", int(res.totals[lo]))
        losses: set[str] = state["loss_keys"]
        tids = res.tids[lo:q]
        present = [int(t) for t in np.unique(tids)]
        while lo < q:
            # The state changes at the first row of a template with a loss key not seen yet.
            cut, adds = q, None
            for t in present:
                if res.templates[t].loss_keys - losses:
                    hit = np.flatnonzero(res.tids[lo:q] == t)
                    if hit.shape[0] and lo + int(hit[0]) < cut:
                        cut, adds = lo + int(hit[0]), t
            if cut > lo:
                self._span(lo, cut, present, losses)
            if adds is None:
                break
            # Rows of the adding template miss what they would have missed before it (its own
            # losses are its keys), so the span may start at the adding row itself.
            losses.update(res.templates[adds].loss_keys)
            lo = cut
        self.walked = q

    def _span(self, lo: int, hi: int, present: list[int], losses: set[str]) -> None:
        res, sink = self.res, self.r.sink
        missing = {t: sorted(k for k in losses if k not in res.templates[t].keys) for t in present}
        self.missing.append((lo, hi, missing))
        loud = [t for t in present if missing[t] or not res.templates[t].loss_keys]
        if not loud:
            return
        tids = res.tids[lo:hi]
        idx = np.flatnonzero(np.isin(tids, loud)) + lo
        if not idx.shape[0]:
            return
        src = sink.source.path if sink.source else ""
        said = {t: ", ".join(missing[t]) if missing[t] else "loss" for t in loud}
        what = {t: missing[t] or ["loss"] for t in loud}
        line0 = self.base + 1
        ranks = res.ranks

        def build() -> Iterator[Event]:
            if self.text is None:
                self.text = self.data().decode("ascii", "replace")  # rows are ASCII: offsets are characters
            text = self.text
            for i, t, step, (a, b) in zip(idx.tolist(), res.tids[idx].tolist(), res.steps[idx].tolist(),
                                          res.spans[idx].tolist()):
                rank = None if ranks is None or ranks[i] < 0 else int(ranks[i])
                yield Event(EventKind.MISSING_METRIC,
                            f"iteration {step}: {said[t]} absent from the line (Megatron omits a NaN/Inf loss)",
                            src, line0 + int(res.rows[i]), text[a:b], step=step, rank=rank,
                            data={"metrics": list(what[t]), "assumed_nan": True})

        sink.events(EventKind.MISSING_METRIC, int(idx.shape[0]), build)

    def emit(self, upto: int) -> None:
        lo = self.emitted
        if upto <= lo:
            return
        res, sink = self.res, self.r.sink
        sl = slice(lo, upto)
        tids, st, ln = res.tids[sl], res.steps[sl], res.rows[sl] + self.base + 1
        n = upto - lo
        nan_of: dict[str, NDArray[np.bool_]] = {}
        for a, b, missing in self.missing:
            a, b = max(a, lo), min(b, upto)
            if a >= b:
                continue
            for t, keys in missing.items():
                if keys:
                    sel = np.zeros(n, dtype=bool)
                    sel[a - lo:b - lo] = tids[a - lo:b - lo] == t
                    for key in keys:
                        nan_of[key] = nan_of[key] | sel if key in nan_of else sel
        self.missing = [(a, b, m) for a, b, m in self.missing if b > upto]
        has = np.array([[key in t.keys for key in res.keys] for t in res.templates], dtype=bool)
        for i, key in enumerate(res.keys + tuple(k for k in nan_of if k not in res.keys)):
            take = has[tids, i] if i < len(res.keys) else np.zeros(n, dtype=bool)
            vals = res.values[i, sl] if i < len(res.keys) else np.full(n, np.nan)
            nan = nan_of.get(key)
            if nan is not None:
                take = take | nan
                vals = np.where(nan, np.nan, vals)
            if not take.any():
                continue
            if res.ranks is None:
                sink.add_many(key, st[take], vals[take], ln[take])
                continue
            # Ranks in the order they first write this metric (the first one owns the plain
            # name); rows whose ranks share a series stay in line order.
            rk = res.ranks[sl][take]
            uniq, first = np.unique(rk, return_index=True)
            names: dict[str, list[int]] = {}
            for r in uniq[np.argsort(first)].tolist():
                names.setdefault(sink.metric_for(key, None if r < 0 else r), []).append(r)
            for name, rs in names.items():
                sel = np.isin(rk, rs)
                sink.add_many(name, st[take][sel], vals[take][sel], ln[take][sel])
        sink.last_step = int(st[-1])
        self.emitted = upto


def read_fast(reader: LineReader, tpl: Template, inp: InputFile, sink: Sink, scanner: SignatureScanner,
              state: dict, chunk_size: int = CHUNK_SIZE, workers: int | None = None) -> None:
    replay = Replay(reader, tpl, sink, scanner, state)
    base = 0
    if inp.fs_path is not None and not inp.compressed:
        path = str(inp.fs_path)
        ranges = file_ranges(path, inp.size, chunk_size, inp.line_bytes)
        nproc = workers if workers is not None else min(2, usable_cpus())
        # Read from the file directly, not through inp.open(): long lines are cut here as the stream
        # would have cut them (inp.line_bytes), counted for the input's report.
        limit, cut = inp.line_bytes, 0
        if nproc > 1 and inp.size >= POOL_MIN_SIZE:
            results = _pooled(path, ranges, tpl, nproc, limit)
        else:
            results = ((off, ln, _work(path, off, ln, tpl, limit)) for off, ln in ranges)
        for off, length, res in results:
            cut += res.cut_lines
            replay.chunk(res, base, functools.partial(reread_range, path, off, length, limit, res.n_lines, inp.display))
            base += res.n_lines
        inp.cut_lines = max(inp.cut_lines, cut)
        return
    with inp.open() as stream:
        for data in stream_chunks(stream, chunk_size):
            n = count_lines(data)
            replay.chunk(parse_chunk(data, tpl), base, functools.partial(_same, data))
            base += n


def _pooled(path: str, ranges: Iterator[tuple[int, int]], tpl: Template, nproc: int, line_bytes: int | None = None
            ) -> Iterator[tuple[int, int, ChunkResult]]:
    """Parse ranges in worker processes, in order, with a bounded number in flight."""

    def make(_: int) -> Callable[[tuple[int, int]], ChunkResult]:
        return lambda r: _work(path, r[0], r[1], tpl, line_bytes)

    with OrderedWorkers(make, nproc) as workers:
        for (off, length), res in in_order(workers, ranges):
            yield off, length, res
