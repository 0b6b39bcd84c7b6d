"""History tracing on a real git repository built in a temp dir."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitrepo import CASE, GOLDEN, story_repo
from trainaudit.errors import InputError
from trainaudit.history.classify import FailureShape
from trainaudit.history.trace import trace


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("repo") / "megatron"
    return root, story_repo(root)


def _by_sha(t, sha):
    return next(c for c in t.commits if c.commit.sha == sha)


def test_roles_of_each_kind_of_commit(repo) -> None:
    root, shas = repo
    t = trace(str(root), shas["base"], shas["broken"], FailureShape(test_case=CASE, metrics=["lm loss"]))
    assert t.n_commits == 6 and not t.truncated
    assert _by_sha(t, shas["model"]).roles == ["suspect"]
    assert _by_sha(t, shas["container"]).roles == ["environment_change"]
    assert _by_sha(t, shas["comparator"]).roles == ["policy_change"]
    assert _by_sha(t, shas["golden"]).roles == ["golden_update"]
    assert _by_sha(t, shas["broken"]).roles == ["policy_change"]
    assert shas["docs"] not in {c.commit.sha for c in t.commits}  # a README change explains nothing
    assert "test scope" in _by_sha(t, shas["broken"]).reason


# The same commits ranked for each kind of failure: a failing run at "comparator" (its golden is the
# one "base" wrote), and a failing golden that "golden" itself wrote.
@pytest.mark.parametrize("bad,kind,category,top", [
    ("comparator", "real_regression", None, "model"), ("comparator", "numerical_drift", None, "container"),
    ("comparator", "gating_policy_issue", "throughput_regression", "container"),
    ("golden", "gating_policy_issue", "golden_mismatch", "golden")])
def test_ranking_follows_the_kind_of_failure(repo, bad: str, kind: str, category: str | None, top: str) -> None:
    root, shas = repo
    t = trace(str(root), shas["base"], shas[bad], FailureShape(kind=kind, category=category, test_case=CASE,
                                                            golden_paths=[GOLDEN]))
    assert t.commits[0].commit.sha == shas[top], [(c.commit.title, c.relevance) for c in t.commits]
    # the relevance is the model's probability of each commit: they share one unit, best first
    assert sum(c.relevance for c in t.commits) == pytest.approx(1.0, abs=1e-3)
    assert [c.relevance for c in t.commits] == sorted((c.relevance for c in t.commits), reverse=True)


def test_fix_after_bad_is_found(repo) -> None:
    root, shas = repo
    t = trace(str(root), shas["base"], shas["model"], FailureShape(kind="real_regression", test_case=CASE,
                                                              golden_paths=[GOLDEN]), find_fix=True)
    fixes = [c for c in t.commits if c.role == "fix"]
    assert [c.commit.sha for c in fixes] == [shas["golden"], shas["broken"], shas["revert"]]
    assert "reverts suspect" in fixes[-1].reason


def test_works_on_a_bare_clone(repo, tmp_path: Path) -> None:
    root, shas = repo
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(root), str(bare)], check=True)
    t = trace(str(bare), shas["base"], shas["container"], FailureShape())
    assert {c.commit.sha for c in t.commits} == {shas["model"], shas["container"]}


@pytest.mark.parametrize("good,bad,needle", [
    ("nope", "HEAD", "--good nope: unknown revision"),
    ("--output=/tmp/x", "HEAD", "not a valid revision"),
    ("HEAD~1..HEAD", "HEAD", "not a valid revision"),
    ("HEAD", "HEAD", "same commit"),
])
def test_bad_revisions_are_clear_errors(repo, good: str, bad: str, needle: str) -> None:
    root, _ = repo
    with pytest.raises(InputError, match=needle.replace(".", r"\.").replace("-", r"\-")):
        trace(str(root), good, bad, FailureShape())


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a git repository"):
        trace(str(tmp_path), None, None, FailureShape())
