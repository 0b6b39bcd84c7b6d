"""Posting against a real HTTP server on 127.0.0.1 speaking the GitHub issues API and a Slack webhook:
create, update on the second run (same fingerprint), dry run sends nothing, 401 is one clear line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.post.fakeservice import FakeService
from trainaudit.post.send import plan_issue
from trainaudit.render.page import load_answer
from trainaudit.answer.fingerprint import fingerprint, marker

REPO = "acme/llm-train"


def nan_log(path: Path, first_nan: int) -> Path:
    rows = [{"step": s, "loss": (3.0 * math.exp(-s / 80) + 1.0) if s < first_nan else "nan", "lr": 1e-4}
            for s in range(1, 201)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GH_", "CI_"))}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "trainaudit", *args], capture_output=True, text=True, env=e,
                          timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same failure twice (NaN from step 150, then from step 153 on a rerun): one fingerprint."""
    tmp = tmp_path_factory.mktemp("answers")
    out = []
    for k, step in enumerate((150, 153)):
        res = cli("diagnose", str(nan_log(tmp / f"run{k}.jsonl", step)), "-o", str(tmp / f"out{k}"), "--quiet")
        assert res.returncode == 1, res.stderr  # unhealthy: a report to post
        out.append(tmp / f"out{k}" / "answer.json")
    return out[0], out[1]


def test_issue_created_then_updated_and_slack(answers: tuple[Path, Path]) -> None:
    a1, a2 = answers
    fp = fingerprint(load_answer(a1))
    assert fp == fingerprint(load_answer(a2))
    with FakeService() as svc:
        env = {"GITHUB_TOKEN": svc.token, "GITHUB_API_URL": svc.url}
        r1 = cli("post", str(a1), "--github-issue", REPO, "--send", env=env)
        assert r1.returncode == 0, r1.stderr
        assert r1.stdout.strip() == f"github: created issue #1 https://github.com/{REPO}/issues/1"
        issue = svc.issues[REPO][0]
        assert marker(fp) in issue["body"] and "unhealthy: nan inf" in issue["title"]
        assert "from step 150" in issue["title"] and "loss is NaN from step 150" in issue["body"]
        assert [lab["name"] for lab in issue["labels"]] == ["trainaudit"]

        r2 = cli("post", str(a2), "--github-issue", REPO, "--send", "--slack-webhook",
                 f"{svc.url}/slack/hook/T000/B000/good", "--link", "https://ci.example/run/7", env=env)
        assert r2.returncode == 0, r2.stderr
        assert "github: updated issue #1" in r2.stdout and "slack: posted" in r2.stdout
        assert len(svc.issues[REPO]) == 1  # deduplicated
        assert "from step 153" in svc.issues[REPO][0]["title"]
        assert "https://ci.example/run/7" in svc.comments[1][0] and marker(fp) in svc.comments[1][0]
        assert [m for m, _ in svc.requests if _.startswith("/repos")] == ["GET", "POST", "GET", "PATCH", "POST"]
        text = svc.slack[0]["text"]
        assert "unhealthy" in text and "from step 153" in text and "<https://ci.example/run/7|Full report>" in text

        # a different failure opens a second issue
        other = json.loads(a1.read_text())
        other["final_answer"]["category"] = "divergence"
        p = a1.parent / "other.json"
        p.write_text(json.dumps(other))
        r3 = cli("post", str(p), "--github-issue", REPO, "--send", env=env)
        assert "created issue #2" in r3.stdout
        assert len(svc.issues[REPO]) == 2


def test_dry_run_sends_nothing(answers: tuple[Path, Path]) -> None:
    with FakeService() as svc:
        hook = f"{svc.url}/slack/hook/T000/B000/good"
        res = cli("post", str(answers[0]), "--github-issue", REPO, "--slack-webhook", hook,
                  env={"GITHUB_TOKEN": svc.token, "GITHUB_API_URL": svc.url})
        assert res.returncode == 0, res.stderr
        assert svc.requests == []
        out = res.stdout
        assert out.startswith("DRY RUN: nothing is sent (add --send).")
        assert f"POST {svc.url}/repos/{REPO}/issues" in out and "token found in $GITHUB_TOKEN" in out
        assert marker(fingerprint(load_answer(answers[0]))) in out
        assert svc.token not in out
        assert "B000/good" not in out and f"POST {svc.url}/slack/***" in out  # webhook URL is a secret


def test_bad_token_and_bad_webhook_are_one_clear_line(answers: tuple[Path, Path]) -> None:
    with FakeService() as svc:
        res = cli("post", str(answers[0]), "--github-issue", REPO, "--send",
                  env={"GITHUB_TOKEN": "ghp_wrongwrongwrongwrongwrong1234", "GITHUB_API_URL": svc.url})
        assert res.returncode == 2
        assert res.stdout == "" and "Traceback" not in res.stderr
        line = res.stderr.strip()
        assert "\n" not in line
        assert line.startswith(f"trainaudit: error: GET {svc.url}/repos/{REPO}/issues: 401 Unauthorized: Bad credentials")
        assert "GITHUB_TOKEN" in line and "wrongwrong" not in line
        assert svc.issues.get(REPO, []) == []

        res = cli("post", str(answers[0]), "--slack-webhook", f"{svc.url}/slack/hook/T000/B000/revoked", "--send")
        assert res.returncode == 2 and "403 invalid_token" in res.stderr and "revoked" not in res.stderr

        res = cli("post", str(answers[0]), "--github-issue", REPO, "--send")
        assert res.returncode == 2 and "needs a token in $GITHUB_TOKEN" in res.stderr
        res = cli("post", str(answers[0].parent / "missing.json"), "--github-issue", REPO)
        assert res.returncode == 2 and "missing.json: no such file" in res.stderr


def test_dry_run_flag_is_accepted_and_the_issue_body_is_printed_once(answers: tuple[Path, Path]) -> None:
    default = cli("post", str(answers[0]), "--github-issue", REPO)
    explicit = cli("post", str(answers[0]), "--github-issue", REPO, "--dry-run")
    assert explicit.returncode == 0, explicit.stderr
    assert explicit.stdout == default.stdout and explicit.stdout.startswith("DRY RUN: nothing is sent")
    body = plan_issue(load_answer(answers[0]), REPO, api=None, label="trainaudit", link=None).body
    first_line = body.splitlines()[0]
    assert explicit.stdout.count(first_line) == 1  # readable Markdown, once; not JSON-escaped in each request
    assert json.dumps(body) not in explicit.stdout
    assert explicit.stdout.count(f'"body": "<the issue body below: {len(body)} characters>"') == 2
