"""The points a plot draws and the quotes a report shows, computed in linear time, are those of the
plain expressions: ``np.unique`` of the evenly spread and the non-finite indices, and a quote that
``str.translate`` would change by removing its control characters."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainaudit.diagnosis.build import _plot_index, textual
from trainaudit.model import Series

_CONTROL = {c: None for c in range(32) if c != 9} | {0x7F: None}


def _unique_index(values: np.ndarray, max_points: int) -> np.ndarray:
    idx = np.arange(values.size)
    if idx.size > max_points:
        idx = np.unique(np.concatenate([np.linspace(0, values.size - 1, max_points).astype(np.int64),
                                        np.flatnonzero(~np.isfinite(values))]))
    return idx


def test_plot_index_is_the_unique_union() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(0, 5000))
        x = rng.standard_normal(n)
        x[rng.random(n) < rng.random()] = rng.choice([np.nan, np.inf, -np.inf])
        if n and rng.random() < 0.3:
            x[int(rng.integers(0, n)):] = np.nan  # a NaN tail
        s = Series("loss", np.arange(n, dtype=np.int64), x, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int16))
        max_points = int(rng.choice([1, 2, 7, 100, 2000, 20000]))
        got, want = _plot_index(s, max_points), _unique_index(x, max_points)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x300), max_size=40))
def test_a_quote_with_control_characters_is_not_shown(quote: str) -> None:
    want = None if "\ufffd" in quote or quote.translate(_CONTROL) != quote else quote
    assert textual(quote) == want
    assert textual(None) is None
