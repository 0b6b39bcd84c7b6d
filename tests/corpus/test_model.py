"""The fitted decision, measured as docs/accuracy.md measures it: out of sample (grouped k-fold by
source), deterministic, and no worse than when it was last raised. Floors are counts (no float
of the machine decides a pass); the generated runs are left out here (they need minutes of
training: `make accuracy` scores them)."""

from __future__ import annotations

import json
from pathlib import Path

import fit_diagnosis as fd
import numpy as np
import pytest

from trainaudit.diagnosis.features import CONFIDENCE_FEATURES, FEATURES
from trainaudit.diagnosis.model import Model, shipped

DOC = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"

# out of sample on the real pasted logs (the generated runs left out of the folds' training): 1451 logs,
# 691 healthy (the corpus grew from 753 to 919, 1037, 1112, 1168, 1220, 1261, 1359, 1438, 1444, then 1451, with logs collected
# without running trainaudit on them; the false alarms went from 7 of 330 healthy to 11 of 423, 18 of 486, 13 of
# 521, 14 of 545, 14 of 569, 12 of 589, 12 of 641, 12 of 684, 12 of 686, 12 of 691 and 11 of 691, 1.6 %: the new healthy logs a rule still fires on
# are pinned in tests/rules/test_rule_fixtures.py); maskrcnn-benchmark#1347, a NaN that comes with the loss's climb, is
# called divergence or nan_inf as the folds' models move: the floor is one below today's 1250
OOS_TOP1_FLOOR = 1249
OOS_FIRST_BAD_STEP_FLOOR = 396
OOS_FALSE_ALARMS_CEILING = 10
# out of sample on the real framework runs (tests/corpus/runs), grouped by family: 700 runs, 351 of them from
# independent generators (answered before they joined: 277 of 351 right, 153 of 235 first bad steps, against
# today's labels; two B56 runs were relabelled from their logs since, tests/corpus/README.md). The third false alarm
# came with B58: log-healthy-flat-s35, meant healthy, whose validation loss ends 15% above its best over its
# last two evaluations while the training loss falls (the label was left as the generator set it). The fourth came
# with B64: nlp-flair-healthy-noisy-smallbatch, meant healthy, whose samples/sec falls to 79% of its level for its
# last 27 points (the generator's machine was busy; the slowdown is in the log)
OOS_RUNS_TOP1_FLOOR = 664
OOS_RUNS_FIRST_BAD_STEP_FLOOR = 425
OOS_RUNS_FALSE_ALARMS_CEILING = 4
# of the answers at confidence 0.8 or more (pasted logs and framework runs), the share whose category is right
CALIBRATION_FLOOR_PCT = 95


@pytest.fixture(scope="module")
def items() -> list[fd.Analysed]:
    return fd.analyse_all(fd.corpus(None))


@pytest.fixture(scope="module")
def oos(items: list[fd.Analysed]) -> list[fd.Outcome]:
    return fd.out_of_sample(items)


def _logs(outcomes: list[fd.Outcome]) -> fd.Summary:
    return fd.summarise([o for o in outcomes if o.kind == "logs"])


def test_out_of_sample_score_does_not_drop(oos: list[fd.Outcome]) -> None:
    s = _logs(oos)
    misses = [f"{o.result.case.name}: {o.result.case.category} -> {o.result.category}" for o in oos
              if o.kind == "logs" and not o.result.cat_ok]
    assert s.right >= OOS_TOP1_FLOOR, misses
    assert s.step_ok >= OOS_FIRST_BAD_STEP_FLOOR
    assert s.false_alarms <= OOS_FALSE_ALARMS_CEILING


def test_out_of_sample_score_on_framework_runs_does_not_drop(oos: list[fd.Outcome]) -> None:
    s = fd.summarise([o for o in oos if o.kind == "runs"])
    misses = [f"{o.result.case.name}: {o.result.case.category} -> {o.result.category}" for o in oos
              if o.kind == "runs" and not o.result.cat_ok]
    assert s.right >= OOS_RUNS_TOP1_FLOOR, misses
    assert s.step_ok >= OOS_RUNS_FIRST_BAD_STEP_FLOOR
    assert s.false_alarms <= OOS_RUNS_FALSE_ALARMS_CEILING, misses


def test_confident_answers_are_right_95_times_in_100(oos: list[fd.Outcome]) -> None:
    s = fd.summarise(oos)
    wrong = [f"{o.result.case.name}: {o.result.case.category} -> {o.result.category} ({o.confidence:.2f})" for o in oos
             if o.confidence >= fd.CONFIDENT and not o.result.cat_ok]
    assert s.confident >= 500 and 100 * s.confident_right >= CALIBRATION_FLOOR_PCT * s.confident, wrong


