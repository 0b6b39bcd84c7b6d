"""TA208 finds the first repeat of a window of distinct values by sorting the windows; the answer is
the one a plain scan over the windows gives (the reference below), on any series."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainaudit.model import Run, Series
from trainaudit.rules.base import Context
from trainaudit.rules.optimisation import RepeatingLoss


def _scan(x: list[float], k: int) -> tuple[int, int] | None:
    first: dict[tuple[float, ...], int] = {}
    for i in range(len(x) - k + 1):
        key = tuple(x[i:i + k])
        if len(set(key)) < k:
            continue
        j = first.setdefault(key, i)
        if j != i and i >= j + k:
            return j, i
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.0, 4.0, 2.5]), min_size=8, max_size=60))
def test_the_first_repeat_is_the_one_a_scan_finds(values: list[float]) -> None:
    n = len(values)
    s = Series("loss", np.arange(1, n + 1, dtype=np.int64), np.array(values), np.arange(1, n + 1, dtype=np.int64),
               np.zeros(n, dtype=np.int16))
    hits = RepeatingLoss().check(Context.of(Run(series={"loss": s})))
    want = _scan(values, RepeatingLoss.Params().min_run)
    if want is None:
        assert hits == []
    else:
        j, i = want
        assert len(hits) == 1 and hits[0].first_bad_step == j + 1
        assert f"from step {i + 1} (" in hits[0].message


def _unique_firsts(rows: np.ndarray) -> np.ndarray:
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.ravel()]


def test_first_equal_row_is_the_first_occurrence_of_the_same_bytes(monkeypatch) -> None:
    from trainaudit.series import stats

    rng = np.random.default_rng(3)
    for m, k, distinct in ((0, 4, 3), (1, 4, 3), (50, 1, 3), (2000, 4, 3), (5000, 3, 50), (3000, 4, 10 ** 9)):
        rows = np.ascontiguousarray(rng.integers(0, distinct, (m, k)) * 0.25 + 0.0)
        want = _unique_firsts(rows) if m else np.empty(0, dtype=np.intp)
        assert np.array_equal(stats.first_equal_row(rows), want)
    # every hash colliding (rows that differ share one hash): the exact sort of the keys answers
    rows = np.ascontiguousarray(rng.integers(0, 3, (500, 4)) + 0.0)
    monkeypatch.setattr(stats, "_row_hash", lambda bits: bits[:, 0] % np.uint64(2))
    assert np.array_equal(stats.first_equal_row(rows), _unique_firsts(rows))
