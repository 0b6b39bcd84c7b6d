"""Batch audit: three generated failures (two NaN runs, one OOM crash) are audited one by one and the
two NaN runs are grouped as one root cause; answers collected from CI jobs are grouped the same way
and the commits they have in common (suspect, environment change) are named."""

from __future__ import annotations

import json
import math
from pathlib import Path

from shared_data import run_cli
from trainaudit.batch import BatchResult, Member, compare_members
from trainaudit.answer.builder import AnswerBuilder
from trainaudit.answer.schema import Culprit, FinalAnswer, RootCause


def nan_run(d: Path, first_nan: int) -> None:
    d.mkdir(parents=True)
    rows = [{"step": s, "loss": (3.0 * math.exp(-s / 80) + 1.0) if s < first_nan else "nan", "lr": 1e-4}
            for s in range(1, 201)]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def oom_run(d: Path) -> None:
    d.mkdir(parents=True)
    lines = [f"{{'loss': {3.0 * math.exp(-s / 80) + 1.0:.4f}, 'grad_norm': 1.2, 'learning_rate': 0.0001, "
             f"'epoch': {s / 100:.2f}}}" for s in range(1, 60)]
    lines += ["Traceback (most recent call last):", '  File "train.py", line 10, in <module>', "    trainer.train()",
              "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
              "of 79.15 GiB of which 1.06 GiB is free."]
    (d / "train.log").write_text("\n".join(lines) + "\n")


