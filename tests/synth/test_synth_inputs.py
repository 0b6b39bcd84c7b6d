"""Which inputs of a generated run docs/accuracy.md scores: each file alone and all together, but a
crash's files without its traceback are not scored as a crash (nothing in them shows it)."""

from __future__ import annotations

import json
from pathlib import Path

import accuracy


def _manifest(root: Path, name: str, category: str, files: list[tuple[str, str]]) -> None:
    (root / name).mkdir(parents=True)
    case = {"case": name, "category": category, "first_bad_step": 120, "first_bad_step_window": [119, 120],
            "files": [{"path": p, "format": f, "metrics": []} for p, f in files]}
    (root / name / "manifest.json").write_text(json.dumps({"cases": [case]}))


def test_a_crash_is_scored_on_its_traceback_and_on_all_files_only(tmp_path: Path) -> None:
    files = [("c/stdout.log", "hf"), ("c/metrics.jsonl", "jsonl"), ("c/stderr.log", "traceback")]
    _manifest(tmp_path, "crash-shape-error", "crash", files)
    got = accuracy.synth_inputs(tmp_path, ["crash-shape-error"])
    assert [(i.source, i.label, len(i.paths)) for i in got] == [("stderr.log", "crash", 1), ("all files", "crash", 3)]


def test_any_other_fault_is_scored_on_every_file(tmp_path: Path) -> None:
    files = [("n/stdout.log", "hf"), ("n/metrics.jsonl", "jsonl")]
    _manifest(tmp_path, "nan-batch", "nan_inf", files)
    got = accuracy.synth_inputs(tmp_path, ["nan-batch"])
    assert [i.source for i in got] == ["stdout.log", "metrics.jsonl", "all files"]
