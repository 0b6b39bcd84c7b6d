"""Robust statistics over metric series, vectorized with numpy and bounded in memory.

Everything here works on plain float arrays (finite values only unless said otherwise), so the
same code serves a 20-epoch Keras log and a 1M-step Megatron run. Windows are in logged points,
not steps: logging intervals differ between frameworks, the number of points seen is what
makes a median trustworthy.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation
_CHUNK = 1 << 16  # rows per chunk of a sliding window: bounds memory at ~CHUNK * window floats


def mad(x: FloatArray) -> float:
    """Median absolute deviation (unscaled)."""
    if x.size == 0:
        return float("nan")
    return float(np.median(np.abs(x - np.median(x))))


def _row_median(block: FloatArray) -> FloatArray:
    """Median of each row of a finite 2-D array, equal to ``np.median(block, axis=1)``.

    A partition at the middle rank(s) alone: ``np.median`` along an axis spends most of its time
    around the selection (NaN checks, a generic mean of the middle pair), 6x slower on 2000
    windows of 51 points, and the rules recompute these windows at every online evaluation."""
    w = block.shape[1]
    k = w // 2
    if w % 2:
        return np.partition(block, k, axis=1)[:, k]
    part = np.partition(block, (k - 1, k), axis=1)
    return 0.5 * (part[:, k - 1] + part[:, k])


def _window_stat(x: FloatArray, window: int, fn: str, starts: NDArray[np.intp] | None = None) -> FloatArray:
    """``fn`` ("median" or "mad") of each full window ``x[i:i+window]``; length n-window+1, or of
    the windows starting at ``starts`` only (the same values, one per start)."""
    n = x.size - window + 1
    out = np.empty(max(n, 0) if starts is None else starts.size, dtype=np.float64)
    if n <= 0 or out.size == 0:
        return out
    # a NaN makes its windows' median NaN, which only np.median does
    median = _row_median if np.isfinite(x).all() else functools.partial(np.median, axis=1)
    view = sliding_window_view(x, window)
    if starts is not None:
        view, n = view[starts], starts.size  # a copy of those rows alone
    for lo in range(0, n, _CHUNK):
        block = view[lo:lo + _CHUNK]
        med = median(block)
        if fn == "median":
            out[lo:lo + block.shape[0]] = med
        else:
            out[lo:lo + block.shape[0]] = median(np.abs(block - med[:, None]))
    return out


def sliding_max(x: FloatArray, window: int) -> FloatArray:
    """Maximum of each full window ``x[i:i+window]`` (length n-window+1), equal to
    ``sliding_window_view(x, window).max(axis=1)`` in O(n log window): maxima of power-of-two
    windows by doubling, then two overlapping ones per window (18x faster at 2000 x 100)."""
    m, p = x, 1
    while 2 * p <= window:
        m = np.maximum(m[:-p], m[p:])
        p *= 2
    n = x.size - window + 1
    return np.maximum(m[:n], m[window - p:window - p + n])


def trailing_median_mad(x: FloatArray, window: int) -> tuple[FloatArray, FloatArray]:
    """Median and MAD of the ``window`` points *before* each point (NaN where fewer exist).

    Trailing, not centred: a spike must be judged against what came before it, or the spike
    itself and its aftermath would inflate its own baseline.
    """
    n = x.size
    med = np.full(n, np.nan)
    dev = np.full(n, np.nan)
    if n <= window:
        return med, dev
    m = _window_stat(x[:-1], window, "median")
    d = _window_stat(x[:-1], window, "mad")
    med[window:] = m
    dev[window:] = d
    return med, dev


def trailing_median_mad_at(x: FloatArray, window: int, at: NDArray[np.intp]) -> tuple[FloatArray, FloatArray]:
    """``trailing_median_mad(x, window)`` at the indices ``at`` alone (each at least ``window``):
    the same values, without computing the windows of the other points."""
    if at.size and (int(at.min()) < window or int(at.max()) >= x.size):
        raise ValueError("trailing windows need window <= index < len(x)")
    starts = at - window
    return _window_stat(x[:-1], window, "median", starts), _window_stat(x[:-1], window, "mad", starts)


def trailing_median_mad_upto(x: FloatArray, window: int, at: NDArray[np.intp]) -> tuple[FloatArray, FloatArray]:
    """Median and MAD of the ``window`` points before each index of ``at`` (each at least 1), or of all the
    points before one with fewer than ``window`` before it: the start of a log judged on what it has."""
    med = np.full(at.size, np.nan)
    dev = np.full(at.size, np.nan)
    full = at >= window
    med[full], dev[full] = trailing_median_mad_at(x, window, at[full])
    for k in np.flatnonzero(~full):
        h = x[:int(at[k])]
        med[k], dev[k] = float(np.median(h)), mad(h)
    return med, dev


_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, odd: multiplying by it is a bijection mod 2**64


def _row_hash(bits: NDArray[np.uint64]) -> NDArray[np.uint64]:
    h = np.zeros(bits.shape[0], dtype=np.uint64)
    for c in range(bits.shape[1]):
        h ^= bits[:, c]
        h *= _MIX  # wraps mod 2**64
        h ^= h >> np.uint64(31)  # the high bits down, so the next product mixes them too
    return h


def first_equal_row(rows: FloatArray) -> NDArray[np.intp]:
    """For each row of a C-contiguous 2-D float64 array, the index of the first row with the same
    bytes (``np.unique(rows as void keys, return_index=True, return_inverse=True)`` gives the same).
    Rows are grouped by a 64-bit hash of their bytes and a stable sort (4x faster than sorting
    void keys); a group that turns out to hold two different rows (a hash collision) sends the
    whole array to the exact sort of the keys."""
    bits = rows.view(np.uint64)
    m = bits.shape[0]
    if m == 0:
        return np.empty(0, dtype=np.intp)
    h = _row_hash(bits)
    order = np.argsort(h, kind="stable")  # stable: a group's first member is its smallest index
    sh = h[order]
    start = np.empty(m, dtype=bool)
    start[0] = True
    np.not_equal(sh[1:], sh[:-1], out=start[1:])
    first = np.empty(m, dtype=np.intp)
    first[order] = order[start][np.cumsum(start) - 1]
    if np.array_equal(bits, bits[first]):
        return first
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, idx, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return np.asarray(idx[inverse.ravel()], dtype=np.intp)


def rolling_median(x: FloatArray, window: int) -> FloatArray:
    """Centred rolling median, same length as ``x`` (edges use the nearest full window)."""
    n = x.size
    if n == 0 or window <= 1:
        return x.astype(np.float64, copy=True)
    window = min(window, n)
    core = _window_stat(x, window, "median")
    left = (window - 1) // 2
    out = np.empty(n, dtype=np.float64)
    out[left:left + core.size] = core
    out[:left] = core[0]
    out[left + core.size:] = core[-1]
    return out


def robust_z(x: FloatArray, med: FloatArray, dev: FloatArray, rel_floor: float = 1e-3) -> FloatArray:
    """(x - median) / sigma with sigma = 1.4826 * MAD, floored at ``rel_floor * |median|`` so a
    perfectly flat baseline (MAD 0) does not turn every tiny wiggle into an infinite z."""
    sigma = np.maximum(MAD_TO_SIGMA * dev, rel_floor * np.abs(med))
    sigma = np.where(sigma > 0, sigma, np.finfo(float).tiny)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return (x - med) / sigma


def downsample(steps: NDArray[np.int64], x: FloatArray, max_points: int = 4000) -> tuple[NDArray[np.int64], FloatArray]:
    """Block medians (and each block's first step) so trend rules cost O(n) once, then O(max_points)."""
    n = x.size
    if n <= max_points:
        return steps, x
    size = int(np.ceil(n / max_points))
    m = n // size
    blocks = x[: m * size].reshape(m, size)
    meds = np.median(blocks, axis=1)
    st = steps[: m * size: size]
    if m * size < n:
        meds = np.append(meds, np.median(x[m * size:]))
        st = np.append(st, steps[m * size])
    return st, meds


def trend_slope(t: FloatArray, y: FloatArray) -> float:
    """Least-squares slope of y over t (units of y per unit of t); NaN with fewer than 3 points."""
    if t.size < 3:
        return float("nan")
    tc = t - t.mean()
    den = float(np.dot(tc, tc))
    if den == 0:
        return float("nan")
    return float(np.dot(tc, y - y.mean()) / den)


def change_point(x: FloatArray, min_seg: int = 5) -> tuple[int, float]:
    """Best single split of ``x`` into two segments with different means (least squares, O(n)).

    Returns (index of the first point of the second segment, ratio mean(after)/mean(before)).
    Callers pass a robust transform (log of step times, block medians) so outliers do not drive
    the split. (-1, nan) when the series is too short.
    """
    n = x.size
    if n < 2 * min_seg:
        return -1, float("nan")
    c = np.cumsum(x)
    c2 = np.cumsum(x * x)
    k = np.arange(min_seg, n - min_seg + 1)
    left_n = k.astype(np.float64)
    right_n = n - left_n
    left_sum = c[k - 1]
    right_sum = c[-1] - left_sum
    # within-segment sum of squares; minimise it
    sse = (c2[k - 1] - left_sum ** 2 / left_n) + ((c2[-1] - c2[k - 1]) - right_sum ** 2 / right_n)
    best = int(k[int(np.argmin(sse))])
    before = float(np.mean(x[:best]))
    after = float(np.mean(x[best:]))
    return best, (after / before) if before != 0 else float("inf")


def first_sustained(mask: NDArray[np.bool_], min_frac: float = 0.8, min_len: int = 3) -> int:
    """Index of the first True from which at least ``min_frac`` of the rest is True (and at
    least ``min_len`` points remain); -1 if none. "Rises and stays up", not "touches once"."""
    n = mask.size
    if n == 0:
        return -1
    suffix_true = np.cumsum(mask[::-1])[::-1].astype(np.float64)  # Trues in mask[i:]
    remain = np.arange(n, 0, -1, dtype=np.float64)
    ok = mask & (suffix_true / remain >= min_frac) & (remain >= min_len)
    idx = np.flatnonzero(ok)
    return int(idx[0]) if idx.size else -1


def kendall_tau(v: FloatArray) -> float:
    """Kendall's tau of ``v`` against its index (tau-a, ties count 0): +1 when every later value is
    above every earlier one, near 0 for noise. The sum of the signs of every later-minus-earlier
    difference, counted in O(n log^2 n) time and O(n) memory (the pairs of a validation curve of
    20 000 points would take gigabytes): the discordant pairs are the inversions of the stable
    sort order, the concordant ones the other pairs of unequal values. NaN where a difference is
    (a NaN, or the same infinity twice), as the sign of that difference makes the sum."""
    n = v.size
    if n < 2:
        return 0.0
    if np.isnan(v).any() or np.count_nonzero(v == np.inf) > 1 or np.count_nonzero(v == -np.inf) > 1:
        return float("nan")
    order = np.argsort(v, kind="stable")
    _, tied = np.unique(v, return_counts=True)  # (-0.0 and 0.0 are one value, as their difference is 0)
    unequal = n * (n - 1) // 2 - int((tied * (tied - 1) // 2).sum())
    discordant = _inversions(order)
    return float(unequal - 2 * discordant) / (n * (n - 1) / 2)


def _inversions(p: NDArray[np.int64]) -> int:
    """The pairs ``a < b`` with ``p[a] > p[b]`` of a permutation of ``0..n-1``, by a bottom-up merge
    sort: at each width, each element of a right half counts the elements of its left half above it."""
    n = p.shape[0]
    a = p.astype(np.int64)
    idx = np.arange(n)
    count = 0
    w = 1
    while w < n:
        block = idx // (2 * w)
        key = block * n + a  # a is sorted within each block of w: the keys of the left halves are sorted
        right = idx % (2 * w) >= w
        left_keys = key[~right]
        below = np.searchsorted(left_keys, key[right], side="right")
        ends = np.searchsorted(left_keys, (block[right] + 1) * n, side="left")
        count += int((ends - below).sum())
        a = np.sort(key) - block * n
        w *= 2
    return count


def monotone_tail(v: FloatArray, sign: int) -> int:
    """How many of the last consecutive differences of ``v`` have ``sign`` (+1 rising, -1 falling)."""
    d = np.sign(np.diff(v)) == sign
    return d.size if bool(d.all()) else int(np.argmin(d[::-1]))
