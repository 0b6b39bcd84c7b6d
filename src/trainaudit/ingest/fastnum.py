"""Vectorised decimal parsing for columns of numbers printed in one format (log fast paths).

A log prints a metric the same way on every line (``{:.6E}``, ``{:.3f}``, ``{:12d}``), so the
bytes of one column share a *layout*: a right-aligned integer part of variable width and a fixed
suffix (``.`` + fraction digits, ``E`` + sign + exponent digits). For rows that fit the layout the
value is computed with Clinger's fast path: an integer mantissa of at most 15 digits (exact in a
double) times or divided by an exact power of ten (10**0..10**22) is one correctly rounded IEEE
operation, hence bitwise equal to Python's ``float()`` of the same text. Rows that do not fit
(``nan``, long mantissas, another shape) are reported as not parsed; callers use ``float()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

P10 = np.array([10.0**k for k in range(23)])  # all exact in binary64
MAX_DIGITS = 15
WIDTH = 24  # widest value region (padding included) parsed vectorised
PAD = 64  # bytes of blank padding around a chunk buffer, so windows never leave it

NUM_RE = re.compile(r"^([-+]?)(\d+)(?:(\.)(\d*))?(?:([eE])([-+]?)(\d+))?$")


@dataclass(frozen=True, slots=True)
class Layout:
    """Shape of a column's numbers, right-aligned: ``[sign] int . frac E sign exp`` + ``trail`` spaces."""

    frac: int  # digits after '.', -1 when there is no '.'
    exp: bool
    exp_sign: bool
    exp_digits: int
    trail: int

    @classmethod
    def of(cls, region: str) -> Layout | None:
        """Layout of one value region (the text between ``key: `` and the next ``|``)."""
        body = region.rstrip(" ")
        m = NUM_RE.match(body.lstrip(" "))
        if m is None:
            return None
        frac = len(m.group(4)) if m.group(3) else -1
        return cls(frac, bool(m.group(5)), bool(m.group(6)), len(m.group(7) or ""), len(region) - len(body))

    @property
    def suffix(self) -> int:
        n = 1 + self.frac if self.frac >= 0 else 0
        if self.exp:
            n += 1 + int(self.exp_sign) + self.exp_digits
        return n


def padded(data: bytes) -> NDArray[np.uint8]:
    """``data`` as uint8 with ``PAD`` spaces on both sides (index ``i`` of data is ``i + PAD``)."""
    buf = np.full(len(data) + 2 * PAD, 32, dtype=np.uint8)
    buf[PAD:PAD + len(data)] = np.frombuffer(data, dtype=np.uint8)
    return buf


