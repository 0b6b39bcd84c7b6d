"""CI outputs: the GitHub step summary and annotations, the GitLab code-quality report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.post.test_post import cli, nan_log


def test_github_summary_annotations_and_gitlab(tmp_path: Path) -> None:
    nan_log(tmp_path / "train.jsonl", 150)
    summary = tmp_path / "step_summary.md"
    summary.write_text("## earlier step\n")
    # as in a CI job: paths relative to the workspace, so annotations point at repository files
    res = cli("diagnose", "train.jsonl", "-o", "out", "--quiet", "--html", "--github-summary", "--gitlab-codequality",
              env={"GITHUB_STEP_SUMMARY": str(summary)}, cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # unhealthy
    md = summary.read_text()
    assert md.startswith("## earlier step\n# trainaudit diagnose: **unhealthy**")  # appended, not overwritten
    assert "Interactive report: `report.html`" in md and "](plots/" not in md
    ann = [ln for ln in res.stdout.splitlines() if ln.startswith("::")]
    assert ann[0].startswith("::error file=train.jsonl,line=150,title=TA101 nan_inf (loss)::loss is NaN from step 150")
    assert (tmp_path / "out" / "report.html").is_file()
    gl = json.loads((tmp_path / "out" / "gl-code-quality-report.json").read_text())
    assert gl[0]["check_name"] == "TA101" and gl[0]["severity"] == "critical"
    assert gl[0]["location"] == {"path": "train.jsonl", "lines": {"begin": 150}} and len(gl[0]["fingerprint"]) == 32

    # `report` does the same from an existing answer.json; outside Actions it says so on stderr
    res = cli("report", str(tmp_path / "out" / "answer.json"), "--no-html", "--github-summary")
    assert res.returncode == 0 and "::error file=" in res.stdout and "GITHUB_STEP_SUMMARY is not set" in res.stderr


def test_workflow_command_escaping() -> None:
    from trainaudit.post.ci import Annotation, Location, workflow_command

    a = Annotation("warning", "TA2: x, y", "50% worse\nsee log", Location("a,b:c.log", 7), "medium")
    assert workflow_command(a) == "::warning file=a%2Cb%3Ac.log,line=7,title=TA2%3A x%2C y::50%25 worse%0Asee log"


def test_report_rejects_what_is_not_an_answer(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{\"a\": 1}")
    res = cli("report", str(bad))
    assert res.returncode == 2 and res.stderr.strip().endswith("x.json: not a trainaudit answer.json (no final_answer)")
    bad.write_text("not json")
    res = cli("report", str(bad))
    assert res.returncode == 2 and "not JSON" in res.stderr and "Traceback" not in res.stderr
