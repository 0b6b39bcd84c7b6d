"""compare from the command line (exit codes 0/1/2, report files), golden JSON read as a run,
a Megatron log as the actual run, the gate's own output in a CI log, and run vs run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.compare.helpers import MIMO, MIMO_CONFIG, MIMO_GOLDEN, load
from shared_data import run_cli, write_lines
from trainaudit.compare.cilog import read_ci_log
from trainaudit.compare.pipeline import run_golden
from trainaudit.compare.runs import compare_runs
from trainaudit.ingest import load_run
from trainaudit.answer.validate import validate_file

HISTORY_OLD = MIMO / "history" / "golden_values_dev_dgx_h100.at_4e85d74ae9.json"
HISTORY_NEW = MIMO / "history" / "golden_values_dev_dgx_h100.at_5fe3f06658.json"


def test_cli_exit_codes_and_report(tmp_path: Path) -> None:
    ok = run_cli("compare", "--golden", str(MIMO_GOLDEN), str(MIMO_GOLDEN), "--model-config", str(MIMO_CONFIG),
                 "-o", str(tmp_path / "ok"), "--quiet")
    assert ok.returncode == 0, ok.stderr
    bad = run_cli("compare", "--golden", str(HISTORY_OLD), str(HISTORY_NEW), "--model-config", str(MIMO_CONFIG),
                  "-o", str(tmp_path / "bad"))
    assert bad.returncode == 1, bad.stderr
    assert "FAIL iteration-time" in bad.stdout and "gating_policy_issue" in bad.stdout
    answer, validation = validate_file(tmp_path / "bad" / "answer.json")
    assert answer is not None and validation.all_passed
    assert (tmp_path / "bad" / "answer.md").is_file()
    assert (tmp_path / "bad" / "plots" / "iteration-time_approximate.png").is_file()
    # --json prints the answer; the numbers recompute.
    js = run_cli("compare", "--golden", str(HISTORY_OLD), str(HISTORY_NEW), "--model-config", str(MIMO_CONFIG),
                 "-o", str(tmp_path / "js"), "--json")
    data = json.loads(js.stdout)
    assert data["final_answer"]["verdict"] == "gating_policy_issue" and data["validation"]["all_passed"]
    calc = {c["id"]: c for c in data["calculations"]}
    it = next(c for c in data["comparisons"] if c["metric"] == "iteration-time")
    assert [calc[e]["result"] for e in it["evidence"] if calc[e]["description"].startswith("golden_median")] == [0.789785]


def test_cli_unreadable_inputs_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"lm loss": {"start_step": 1,', encoding="utf-8")
    for args in (["--golden", str(tmp_path / "nope.json"), str(MIMO_GOLDEN)],
                 ["--golden", str(broken), str(MIMO_GOLDEN)],
                 ["--golden", str(MIMO_GOLDEN), str(MIMO_GOLDEN), "--policy", "megatron@2026-13-01"],
                 ["--golden", str(MIMO_GOLDEN), str(MIMO_GOLDEN), "--model-config", str(tmp_path / "none.yaml")],
                 [str(MIMO_GOLDEN)]):
        r = run_cli("compare", *args, "-o", str(tmp_path / "o"))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "not valid JSON" in run_cli("compare", "--golden", str(broken), str(MIMO_GOLDEN)).stderr


def test_golden_file_reads_as_a_run() -> None:
    run, problems = load_run([str(HISTORY_OLD)])
    assert not problems and run.sources[0].format == "golden_values" and run.sources[0].kind.value == "golden_values"
    loss = run.series["lm loss"]
    assert loss.value_at(1) == 7.74249 and loss.value_at(2) == 7.94009
    it = run.series["iteration-time"]
    assert it.value_at(2) == 4.04 and it.value_at(1) != it.value_at(1)  # the "1": "nan" placeholder -> NaN
    # Line numbers point into the pretty-printed JSON.
    lines = HISTORY_OLD.read_text().splitlines()
    assert '"1": 7.74249' in lines[int(loss.lines[0]) - 1]


def _megatron_log(golden: dict, steps: range) -> list[str]:
    # The line format of Megatron-LM's training_log() (stdout: loss .6E, time in ms, num zeros raw).
    out = []
    for s in steps:
        it = golden["iteration-time"]["values"].get(str(s), 9.0)
        out.append(f" [2026-05-07 10:00:00.123456] iteration {s:8d}/{100:8d} | consumed samples: {s * 32:12d} | "
                   f"elapsed time per iteration (ms): {it * 1000:.1f} | learning rate: {0.001 * s / 150:.6E} | "
                   f"global batch size: {32:5d} | lm loss: {golden['lm loss']['values'][str(s)]:.6E} | "
                   f"loss scale: 1.0 | grad norm: 1.234 | num zeros: {golden['num-zeros']['values'][str(s)]} | "
                   f"params norm: 456.789 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    return out


def test_megatron_log_as_actual_uses_extractor_semantics(tmp_path: Path) -> None:
    g = load(MIMO_GOLDEN)
    log = write_lines(tmp_path / "train.log", _megatron_log(g, range(1, 101)))
    cfg = write_lines(tmp_path / "model_config.yaml", ["ENV_VARS:", "  NVTE_ALLOW_NONDETERMINISTIC_ALGO: 0",
                                                        "MODEL_ARGS:", "  --train-iters: 100", "METRICS:",
                                                        '  - "iteration-time"', '  - "lm loss"', '  - "num-zeros"'])
    answer, _, passed = run_golden(str(MIMO_GOLDEN), [str(log)], model_config=str(cfg))
    assert answer.validation.all_passed
    by = {(c.metric, c.check): c for c in answer.comparisons}
    # .6E loss rounded to 5 decimals equals the golden exactly; ms -> s within the 5 % band.
    assert by[("lm loss", "exact")].passed and by[("num-zeros", "exact")].passed
    assert by[("iteration-time", "approximate")].passed and passed
    assert by[("iteration-time", "approximate")].actual_median == 0.9042  # 904.2 ms printed with .1f
    assert "converted ms -> s" in answer.source_refs[1].description
    # A run that died at step 70: the log stops; the gate counts the rest as "nan" -> crash.
    short = write_lines(tmp_path / "short.log", _megatron_log(g, range(1, 70)))
    answer, _, passed = run_golden(str(MIMO_GOLDEN), [str(short)], model_config=str(cfg))
    assert not passed and answer.final_answer.verdict == "crash" and answer.final_answer.first_bad_step == 70


CI_LOG = [
    "Running pytest checks against golden values",
    "============================= test session starts ==============================",
    "tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py::test_regular_pipeline ",
    "-------------------------------- live log call ---------------------------------",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:212 Actual values: 0.90419",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:213 Golden values: 0.789785",
    "ERROR    tests.functional_tests.python_test_utils.common:common.py:230 Approximate comparison of iteration-time: FAILED",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:236 DETERMINISTIC test for metric lm loss: PASSED",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:236 APPROXIMATE test for metric lm loss: PASSED",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:212 Actual values: 7.74249, 7.94009, ..., 3.3479",
    "INFO     tests.functional_tests.python_test_utils.common:common.py:213 Golden values: 7.74249, 7.94009, ..., 3.3478",
    "ERROR    tests.functional_tests.python_test_utils.common:common.py:230 Exact comparison of num-zeros: FAILED",
    "FAILED tests/functional_tests/python_test_utils/test_pretraining_regular_pipeline.py::test_regular_pipeline - "
    "AssertionError: The following metrics failed: iteration-time, num-zeros",
    "========================= 1 failed, 0 passed in 12.34s =========================",
]


def test_ci_log_gate_output_is_read_as_evidence(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "job.log", CI_LOG)
    rep = read_ci_log(str(path))
    assert rep.failed_metrics == ["iteration-time", "num-zeros"] and rep.failed_line == 13
    it = rep.checks[0]
    assert (it.metric, it.check, it.passed, it.actual, it.golden) == ("iteration-time", "approximate", False,
                                                                       [0.90419], [0.789785])
    nz = rep.checks[3]
    assert nz.metric == "num-zeros" and nz.elided and nz.actual == [7.74249, 7.94009, None, 3.3479]
    assert [c.passed for c in rep.checks[1:3]] == [True, True]
    assert rep.pytest_summary == "1 failed, 0 passed" and rep.pytest_line == 14
    answer, _, _ = run_golden(str(HISTORY_OLD), [str(HISTORY_NEW)], model_config=str(MIMO_CONFIG),
                              ci_logs=[str(path)])
    assert answer.validation.all_passed
    ci = next(s for s in answer.source_refs if s.kind == "ci_log")
    facts = [f for f in answer.extracted_facts if f.source_ref == ci.id]
    assert any(f.line == 7 and "Approximate comparison of iteration-time: FAILED" in (f.quote or "") for f in facts)
    assert any("DIFFERS" in f.statement for f in facts)  # CI also failed num-zeros; this pair does not


def test_run_vs_run_with_noise_band(tmp_path: Path) -> None:
    g = load(MIMO_GOLDEN)
    base = write_lines(tmp_path / "base.log", _megatron_log(g, range(1, 101)))
    g2 = json.loads(json.dumps(g))
    g2["lm loss"]["values"] = {s: v * (1 + (1e-4 if int(s) % 2 else -1e-4)) for s, v in g["lm loss"]["values"].items()}
    base2 = write_lines(tmp_path / "base2.log", _megatron_log(g2, range(1, 101)))
    g3 = json.loads(json.dumps(g))
    g3["lm loss"]["values"] = {s: (v * 1.02 if int(s) >= 40 else v) for s, v in g["lm loss"]["values"].items()}
    cand = write_lines(tmp_path / "cand.log", _megatron_log(g3, range(1, 101)))
    answer, _, passed = compare_runs([str(base), str(base2)], str(cand))
    assert answer.validation.all_passed and not passed
    assert answer.final_answer.verdict == "real_regression" and answer.final_answer.first_bad_step == 40
    loss = next(c for c in answer.comparisons if c.metric == "lm loss")
    assert loss.policy == "run-vs-run" and loss.n_failing == 61 and loss.rtol < 0.001
    # Baseline against its noisy twin: inside the band.
    answer, _, passed = compare_runs([str(base), str(base2)], str(base2))
    assert passed and answer.final_answer.verdict == "pass"
    r = run_cli("compare", str(base), str(cand), "--baseline", str(base2), "-o", str(tmp_path / "rr"), "--quiet")
    assert r.returncode == 1, r.stderr
