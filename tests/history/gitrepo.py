"""Build real git repositories in a temp dir for history tests (git itself, no mocks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CASE = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"
GOLDEN = f"{CASE}/golden_values_dev_dgx_h100.json"


def git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
           "GIT_COMMITTER_NAME": "dev", "GIT_COMMITTER_EMAIL": "dev@example.org"}
    if date:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(repo: Path, title: str, files: dict[str, str], date: str, body: str = "") -> str:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        git(repo, "add", rel)
    msg = title + ("\n\n" + body if body else "")
    git(repo, "commit", "-q", "-m", msg, date=date)
    return git(repo, "rev-parse", "HEAD")


def story_repo(root: Path) -> dict[str, str]:
    """A Megatron-like repository with one commit of each kind. Returns {name: sha}."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    shas: dict[str, str] = {}
    shas["base"] = commit(root, "Initial import", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n",
        "megatron/training/training.py": "def train():\n    pass\n",
        "docker/Dockerfile.ci": "FROM nvcr.io/nvidia/pytorch:26.03-py3\n",
        "tests/test_utils/recipes/gpt.yaml": "products:\n  - test_case: [gpt3_tp1_pp1]\n    scope: [mr-github]\n",
        "tests/functional_tests/python_test_utils/common.py": "RTOL = 0.05\n",
        GOLDEN: '{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, "values": {"1": 10.0, "2": 9.5}}}\n',
        f"{CASE}/model_config.yaml": "METRICS:\n  - lm loss\n",
        "README.md": "demo\n",
    }, "2026-04-01T10:00:00+00:00")
    shas["docs"] = commit(root, "Docs: typo", {"README.md": "demo repo\n"}, "2026-04-02T10:00:00+00:00")
    shas["model"] = commit(root, "Fuse attention softmax scaling", {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return (q @ k.T / 8) @ v\n"},
        "2026-04-03T10:00:00+00:00")
    shas["container"] = commit(root, "chore: Update Docker image version to 26.04-py3", {
        "docker/Dockerfile.ci": "FROM nvcr.io/nvidia/pytorch:26.04-py3\n"}, "2026-04-04T10:00:00+00:00")
    shas["comparator"] = commit(root, "fix: enforce correct pass thresholds", {
        "tests/functional_tests/python_test_utils/common.py": "RTOL = 0.05\nBUDGET = 'k/N'\n"},
        "2026-04-05T10:00:00+00:00")
    shas["golden"] = commit(root, "Refresh golden values", {
        GOLDEN: '{"lm loss": {"start_step": 1, "end_step": 2, "step_interval": 1, "values": {"1": 10.0, "2": 9.6}}}\n'},
        "2026-04-06T10:00:00+00:00")
    shas["broken"] = commit(root, "Move gpt3_tp1_pp1 to broken: iteration-time keeps failing", {
        "tests/test_utils/recipes/gpt.yaml": "products:\n  - test_case: [gpt3_tp1_pp1]\n    scope: [mr-github-broken]\n"},
        "2026-04-07T10:00:00+00:00")
    shas["revert"] = commit(root, 'Revert "Fuse attention softmax scaling"', {
        "megatron/core/transformer/attention.py": "def attention(q, k, v):\n    return q @ k.T @ v\n"},
        "2026-04-08T10:00:00+00:00", body=f"This reverts commit {shas['model']}.")
    return shas
