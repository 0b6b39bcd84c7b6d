"""Downloads through a real HTTP server on 127.0.0.1 speaking the GitHub Actions / GitLab shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeapi import FakeCI, zip_bytes
from trainaudit.errors import InputError
from trainaudit.fetch import acquire
from trainaudit.fetch.providers import github_plan, gitlab_plan

TOKEN = "ghp_testtoken0123456789abcdefghij"


def test_github_run_job_logs_and_artifacts_with_retry_and_a_failing_download(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with FakeCI(TOKEN) as ci:
        ci.require_token = True
        ci.github_run("acme", "llm", 42, jobs={7: ("train-gpt", "failure", b"iteration 1/ 2 | lm loss: 1.0 |\n"),
                                               8: ("lint", "success", b"ok\n")},
                      artifacts={"tb-logs": zip_bytes({"events.txt": b"x"}), "goldens": zip_bytes({"g.json": b"{}"})},
                      expired=("old-logs",))
        ci.fail_once.add("/blobs/job-7.txt")  # transient 503: retried
        ci.missing.add("/blobs/artifact-2.zip")  # this download fails for good
        got = acquire([], tmp_path, github=["https://github.com/acme/llm/actions/runs/42"],
                      github_api_url=ci.url, backoff_s=0.01)
        names = sorted(got.names.values())
        assert names == ["github:acme/llm/runs/42/artifact/tb-logs.zip", "github:acme/llm/runs/42/job/lint.log",
                         "github:acme/llm/runs/42/job/train-gpt.log"]
        assert sorted(got.missing) == ["github:acme/llm/runs/42/artifact/goldens.zip: HTTP 404 (not found, or expired)",
                                       "github:acme/llm/runs/42/artifact/old-logs: expired"]
        log = next(p for p, n in got.names.items() if n.endswith("train-gpt.log"))
        assert Path(log).read_bytes() == b"iteration 1/ 2 | lm loss: 1.0 |\n"
        retried = next(f for f in got.fetched if f.download.name.endswith("train-gpt.log"))
        assert retried.attempts == 2
        # the token went in a header, never into a name or a message
        assert all(TOKEN not in n for n in got.names.values()) and all(TOKEN not in m for m in got.missing)
        assert any(h.get("Authorization") == f"Bearer {TOKEN}" for _, h in ci.requests)


def test_unauthorized_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GH_TOKEN", raising=False)
    with FakeCI() as ci:
        ci.require_token = True
        ci.github_run("acme", "llm", 1, jobs={1: ("j", "failure", b"x\n")}, artifacts={})
        got = acquire([], tmp_path, github=["acme/llm/actions/runs/1"], github_api_url=ci.url, backoff_s=0.01)
        assert got.paths == []
        assert got.missing == [f"github acme/llm/actions/runs/1: {ci.url}/repos/acme/llm/actions/runs/1/jobs: "
                               "HTTP 401 (unauthorized: set a valid token in the environment)"]


def test_gitlab_job_trace_and_artifacts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-abcdefghijklmnopqrstu")
    with FakeCI() as ci:
        ci.gitlab_job("group/sub/proj", 123, b"Traceback (most recent call last):\nRuntimeError: boom\n", None)
        got = acquire([], tmp_path, gitlab=[f"{ci.url}/group/sub/proj/-/jobs/123"], backoff_s=0.01)
        assert list(got.names.values()) == ["gitlab:group/sub/proj/jobs/123/trace.log"]
        assert got.missing == []  # no artifacts is not a missing input
        trace = [h for p, h in ci.requests if p == "/api/v4/projects/group%2Fsub%2Fproj/jobs/123/trace"]
        assert len(trace) == 1 and trace[0]["PRIVATE-TOKEN"] == "glpat-abcdefghijklmnopqrstu"


def test_plain_urls_in_parallel_and_size_limit(tmp_path: Path) -> None:
    with FakeCI() as ci:
        ci.blob("/a.log", b"a" * 100)
        ci.blob("/big.log", b"b" * 5000)
        got = acquire([f"{ci.url}/a.log", f"{ci.url}/big.log?sig=secret", f"{ci.url}/none.log"], tmp_path,
                      max_bytes=1000, backoff_s=0.01)
        assert list(got.names.values()) == [f"{ci.url}/a.log"]
        assert got.missing == [f"{ci.url}/big.log: 5000 bytes is over the size limit of 1000",
                               f"{ci.url}/none.log: HTTP 404 (not found, or expired)"]


@pytest.mark.parametrize("ref", ["acme/llm", "acme/llm/actions/runs/x", "https://github.com/acme/llm/pull/3"])
def test_bad_github_reference(ref: str) -> None:
    with pytest.raises(InputError, match="expected owner/repo/actions/runs/ID"):
        github_plan(ref, None, env={})  # type: ignore[arg-type]


def test_bad_gitlab_reference() -> None:
    with pytest.raises(InputError, match="expected a job URL"):
        gitlab_plan("group/proj/jobs/1", env={})
