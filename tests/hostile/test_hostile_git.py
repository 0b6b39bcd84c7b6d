"""Untrusted repositories are data, never code: each configuration that would make git run a
command is in a real repository, and `audit --repo`, `trace` and the MCP tools run none of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness import run
from hostile_git import HOSTILE_KINDS, hostile_repo
from trainaudit.errors import PathRefused
from trainaudit.history.classify import FailureShape
from trainaudit.history.trace import trace
from trainaudit.mcp.roots import Roots
from trainaudit.mcp.tools import Toolbox


@pytest.fixture(scope="module", params=HOSTILE_KINDS)
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    base = tmp_path_factory.mktemp(f"git-{request.param}")
    marker = base / "PWNED"
    shas = hostile_repo(base / "repo", request.param, marker)
    return base, marker, shas


# the kinds where plain git itself runs the repository's command on a read (hooks and a hostile
# environment only act on writes or through trainaudit's own environment)
LIVE_ON_READ = [k for k in HOSTILE_KINDS if k not in ("environment", "hooks")]


@pytest.mark.parametrize("kind", LIVE_ON_READ)
def test_the_hostile_setting_is_live_for_plain_git(kind: str, tmp_path: Path) -> None:
    """The repository really is hostile: plain git (as a user would run it) runs the command."""
    base, marker = tmp_path, tmp_path / "PWNED"
    shas = hostile_repo(base / "repo", kind, marker)
    cmd = {"textconv": ["log", "-p", "-1", shas["model"]], "ext_diff": ["diff", shas["good"], shas["model"]],
           "fsmonitor": ["status"], "signature": ["log", "-1", shas["bad"]],
           "promisor": ["log", "-p", "-1", shas["model"]]}[kind]
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "-C", str(base / "repo"), *cmd], capture_output=True, env=env, timeout=30)
    assert marker.exists(), kind
    marker.unlink()


def test_trace_runs_nothing_from_the_repository(case: tuple[Path, Path, dict]) -> None:
    base, marker, shas = case
    t = trace(str(base / "repo"), shas["good"], shas["bad"], FailureShape(kind="real_regression"))
    assert t.n_commits >= 2
    assert not marker.exists()


def test_audit_cli_runs_nothing_from_the_repository(case: tuple[Path, Path, dict]) -> None:
    base, marker, shas = case
    out = base / "out"
    out.mkdir(exist_ok=True)
    run(["audit", "--repo", str(base / "repo"), "--good", shas["good"], "--bad", shas["bad"], "-o", str(out)],
        cwd=out)
    assert not marker.exists()


def test_mcp_tools_run_nothing_from_the_repository(case: tuple[Path, Path, dict]) -> None:
    base, marker, shas = case
    box = Toolbox(Roots.of([str(base)]))
    box.trace_history("repo", shas["good"], shas["bad"], find_fix=True)
    box.audit(repo="repo", good=shas["good"], bad=shas["bad"])
    assert not marker.exists()


def test_caller_environment_does_not_reach_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "PWNED"
    shas = hostile_repo(tmp_path / "repo", "environment", marker)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"sh -c 'touch {marker}' --")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'diff.external'='sh -c \"touch {marker}\" --'")
    trace(str(tmp_path / "repo"), shas["good"], shas["bad"], FailureShape())
    assert not marker.exists()


def test_dot_git_file_pointing_outside_the_mcp_root_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    hostile_repo(outside, "environment", tmp_path / "PWNED")
    root = tmp_path / "root"
    (root / "repo").mkdir(parents=True)
    (root / "repo" / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    box = Toolbox(Roots.of([str(root)]))
    with pytest.raises(PathRefused):
        box.trace_history("repo")
    # Alternates that borrow objects from a repository outside are refused the same way.
    inside = root / "clone"
    hostile_repo(inside, "environment", tmp_path / "PWNED")
    (inside / ".git" / "objects" / "info" / "alternates").write_text(str(outside / ".git" / "objects") + "\n")
    with pytest.raises(PathRefused):
        box.trace_history("clone")


def test_repository_inside_a_repository_outside_the_root_is_not_discovered(tmp_path: Path) -> None:
    """git searches parent folders for a repository; the MCP root inside someone's work tree must
    not make that repository readable."""
    hostile_repo(tmp_path / "big", "environment", tmp_path / "PWNED")
    root = tmp_path / "big" / "data"
    root.mkdir()
    box = Toolbox(Roots.of([str(root)]))
    with pytest.raises(Exception, match="not a git repository"):
        box.trace_history(".")

