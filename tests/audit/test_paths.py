"""Absolute input paths under the working directory are reported relative, as the user knows them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shared_data import REPO, run_cli


def test_absolute_inputs_under_cwd_become_relative(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples" / "audit-demo" / "failing", tmp_path / "failing")
    proc = run_cli("audit", str(tmp_path / "failing"), "-o", "out", "--quiet", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # completed; the verdict is not pass
    answer = json.loads((tmp_path / "out" / "answer.json").read_text())
    assert sorted(s["path"] for s in answer["source_refs"]) == ["failing/job.log", "failing/train.log"]
    assert answer["validation"]["all_passed"], answer["validation"]
    assert str(tmp_path) not in (tmp_path / "out" / "answer.md").read_text()
