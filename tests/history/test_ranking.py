"""The fitted commit ranking: the fit learns what tells the culprit apart, the same on every run,
and the shipped weights are plain data that say how they were fitted."""

from __future__ import annotations

import numpy as np
import pytest

from trainaudit.history.ranking import FEATURES, GROUPS, Model, Sample, fit, log_likelihood, packaged, softmax


def _samples() -> list[Sample]:
    """Ranges where the culprit is the code change for a training failure and the image bump for a
    wall-clock one; a CI-plumbing commit sits nearest the bad revision in both."""
    out = []
    for k in range(6):
        code = {"code": 1.0, "recency": 0.5}
        image = {"env": 1.0, "recency": 0.6}
        ci = {"ci": 1.0, "recency": 1.0}
        noise = {"code": 0.3, "recency": 0.1 * k}
        out.append(Sample([ci, code, image, noise], "training", 1, f"t{k}"))
        out.append(Sample([ci, code, image, noise], "wall_clock", 2, f"w{k}"))
    return out


def test_the_fit_learns_the_culprit_of_each_kind_of_failure() -> None:
    sm = _samples()
    w = fit(sm, l2=1.0)
    model = Model(w)
    for s in sm:
        scores = model.scores(s.xs, s.group)
        assert int(np.argmax(scores)) == s.culprit, (s.key, scores)
    # the fit maximises the penalised likelihood: better than no model at all
    assert log_likelihood(w, sm) > log_likelihood(np.zeros_like(w), sm)
    # contributions add up to the score
    x = sm[0].xs[1]
    assert sum(model.contributions(x, "training").values()) == pytest.approx(float(model.scores([x], "training")[0]))


def test_the_fit_is_deterministic_and_the_weights_round_trip() -> None:
    a, b = fit(_samples()), fit(_samples())
    assert np.array_equal(a, b)
    m = Model(a, {"how": "test"})
    back = Model.from_json(m.to_json())
    assert np.allclose(back.weights, a, atol=1e-6) and back.meta == {"how": "test"}


def test_the_shipped_model_says_how_it_was_fitted() -> None:
    m = packaged()
    assert m.weights.shape == (len(FEATURES) * (1 + len(GROUPS)),) and np.any(m.weights != 0)
    assert {"how", "corpus", "cases", "samples", "l2"} <= set(m.meta)
    assert int(m.meta["samples"]) >= 40  # type: ignore[call-overload]
    p = softmax(m.scores([{"env": 1.0, "regen": 0.9, "recency": 1.0}, {"ci": 1.0, "recency": 0.9}], "wall_clock"))
    assert p.sum() == pytest.approx(1.0) and p[0] > p[1]
