"""``trainaudit diagnose`` and ``trainaudit rules`` end to end, as a user runs them."""

from __future__ import annotations

import json

from shared_data import CORPUS_LOGS, run_cli, sample_block, write_lines

from trainaudit.answer.validate import validate_file


def test_diagnose_writes_a_valid_report(synth_runs, tmp_path):
    c = synth_runs.get("nan-after-lr-jump")
    out = tmp_path / "rep"
    r = run_cli("diagnose", str(c.file("train.log")), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 1, r.stderr  # a problem was found
    assert "UNHEALTHY" in r.stdout and "nan_inf" in r.stdout
    answer, validation = validate_file(out / "answer.json")
    assert validation.all_passed, [ch for ch in validation.checks if not ch.passed]
    fa = answer.final_answer
    assert (fa.verdict, fa.category) == ("unhealthy", "nan_inf")
    lo, hi = c.label["first_bad_step_window"]
    assert lo <= fa.first_bad_step <= hi
    nan = next(f for f in answer.findings if f.rule == "TA101")
    facts = {f.id: f for f in answer.extracted_facts}
    quoted = [facts[e] for e in nan.evidence if e in facts and facts[e].quote]
    assert quoted and all(f.line for f in quoted)
    assert any("iteration" in f.quote for f in quoted)  # the Megatron line itself
    assert fa.root_causes[0].evidence and fa.root_causes[0].fix
    # the cause, found from the lr series, named with its values and the line that logs the jump
    assert fa.root_causes[0].issue.startswith("likely cause: the learning rate jumped from 0.05 to 50 at step 120 "
                                              "(train.log:")
    assert (out / "answer.md").read_text().strip()
    assert list((out / "plots").glob("*.png"))


def test_healthy_json_and_fail_on(synth_runs, tmp_path):
    c = synth_runs.get("healthy-warmup-cosine")
    r = run_cli("diagnose", str(c.dir), "--json", "-o", str(tmp_path / "o"), "--fail-on", "low")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["final_answer"]["verdict"] == "healthy" and data["final_answer"]["first_bad_step"] is None
    assert data["validation"]["all_passed"]
    bad = synth_runs.get("corrupt-batch-spike")
    r = run_cli("diagnose", str(bad.file("metrics.jsonl")), "--quiet", "-o", str(tmp_path / "p"), "--fail-on", "medium")
    assert r.returncode == 1 and r.stdout.startswith("unhealthy: ") and r.stdout.count("\n") == 1  # the closing line


def test_crash_verdict_from_stderr(tmp_path):
    log = write_lines(tmp_path / "err.log", sample_block("error_signatures.txt", "murong-xu/CADS/issues/4"))
    r = run_cli("diagnose", str(log), "--json", "-o", str(tmp_path / "o"))
    fa = json.loads(r.stdout)["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("crash", "oom")


def test_a_crash_after_a_numeric_failure_is_its_end_not_its_cause(tmp_path):
    # icefall's ScaledAdam scales the gradients by 3.8e-14, then the run dies in a traceback cut before its
    # exception: the run crashed of exploding gradients
    log = CORPUS_LOGS / "icefall-k2-fsa-icefall-1895" / "log.txt"
    r = run_cli("diagnose", str(log), "--json", "-o", str(tmp_path / "o"))
    fa = json.loads(r.stdout)["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("crash", "grad_explosion")
    assert "then the run died (the run crashed: traceback" in fa["root_causes"][0]["issue"]
    # the same traceback alone is a crash of unknown cause
    alone = write_lines(tmp_path / "tb.log", (CORPUS_LOGS / "icefall-k2-fsa-icefall-1895" / "log.txt")
                        .read_text(encoding="utf-8").splitlines()[3:])
    r = run_cli("diagnose", str(alone), "--json", "-o", str(tmp_path / "p"))
    fa = json.loads(r.stdout)["final_answer"]
    assert (fa["verdict"], fa["category"]) == ("crash", "crash")


def test_bad_input_and_bad_config_exit_2(tmp_path):
    r = run_cli("diagnose", str(tmp_path / "missing.log"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    cfg = write_lines(tmp_path / "t.toml", ["[tool.trainaudit.rules.TA102]", "nope = 1"])
    log = write_lines(tmp_path / "x.log", sample_block("keras.txt", "image-segmentation-keras/issues/50"))
    r = run_cli("diagnose", str(log), "--config", str(cfg), "-o", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown threshold" in r.stderr and "Traceback" not in r.stderr


def test_config_ignore_changes_the_answer(tmp_path):
    log = write_lines(tmp_path / "x.log", sample_block("keras.txt", "image-segmentation-keras/issues/50"))
    cfg = write_lines(tmp_path / "pyproject.toml", ["[tool.trainaudit]", 'ignore = ["TA101"]'])
    r = run_cli("diagnose", str(log), "--json", "--config", str(cfg), "-o", str(tmp_path / "o"))
    assert r.returncode == 0 and "TA101" not in r.stdout


def test_rules_command():
    r = run_cli("rules")
    assert r.returncode == 0 and "TA101" in r.stdout and "TA410" in r.stdout
    r = run_cli("rules", "TA102")
    assert r.returncode == 0 and "loss-spike" in r.stdout and "Fix:" in r.stdout and "window=10" in r.stdout
    r = run_cli("rules", "TA999")
    assert r.returncode == 2 and "unknown rule" in r.stderr
