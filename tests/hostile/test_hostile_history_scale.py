"""History tracing stays linear in the number of files a commit touches: a real git repository (built
with ``git fast-import`` in a temp dir) holds one commit that adds 20 000 files, all of them files whose
patches are read (environment files under ``docker/``, test recipes, CI files). The work is counted,
not timed: every line the interpreter executes in ``trainaudit.history`` while tracing is counted
(``sys.settrace``), and the count must stay within a fixed number of lines per file. A step that
looked up each patch header against every path (quadratic) would need hundreds of millions; the
counter stops the run as soon as the bound is passed, so such a regression fails fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import trainaudit.history.classify as classify
from trainaudit.history.classify import FailureShape
from trainaudit.history.trace import trace

N_FILES = 20_000
LINES_PER_FILE = 300  # measured about 110 per file for the linear code; the quadratic one needed 1 500 per file at 2 000 files
HISTORY = str(Path(classify.__file__).parent)
CASE = "tests/functional_tests/test_cases/gpt/gpt3_tp1_pp1"


class TooMuchWork(Exception):
    pass


def _fast_import(root: Path, commits: list[tuple[str, dict[str, str]]]) -> None:
    """Commits (title, {path: text}) on ``main``, each on top of the one before, in one git process."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    parts: list[bytes] = []
    for i, (title, files) in enumerate(commits):
        msg = title.encode()
        parts.append(b"commit refs/heads/main\n")
        parts.append(f"committer dev <dev@example.org> {1775037600 + 3600 * i} +0000\n".encode())
        parts.append(b"data %d\n%s\n" % (len(msg), msg))
        for path, text in files.items():
            data = text.encode()
            parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
    subprocess.run(["git", "-C", str(root), "fast-import", "--quiet"], input=b"".join(parts), check=True, env=env)


def _count_lines(limit: int) -> tuple[Callable[[FrameType, str, Any], Any], dict[str, int]]:
    seen = {"lines": 0}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            seen["lines"] += 1
            if seen["lines"] > limit:
                raise TooMuchWork(f"over {limit} lines executed in trainaudit.history")
        return local

    def global_(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(HISTORY) else None

    return global_, seen


def test_a_commit_adding_many_files_is_classified_in_linear_work(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    many = {f"docker/part{i // 1000}/Dockerfile.{i}": f"FROM nvcr.io/nvidia/pytorch:26.0{i % 9}-py3\n"
            for i in range(N_FILES // 2)}
    many |= {f"tests/test_utils/recipes/r{i}.yaml": f"- test_case: [case{i}]\n" for i in range(N_FILES // 4)}
    many |= {f".gitlab/ci/job{i}.yml": f"job{i}: {{}}\n" for i in range(N_FILES - len(many))}
    assert len(many) == N_FILES
    _fast_import(root, [
        ("Initial import", {"megatron/core/model.py": "x = 1\n", f"{CASE}/model_config.yaml": "METRICS: [lm loss]\n"}),
        ("Vendor every image and recipe", many),
        ("Change the model", {"megatron/core/model.py": "x = 2\n"}),
    ])
    shape = FailureShape(kind="real_regression", test_case=CASE, metrics=["lm loss"], config_path=f"{CASE}/model_config.yaml")
    tracer, seen = _count_lines(LINES_PER_FILE * N_FILES)
    threading.settrace(tracer)  # the patches are read in a worker thread
    sys.settrace(tracer)
    try:
        t = trace(str(root), "HEAD~2", "HEAD", shape)
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    # the commit was read whole and judged: its environment change is seen
    vendored = next(c for c in t.commits if c.commit.title == "Vendor every image and recipe")
    assert len(vendored.commit.files) == N_FILES
    assert "env" in (vendored.evidence.parts if vendored.evidence else {})
    assert seen["lines"] <= LINES_PER_FILE * N_FILES
