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
