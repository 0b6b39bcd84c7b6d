"""The Megatron gate reproduced on the real golden fixtures and on perturbations of them; every
expected pass/fail is computed by hand from the rules (tests/compare/helpers.py), not by the
comparator under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compare.helpers import (MIMO, MIMO_CONFIG, MIMO_GOLDEN, NONDET, RESUME, SHORT, dump, hand_check,
                                   hand_iteration_time, load, perturbed)
from shared_data import MEGATRON
from trainaudit.compare.pipeline import run_golden
from trainaudit.errors import InputError

ALL_GOLDENS = sorted(p for p in MEGATRON.rglob("*.json"))


def compare(golden: Path, actual: Path, config: Path | None = None, **kw):  # type: ignore[no-untyped-def]
    answer, _, passed = run_golden(str(golden), [str(actual)], model_config=str(config) if config else None, **kw)
    assert answer.validation.all_passed, [c for c in answer.validation.checks if not c.passed]
    return answer, passed


def cmp(answer, metric: str, check: str):  # type: ignore[no-untyped-def]
    return next(c for c in answer.comparisons if c.metric == metric and c.check == check)


@pytest.mark.parametrize("golden", ALL_GOLDENS, ids=lambda p: str(p.relative_to(MEGATRON)))
def test_every_fixture_golden_passes_against_itself(golden: Path) -> None:
    cfg = golden.parent / "model_config.yaml"
    if not cfg.exists():
        cfg = golden.parent.parent / "model_config.yaml"  # history/ files share the folder's config
    answer, passed = compare(golden, golden, cfg)
    assert passed and answer.final_answer.verdict == "pass"
    assert answer.comparisons and all(c.passed and c.n_failing == 0 for c in answer.comparisons)


def _scale_step(metric: str, step: str, factor: float):  # type: ignore[no-untyped-def]
    def edit(d: dict) -> None:
        d[metric]["values"][step] = round(d[metric]["values"][step] * factor, 5)
    return edit


@pytest.mark.parametrize("factor", [1.049, 1.051])
def test_one_loss_step_off_fails_exact_only(tmp_path: Path, factor: float) -> None:
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", _scale_step("lm loss", "50", factor))
    g, a = load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"]
    exact_ok, exact_fail = hand_check(g, a, 0.0, exact=True)
    approx_ok, approx_fail = hand_check(g, a, 0.05, exact=False)
    assert (exact_ok, exact_fail) == (False, 1)
    assert approx_ok is True and approx_fail == (0 if factor < 1.05 else 1)  # 1 of 100 is inside the budget
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert passed is False
    assert cmp(answer, "lm loss", "exact").passed is exact_ok and cmp(answer, "lm loss", "exact").n_failing == 1
    ap = cmp(answer, "lm loss", "approximate")
    assert ap.passed is approx_ok and ap.n_failing == approx_fail and ap.allowed_failing == 1
    assert cmp(answer, "lm loss", "exact").first_failing_step == 50
    # An isolated 5 % step with everything else identical is neither drift nor a decided regression.
    assert answer.final_answer.verdict == "inconclusive"
    assert answer.final_answer.needs_more_data


@pytest.mark.parametrize("factor,expected", [(1.049, True), (1.051, False)])
def test_two_loss_steps_off_exceed_the_budget_only_beyond_5_percent(tmp_path: Path, factor: float,
                                                                     expected: bool) -> None:
    def edit(d: dict) -> None:
        for s in ("40", "60"):
            d["lm loss"]["values"][s] = round(d["lm loss"]["values"][s] * factor, 5)
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", edit)
    approx_ok, _ = hand_check(load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"], 0.05, exact=False)
    assert approx_ok is expected
    answer, _ = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert cmp(answer, "lm loss", "approximate").passed is expected
    assert answer.final_answer.verdict == ("inconclusive" if expected else "real_regression")
    if not expected:
        assert answer.final_answer.first_bad_step == 40


def test_all_steps_off_by_1e_5_is_numerical_drift(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        for m in ("lm loss",):
            d[m]["values"] = {s: round(v * (1 + 1e-5), 5) for s, v in d[m]["values"].items()}
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", edit)
    g, a = load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"]
    exact_ok, n_exact = hand_check(g, a, 0.0, exact=True)
    approx_ok, _ = hand_check(g, a, 0.05, exact=False)
    assert not exact_ok and approx_ok and n_exact > 90
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert not passed
    ex = cmp(answer, "lm loss", "exact")
    assert ex.n_failing == n_exact and ex.max_rel_err is not None and ex.max_rel_err < 2e-5
    assert answer.final_answer.verdict == "numerical_drift"
    assert ex.deviation is not None and ex.deviation["sign"] == "positive"


def test_missing_step_counts_as_nan(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        for m in ("lm loss", "num-zeros"):
            del d[m]["values"]["50"]
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", edit)
    g, a = load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"]
    assert hand_check(g, a, 0.0, exact=True) == (False, 1)
    assert hand_check(g, a, 0.05, exact=False) == (True, 1)
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert not passed
    assert cmp(answer, "lm loss", "exact").first_failing_step == 50
    assert cmp(answer, "lm loss", "approximate").passed
    # Training matches everywhere else: the gate failed on a missing sample, not on the model.
    assert answer.final_answer.verdict == "gating_policy_issue"
    assert answer.final_answer.first_bad_step == 50


def test_nan_in_actual_and_nan_in_golden(tmp_path: Path) -> None:
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", lambda d: d["lm loss"]["values"].__setitem__("7", "nan"))
    g, a = load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"]
    assert hand_check(g, a, 0.0, exact=True) == (False, 1)
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert not passed and cmp(answer, "lm loss", "exact").first_failing_step == 7
    assert answer.final_answer.verdict == "gating_policy_issue"
    # Matching "nan" on both sides passes (inf == inf).
    both = perturbed(MIMO_GOLDEN, tmp_path, "golden_nan.json", lambda d: d["lm loss"]["values"].__setitem__("7", "nan"))
    answer, passed = compare(both, actual, MIMO_CONFIG)
    assert passed and answer.final_answer.verdict == "pass"
    # "nan" only in the golden: a stale placeholder.
    answer, passed = compare(both, MIMO_GOLDEN, MIMO_CONFIG)
    assert not passed and answer.final_answer.verdict == "gating_policy_issue"
    assert "placeholder" in answer.final_answer.root_causes[0].issue


def test_run_that_stopped_early_is_a_crash(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        for m in d.values():
            m["values"] = {s: v for s, v in m["values"].items() if int(s) < 60}
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", edit)
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert not passed and answer.final_answer.verdict == "crash" and answer.final_answer.first_bad_step == 60


@pytest.mark.parametrize("factor", [1.04, 1.06])
def test_iteration_time_window_median(tmp_path: Path, factor: float) -> None:
    def edit(d: dict) -> None:
        d["iteration-time"]["values"] = {s: round(v * factor, 5) for s, v in d["iteration-time"]["values"].items()}
    actual = perturbed(MIMO_GOLDEN, tmp_path, "actual.json", edit)
    ok, g_med, a_med = hand_iteration_time(load(MIMO_GOLDEN)["iteration-time"], load(actual)["iteration-time"])
    assert ok is (factor < 1.05)
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    it = cmp(answer, "iteration-time", "approximate")
    assert it.window == [30, 45] and it.golden_median == pytest.approx(g_med, abs=0) and it.actual_median == a_med
    assert it.passed is ok and passed is ok
    assert answer.final_answer.verdict == ("pass" if ok else "gating_policy_issue")
    if not ok:
        assert answer.final_answer.category == "throughput_regression"
        assert "consistent slowdown" in answer.final_answer.summary


def test_short_run_uses_window_5_to_20_with_nan_steps(tmp_path: Path) -> None:
    golden = SHORT / "golden_values_dev_dgx_h100.json"
    actual = perturbed(golden, tmp_path, "a.json", lambda d: d["iteration-time"]["values"].update(
        {s: round(v * 1.2, 5) for s, v in d["iteration-time"]["values"].items() if not isinstance(v, str)}))
    ok, g_med, _ = hand_iteration_time(load(golden)["iteration-time"], load(actual)["iteration-time"])
    answer, _ = compare(golden, actual, SHORT / "model_config.yaml")
    it = cmp(answer, "iteration-time", "approximate")
    assert it.window == [5, 20] and it.golden_median == g_med and it.passed is ok is False


def test_memory_plus_one_mib_passes_and_plus_ten_percent_is_a_memory_change(tmp_path: Path) -> None:
    def plus(delta_abs: float, factor: float):  # type: ignore[no-untyped-def]
        def edit(d: dict) -> None:
            for m in ("mem-allocated-bytes", "mem-max-allocated-bytes"):
                d[m]["values"] = {s: v * factor + delta_abs for s, v in d[m]["values"].items()}
        return edit
    small = perturbed(MIMO_GOLDEN, tmp_path, "small.json", plus(1024 * 1024, 1.0))
    g, a = load(MIMO_GOLDEN)["mem-allocated-bytes"], load(small)["mem-allocated-bytes"]
    assert hand_check(g, a, 0.05, exact=False) == (True, 0)
    answer, passed = compare(MIMO_GOLDEN, small, MIMO_CONFIG)
    assert passed and answer.final_answer.verdict == "pass"
    big = perturbed(MIMO_GOLDEN, tmp_path, "big.json", plus(0.0, 1.10))
    g, a = load(MIMO_GOLDEN)["mem-allocated-bytes"], load(big)["mem-allocated-bytes"]
    assert hand_check(g, a, 0.05, exact=False) == (False, 100)
    answer, passed = compare(MIMO_GOLDEN, big, MIMO_CONFIG)
    assert not passed and answer.final_answer.verdict == "real_regression"
    assert answer.final_answer.category == "memory_growth"
    assert cmp(answer, "mem-allocated-bytes", "approximate").n_failing == 100


def _synthetic(n: int) -> dict:
    # Default METRICS are lm loss and num-zeros, so the file has both.
    return {"lm loss": {"start_step": 1, "end_step": n, "step_interval": 1,
                        "values": {str(s): round(10.0 - s * 0.01, 5) for s in range(1, n + 1)}},
            "num-zeros": {"start_step": 1, "end_step": n, "step_interval": 1,
                          "values": {str(s): float(100 + s) for s in range(1, n + 1)}}}


@pytest.mark.parametrize("n", [170, 171, 172])
def test_budget_floating_point_subtlety(tmp_path: Path, n: int) -> None:
    # For N = 171, k = 1 but (N - 1)/N >= 1 - 1/N is False in floating point: no failing step allowed.
    k = min(max(n // 100, 1), 50)
    allowed_by_hand = max(j for j in range(k + 1) if (n - j) / n >= 1 - k / n)
    assert k == 1 and allowed_by_hand == (0 if n == 171 else 1)
    golden = dump(_synthetic(n), tmp_path / "g.json")
    act = _synthetic(n)
    act["lm loss"]["values"]["100"] *= 1.5
    actual = dump(act, tmp_path / "a.json")
    answer, passed = compare(golden, actual, None, deterministic=False)
    ap = cmp(answer, "lm loss", "approximate")
    assert ap.allowed_failing == allowed_by_hand and ap.n_failing == 1
    assert ap.passed is (allowed_by_hand >= 1) and passed is (allowed_by_hand >= 1)
    assert not any(c.check == "exact" for c in answer.comparisons)


def test_nondeterministic_config_skips_exact_checks(tmp_path: Path) -> None:
    golden = NONDET / "golden_values_dev_dgx_a100.json"
    actual = perturbed(golden, tmp_path, "a.json", lambda d: d["lm loss"]["values"].update(
        {s: round(v * (1 + 1e-4), 5) for s, v in d["lm loss"]["values"].items()}))
    assert hand_check(load(golden)["lm loss"], load(actual)["lm loss"], 0.0, exact=True)[0] is False
    answer, passed = compare(golden, actual, NONDET / "model_config.yaml")
    assert passed and {c.check for c in answer.comparisons} == {"approximate"}
    assert answer.final_answer.verdict == "pass"
    answer, passed = compare(golden, actual, NONDET / "model_config.yaml", deterministic=True)
    assert not passed and cmp(answer, "lm loss", "exact").n_failing == 11
    assert answer.final_answer.verdict == "numerical_drift"


def test_resume_pipeline_compares_second_half(tmp_path: Path) -> None:
    first = RESUME / "golden_values_dev_dgx_h100.json"
    cfg = RESUME / "model_config.yaml"  # TEST_TYPE ckpt-resume, --train-iters 100

    def blank_first_half(d: dict) -> None:  # the _2nd.json layout: steps <= 50 are "nan"
        for m in d.values():
            m["values"] = {s: ("nan" if int(s) <= 50 else v) for s, v in m["values"].items()}
    second = perturbed(first, tmp_path, "second.json", blank_first_half)
    answer, passed = compare(first, second, cfg)
    assert passed and all(c.n_steps == 50 for c in answer.comparisons)
    answer, passed = compare(first, second, cfg, pipeline="regular")
    assert not passed and cmp(answer, "lm loss", "exact").n_failing == 50
    # A change at step 40 (first half) is ignored; at step 60 it counts.
    early = perturbed(second, tmp_path, "early.json", lambda d: d["lm loss"]["values"].__setitem__("40", 1.0))
    assert compare(first, early, cfg)[1] is True
    late = perturbed(second, tmp_path, "late.json", _scale_step("lm loss", "60", 1.001))
    answer, passed = compare(first, late, cfg, train_iters=100)
    assert not passed and cmp(answer, "lm loss", "exact").first_failing_step == 60


def test_resume_pipeline_on_the_real_first_and_second_goldens() -> None:
    # The two files were regenerated at different commits, so they differ slightly after step 50.
    first = RESUME / "golden_values_dev_dgx_h100.json"
    second = RESUME / "golden_values_dev_dgx_h100_2nd.json"
    g1, g2 = load(first), load(second)
    answer, passed = compare(first, second, RESUME / "model_config.yaml")
    expected_all = True
    for m, rtol in (("lm loss", 0.05), ("num-zeros", 0.20)):
        tail = {"values": {s: v for s, v in g1[m]["values"].items() if int(s) > 50}}
        for check, tol in (("exact", 0.0), ("approximate", rtol)):
            ok, n_fail = hand_check(tail, g2[m], tol, exact=check == "exact")
            c = cmp(answer, m, check)
            assert (c.passed, c.n_failing, c.n_steps) == (ok, n_fail, 50)
            expected_all &= ok
    assert passed is expected_all is False
    assert cmp(answer, "lm loss", "approximate").passed


def test_metric_missing_from_actual_is_a_crash_not_a_golden_mismatch(tmp_path: Path) -> None:
    actual = perturbed(MIMO_GOLDEN, tmp_path, "a.json", lambda d: d.pop("mem-allocated-bytes"))
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG)
    assert not passed and answer.final_answer.verdict == "crash" and answer.final_answer.category == "crash"
    assert "MissingTensorboardLogsError" in answer.final_answer.summary
    # Checks before the missing metric in METRICS order ran; the abort stops the rest.
    assert [c.metric for c in answer.comparisons][-1] == "num-zeros"


def test_metric_required_but_absent_from_golden(tmp_path: Path) -> None:
    golden = perturbed(MIMO_GOLDEN, tmp_path, "g.json", lambda d: d.pop("num-zeros"))
    answer, passed = compare(golden, MIMO_GOLDEN, MIMO_CONFIG)
    assert not passed and answer.final_answer.verdict == "gating_policy_issue"
    assert answer.comparisons == []
    assert "num-zeros" in answer.final_answer.root_causes[0].issue


def test_mimo_history_pair_is_a_gating_policy_issue() -> None:
    golden = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
    actual = MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"
    ok, g_med, a_med = hand_iteration_time(load(golden)["iteration-time"], load(actual)["iteration-time"])
    assert not ok and a_med / g_med == pytest.approx(1.145, abs=0.001)
    answer, passed = compare(golden, actual, MIMO_CONFIG)
    assert not passed
    failing = [(c.metric, c.check) for c in answer.comparisons if not c.passed]
    assert failing == [("iteration-time", "approximate")]
    assert answer.final_answer.verdict == "gating_policy_issue"
    assert answer.final_answer.root_causes[0].confidence >= 0.7
    it = cmp(answer, "iteration-time", "approximate")
    assert (it.golden_median, it.actual_median) == (g_med, a_med)


def test_dated_policy_replays_the_old_budget(tmp_path: Path) -> None:
    # 90 of 100 steps 10 % off: the current approximate check fails; before 4e85d74ae9 the gate
    # passed when mean(is_close) >= k/N, i.e. 10/100 >= 1/100.
    def edit(d: dict) -> None:
        d["lm loss"]["values"] = {s: (round(v * 1.1, 5) if int(s) > 10 else v) for s, v in d["lm loss"]["values"].items()}
    actual = perturbed(MIMO_GOLDEN, tmp_path, "a.json", edit)
    g, a = load(MIMO_GOLDEN)["lm loss"], load(actual)["lm loss"]
    assert hand_check(g, a, 0.05, exact=False) == (False, 90)
    assert 10 / 100 >= 1 / 100
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG, policy="megatron")
    assert not passed and answer.final_answer.verdict == "real_regression"
    answer, passed = compare(MIMO_GOLDEN, actual, MIMO_CONFIG, policy="megatron@2026-04-13")
    assert cmp(answer, "lm loss", "approximate").passed and cmp(answer, "lm loss", "exact").passed
    assert cmp(answer, "lm loss", "approximate").allowed_failing == 99


def test_dated_policy_median_of_all_steps_before_the_window(tmp_path: Path) -> None:
    golden = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
    actual = MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"
    import statistics
    from tests.compare.helpers import as_inf
    g = statistics.median(as_inf(v) for v in load(golden)["iteration-time"]["values"].values())
    a = statistics.median(as_inf(v) for v in load(actual)["iteration-time"]["values"].values())
    answer, _ = compare(golden, actual, MIMO_CONFIG, policy="megatron@2026-05-26")
    it = cmp(answer, "iteration-time", "approximate")
    assert (it.golden_median, it.actual_median) == (g, a)
    assert it.passed is (abs(a - g) <= 0.05 * abs(g))


def test_legacy_list_golden_cannot_be_read_by_the_current_gate(tmp_path: Path) -> None:
    g = load(MIMO_GOLDEN)
    legacy = {"lm loss": {"start_step": 0, "end_step": 99, "step_interval": 1,
                          "values": list(g["lm loss"]["values"].values())},
              "num-zeros": {"start_step": 0, "end_step": 99, "step_interval": 1,
                            "values": list(g["num-zeros"]["values"].values())},
              "iteration_timing_avg": 0.79}
    path = dump(legacy, tmp_path / "legacy.json")
    # Megatron-LM's GoldenValueMetric (values: Dict[int, ...]) cannot load it: a pydantic
    # ValidationError before any comparison. The gate, not the training, is broken (a malformed
    # golden); as the actual values, the same file is an input that cannot be compared.
    answer, passed = compare(path, MIMO_GOLDEN, None)
    fa = answer.final_answer
    assert not passed and fa.verdict == "gating_policy_issue" and not answer.comparisons
    assert "values is a list (the 2024 layout)" in fa.summary and "ValidationError" in fa.summary
    with pytest.raises(InputError, match="ValidationError"):
        compare(MIMO_GOLDEN, path, None)
