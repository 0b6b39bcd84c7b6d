"""Run vs run on real HF Trainer runs trained on CPU (``hf_runs``), through the real command: a
candidate that planned fewer steps and finished them is compared, not called a crash; a learning
rate 2000x larger is said first, with both values, where each was read and the step the logged
rates part; a different seed stays inside the bands and wall-clock metrics never fail; a run that
died or was killed is still a crash, with its evidence; the head fits 80 columns."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.compare.hf_runs import Spec, train, train_lightning
from trainaudit.compare.bands import metric_kind
from trainaudit.compare.runs import compare_runs

RUNS = {"base": Spec(), "short": Spec(steps=80), "lr": Spec(lr=2.0), "seed": Spec(seed=2), "crash": Spec(crash_at=90)}
FINDING = re.compile(r"^\S+: TA8\d\d \[(critical|high|medium|low|info)\] ")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf-runs")
    for name, spec in RUNS.items():
        train(root / name, spec)
    return root


def _compare(root: Path, candidate: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    out = f"out-{candidate}"
    r = subprocess.run([sys.executable, "-m", "trainaudit", "compare", "base", candidate, "-o", out, *extra],
                       capture_output=True, text=True, cwd=root, timeout=300, env={**os.environ, "COLUMNS": "80"})
    answer = json.loads((root / out / "answer.json").read_text(encoding="utf-8"))
    return r, answer, (root / out / "answer.md").read_text(encoding="utf-8")


def _line_of(path: Path, no: int) -> str:
    """Line ``no`` as trainaudit numbers lines: by newline (tqdm's carriage returns stay inside a line)."""
    return path.read_bytes().decode("utf-8").split("\n")[no - 1]


def test_a_candidate_that_finished_its_80_planned_steps_is_compared_on_them(runs: Path) -> None:
    r, answer, _ = _compare(runs, "short")
    fa = answer["final_answer"]
    assert r.returncode == 0, r.stdout + r.stderr
    assert fa["verdict"] == "pass" and "CRASH" not in r.stdout and "stopped" not in fa["summary"]
    assert "The candidate planned 80 steps and finished them; compared on steps 1..80." in fa["summary"]
    assert {c["n_steps"] for c in answer["comparisons"] if c["metric"] == "loss"} == {80}
    # the planned lengths differ, and the answer says where each was read
    (length,) = [d for d in answer["findings"] if d["rule"] == "TA811"]
    assert length["severity"] == "low"
    where = re.search(r"max_steps 80 in the candidate \((short/stdout\.log):(\d+)\) vs 200 in the baseline "
                      r"\((base/stdout\.log):(\d+)\)", length["message"])
    assert where is not None, length["message"]
    assert _line_of(runs / where[1], int(where[2])).strip() == "max_steps=80,"
    assert _line_of(runs / where[3], int(where[4])).strip() == "max_steps=200,"


def test_a_2000x_learning_rate_is_named_first_with_both_values_and_the_step(runs: Path) -> None:
    r, answer, md = _compare(runs, "lr")
    fa = answer["final_answer"]
    assert r.returncode == 1 and fa["verdict"] == "real_regression"
    first = r.stdout.splitlines()[0]
    assert first.startswith("lr/stdout.log:62: TA811 [high] configuration differs: learning_rate 2 in the candidate "
                            "(lr/stdout.log:62) vs 0.001 in the baseline (base/stdout.log:62); the logged "
                            "learning_rate is 2000x the baseline's from step 2 (0.2 vs 0.0001 at step 2"), first
    assert _line_of(runs / "lr" / "stdout.log", 62) == "learning_rate=2.0,"
    assert _line_of(runs / "base" / "stdout.log", 62) == "learning_rate=0.001,"
    assert fa["summary"].startswith("The runs' configuration differs: learning_rate 2 vs 0.001 in the baseline "
                                    "(logged learning_rate 2000x from step 2).")
    assert fa["root_causes"][0]["issue"].startswith("the runs are configured differently: learning_rate 2 vs 0.001")
    # the ratio is a calculation over both logged series, recomputed by validation
    calcs = {c["id"]: c for c in answer["calculations"]}
    (ratio,) = [c for c in calcs.values() if c["description"].startswith("ratio of the logged learning_rate")]
    assert ratio["result"] == pytest.approx(2000) and answer["validation"]["all_passed"]
    # answer.md: the configuration line comes before what failed, in a short head
    head = md.split("<details>")[0].strip().splitlines()
    assert len(head) <= 10
    assert head[2].startswith("**Configuration differs:** learning\\_rate 2 in the candidate") or \
        head[2].startswith("**Configuration differs:** learning_rate 2 in the candidate"), head[2]
    assert head[3].startswith("**What failed:** loss approximate")
    # the loss leaves its band after the rates part, and no wall-clock metric is a check
    loss = next(d for d in answer["findings"] if d["rule"] == "TA810" and d["metric"] == "loss")
    assert loss["first_bad_step"] >= 2
    assert not [c for c in answer["comparisons"] if metric_kind(c["metric"]) in ("wall_clock", "progress", "lr")]


def test_a_different_seed_passes_and_wall_clock_never_fails(runs: Path) -> None:
    r, answer, _ = _compare(runs, "seed")
    fa = answer["final_answer"]
    assert r.returncode == 0 and fa["verdict"] == "pass", r.stdout
    assert not [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL ")]
    assert "eval_runtime" not in {c["metric"] for c in answer["comparisons"]}
    assert {"loss", "eval_loss", "grad_norm"} <= {c["metric"] for c in answer["comparisons"] if c["passed"]}
    (seed,) = [d for d in answer["findings"] if d["rule"] == "TA811"]
    assert seed["severity"] == "info" and seed["message"].startswith("configuration differs: seed 2 in the candidate")
    # eval_runtime is compared as wall-clock, in a note: never a correctness check
    notes = [f["statement"] for f in answer["extracted_facts"] if f["statement"].startswith("note: eval_runtime")]
    assert notes and "not a correctness check" in notes[0]


def test_a_run_that_died_is_still_a_crash_with_its_evidence(runs: Path) -> None:
    r, answer, _ = _compare(runs, "crash")
    fa = answer["final_answer"]
    assert r.returncode == 1 and fa["verdict"] == "crash" and fa["first_bad_step"] == 89
    where = re.search(r"\((crash/stdout\.log):(\d+)\)", fa["summary"])
    assert where is not None, fa["summary"]
    assert _line_of(runs / where[1], int(where[2])).startswith("RuntimeError: DataLoader worker (pid 4242) is killed")
    facts = {f["id"]: f for f in answer["extracted_facts"]}
    quoted = [facts[i].get("quote") or "" for i in fa["root_causes"][0]["evidence"] if i in facts]
    assert any("killed by signal: Bus error" in q for q in quoted)


def test_a_killed_run_without_an_end_line_is_a_crash_before_its_planned_length(runs: Path, tmp_path: Path) -> None:
    """The console of a run killed at step 120 (no traceback, no end-of-training line, no
    trainer_state.json): the prefix of the complete run's console up to that step."""
    lines = (runs / "base" / "stdout.log").read_bytes().split(b"\n")
    cut = next(i for i, ln in enumerate(lines) if b"| 120/200 [" in ln)
    (tmp_path / "killed").mkdir()
    killed = tmp_path / "killed" / "stdout.log"
    killed.write_bytes(b"\n".join(lines[:cut + 1]) + b"\n")
    answer, _, passed = compare_runs([str(runs / "base")], str(killed.parent))
    fa = answer.final_answer
    assert not passed and fa.verdict == "crash" and fa.first_bad_step == 120
    assert fa.root_causes[0].issue.endswith("of the 200 it planned, with no end-of-training line and no error "
                                            "(killed or hung)")
    # the complete run against itself: nothing differs
    answer, _, passed = compare_runs([str(runs / "base")], str(runs / "base"))
    assert passed and answer.final_answer.verdict == "pass" and not answer.findings


@pytest.mark.parametrize("candidate", ["short", "lr", "seed", "crash"])
def test_the_head_and_the_closing_line_fit_80_columns(runs: Path, candidate: str) -> None:
    r, answer, md = _compare(runs, candidate)
    lines = r.stdout.splitlines()
    verdict = next(i for i, ln in enumerate(lines) if re.match(r"^(PASS|CRASH|REAL REGRESSION)\b", ln))
    above = [ln for ln in lines[:verdict] if ln]
    assert len(above) <= 7, above  # a handful of ranked lines; the rest is in answer.md
    prose = [ln for ln in lines[verdict:] if not FINDING.match(ln)]
    assert all(len(ln) <= 80 for ln in prose), [ln for ln in prose if len(ln) > 80]
    assert lines[-1].startswith(f"{answer['final_answer']['verdict']}: ") and len(lines[-1]) <= 80
    # answer.md: a short head, then everything in <details>
    assert "<details>" in md and len(md.split("<details>")[0].strip().splitlines()) <= 12


def test_lightning_a_run_of_fewer_epochs_that_reached_them_is_compared(tmp_path: Path) -> None:
    base, short = train_lightning(tmp_path / "five", 5), train_lightning(tmp_path / "two", 2)
    answer, _, passed = compare_runs([str(base)], str(short))
    fa = answer.final_answer
    assert passed and fa.verdict == "pass", fa.summary
    assert fa.summary.startswith("The candidate planned 2 epochs and finished them; compared on steps 1..128.")
    (epochs,) = [d for d in answer.findings if d.rule == "TA811"]
    assert re.search(r"num_train_epochs 2 in the candidate \(\S+/two/stdout\.log:\d+\) vs 5 in the baseline", epochs.message)
    # its CSV alone holds no plan and no end line: the answer does not guess a crash, it says what would decide
    answer, _, passed = compare_runs([str(base / "metrics.csv")], str(short / "metrics.csv"))
    fa = answer.final_answer
    assert not passed and fa.verdict == "inconclusive" and not fa.root_causes
    assert any("planned length" in n for n in fa.needs_more_data)


def test_a_config_file_beside_each_log_is_read_with_its_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded tiny run (``tests/rules/fixtures/data/tiny/healthy.jsonl``) in two folders, each
    with the ``config.yaml`` its launcher would leave beside the log; only the batch size differs."""
    healthy = Path(__file__).resolve().parents[1] / "rules" / "fixtures" / "data" / "tiny" / "healthy.jsonl"
    for name, batch in (("a", 64), ("b", 32)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.jsonl").write_bytes(healthy.read_bytes())
        (tmp_path / name / "config.yaml").write_text(f"model: mlp\noptimizer:\n  name: adam\n  lr: 0.003\n"
                                                      f"data:\n  batch_size: {batch}\nseed: 0\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    answer, _, passed = compare_runs(["a/train.jsonl"], "b/train.jsonl")
    (batch,) = [d for d in answer.findings if d.rule == "TA811"]
    assert batch.severity == "medium" and batch.message == (
        "configuration differs: batch_size 32 in the candidate (b/config.yaml:6) vs 64 in the baseline (a/config.yaml:6)")
    assert passed and answer.final_answer.verdict == "pass"  # the same numbers: the difference changed nothing
    assert answer.final_answer.summary.startswith("The runs' configuration differs: batch_size 32 vs 64 in the baseline.")


def test_megatron_world_size_and_a_crash_before_train_iters(tmp_path: Path) -> None:
    """The audit demo's passing Megatron log, and the same log as a job with twice the ranks that
    was killed after iteration 60 of its 100 (its lines up to there, world size line edited)."""
    log = Path(__file__).resolve().parents[2] / "examples" / "audit-demo" / "passing" / "train.log"
    lines = log.read_text(encoding="utf-8").split("\n")
    cut = next(i for i, ln in enumerate(lines) if "iteration       60/     100" in ln)
    killed = tmp_path / "killed.log"
    killed.write_text("\n".join([lines[0].replace("world size: 8,", "world size: 16,"), *lines[1:cut + 1]]) + "\n",
                      encoding="utf-8")
    answer, _, passed = compare_runs([str(log)], str(killed))
    fa = answer.final_answer
    assert not passed and fa.verdict == "crash" and fa.first_bad_step == 60
    assert fa.root_causes[0].issue == ("the candidate run stopped at step 60 of the 100 it planned, with no "
                                       "end-of-training line and no error (killed or hung)")
    (world,) = [d for d in answer.findings if d.rule == "TA811"]
    assert re.fullmatch(r"configuration differs: world_size 16 in the candidate \(\S*killed\.log:1\) vs 8 in the "
                        r"baseline \(\S*train\.log:1\)", world.message), world.message
