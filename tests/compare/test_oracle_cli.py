"""Five oracle cases through the command line (``python -m trainaudit compare --golden``), with
the numbers worked out by hand from the comparator's rules. Before the fixes these cases ended in
an internal error (exit 3), passed what Megatron-LM rejects, or failed what it passes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.compare.oracle_cases import load_cases, materialize

CASES = {c["id"]: c for c in load_cases()}


def run_cli(case_id: str, tmp: Path) -> tuple[int, str, dict[str, Any] | None]:
    case = CASES[case_id]
    tmp.mkdir(parents=True, exist_ok=True)
    g, a, cfg, out = tmp / "golden.json", tmp / "actual.json", tmp / "model_config.yaml", tmp / "out"
    g.write_text(materialize(case["golden"]), encoding="utf-8")
    a.write_text(materialize(case["actual"]), encoding="utf-8")
    body: dict[str, Any] = {"TEST_TYPE": "regular"}
    if case["metrics"] is not None:
        body["METRICS"] = case["metrics"]
    cfg.write_text(json.dumps(body), encoding="utf-8")
    args = [sys.executable, "-m", "trainaudit", "compare", "--golden", str(g), str(a), "--model-config", str(cfg),
            "--pipeline", case["pipeline"], "--policy", case["policy"], "-o", str(out),
            "--nondeterministic" if case["nondeterministic"] else "--deterministic"]
    if case["train_iters"] is not None:
        args += ["--train-iters", str(case["train_iters"])]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    answer = json.loads((out / "answer.json").read_text()) if (out / "answer.json").exists() else None
    return p.returncode, p.stderr, answer


def comparison(answer: dict[str, Any], metric: str, check: str) -> dict[str, Any]:
    return next(c for c in answer["comparisons"] if c["metric"] == metric and c["check"] == check)


def test_mimo_dev_vs_dgx_h100_fails_like_megatron_instead_of_crashing(tmp_path: Path) -> None:
    # golden_values_dev.json (21 values: steps 1, 5, ..., 100) vs golden_values_dev_dgx_h100.json of
    # the MIMO test: once an internal error in explain.py (a relative error over a golden 0).
    code, err, answer = run_cli("platform-001", tmp_path)
    assert code == 1 and "internal error" not in err and answer is not None
    lm = comparison(answer, "lm loss", "approximate")
    # N = 21 golden values, k = min(max(21 // 100, 1), 50) = 1; allowed is the largest n with
    # (21 - n)/21 >= 1 - 1/21: n = 1 (20/21 and 1 - 1/21 are the same double). Every actual lm loss
    # is within 5 % of the golden: 0 failing, so it passes; the exact check fails on all 21.
    assert (lm["passed"], lm["n_steps"], lm["n_failing"], lm["allowed_failing"]) == (True, 21, 0, 1)
    ex = comparison(answer, "lm loss", "exact")
    assert (ex["passed"], ex["n_failing"], ex["allowed_failing"]) == (False, 21, 0)
    nz = comparison(answer, "num-zeros", "approximate")  # golden 0-2 vs actual 54-244 at every step
    assert (nz["passed"], nz["n_failing"]) == (False, 21)


def test_a_null_metric_in_the_golden_breaks_the_gate(tmp_path: Path) -> None:
    # "iteration-time": null, not in METRICS: Megatron's GoldenValues model raises a pydantic
    # ValidationError when the file is read (trainaudit once skipped the entry and passed). A golden
    # the comparator cannot load is the gate's failure, not the training's: gating_policy_issue.
    code, err, answer = run_cli("edge-038", tmp_path)
    assert code == 1 and answer is not None, err
    fa = answer["final_answer"]
    assert fa["verdict"] == "gating_policy_issue" and not answer["comparisons"]
    assert "'iteration-time' is null, not a metric object" in fa["summary"] and "ValidationError" in fa["summary"]


def test_a_step_written_twice_counts_once(tmp_path: Path) -> None:
    # Golden lm loss has "50": v and "050": 1.06 v; pydantic reads both keys as step 50, the later
    # value wins. Policy 2026-05-10: N = (end_step - start_step)/step_interval + 1 = (100 - 1)/1 + 1
    # = 100 (not 101 entries, which crashed on numpy broadcasting), k = 1, one step off by 6 %:
    # exact fails (1 failing, 0 allowed); approximate: 99/100 >= 1 - 1/100, passes with 1 allowed.
    code, _, answer = run_cli("edge-policy-099", tmp_path)
    assert code == 1 and answer is not None
    ex, ap = comparison(answer, "lm loss", "exact"), comparison(answer, "lm loss", "approximate")
    assert (ex["passed"], ex["n_failing"], ex["allowed_failing"]) == (False, 1, 0)
    assert (ap["passed"], ap["n_steps"], ap["n_failing"], ap["allowed_failing"]) == (True, 100, 1, 1)
    assert ap["first_failing_step"] == 50


def test_resume_second_run_without_a_metric_is_the_comparators_key_error(tmp_path: Path) -> None:
    # test_resume_checkpoint_pipeline indexes actual_values_second_run[metric] before comparing:
    # a KeyError, not the regular pipeline's MissingTensorboardLogsError verdict.
    code, err, answer = run_cli("edge-083", tmp_path)
    assert code == 2 and answer is None
    assert len(err.strip().splitlines()) == 1 and "KeyError: 'num-zeros'" in err


def test_policy_2026_04_20_counts_n_from_end_step(tmp_path: Path) -> None:
    # One lm loss step 6 % off. The comparator of 2026-04-20 (4e85d74ae9) takes
    # N = end_step/step_interval + 1 = 100/1 + 1 = 101, k = min(max(101 // 100, 1), 50) = 1, and needs
    # mean(is_close) >= 1 - 1/101 = 0.990099; 99 of the 100 compared steps are close, 0.99 < 0.990099:
    # the approximate check fails with 0 allowed (it passes with the newest comparator, N = 100).
    code, _, answer = run_cli("edge-policy-013", tmp_path)
    assert code == 1 and answer is not None
    ap = comparison(answer, "lm loss", "approximate")
    assert (ap["passed"], ap["n_failing"], ap["allowed_failing"]) == (False, 1, 0)
    code, _, answer = run_cli("edge-004", tmp_path / "newest")
    ap = comparison(answer, "lm loss", "approximate")  # type: ignore[arg-type]
    assert (ap["passed"], ap["n_failing"], ap["allowed_failing"]) == (True, 1, 1)


def test_null_values_in_the_golden_break_the_gate_itself(tmp_path: Path) -> None:
    # lm loss null at steps 50 and 75, num-zeros at step 3: Megatron-LM's comparator raises a pydantic
    # ValidationError when it loads the golden (values are Union[int, float, str]); the training is
    # not compared at all, so the answer is the gate's: gating_policy_issue, naming each null.
    assert CASES["edge-092"]["oracle"]["exception"] == "ValidationError"
    code, err, answer = run_cli("edge-092", tmp_path)
    assert code == 1 and answer is not None, err
    fa = answer["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("gating_policy_issue", "golden_mismatch")
    assert "lm loss at steps 50, 75; num-zeros at step 3" in fa["summary"] and "ValidationError" in fa["summary"]
    nulls = {(f["metric"], f["step"]) for f in answer["extracted_facts"] if "holds null" in f["statement"]}
    assert nulls == {("lm loss", 50), ("lm loss", 75), ("num-zeros", 3)}
    assert set(fa["root_causes"][0]["evidence"]) >= {f["id"] for f in answer["extracted_facts"]
                                                     if "holds null" in f["statement"]}
    assert answer["validation"]["all_passed"] and answer["comparisons"] == []
    md = (tmp_path / "out" / "answer.md").read_text()
    assert "**gating_policy_issue**" in md and "raises pydantic ValidationError" in md


def test_a_golden_that_is_json_null_is_the_comparators_type_error(tmp_path: Path) -> None:
    assert CASES["edge-091"]["oracle"]["exception"] == "TypeError"
    code, err, answer = run_cli("edge-091", tmp_path)
    assert code == 1 and answer is not None, err
    assert answer["final_answer"]["verdict"] == "gating_policy_issue"
    assert "JSON null" in answer["final_answer"]["summary"] and "TypeError" in answer["final_answer"]["summary"]


def test_null_values_in_the_actual_values_stay_an_input_error(tmp_path: Path) -> None:
    # the run's values, not the gate: nothing to answer about the golden
    code, err, answer = run_cli("edge-037", tmp_path)
    assert code == 2 and answer is None
    assert len(err.strip().splitlines()) == 1 and "ValidationError" in err and "lm loss at step 50" in err


def test_an_empty_golden_breaks_the_gate(tmp_path: Path) -> None:
    # "{}": GoldenValues() has no metric, a ValidationError when the golden is loaded. An empty golden
    # is the gate's failure (SPEC: a stale, empty, malformed or step-mismatched golden file).
    code, err, answer = run_cli("edge-076", tmp_path)
    assert code == 1 and answer is not None, err
    fa = answer["final_answer"]
    assert fa["verdict"] == "gating_policy_issue" and "the golden file is an empty object" in fa["summary"]
    assert "download_golden_values.py" in fa["root_causes"][0]["fix"]
