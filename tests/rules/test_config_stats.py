"""Rule registry, pyproject configuration, and the robust statistics helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from trainaudit.errors import InputError
from trainaudit.rules import FAMILIES, RULE_CLASSES, active_rules, load_config, rule_class
from trainaudit.series.stats import (
    change_point,
    kendall_tau,
    first_sustained,
    robust_z,
    rolling_median,
    sliding_max,
    trailing_median_mad,
    trailing_median_mad_at,
    trailing_median_mad_upto,
)


def test_registry_ids_names_docs():
    ids = [c.id for c in RULE_CLASSES]
    assert len(set(ids)) == len(ids) and all(i[:3] in FAMILIES for i in ids)
    for c in RULE_CLASSES:
        assert c.name == c.name.lower() and " " not in c.name
        doc = c.__doc__ or ""
        for part in ("Why:", "Fix:", "Example:"):
            assert part in doc, f"{c.id} docstring lacks {part}"
    assert rule_class("loss-spike") is rule_class("ta102")


def test_pyproject_select_ignore_thresholds(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.trainaudit]\nselect = ["TA1", "TA401"]\nignore = ["TA103"]\n'
        '[tool.trainaudit.rules.TA102]\nz = 5\nrel = 0.25\n', encoding="utf-8")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    cfg = load_config(start=sub)  # found by walking up
    rules = {r.id: r for r in active_rules(cfg)}
    assert set(rules) == {"TA101", "TA102", "TA104", "TA401"}
    assert rules["TA102"].p.z == 5.0 and isinstance(rules["TA102"].p.z, float) and rules["TA102"].p.rel == 0.25


@pytest.mark.parametrize("text,what", [
    ('[tool.trainaudit.rules.TA999]\nz = 1\n', "unknown rule"),
    ('[tool.trainaudit.rules.TA102]\nzz = 1\n', "unknown threshold"),
    ('[tool.trainaudit]\nselect = 3\n', "must be a list"),
    ('[tool.trainaudit\n', "cannot read config"),
])
def test_bad_config_is_one_clear_error(tmp_path, text, what):
    p = tmp_path / "pyproject.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=what):
        load_config(p)


def test_trailing_median_excludes_the_point_itself():
    x = np.array([1, 1, 1, 1, 100, 1, 1], dtype=float)
    med, mad = trailing_median_mad(x, 3)
    assert np.isnan(med[:3]).all() and med[4] == 1.0 and mad[4] == 0.0 and med[5] == 1.0


@pytest.mark.parametrize("window", [1, 2, 3, 10, 51, 64, 100, 127, 129])
def test_window_statistics_equal_numpy_bit_for_bit(window):
    # the fast paths (partition at the middle ranks, doubling maxima) must give exactly what the
    # plain numpy expressions give, or online and offline diagnoses could disagree
    rng = np.random.default_rng(window)
    x = rng.standard_normal(1000) * rng.random(1000) ** 4
    view = sliding_window_view(x[:-1], window)
    med, dev = trailing_median_mad(x, window)
    ref = np.median(view, axis=1)
    assert np.array_equal(med[window:], ref)
    assert np.array_equal(dev[window:], np.median(np.abs(view - ref[:, None]), axis=1))
    assert np.array_equal(sliding_max(x, window), sliding_window_view(x, window).max(axis=1))
    odd = window | 1
    core = np.median(sliding_window_view(x, odd), axis=1)
    assert np.array_equal(rolling_median(x, odd)[(odd - 1) // 2:][:core.size], core)


def test_window_median_keeps_nan_propagation():
    x = np.arange(20.0)
    x[7] = np.nan
    med, _ = trailing_median_mad(x, 4)
    assert np.isnan(med[8:12]).all() and np.isfinite(med[12:]).all() and med[4] == 1.5


def test_rolling_median_and_change_point():
    x = np.r_[np.full(50, 1.0), np.full(50, 3.0)]
    assert np.array_equal(rolling_median(x, 5), x)
    k, ratio = change_point(x)
    assert k == 50 and ratio == 3.0


def test_first_sustained():
    m = np.array([0, 1, 0, 0, 1, 1, 1, 0, 1, 1], dtype=bool)
    assert first_sustained(m, 0.8) == 4
    assert first_sustained(np.zeros(5, dtype=bool)) == -1


def test_docs_rules_md_is_generated_from_the_registry():
    from shared_data import REPO

    from trainaudit.rules.docs import render

    assert (REPO / "docs" / "rules.md").read_text(encoding="utf-8") == render(), \
        "docs/rules.md is stale: run python -m trainaudit.rules.docs"


def test_kendall_tau_against_the_index() -> None:
    up = np.array([1.0, 2.0, 3.0, 5.0, 8.0])
    assert kendall_tau(up) == 1.0 and kendall_tau(up[::-1]) == -1.0 and kendall_tau(np.ones(5)) == 0.0
    # one pair out of order among 15: (14 - 1) / 15
    assert kendall_tau(np.array([1.1, 1.12, 1.15, 1.13, 1.22, 1.26])) == pytest.approx(13 / 15)
    assert kendall_tau(np.array([3.0])) == 0.0


def _spike_mask_everywhere(x, window, z_thr, rel_thr, min_history, max_window=100, min_excess=0.1, over_max=3.0,
                           early=False):
    # spike_mask computed at every point: the trailing median and MAD of each (of all the points before one
    # with fewer than w: at least 3), and each point's excursion above its own median
    n = x.size
    w = max(3, min(window, n // 3))
    mw = max(w, min(max_window, n // 3))
    med, dev = trailing_median_mad(x, w)
    for i in range(3, min(w, n)):
        med[i] = np.median(x[:i])
        dev[i] = np.median(np.abs(x[:i] - med[i]))
    z = robust_z(x, med, dev)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rel = (x - med) / np.abs(med)
    lo = max(3, min_history) if early else max(min_history, w)
    prev_max = np.full(n, np.inf)
    for i in range(lo if early else mw, n):
        prev_max[i] = np.max(x[max(0, i - mw):i])
    first = float(np.max(x[:min(5, n)]))
    came_down = np.maximum(first - med, 0.0)
    base = (z > z_thr) & (rel > rel_thr) & (x - med >= min_excess * came_down)
    base[:lo] = False
    if over_max >= 1:
        base &= x > prev_max
    mask = base & (x - med > over_max * (prev_max - med))
    excursion = x - med
    for i in np.flatnonzero(base & ~mask):
        e = excursion[max(3, i - mw):i]
        mask[i] = x[i] - med[i] > over_max * max(0.0, float(np.max(e)) if e.size else 0.0)
    return np.flatnonzero(mask), med, z


def _spiky(rng, n):
    kind = rng.integers(4)
    if kind == 0:  # a noisy decreasing loss with spikes
        x = 3.0 * np.exp(-np.arange(n) / max(n / 3, 1)) + 0.05 * rng.standard_normal(n)
    elif kind == 1:  # few distinct values: ties everywhere
        x = rng.integers(0, 4, n).astype(float)
    elif kind == 2:  # heavy right tail
        x = rng.lognormal(0.0, 1.0, n)
    else:  # grad norms with a floor and zeros
        x = np.maximum(rng.standard_normal(n), 0.0)
    hits = rng.random(n) < 0.02
    x[hits] *= rng.uniform(1.5, 50.0, int(hits.sum()))
    if rng.random() < 0.3:
        x = -x  # negative values: a median below zero
    return x


@pytest.mark.parametrize("seed", range(40))
def test_spike_mask_equals_computing_every_window(seed):
    # spike_mask computes the trailing median/MAD only where a point exceeds the previous maximum, and
    # the earlier points' own medians only where the quick bound fails; its spikes and the median and z
    # at them must be those of the computation at every point
    from trainaudit.model import Series
    from trainaudit.rules.numerics import spike_mask

    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(3, 3000))
        x = _spiky(rng, n)
        s = Series("loss", np.arange(n, dtype=np.int64), x, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int16))
        window = int(rng.choice([3, 10, 20, 51]))
        args = (window, float(rng.choice([2.0, 5.0, 8.0])), float(rng.choice([0.1, 0.5, 2.0])), int(rng.integers(0, 12)),
                int(rng.choice([3, 50, 100])), float(rng.choice([0.0, 0.1])), float(rng.choice([0.5, 1.0, 3.0, 10.0])),
                bool(rng.integers(2)))
        idx, med, z = spike_mask(s, *args)
        ref_idx, ref_med, ref_z = _spike_mask_everywhere(x, *args)
        assert np.array_equal(idx, ref_idx)
        assert np.array_equal(med[idx], ref_med[idx]) and np.array_equal(z[idx], ref_z[idx])


def test_trailing_median_mad_at_equals_every_point():
    rng = np.random.default_rng(7)
    for window in (1, 3, 4, 51):
        x = rng.integers(0, 6, 700).astype(float) * rng.random(700)
        med, dev = trailing_median_mad(x, window)
        at = np.flatnonzero(rng.random(700) < 0.2)
        at = at[at >= window]
        m, d = trailing_median_mad_at(x, window, at)
        assert np.array_equal(m, med[at]) and np.array_equal(d, dev[at])
        assert trailing_median_mad_at(x, window, np.array([], dtype=np.intp))[0].size == 0
    with pytest.raises(ValueError):
        trailing_median_mad_at(np.arange(10.0), 4, np.array([3]))


def test_trailing_median_mad_upto_takes_the_points_there_are():
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 1.0, 300)
    at = np.array([1, 2, 5, 9, 10, 11, 150, 299], dtype=np.intp)
    m, d = trailing_median_mad_upto(x, 10, at)
    for k, i in enumerate(at):
        h = x[max(0, i - 10):i]
        assert m[k] == np.median(h) and d[k] == np.median(np.abs(h - np.median(h)))


def _kendall_pairs(v: np.ndarray) -> float:
    """Kendall's tau-a from every pair's sign (the quadratic definition)."""
    n = v.size
    if n < 2:
        return 0.0
    with np.errstate(invalid="ignore"):
        pairs = np.sign(v[None, :] - v[:, None])[np.triu_indices(n, 1)]
    return float(pairs.sum()) / (n * (n - 1) / 2)


@settings(max_examples=400, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, -0.0, 1.0, 1.5, -2.0, 3.25, 1e300, -1e-300, np.inf, -np.inf, np.nan]),
                       max_size=70),
       noise=st.integers(0, 2**32 - 1))
def test_kendall_tau_is_the_sum_of_every_pair_s_sign(values: list[float], noise: int) -> None:
    """Ties (signed zeros too), infinities (one, or the same twice), NaN and random runs: the same
    float as summing the sign of every later-minus-earlier difference."""
    rng = np.random.default_rng(noise)
    for v in (np.array(values, dtype=np.float64), rng.integers(0, 6, size=len(values)).astype(np.float64),
              rng.normal(size=len(values))):
        got, want = kendall_tau(v), _kendall_pairs(v)
        assert (np.isnan(got) and np.isnan(want)) or got == want


@pytest.mark.parametrize("seed", range(4))
def test_earlier_tail_equals_computing_every_median(seed):
    # TA102 looks for an earlier point as far above its own median as a jump's third; the bounds on each
    # point's excursion (above the highest and the lowest point before it) must not change the answer
    from trainaudit.rules.numerics import LossSpike, _excursion_bounds, spike_history

    rule = LossSpike()
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(20, 1500))
        x = _spiky(rng, n)
        w, _ = spike_history(n, rule.p.window, rule.p.max_window)
        med, _ = trailing_median_mad(x, w)
        bounds = _excursion_bounds(x, w)
        start = max(rule.p.min_history, w)
        for i in rng.integers(w, n, 8):
            i = int(i)
            end = i - max(w, min(rule.p.max_window, n // 3))
            excess = float(x[i] - med[i]) / rule.p.over_max
            ref = end > start and bool(np.any(x[start:end] - med[start:end] >= excess))
            assert rule._within_earlier_tail(x, med, i, bounds) == ref
