"""The charts' thinning (``chartdata._thin``) keeps exactly the points a bucket-by-bucket pass keeps:
first and last, each bucket's first minimum and first maximum among its finite values, every
non-finite point."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from trainaudit.render.chartdata import _thin


def _thin_by_bucket(values: np.ndarray, max_points: int) -> np.ndarray:
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    edges = np.linspace(0, n, max(1, max_points // 2) + 1).astype(np.int64)
    finite = np.where(np.isfinite(values), values, np.nan)
    keep = [np.array([0, n - 1]), np.flatnonzero(~np.isfinite(values))]
    for a, b in itertools.pairwise(edges):
        seg = finite[a:b]
        if b <= a or np.all(np.isnan(seg)):
            continue
        keep.append(np.array([a + int(np.nanargmin(seg)), a + int(np.nanargmax(seg))]))
    return np.unique(np.concatenate(keep))


def _series(rng: np.random.Generator, n: int) -> np.ndarray:
    kind = rng.integers(0, 4)
    if kind == 0:
        v = rng.normal(size=n)
    elif kind == 1:  # few distinct values: ties everywhere, signed zeros
        v = rng.choice(np.array([0.0, -0.0, 1.0, 2.0]), size=n)
    elif kind == 2:  # a run that turns NaN/Inf, and whole buckets of it
        v = np.cumsum(rng.normal(size=n))
        v[rng.integers(0, n):] = rng.choice(np.array([np.nan, np.inf, -np.inf]))
    else:
        v = rng.normal(size=n) * 10.0 ** rng.integers(-300, 300, size=n)
    holes = rng.random(n) < rng.choice(np.array([0.0, 0.01, 0.5]))
    v[holes] = rng.choice(np.array([np.nan, np.inf, -np.inf]), size=int(holes.sum()))
    return v


@pytest.mark.parametrize("seed", range(40))
def test_thin_keeps_the_points_of_the_bucket_pass(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for max_points in (2, 3, 10, 101, 4000):
        n = int(rng.integers(1, 3 * max_points + 50))
        v = _series(rng, n)
        got = _thin(np.arange(n), v, max_points)
        assert np.array_equal(got, _thin_by_bucket(v, max_points)), (seed, max_points, n)


def test_thin_keeps_a_spike_and_every_nonfinite_point() -> None:
    v = np.zeros(100_000)
    v[12_345] = 50.0
    v[70_001] = np.nan
    v[90_000:] = np.inf
    got = set(_thin(np.arange(v.size), v, 4000).tolist())
    assert {0, 12_345, 70_001, 99_999} <= got and set(range(90_000, 100_000)) <= got
    assert len(got) < 4000 + 10_001


def test_nonfinite_spellings_are_what_masking_leaves_them() -> None:
    """json_clean passes these strings through unmasked: masking would not change them."""
    from trainaudit.redact import NONFINITE_TEXTS, mask_secrets

    assert NONFINITE_TEXTS and all(mask_secrets(t) == t for t in NONFINITE_TEXTS)


@pytest.mark.parametrize("seed", range(20))
def test_a_curves_numbers_are_spelled_as_one_by_one(seed: int) -> None:
    """``_nums`` (a curve's values at once) gives what ``_num`` gives value by value: the same
    floats bit for bit (signed zeros, huge and tiny values) and the same non-finite spellings."""
    from trainaudit.render.chartdata import _num, _nums

    rng = np.random.default_rng(seed)
    v = _series(rng, int(rng.integers(0, 3000)))
    got, want = _nums(v), [_num(float(x)) for x in v]
    assert [repr(x) for x in got] == [repr(x) for x in want]
    assert [type(x) for x in got] == [type(x) for x in want]


def test_json_clean_still_masks_a_list_that_is_not_only_numbers() -> None:
    """Lists of numbers and non-finite spellings pass whole; any other string in a list, a key or a
    nested value is masked as before."""
    from trainaudit.redact import json_clean, mask_secrets

    secret = "token=ghp_" + "a1B2c3D4e5" * 4
    assert mask_secrets(secret) != secret
    numbers = [1, 2.5, "nan", "inf", "-inf", -0.0, 10**30]
    assert json_clean(numbers) == numbers and json_clean(numbers) is not numbers
    for value in ([1.0, "nan", secret], [secret], [True, "nan", secret], [[1.0, secret]], ({"k": secret},),
                  [1.0, "nan ", "x"]):
        assert json_clean(value) == [json_clean(x) for x in value]
    assert json_clean([1.0, "nan", secret])[2] == mask_secrets(secret)
