"""Shared test helpers: where the fixtures live, access to their sample blocks, and the CLI.

Import them as ``from shared_data import ...`` (a plain module: several ``conftest.py`` files
exist, so ``from conftest import`` would depend on which one was imported first)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
LOG_SAMPLES = FIXTURES / "log_samples"
MEGATRON = FIXTURES / "megatron"


def sample_blocks(name: str) -> dict[str, list[str]]:
    """Split a log_samples file into its '# source:' blocks: {source line: [verbatim lines]}."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (LOG_SAMPLES / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("# source:"):
            current = blocks.setdefault(line, [])
        elif current is not None:
            current.append(line)
    return blocks


def sample_block(name: str, contains: str) -> list[str]:
    """The lines of the one block of ``name`` whose '# source:' header contains ``contains``."""
    hits = [lines for header, lines in sample_blocks(name).items() if contains in header]
    assert len(hits) == 1, f"{contains!r} matches {len(hits)} blocks of {name}"
    return hits[0]


CORPUS_LOGS = REPO / "tests" / "corpus" / "logs"


def corpus_log(case: str, name: str = "log.txt") -> list[str]:
    """The verbatim lines of a real-log corpus case (``tests/corpus/logs/<case>``; its label.json
    gives the source)."""
    return (CORPUS_LOGS / case / name).read_text(encoding="utf-8").splitlines()


def write_lines(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.write_text(newline.join(lines) + newline, encoding="utf-8")
    return path


def run_synth(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m synth ...`` (the test-data generator in ``tools/``) in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    return subprocess.run([sys.executable, "-m", "synth", *args], capture_output=True, text=True, env=env, timeout=600)


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real console entry point in a subprocess (exit codes and stderr as a user sees them)."""
    return subprocess.run([sys.executable, "-m", "trainaudit", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
