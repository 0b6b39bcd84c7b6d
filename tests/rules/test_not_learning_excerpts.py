"""TA202 on excerpts: a flat loss in a paste that starts late in its run is where the run settled, not a
run that never learned; repeated evaluations printed with two significant digits do not show frozen
weights. Each case beside its twin where the rule does fire."""

from __future__ import annotations

import numpy as np

from trainaudit.model import Run, Series
from trainaudit.rules.base import Context
from trainaudit.rules.optimisation import NotLearning


def _series(name: str, steps: list[int] | np.ndarray, values: list[float] | np.ndarray) -> Series:
    n = len(steps)
    return Series(name, np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64),
                  np.arange(1, n + 1, dtype=np.int64), np.zeros(n, dtype=np.int16))


def _check(**series: Series) -> list:  # type: ignore[type-arg]
    return NotLearning().check(Context.of(Run(series=series)))


def _flat(first: int) -> Series:
    rng = np.random.default_rng(3)
    steps = np.arange(first, first + 37)
    return _series("loss", steps, 0.31 + 0.002 * rng.standard_normal(steps.size))


def test_a_flat_loss_from_the_first_epoch_does_not_learn() -> None:
    hits = _check(loss=_flat(1))
    assert hits and hits[0].category == "plateau"


def test_a_flat_loss_in_a_paste_from_epoch_14_is_where_the_run_settled() -> None:
    assert _check(loss=_flat(14)) == []


def _evaluations(last: float) -> dict[str, Series]:
    steps = list(range(100, 1000, 100))
    val = [3 * last, 2 * last, 1.5 * last, 1.2 * last] + [last] * 5
    return {"loss": _series("loss", steps, [1.0, 0.8, 0.7, 0.6, 0.55, 0.5, 0.46, 0.43, 0.4]),
            "val_loss": _series("val_loss", steps, val)}


def test_evaluations_identical_to_four_digits_show_frozen_weights() -> None:
    hits = _check(**_evaluations(1.234))
    assert hits and "evaluated weights do not change" in hits[0].message


def test_evaluations_printed_with_two_significant_digits_repeat_in_a_healthy_run() -> None:
    assert _check(**_evaluations(0.0023)) == []
