"""The bundled audit example builds and audits to the documented answer; its committed artifacts are
exactly what the builder writes (so the demo and the script cannot drift apart)."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path

from shared_data import REPO


def test_demo_builds_and_names_the_suspect(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, str(REPO / "examples/make_audit_demo.py"), "--artifacts-only", str(fresh)],
                   check=True)
    cmp = filecmp.dircmp(fresh, REPO / "examples/audit-demo")
    assert not cmp.diff_files and not cmp.left_only and not cmp.right_only
    for sub in cmp.subdirs.values():
        assert not sub.diff_files and not sub.left_only and not sub.right_only
    p = subprocess.run([sys.executable, str(REPO / "examples/make_audit_demo.py"), "--out", str(tmp_path / "demo"),
                        "--run"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "REAL REGRESSION" in p.stdout and "suspect: Fuse attention softmax scaling" in p.stdout
    answer = json.loads((tmp_path / "demo/report/answer.json").read_text())
    assert answer["validation"]["all_passed"]
    assert answer["final_answer"]["first_bad_step"] == 40
    roles = {c["title"]: c["role"] for c in answer["commits"]}
    assert roles["chore: Update Docker image version to 26.04-py3"] == "environment_change"
    assert roles["Fuse attention softmax scaling"] == "suspect"