def test_batch_groups_generated_failures(tmp_path: Path) -> None:
    sets = tmp_path / "failures"
    nan_run(sets / "job-101", 150)
    oom_run(sets / "job-102")
    nan_run(sets / "job-103", 120)
    res = run_cli("batch", "failures", "-o", "out", "--json", "--html", cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # failures found
    cmp = json.loads(res.stdout)
    rows = {r["name"]: r for r in cmp["sets"]}
    assert set(rows) == {"job-101", "job-102", "job-103"}
    assert (rows["job-101"]["category"], rows["job-101"]["first_bad_step"]) == ("nan_inf", 150)
    assert (rows["job-103"]["category"], rows["job-103"]["first_bad_step"]) == ("nan_inf", 120)
    assert rows["job-102"]["category"] == "oom" and rows["job-102"]["verdict"] == "infrastructure_failure"
    assert rows["job-101"]["cause"] == rows["job-103"]["cause"] != rows["job-102"]["cause"]
    assert rows["job-101"]["fingerprint"] == rows["job-103"]["fingerprint"]
    groups = [(g["category"], g["members"]) for g in cmp["groups"]]
    assert groups == [("nan_inf", ["job-101", "job-103"]), ("oom", ["job-102"])]
    assert cmp["groups"][0]["rules"] == ["TA101"] and cmp["groups"][0]["first_bad_steps"] == [150, 120]
    for name in rows:  # one answer (and report) per failure
        assert json.loads((tmp_path / "out" / name / "answer.json").read_text())["task"] == "audit"
        assert (tmp_path / "out" / name / "report.html").is_file()
    md = (tmp_path / "out" / "batch.md").read_text()
    assert "3 failures, 2 distinct root causes" in md
    assert "- **G1** nan_inf (TA101): 2 failures (job-101, job-103)" in md
    # the issue's spelling, `trainaudit audit` over several failures, gives the same grouping
    res = run_cli("audit", "--batch", "failures", "-o", "out2", "--json", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    again = json.loads(res.stdout)
    assert [(g["category"], g["members"]) for g in again["groups"]] == groups
    assert (tmp_path / "out2" / "job-102" / "answer.json").is_file()
    res = run_cli("audit", "--batch", "failures", "--golden", "g.json", cwd=tmp_path)
    assert res.returncode == 2 and "trainaudit-set.json" in res.stderr and "Traceback" not in res.stderr


def _ci_answer(category: str, rule: str, step: int, commits: list[tuple[str, str, str]], named: bool = False):
    b = AnswerBuilder("audit")
    s = b.source("job.log", "ci_log")
    f = b.fact(s, f"symptom at step {step}", metric="lm loss", step=step, value=1.0, line=step)
    d = b.finding(rule=rule, category=category, severity="high", metric="lm loss", first_bad_step=step,
                  last_step=step, message="symptom", evidence=[f], confidence=0.8)
    for sha, role, title in commits:
        b.commit(sha=sha, date="2025-03-01T00:00:00Z", title=title, role=role, relevance=0.7, reason="between good and bad")
    final = FinalAnswer(verdict="real_regression", category=category, first_bad_step=step, summary="x",
                        root_causes=[RootCause(issue="x", category=category, severity="high", evidence=[d], fix="x",
                                               expected_impact="x", verify="x", confidence=0.8)])
    if named:  # the answer names its first commit, as an audit with a history does
        final = final.model_copy(update={"culprit": Culprit(sha=commits[0][0], role=commits[0][1], confidence=0.7)})
    return b.build(final)


def test_shared_commits_and_environment_changes(tmp_path: Path) -> None:
    kernel, env, other = "a" * 40, "b" * 40, "c" * 40
    members = [
        Member("h100-gpt", _ci_answer("golden_mismatch", "TA701", 40, [(kernel, "suspect", "new attention kernel"),
                                                                      (env, "environment_change", "bump PyTorch")])),
        Member("h100-moe", _ci_answer("golden_mismatch", "TA701", 55, [(kernel, "suspect", "new attention kernel"),
                                                                      (env, "environment_change", "bump PyTorch")])),
        Member("a100-t5", _ci_answer("distributed_failure", "TA420", 3, [(other, "suspect", "NCCL timeout knob"),
                                                                        (env, "environment_change", "bump PyTorch")])),
        Member("broken", None, error="broken/job.log: no metrics or events found"),
    ]
    cmp = compare_members(BatchResult(members))
    g = cmp["groups"]
    assert [x["members"] for x in g] == [["h100-gpt", "h100-moe"], ["a100-t5"]]
    assert [(c["sha"], c["role"]) for c in g[0]["shared_commits"]] == [(kernel, "suspect"), (env, "environment_change")]
    assert g[1]["shared_commits"] == []
    assert [(c["sha"], c["members"]) for c in cmp["shared_environment_changes"]] == \
        [(env, ["h100-gpt", "h100-moe", "a100-t5"])]
    assert {r["name"]: r.get("error") for r in cmp["sets"]}["broken"].endswith("no metrics or events found")

    # the same answers collected from CI jobs, as folders: the batch command reads them as they are
    for m in members[:3]:
        d = tmp_path / "jobs" / m.name
        d.mkdir(parents=True)
        (d / "answer.json").write_text(m.answer.model_dump_json())
    res = run_cli("batch", "jobs", "-o", "out", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert f"| `{kernel[:10]}` | suspect | new attention kernel | h100-gpt, h100-moe |" in res.stdout
    assert f"| `{env[:10]}` | environment_change | bump PyTorch | a100-t5, h100-gpt, h100-moe |" in res.stdout
    assert not any((tmp_path / "jobs" / m.name / "report.html").exists() for m in members[:3])


def test_failures_of_one_pipeline_are_said_together_first(tmp_path: Path) -> None:
    """Several tests of one pipeline fail after one container change: batch.md opens with it, the
    shared environment change, and names the failure that has another culprit."""
    image, kernel = "d" * 40, "e" * 40
    bump = (image, "environment_change", "Update Docker image version to 26.04-py3")
    names = ["gpt-tp2", "moe-ep8", "llava-tp1", "t5-pp2"]
    for name in names:
        first = (kernel, "suspect", "new attention kernel") if name == "t5-pp2" else bump
        d = tmp_path / "jobs" / name
        d.mkdir(parents=True)
        others = [bump] if first is not bump else [(kernel, "suspect", "new attention kernel")]
        (d / "answer.json").write_text(_ci_answer("golden_mismatch", "TA701", 1, [first, *others],
                                                  named=True).model_dump_json())
    res = run_cli("batch", "jobs", "-o", "out", "--json", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    h = json.loads(res.stdout)["headline"]
    assert (h["kind"], h["sha"], sorted(h["members"]), h["exceptions"]) == \
        ("shared_environment_change", image, sorted(names[:3]), ["t5-pp2"])
    rows = {r["name"]: r for r in json.loads(res.stdout)["sets"]}
    assert rows["t5-pp2"]["top_commit"]["sha"] == kernel and rows["gpt-tp2"]["top_commit"]["sha"] == image
    md = (tmp_path / "out" / "batch.md").read_text().splitlines()
    assert md[2] == (f"**3 of 4 failures have a shared environment change as culprit:** `{image[:10]}` "
                     "(environment_change) Update Docker image version to 26.04-py3. Exceptions: t5-pp2.")
    # without a commit two of them name, no shared culprit is claimed
    cmp = compare_members(BatchResult([Member("a", _ci_answer("golden_mismatch", "TA701", 1, [bump], named=True)),
                                       Member("b", _ci_answer("golden_mismatch", "TA701", 1,
                                                              [(kernel, "suspect", "k")], named=True))]))
    assert cmp["headline"] is None


def test_batch_input_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = run_cli("batch", "empty", cwd=tmp_path)
    assert res.returncode == 2 and "empty: no artifact sets" in res.stderr
    res = run_cli("batch", "nope", cwd=tmp_path)
    assert res.returncode == 2 and "nope: no such file or directory" in res.stderr and "Traceback" not in res.stderr


def test_a_healthy_set_is_not_counted_as_a_failure(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    nan_run(sets / "job-sick", 150)
    nan_run(sets / "job-fine", 10_000)  # never NaN: a healthy run
    res = run_cli("batch", "sets", "-o", "out", "--json", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)["sets"]}
    assert rows["job-fine"]["failed"] is False and rows["job-sick"]["failed"] is True
    md = (tmp_path / "out" / "batch.md").read_text()
    assert md.startswith("# trainaudit batch: 1 failure, 1 distinct root cause (1 set(s) with nothing failing)")
    failures = md.split("## Failures")[1].split("## Shared")[0]
    assert "| job-sick |" in failures and "| job-fine |" not in failures and "Nothing failing: job-fine." in failures
    for name, r in rows.items():  # the top commit is the one the set's own answer.md names (none here)
        assert r["top_commit"] is None and "**Culprit:** `" not in (tmp_path / "out" / name / "answer.md").read_text()
