"""The fitted decision: an answer below the confidence bar says what would decide it, and the
primary root cause says why the model chose its category."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainaudit.diagnosis import analyse, decide
from trainaudit.diagnosis.decide import CONFIDENT
from trainaudit.diagnosis.features import CLASSES, FEATURES
from trainaudit.diagnosis.model import Model, fit, shipped
from trainaudit.ingest import load_run


def _analysis(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text(text, encoding="utf-8")
    run, _ = load_run([str(log)])
    return analyse(run)


NAN = "".join(f"step {i} loss {2.0 - i * 0.01:.3f}\n" for i in range(1, 60)) + "step 60 loss nan\nstep 61 loss nan\n"


def test_an_unsure_answer_says_what_would_decide_it(tmp_path: Path) -> None:
    a = _analysis(tmp_path, NAN)
    flat = Model(FEATURES, np.zeros(len(FEATURES)))  # every category equally likely
    d = decide(a, flat)
    assert d.confidence < CONFIDENT
    assert any(n.startswith(f"what would decide between {d.category} and ") for n in d.needs_more_data)


def test_the_shipped_model_explains_its_choice(tmp_path: Path) -> None:
    d = decide(_analysis(tmp_path, NAN), shipped())
    assert d.category == "nan_inf" and d.verdict == "unhealthy" and d.first_bad_step == 60
    assert d.runner_up and d.runner_up != "nan_inf" and d.reasons and all(v > 0 for _, v in d.reasons)
    assert d.probabilities["nan_inf"] > d.probabilities[d.runner_up]
    assert abs(sum(d.probabilities.values()) - 1.0) < 1e-3
    assert d.stories[0].confidence == d.confidence


def test_deciding_again_does_not_change_the_analysis(tmp_path: Path) -> None:
    a = _analysis(tmp_path, NAN)
    first = decide(a, shipped())
    again = decide(a, shipped())
    assert (first.stories[0].issue, first.reasons) == (again.stories[0].issue, again.reasons)
    assert first.stories[0].issue == a.engine.stories[0].issue  # the decision is data, not appended prose


def test_fit_learns_a_separable_rule() -> None:
    """Two toy cases whose only difference is the story feature: the fit puts each on its label."""
    col = FEATURES.index("story")
    healthy, nan = CLASSES.index("healthy"), CLASSES.index("nan_inf")
    with_story = np.zeros((len(CLASSES), len(FEATURES)))
    with_story[nan, col] = 1.0
    without = np.zeros((len(CLASSES), len(FEATURES)))
    for x in (with_story, without):
        for k, c in enumerate(CLASSES):
            x[k, FEATURES.index(f"bias:{c}")] = 1.0
    w = fit([with_story, without] * 5, [nan, healthy] * 5, l2=0.1)
    m = Model(FEATURES, w)
    assert int(np.argmax(m.probabilities(with_story))) == nan
    assert int(np.argmax(m.probabilities(without))) == healthy


def _run(tmp_path: Path, val: list[float], train: list[float]):  # type: ignore[no-untyped-def]
    log = tmp_path / "fit.log"
    log.write_text("".join(f"Epoch {i}: loss {t} - val_loss {v}\n" for i, (t, v) in enumerate(zip(train, val), 1)),
                   encoding="utf-8")
    run, _ = load_run([str(log)])
    return run


def test_a_widening_gap_is_a_pattern_that_points_at_overfitting(tmp_path: Path) -> None:
    from trainaudit.diagnosis.features import patterns
    from trainaudit.rules.base import Context
    # the validation loss ends 5% above its first-epoch minimum while the training loss falls 200-fold
    run = _run(tmp_path, [0.692, 0.695, 0.713, 0.700, 0.704, 0.705, 0.734, 0.717, 0.720, 0.724],
               [0.694, 0.505, 0.281, 0.122, 0.058, 0.031, 0.017, 0.0098, 0.0058, 0.0035])
    assert patterns(run, Context.of(run))["overfitting"] > 0.4
    # both falling: nothing
    run = _run(tmp_path, [0.9, 0.8, 0.7, 0.65, 0.6], [1.0, 0.8, 0.6, 0.5, 0.4])
    assert "overfitting" not in patterns(run, Context.of(run))


def test_a_healthy_answer_against_a_pattern_is_marked_for_the_confidence_model() -> None:
    from trainaudit.diagnosis.features import CONFIDENCE_FEATURES, confidence_vector
    x = np.zeros((len(CLASSES), len(FEATURES)))
    x[CLASSES.index("healthy"), FEATURES.index("h:patterns")] = 0.5
    p = np.full(len(CLASSES), 1 / len(CLASSES))
    k = CONFIDENCE_FEATURES.index("healthy_despite_patterns")
    assert confidence_vector(x, p, CLASSES.index("healthy"), 0)[k] == 0.5
    assert confidence_vector(x, p, CLASSES.index("overfitting"), 0)[k] == 0.0  # the pattern supports that answer


def test_a_slowdown_that_starts_with_a_leak_is_marked_explained(tmp_path: Path) -> None:
    # memory held at 320 MB, then 20 MB more every 10 steps from step 210; each step 1.5x slower from there
    lines = [f"step {s} loss {2.0 / (1 + s / 100):.4f} time/step {4.0 if s <= 200 else 6.0 + (s % 3) * 0.1:.2f}ms "
             f"mem {320 if s <= 200 else 320 + 2 * (s - 200)}MB" for s in range(10, 510, 10)]
    a = _analysis(tmp_path, "\n".join(lines) + "\n")
    col = FEATURES.index("explained")
    cats = {s.category for s in a.engine.stories}
    assert {"memory_growth", "throughput_regression"} <= cats
    assert a.x[CLASSES.index("throughput_regression"), col] == 1.0
    assert a.x[CLASSES.index("memory_growth"), col] == 0.0
    # the same slowdown without the leak explains nothing
    a = _analysis(tmp_path, "\n".join(ln.rsplit(" mem ", 1)[0] for ln in lines) + "\n")
    assert a.x[CLASSES.index("throughput_regression"), col] == 0.0