def test_in_sample_is_no_worse_than_out_of_sample(items: list[fd.Analysed], oos: list[fd.Outcome]) -> None:
    assert _logs(fd.in_sample(items)).right >= _logs(oos).right - 5  # a gap, if any, goes the expected way


def test_evaluation_is_deterministic(items: list[fd.Analysed], oos: list[fd.Outcome]) -> None:
    again = fd.out_of_sample(items)
    assert [(o.result.category, o.result.first_bad) for o in again] == \
        [(o.result.category, o.result.first_bad) for o in oos]
    w1, w2 = fd.fit_on(items).weights, fd.fit_on(items).weights
    assert np.allclose(w1, w2, atol=1e-9)


def test_a_group_never_sits_in_training_and_test(items: list[fd.Analysed]) -> None:
    folds: dict[str, set[int]] = {}
    for a in items:
        folds.setdefault(a.case.group, set()).add(fd.fold_of(a.case.group))
    assert all(len(f) == 1 for f in folds.values())
    assert len({fd.fold_of(g) for g in folds}) == fd.K  # every fold holds some groups
    # two pastes from one thread are one group; a repository file is grouped by its repository
    assert fd.group_of("https://github.com/Owner/Repo/issues/12#issuecomment-3") == \
        fd.group_of("https://github.com/owner/repo/issues/12")
    assert fd.group_of("https://github.com/o/r/blob/abc/logs/a.txt") == fd.group_of("https://github.com/o/r/tree/x")
    assert fd.group_of("https://github.com/o/r/issues/1") != fd.group_of("https://github.com/o/r/issues/2")


def test_fit_finds_the_maximum(items: list[fd.Analysed]) -> None:
    """The fitted weights are where the penalised log-likelihood's gradient vanishes."""
    from trainaudit.diagnosis.features import CLASSES

    train = [a for a in items if a.analysis is not None]
    w = fd.fit_on(items).weights
    grad = -fd.L2 * w
    for a in train:
        x = a.analysis.x  # type: ignore[union-attr]
        s = x @ w
        p = np.exp(s - s.max())
        p /= p.sum()
        grad += x[CLASSES.index(a.case.log.category)] - p @ x
    assert float(np.max(np.abs(grad))) < 1e-4


def test_the_shipped_model_is_plain_data_with_its_provenance() -> None:
    data = json.loads((fd.MODEL_PATH).read_text(encoding="utf-8"))
    assert data["features"] == list(FEATURES)
    assert set(data["weights"]) == set(FEATURES)
    assert set(data["confidence_weights"]) == set(CONFIDENCE_FEATURES)
    info = data["fitted"]
    assert info["cases"]["logs"] >= 150 and info["l2"] == fd.L2 and "fold" in info["evaluation"]
    m = shipped()
    assert isinstance(m, Model) and m.weights.shape == (len(FEATURES),)
    assert m.confidence is not None and m.confidence.shape == (len(CONFIDENCE_FEATURES),)


def test_the_document_leads_with_out_of_sample_and_calibration() -> None:
    doc = DOC.read_text(encoding="utf-8")
    first = doc.index("<!-- ")
    assert doc[first:].startswith("<!-- model -->")
    assert "| set | cases | top-1 out of sample | top-1 in sample | gap |" in doc
    assert "### Calibration (out of sample, all sets)" in doc
    assert "| confidence | answers | right | share right |" in doc
    rows = [line for line in doc.split("### Calibration")[1].splitlines() if line.startswith("| 0.")]
    assert len(rows) == len(fd.BINS)


def test_framework_runs_are_picked_up_with_their_family_as_group(tmp_path: Path) -> None:
    case = tmp_path / "hf-trainer-nan-1"
    case.mkdir()
    (case / "stdout.log").write_text("".join(f"step {i} loss {2 - i / 100:.3f}\n" for i in range(1, 30)) + "step 30 loss nan\n",
                                     encoding="utf-8")
    (case / "label.json").write_text(json.dumps({"category": "nan_inf", "family": "hf-trainer-nan",
                                                 "framework": "hf-transformers", "first_bad_step": 30}), encoding="utf-8")
    (tmp_path / "no-label").mkdir()  # a folder without a label is not a case
    runs = [c for c in fd.corpus(None, runs=tmp_path) if c.kind == "runs"]
    assert [(c.log.name, c.group, [p.name for p in c.paths]) for c in runs] == \
        [("hf-trainer-nan-1", "family:hf-trainer-nan", ["stdout.log"])]
    (done,) = fd.analyse_all(runs)
    assert done.analysis is not None and done.analysis.engine.category == "nan_inf"