def parse_regions(buf: NDArray[np.uint8], starts: NDArray[np.int64], ends: NDArray[np.int64],
                  layout: Layout | None) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Parse the regions ``buf[starts[i]:ends[i]]`` (indices into the padded buffer), each
    ``spaces* number spaces*`` in ``layout``. Returns (values, ok); where ``ok`` is False the value
    is undefined and the caller must parse the text itself.

    Works a column at a time (byte ``j`` counted from the right-aligned window start, all rows at
    once): numpy is fast on long vectors and slow on many short rows."""
    n = int(starts.shape[0])
    if layout is None or n == 0:
        return np.zeros(n), np.zeros(n, dtype=bool)
    lens = ends - starts
    w = int(min(WIDTH, lens.max()))
    ok = (lens >= 1) & (lens <= w)
    t, sfx = layout.trail, layout.suffix
    wi = w - t - sfx  # integer part occupies window columns [0, wi)
    if wi < 1:
        return np.zeros(n), np.zeros(n, dtype=bool)
    base = ends - w
    u48 = np.uint8(48)

    def col(j: int) -> NDArray[np.uint8]:
        return buf[base + j]

    for j in range(w - t, w):
        ok &= col(j) == 32
    frac = max(layout.frac, 0)
    mant = np.zeros(n)
    pos = wi
    if layout.frac >= 0:
        ok &= col(pos) == 46
        for q in range(layout.frac):
            d = col(pos + 1 + q) - u48
            ok &= d < 10
            mant += d * P10[frac - 1 - q]
        pos += 1 + layout.frac
    exp = np.zeros(n, dtype=np.int64)
    if layout.exp:
        ok &= (col(pos) | 32) == 101
        pos += 1
        eneg = None
        if layout.exp_sign:
            c = col(pos)
            ok &= (c == 43) | (c == 45)
            eneg = c == 45
            pos += 1
        for j in range(pos, pos + layout.exp_digits):
            d = col(j) - u48
            ok &= d < 10
            exp = exp * 10 + d
        if eneg is not None:
            exp = np.where(eneg, -exp, exp)
    # Integer part, right to left: a run of digits (at least one), then at most one sign, then
    # only spaces up to the region start.
    run = np.ones(n, dtype=bool)
    k = np.zeros(n, dtype=np.int64)
    neg = np.zeros(n, dtype=bool)
    signed = np.zeros(n, dtype=bool)
    for j in range(wi - 1, -1, -1):
        c = col(j)
        inside = lens >= w - j
        d = c - u48
        isd = run & (d < 10) & inside
        if wi - 1 - j < MAX_DIGITS:
            mant += np.where(isd, d, u48 - u48) * P10[frac + wi - 1 - j]
        else:
            ok &= ~isd
        k += isd
        first_stop = run & ~isd  # the byte just left of the digits
        is_sign = first_stop & inside & ((c == 45) | (c == 43))
        neg |= is_sign & (c == 45)
        signed |= is_sign
        ok &= ~(~run & inside & (c != 32))  # further left: spaces only
        ok &= ~(first_stop & inside & ~is_sign & (c != 32))
        run &= isd
    ok &= k >= 1
    ok &= k + frac <= MAX_DIGITS
    e10 = exp - frac
    ok &= np.abs(e10) <= 22
    e = np.clip(e10, -22, 22)
    vals = np.where(e10 >= 0, mant * P10[np.maximum(e, 0)], mant / P10[np.maximum(-e, 0)])
    return np.where(neg, -vals, vals), ok


# a number as the text tokenizer cuts it: sign, integer digits (thousands commas), fraction, exponent
_FIXED_RE = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?)(\d+))?")


class FixedNumbers:
    """Numbers whose digits stand at the same offsets on every line (lines of one shape: the same
    text but for the digits), for a matrix of those lines (a row a line, a column a byte). A
    number's mantissa is a product of its digit columns with powers of ten (one matrix product for
    all numbers, exact below 10**15), then one multiplication or division by an exact power of
    ten, as :func:`parse_regions` does. A number of another spelling (thousands commas, more than
    :data:`MAX_DIGITS` digits), or whose exponent passes 10**22, is reported as not parsed."""

    def __init__(self, text: str, spans: list[tuple[int, int]]) -> None:
        fast: list[tuple[int, list[int], int, list[int], float, int]] = []
        cols: set[int] = set()
        for j, (a, b) in enumerate(spans):
            m = _FIXED_RE.fullmatch(text, a, b)
            if m is None or not (m.group(2) or m.group(3)):
                continue
            mant = [k for k in range(a, m.end(3) if m.group(3) is not None else m.end(2)) if text[k].isdigit()]
            if len(mant) > MAX_DIGITS:
                continue
            exp = list(range(m.start(5), m.end(5))) if m.group(5) else []
            fast.append((j, mant, len(m.group(3) or ""), exp, -1.0 if m.group(1) == "-" else 1.0,
                         -1 if m.group(4) == "-" else 1))
            cols.update(mant + exp)
        self.n = len(spans)
        self.cols = np.array(sorted(cols), dtype=np.int64)
        where = {c: i for i, c in enumerate(self.cols.tolist())}
        self.which = np.array([f[0] for f in fast], dtype=np.int64)
        self.wm = np.zeros((len(where), len(fast)))  # digit column -> power of ten in the mantissa
        self.we = np.zeros((len(where), len(fast)))  # ... in the exponent
        for q, (_, mant, _, exp, _, _) in enumerate(fast):
            for k, c in enumerate(reversed(mant)):
                self.wm[where[c], q] = 10.0 ** k
            for k, c in enumerate(reversed(exp)):
                self.we[where[c], q] = 10.0 ** k
        self.frac = np.array([f[2] for f in fast], dtype=np.int64)
        self.sign = np.array([f[4] for f in fast])
        self.esign = np.array([f[5] for f in fast], dtype=np.int64)
        self.with_exp = np.array([q for q, f in enumerate(fast) if f[3]], dtype=np.int64)  # (most have none)

    def read(self, mat: NDArray[np.uint8]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """(values, ok), a column a number; where ``ok`` is False the caller parses the text."""
        return self._read(mat[:, self.cols])

    def read_at(self, buf: NDArray[np.uint8], starts: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """As :meth:`read`, for the lines of ``buf`` that begin at ``starts``: only the digit
        columns are taken from the buffer, not the whole lines."""
        if not starts.shape[0]:
            return self._read(np.zeros((0, self.cols.shape[0]), dtype=np.uint8))
        # whole rows first (a copy of each line's bytes), then the columns: faster than one gather
        # of every (line, column) byte
        width = int(self.cols[-1]) + 1 if self.cols.shape[0] else 1
        return self._read(sliding_window_view(buf, width)[starts][:, self.cols])

    def _read(self, cols: NDArray[np.uint8]) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        n = cols.shape[0]
        vals = np.zeros((n, self.n))
        ok = np.zeros((n, self.n), dtype=bool)
        if self.which.shape[0]:
            d = cols.astype(np.float64) - 48.0
            mant = d @ self.wm
            e10 = -self.frac  # the same on every line for a number without an exponent (most)
            if self.with_exp.shape[0]:
                e10 = np.repeat(e10[None, :], d.shape[0], axis=0)
                e10[:, self.with_exp] += (d @ self.we[:, self.with_exp]).astype(np.int64) * self.esign[self.with_exp]
            # one of the two powers is 1: a multiplication for e >= 0, else a division (exact both)
            up, down = np.minimum(np.maximum(e10, 0), 22), np.minimum(np.maximum(-e10, 0), 22)
            vals[:, self.which] = mant * P10[up] / P10[down] * self.sign
            ok[:, self.which] = np.abs(e10) <= 22
        return vals, ok
