"""Rule registry, pyproject configuration, and the robust statistics helpers."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from trainaudit.errors import InputError
from trainaudit.rules import FAMILIES, RULE_CLASSES, active_rules, load_config, rule_class
from trainaudit.series.stats import (
    change_point,
    kendall_tau,
    first_sustained,
    rolling_median,
    sliding_max,
    trailing_median_mad,
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
